"""How a chapter opens: "On this machine" (at most three one-sentence findings, each with the reference
run's and the published figure beside it) and "What to do" (the settings this run chose, with their
measured gain and a snippet), then the full key results folded into "How we know"."""
from __future__ import annotations

from collections.abc import Callable

from datajourney.book import report
from datajourney.core import results
from datajourney.core.findings import Opening


def _who(res: results.Result, is_reference_run: bool) -> str:
    gpu = (res.fingerprint.get("gpu") or {}).get("name") if isinstance(res.fingerprint.get("gpu"), dict) else None
    if is_reference_run:
        return f"On the reference host{f' (an {gpu} host)' if gpu else ''}"
    return "On this machine"


def _safe(fn, res):
    if res is None:
        return None
    try:
        return fn(res)
    except (KeyError, ValueError, IndexError, TypeError):
        return None


def markdown(opening: Callable[[results.Result], Opening], this: results.Result, ref: results.Result | None = None,
             *, is_reference_run: bool = False) -> str:
    """The opening block as Markdown (see :func:`show`)."""
    op = opening(this)
    theirs = None if is_reference_run else _safe(opening, ref)
    by_key = {f.key: f for f in theirs.findings} if theirs is not None else {}
    lines = [f"**{_who(this, is_reference_run)}**", ""]
    lines += report.finding_bullets(op.findings, by_key, this.chapter, ref_label="reference host", name_source=False)
    lines += ["", "**What to do**", ""]
    for a in op.actions:
        lines.append(f"* {a.text}")
        if a.snippet:
            lines += ["", "  ```python"] + [f"  {line}" for line in a.snippet.splitlines()] + ["  ```", ""]
    return "\n".join(lines)


def show(opening: Callable[[results.Result], Opening], this: results.Result, ref: results.Result | None = None,
         *, is_reference_run: bool = False) -> None:
    """Show the chapter's opening: "On this machine" and "What to do"."""
    report.say(markdown(opening, this, ref, is_reference_run=is_reference_run))


def evidence(findings, this: results.Result, ref: results.Result | None = None, *,
             is_reference_run: bool = False) -> None:
    """The chapter's full key results, folded into a "How we know" block under the opening."""
    _, lines = report.key_result_lines(findings, this, ref, is_reference_run=is_reference_run)
    report.say("<details>\n<summary>How we know: every key result of this run</summary>\n\n"
               + "\n".join(lines) + "\n\n</details>")
