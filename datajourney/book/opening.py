"""How a chapter opens: this run's host by name (at most three one-sentence findings, each with the
reference host's value of the same fact and the published figure beside it) and "What to do" (the
settings this run chose, with their measured gain and, folded under each, its code), then the full key results folded
into "How we know". A chapter's page words its facts (``page.opening(facts)``, ``page.findings(facts)``);
the reference host's value beside a finding is the same fact of the reference result, never recomputed."""
from __future__ import annotations

import re
import types
from pathlib import Path

from datajourney.book import registry, report
from datajourney.chapters import published
from datajourney.core import phrasing, results
from datajourney.core.facts import host_label


def heading(this: results.Result, is_reference_run: bool) -> str:
    """Who measured what follows, by host: "On this machine, a CPU-only host (2 cores)" or "On the reference
    host, an H200 host (16 cores)". The label is made of the result's fingerprint, so it is shown as text."""
    who = "On the reference host" if is_reference_run else "On this machine"
    yours = phrasing.your_data(this.facts.get("your_data") if this.facts is not None else None)
    return f"{who}, {phrasing.text(host_label(this.fingerprint))}" + (f", reading {yours}" if yours else "")


def fact_bullets(findings: list, this: results.Result, ref: results.Result | None, *,
                 is_reference_run: bool) -> list[str]:
    """Markdown bullets of a page's findings, each with the reference host's value of the same fact
    (and the published figure where the finding names one)."""
    theirs = {}
    if not is_reference_run and ref is not None:
        rf = registry.analysed(ref).facts
        theirs = {f.key: rf.get(f.key) for f in findings if rf.get(f.key) is not None}
    lines = []
    for f in findings:
        extra = []
        r = theirs.get(f.key)
        if r is not None and r.number is not None:
            extra.append(f"reference host: {phrasing.headline(r)}")
        fig = published.figure(this.chapter, f.published) if f.published else None
        if fig is not None:
            extra.append(f"published: {fig.text}")
        lines.append(f"* {f.text}" + (f" <small>({'; '.join(extra)})</small>" if extra else ""))
    return lines


def markdown(page: types.ModuleType, this: results.Result, ref: results.Result | None = None,
             *, is_reference_run: bool = False) -> str:
    """The opening block as Markdown (see :func:`show`): ``page`` is the chapter's page module, whose
    ``opening(facts)`` words this result's facts."""
    op = page.opening(registry.analysed(this).facts)
    lines = [f"**{heading(this, is_reference_run)}**", ""]
    lines += fact_bullets(op.findings, this, ref, is_reference_run=is_reference_run)
    lines += ["", "**What to do**", ""]
    for a in op.actions:
        lines.append(f"* {a.text}")
        if a.snippet:
            lines += ["", "  <details><summary>The code</summary>", "", *fenced(a.snippet, "  "),
                      "", "  </details>", ""]
    return "\n".join(lines)


def fenced(snippet: str, indent: str = "") -> list[str]:
    """A Python snippet (it may come from a result file) as the lines of a code block that nothing inside it can
    end: fenced by more backticks than its longest run of them, hidden characters dropped
    (:func:`~datajourney.core.phrasing.visible`)."""
    body = phrasing.visible(snippet.replace("\r", "")).splitlines()
    fence = "`" * max(3, 1 + max((len(m) for line in body for m in re.findall(r"`+", line)), default=0))
    return [f"{indent}{fence}python", *(f"{indent}{line}" for line in body), f"{indent}{fence}"]


def where_saved(this: results.Result) -> str:
    """For a notebook run by hand: where its result file went (a directory of its own per kernel)."""
    path = this.path
    interactive = results.REPO_ROOT / "results" / "interactive"
    if path is None or this.replayed_from or interactive not in Path(path).parents:
        return ""
    return (f"\n\n<small>This run's result: {phrasing.code(Path(path).relative_to(results.REPO_ROOT))} "
            "(a new directory for each kernel, so a later Run All keeps it).</small>")


def show(page: types.ModuleType, this: results.Result, ref: results.Result | None = None,
         *, is_reference_run: bool = False) -> None:
    """Show the chapter's opening: the findings under the host's name and "What to do"."""
    report.say(markdown(page, this, ref, is_reference_run=is_reference_run) + where_saved(this))


def evidence(page: types.ModuleType, this: results.Result, ref: results.Result | None = None, *,
             is_reference_run: bool = False) -> None:
    """The chapter's full key results, folded into a "How we know" block under the opening (the page's
    ``findings(facts)``, each with the reference host's value of the same fact)."""
    lines = fact_bullets(page.findings(registry.analysed(this).facts), this, ref, is_reference_run=is_reference_run)
    report.say("<details>\n<summary>How we know: every key result of this run</summary>\n\n"
               + "\n".join(lines) + "\n\n</details>")
