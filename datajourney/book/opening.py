"""How a chapter opens: this run's host by name (at most three one-sentence findings, each with the
published figure beside it where it names one) and "What to do" (the settings this run chose, each as its first
sentence with its measured gain; the rest and the code folded under the list), then the full key results, each with
the reference host's value of the same fact, folded into "How we know": the opening fits a laptop's first screen.
A chapter's page words its facts (``page.opening(facts)``, ``page.findings(facts)``); the reference host's value
beside a finding is the same fact of the reference result, never recomputed."""
from __future__ import annotations

import math
import re
import types
from pathlib import Path

from datajourney.book import registry, report
from datajourney.chapters import published
from datajourney.core import phrasing, results
from datajourney.core.facts import host_label

#: Lines of the text column at 1280×800 that the opening's findings and its actions' first sentences fill together:
#: what leaves the title, one short paragraph and the headings room on the first screen (measured on the built
#: book: a list item wraps at about :data:`LINE_CHARS` characters, code spans a quarter wider than prose). Findings
#: past it (the page's order is its priority; the first is always shown) move to "How we know". A page whose
#: introduction runs longer sets its own ``OPENING_LINES``.
OPENING_LINES = 13
#: Characters of a list item's line in the text column.
LINE_CHARS = 76


def heading(this: results.Result, is_reference_run: bool) -> str:
    """Who measured what follows, by host: "On this machine, a CPU-only host (2 cores)" or "On the reference
    host, an H200 host (16 cores)". The label is made of the result's fingerprint, so it is shown as text."""
    who = "On the reference host" if is_reference_run else "On this machine"
    yours = phrasing.your_data(this.facts.get("your_data") if this.facts is not None else None)
    return f"{who}, {phrasing.text(host_label(this.fingerprint))}" + (f", reading {yours}" if yours else "")


def fact_bullets(findings: list, this: results.Result, ref: results.Result | None, *,
                 is_reference_run: bool, beside_reference: bool = True) -> list[str]:
    """Markdown bullets of a page's findings, each with the reference host's value of the same fact (unless
    ``beside_reference`` is false) and the published figure where the finding names one."""
    theirs = {}
    if beside_reference and not is_reference_run and ref is not None:
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
    ``opening(facts)`` words this result's facts. "What to do" lists each action's first sentence, numbered, so
    the findings and the advice fit a laptop's first screen; the rest of each action (its cost, a caveat) and its
    code follow under the same number in one folded block."""
    op = page.opening(registry.analysed(this).facts)
    lines = [f"**{heading(this, is_reference_run)}**", ""]
    budget = getattr(page, "OPENING_LINES", OPENING_LINES)
    lines += fact_bullets(shown(op, budget), this, ref, is_reference_run=is_reference_run, beside_reference=False)
    lines += ["", "**What to do**", ""]
    folded = []
    for i, a in enumerate(op.actions, 1):
        lead, rest = first_sentence(a.text)
        lines.append(f"{i}. {lead}")
        if rest or a.snippet:
            folded += [f"{i}. {rest or 'The code:'}", ""]
            folded += [*fenced(a.snippet, "   "), ""] if a.snippet else []
    if folded:
        summary = "More on each step, and its code" if any(first_sentence(a.text)[1] for a in op.actions) \
            else "The code"
        lines += ["", f"<details><summary>{summary}</summary>", "", *folded, "</details>", ""]
    return "\n".join(lines)


def read_length(text: str) -> int:
    """Characters a reader reads in a Markdown ``text``: link targets, emphasis, code ticks and escapes left out."""
    return len(re.sub(r"[*`\\]", "", re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)))


def lines(text: str) -> int:
    """Lines a list item of Markdown ``text`` takes in the text column (code spans drawn a quarter wider)."""
    code = sum(len(c) for c in re.findall(r"`([^`]*)`", text))
    return math.ceil((read_length(text) + code / 4) / LINE_CHARS)


#: How a finding that words a measurement problem starts (its bold label): such a finding is always shown.
FLAG_MARK = "**Flagged"


def shown(op, budget: int = OPENING_LINES) -> list:
    """The opening's findings that fit ``budget`` lines beside its actions' first sentences: any flagged as a
    measurement problem and the first always, the next ones in order while they fit."""
    used = sum(lines(first_sentence(a.text)[0]) for a in op.actions)
    flagged = [f for f in op.findings if FLAG_MARK in f.text]   # a measurement problem is never folded away
    out = list(flagged)
    used += sum(lines(f.text) for f in flagged)
    for f in op.findings:
        if f in flagged:
            continue
        used += lines(f.text)
        if out and used > budget:
            break
        out.append(f)
    return [f for f in op.findings if f in out]


def first_sentence(text: str) -> tuple[str, str]:
    """``text`` split after its first sentence: a full stop, question or exclamation mark followed by a space and
    a capital letter, outside code spans, links and brackets. The rest is "" for a text of one sentence."""
    depth, code = 0, False
    for i, ch in enumerate(text):
        if ch == "`":
            code = not code
        elif not code and ch in "([":
            depth += 1
        elif not code and ch in ")]":
            depth = max(0, depth - 1)
        elif (not code and depth == 0 and ch in ".!?" and text[i + 1:i + 2] == " "
              and re.match(r"\s+[A-Z*`\[]", text[i + 1:])):
            return text[:i + 1], text[i + 1:].strip()
    return text, ""


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
    if path is None or this.replayed_from or results.INTERACTIVE_RUN_DIR.parent not in Path(path).parents:
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
    ``findings(facts)``, and the opening's findings they do not hold, each with the reference host's value of the
    same fact: the opening leaves that value to this block, to fit the first screen)."""
    facts = registry.analysed(this).facts
    found = page.findings(facts)
    keys = {f.key for f in found}
    found = [f for f in page.opening(facts).findings if f.key not in keys] + list(found)
    lines = fact_bullets(found, this, ref, is_reference_run=is_reference_run)
    report.say("<details>\n<summary>How we know: every key result of this run</summary>\n\n"
               + "\n".join(lines) + "\n\n</details>")
