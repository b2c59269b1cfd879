"""What chapter 1's page says about this machine: its fingerprint beside the reference host's."""
from __future__ import annotations

import pandas as pd

from datajourney.core import phrasing, results
from datajourney.core.facts import Facts
from datajourney.core.fingerprint import summary
from datajourney.core.phrasing import Finding, Opening


def findings(facts: Facts) -> list[Finding]:
    """What chapter 1 records: the machine the run had, which every other chapter's findings depend on."""
    cores, gpus = facts.get("cores"), facts.get("gpus")
    text = (f"This run's machine is {phrasing.text(facts.data.get('host', 'unknown'))}: "
            f"{phrasing.value(cores)} usable cores and {phrasing.value(gpus)} "
            f"{'GPU' if gpus is not None and gpus.number == 1 else 'GPUs'}.")
    return [Finding("host", text, cores.number if cores else None, "")]


def opening(facts: Facts) -> Opening:
    """Chapter 1 opens with the machine; what to change is chapter 12's answer, shown below it."""
    return Opening(findings(facts), [])


def machine_table(this: results.Result, ref: results.Result | None, ref_label: str,
                  is_reference_run: bool = False) -> pd.DataFrame:
    """The machine of this run beside the reference host, field by field (one column when this
    run is the reference run)."""
    mine = summary(this.fingerprint)
    if is_reference_run or ref is None:
        label = ref_label if is_reference_run else "this machine"
        return pd.DataFrame({"": list(mine), f"{label} (run {this.run_id})": list(mine.values())})
    theirs = summary(ref.fingerprint)
    return pd.DataFrame({"": list(mine), f"this machine (run {this.run_id})": list(mine.values()),
                         f"{ref_label} (run {ref.run_id})": [theirs.get(k, "—") for k in mine]})
