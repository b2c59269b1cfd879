"""Answers: a question a reader brings to a chapter, decided by the run like for like against the default.

A chapter's analysis declares each question once (:class:`Question`): the knob a reader changes, the
candidates the run measured doing the same work, the library's default as the baseline (the setting a
reader runs without the book), and the smallest effect worth a change. :func:`decide` turns the measured
candidates into one :class:`~datajourney.core.facts.Advice`:

* the best candidate is compared with the best *alternative*: the best of the default's group (the default
  value itself for a plain knob; the best measured configuration of the default's kind, e.g. the best
  DataLoader, for a choice between kinds), never with a weaker configuration;
* below the threshold, :data:`MIN_EFFECT` (or the question's ``cost_effect`` for an option with a cost: lower
  precision, alignment, convergence), or where the two sides' runs overlap (level: within the measured spread,
  :func:`~datajourney.core.stats.level`), the verdict is "keep the default",
  with how far the default is from the best measured;
* candidates level with the best (within its threshold) serve as well, so the first one listed (a caller
  lists them cheapest first: fewer workers, less memory) is the one advised;
* a question whose default the run did not measure gives no advice: a gain needs its baseline.

Nothing here words anything: :func:`datajourney.core.phrasing.advice` words the advice the same way
wherever it appears (a chapter page, the front page, chapter 12).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from datajourney.core.facts import Advice, Fact, Facts, compare

#: MLPerf Storage's bar, the book's one definition of "keeps up": a loader keeps up, and a GPU is fed, when the
#: accelerator's utilisation (AU: steps × the step alone ÷ wall time, the share of its own ceiling) reaches 90%.
KEEPS_UP = 0.90
#: The smallest effect worth changing a default for, as a fraction (3%).
MIN_EFFECT = 0.03
#: The smallest effect worth an option that costs something (precision, convergence, alignment), 10%.
COST_EFFECT = 0.10


@dataclass(frozen=True)
class Question:
    """One question a reader brings to a chapter, declared once by its analysis."""

    key: str                    #: one question, one key: "image.num_workers"
    ask: str                    #: the question in a reader's words: "How many DataLoader workers?"
    knob: str                   #: what a reader changes: "num_workers", "bucket_cap_mb"
    default: object             #: the candidate value that is the library's default (the baseline)
    default_call: str           #: the default as a reader writes it: "num_workers=0", "NCCL_P2P_DISABLE unset"
    whose: str                  #: whose default it is: "PyTorch's DataLoader default"
    workload: str               #: the workload the candidates ran: "ResNet-50 training from JPEG files"
    min_effect: float = MIN_EFFECT
    cost: str | None = None     #: the cost of the non-default options, said with the advice
    cost_effect: float = COST_EFFECT
    #: the published metric the gain matches when it reads "advised ÷ default" (a change of the default)
    published: str | None = None
    #: the candidates are one knob's values in increasing order (a sweep): a change to the last one is said to be
    #: "the largest value measured; more may help" only where the sweep's last step still gained
    #: (:func:`more_may_help`)
    swept: bool = False


@dataclass(frozen=True)
class Candidate:
    """One measured candidate: the knob's ``value``, the fact measuring it, and how a reader sets it."""

    value: object
    fact: Fact | None
    call: str | None = None     #: code a reader pastes for it: "num_workers=8" (default: knob=value)
    group: object = None        #: the kind it belongs to (for a choice between kinds); default: the value
    snippet: str | None = None
    costly: bool = False        #: carries the question's cost
    at: str | None = None       #: the setting it was measured at, where the value alone does not say it

    @property
    def kind(self) -> object:
        return self.value if self.group is None else self.group


def _gain(top: Fact, base: Fact) -> float:
    """How much better ``top`` is than ``base``, as a ratio ≥ 1 when better (a time's ratio inverted)."""
    r = top.number / base.number
    return 1 / r if top.better == "lower" else r


def _best(cands: Sequence[Candidate]) -> Candidate | None:
    have = [c for c in cands if c.fact is not None and c.fact.number is not None and c.fact.number > 0]
    if not have:
        return None
    lower = have[0].fact.better == "lower"
    return (min if lower else max)(have, key=lambda c: c.fact.number)


def threshold(q: Question, top: Candidate, base: Candidate) -> float:
    """The smallest gain (a ratio above 1, as a fraction) that advises ``top`` over ``base``: the question's
    minimum effect (its larger one for an option with a cost). The runs' spread enters through "level"."""
    return q.cost_effect if top.costly else q.min_effect


