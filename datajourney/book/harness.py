"""One way to run a chapter: the harness does everything around the measurement, the chapter's experiment
only measures.

:func:`run` checks the parameters once (the experiment's ``preflight(params) -> Plan``: the declared ranges,
then what spans fields or depends on this machine), starts the result in the run directory (with this
machine's fingerprint), hands it to the experiment's ``measure(plan, context)`` to fill with tables and
metadata, analyses it with the chapter's ``analysis.analyse``, stores the facts and saves the result file.
The experiment never imports its analysis and the analysis never imports its experiment: results flow one
way, experiment → result → analysis → facts.

A notebook's run cell calls it (``res = results.replay(...) or harness.run(CHAPTER, Params.from_namespace(
globals()), run_dir=run_dir)``), under the runner's papermill or by hand in JupyterLab alike. Under the runner,
the same ``preflight`` has already checked every chapter of the run before any notebook started (so bad input
stops the run before any work); the harness calls it once more in the kernel, the process that measures,
because the plan it returns (data directory, resolved settings, chapter 5's tokenised records) cannot cross
from the runner's process.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from datajourney.book import registry
from datajourney.core import results
from datajourney.core.params import ChapterParams
from datajourney.toolkit import yourdata


@dataclass
class Context:
    """What a chapter's ``measure`` gets beside its plan: the started result it adds tables and metadata to,
    the run directory its files go to, whether to show progress bars, and the other chapters whose exported
    facts it may read (the registry's: a chapter never looks its neighbours up itself)."""

    result: results.Result
    run_dir: Path
    progress: bool = True
    sources: tuple[str, ...] = ()


def run(chapter: str, params: ChapterParams | dict | None = None, *, run_dir=None, progress: bool = True,
        **changes) -> results.Result:
    """Run ``chapter`` (a number, slug or name) with ``params`` (default: its ``Params``, the notebook's
    defaults) changed by ``changes``: preflight, start, measure, analyse, save; the saved result."""
    ch = registry.lookup(chapter)
    experiment = ch.piece("experiment")
    plan = experiment.preflight(ch.params.coerce(params if params is not None else ch.params()).replace(**changes))
    p = plan if isinstance(plan, ChapterParams) else plan.params   # a preflight returns Params or a plan of them
    rd = results.resolve_run_dir(run_dir)
    recorded = {**p.as_dict(), "run_dir": None if run_dir is None else str(run_dir)}
    for name in yourdata.PARAMETERS:   # the reader's data is described (metadata "your_data"), never named
        if recorded.get(name) is not None:
            recorded[name] = yourdata.RECORDED
    res = results.start(ch.name, recorded, run_dir, getattr(plan, "data_dir", None))
    experiment.measure(plan, Context(res, rd, progress, registry.sources(ch.name)))
    res.facts = ch.analyse(res)
    res.save(rd)
    return res


def regather(res: results.Result, run_dir) -> results.Result:
    """A replayed result of a chapter whose experiment gathers from its run directory (chapter 12: the facts
    of the other chapters' results beside it) gathered and analysed again from ``run_dir`` as it is now,
    its measurements and creation time kept, and saved there."""
    ch = registry.lookup(res.chapter)
    rd = results.resolve_run_dir(run_dir)
    ch.piece("experiment").gather(res, rd, registry.sources(ch.name))
    res.facts = ch.analyse(res)
    res.save(rd, created_utc=res.created_utc)  # rendered, not measured: its time stays
    return res
