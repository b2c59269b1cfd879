"""Sentences several chapters' pages word the same way from their facts (pages only: analyses may not word)."""
from __future__ import annotations

from datajourney.core import phrasing as say
from datajourney.core.phrasing import Finding


def cap(s: str) -> str:
    """``s`` with its first letter capitalised (the rest unchanged)."""
    return s[:1].upper() + s[1:]


def fact_value(facts, key: str, runs: bool = False) -> str:
    """Fact ``key`` as the book prints a value (without its run count unless ``runs``)."""
    return say.value(facts.get(key), runs=runs)


def pair_words(facts, key: str) -> str:
    """"A ran at x MB/s and B at y MB/s: N× faster than B" for the comparison fact ``key``."""
    c = facts[key]
    a, b = facts[c.of], facts[c.basis]
    return (f"{cap(say.text(a.label))} ran at **{say.value(a)}** and {say.text(b.label)} at **{say.value(b)}**: "
            f"**{say.comparison(c, facts)}**")


def fact_finding(facts, key: str, text: str):
    """A finding worded ``text`` carrying fact ``key``'s number, unit, published figure and spread."""
    f = facts[key]
    return Finding(key, text, f.number, f.unit, f.published, f.spread)


def residency_words(facts, unit: str) -> str:
    """Whether cold ``unit`` (runs, epochs) started cold and warm ones warm: the page-cache residency measured
    when each began, from the ``residency.cold``/``residency.warm`` facts."""
    parts = []
    c, w = facts.get("residency.cold"), facts.get("residency.warm")
    if c is not None:
        share = "**none** of the data" if c.number == 0 else f"at most **{say.value(c)}** of the data"
        parts.append(f"{say.text(facts.data.get('cold_label') or 'cold')} {unit} started with {share} resident")
    if w is not None:
        parts.append(f"warm {unit} with at least **{say.value(w)}**")
    return ("Residency: " + "; ".join(parts) + ".") if parts else f"No timed {unit} to check."