def _clears(q: Question, a: Candidate, b: Candidate) -> bool:
    """Whether ``a`` measured better than ``b`` by at least the threshold, with their runs apart: not level
    (:func:`~datajourney.core.stats.level`, the one rule the facts' comparisons and :func:`exceeds` use)."""
    return _gain(a.fact, b.fact) - 1 >= threshold(q, a, b) and not compare("_", a.fact, b.fact).level


def decide(q: Question, candidates: Sequence[Candidate], facts: Facts) -> Advice | None:
    """The run's answer to ``q`` (also stored in ``facts``: the gain as ``<key>.gain``), or None when the
    run measured fewer than two candidates or not the default."""
    top = _best(candidates)
    default_kind = next((c.kind for c in candidates if c.value == q.default), q.default)
    base = _best([c for c in candidates if c.kind == default_kind])
    alt = _best([c for c in candidates if c.kind != default_kind])
    if top is None or base is None or alt is None:
        return None
    facts.add(*(c.fact for c in candidates if c.fact is not None and c.fact.key not in facts))
    evidence = tuple(dict.fromkeys(c.fact.key for c in candidates if c.fact is not None))
    common = dict(workload=q.workload, default=q.default_call, question=q.ask, evidence=evidence)
    if top.kind == default_kind:
        # the default's kind won: keep it, and say by how much it beat the best other kind
        facts.add(compare(f"{q.key}.gain", base.fact, alt.fact))
        return Advice(q.key, q.knob, base.value, gain=f"{q.key}.gain", verdict="keep",
                      within=0.0, threshold=threshold(q, alt, base), snippet=base.snippet,
                      call=base.call, at=base.at, **common)
    if not _clears(q, top, base):
        facts.add(compare(f"{q.key}.gain", top.fact, base.fact))
        return Advice(q.key, q.knob, q.default, gain=f"{q.key}.gain", verdict="keep",
                      within=_gain(top.fact, base.fact) - 1, threshold=threshold(q, top, base), call=q.default_call,
                      best=top.call or _call(q.knob, top.value), **common)
    # candidates level with the best that still clear the default serve as well: the first listed (a caller lists
    # them cheapest first) is advised
    pick = next(c for c in candidates if c is top or (
        c.kind != default_kind and c.fact is not None and c.fact.number
        and not _clears(q, top, c) and _clears(q, c, base)))
    gain, need = _gain(pick.fact, base.fact), threshold(q, pick, base)
    facts.add(compare(f"{q.key}.gain", pick.fact, base.fact, published=q.published))
    advice = Advice(q.key, q.knob, pick.value, gain=f"{q.key}.gain", verdict="change", within=gain - 1,
                    threshold=need, snippet=pick.snippet, call=pick.call, at=pick.at,
                    cost=q.cost if pick.costly else None, **common)
    return replace(advice, scope="edge") if q.swept and more_may_help(q, candidates, advice) else advice


def _call(knob: str, value) -> str:
    return f"{knob}={value!r}" if isinstance(value, str) else f"{knob}={value}"


def exceeds(value: Fact, bound: Fact) -> bool:
    """Whether ``value`` measured beyond ``bound`` (a ceiling, a faster configuration it cannot beat) by more
    than :data:`MIN_EFFECT`, with the two runs not level (:func:`~datajourney.core.stats.level`, the rule the
    facts' comparisons use): an impossible result, which the book flags as a measurement problem and never
    words as an outcome."""
    if value.number is None or bound.number is None or not bound.number:
        return False
    over = value.number / bound.number if value.better != "lower" else bound.number / value.number
    return over - 1 > MIN_EFFECT and not compare("_", value, bound).level


def more_may_help(q: Question, candidates: Sequence[Candidate], advice: Advice | None) -> bool:
    """Whether a change to the largest value measured may gain from going further, as the measured trend says: the
    advice picked the last candidate (a caller lists them in the knob's order), and that candidate beat the one
    before it by at least the question's minimum effect with their runs apart (not level). The advice then carries
    ``scope="edge"`` ("the largest value measured; more may help"); a last step that gained less says nothing of
    what lies beyond."""
    if advice is None or advice.verdict != "change" or len(candidates) < 2:
        return False
    prev, last = candidates[-2], candidates[-1]
    if advice.value != last.value or any(c.fact is None or not c.fact.number for c in (prev, last)):
        return False
    return _clears(q, last, prev)
