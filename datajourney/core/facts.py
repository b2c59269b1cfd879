"""Facts: what a chapter's analysis finds in its result, typed and named, with no prose.

Every chapter has ``analysis.py`` with ``analyse(result) -> Facts``: a pure function of the result
file. The chapter's page, the front page, chapter 12, the checklist and the command-line summary
only *word* these facts (:mod:`datajourney.core.phrasing`), so one number or one piece of advice
is computed once and reads the same wherever it appears. Facts are stored in the result file
(``"facts"``, schema 3) so that chapter 12 reads other chapters' results, never their code.

* :class:`Fact`: one measured quantity (value, unit, which direction is better, the runs behind it
  and their spread, the setting it belongs to) or a comparison of two such quantities (``of`` and
  ``basis``: the keys of the compared fact and of its baseline; ``value`` is their ratio).
* :class:`Advice`: a setting to change, for a named workload, with the fact that measures its gain
  and the range measured (``scope``).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

from datajourney.core import stats

#: How a quantity reads in a comparison: a rate or a time reads faster/slower (``better`` decides
#: which is which), an amount (CPU time per image, memory, bytes) reads more/less, a share (a percentage) or a
#: ratio (a gain, itself a ratio) reads "3.1× that of" ("× more" would leave open whether 3.1× means 4.1×).
QUANTITIES = ("rate", "time", "amount", "share", "ratio", "count", "choice")
BETTER = ("higher", "lower", None)
#: How far a piece of advice holds: ``best`` — the best of the values measured, inside the range;
#: ``edge`` — the largest (or smallest) value measured, more may help; ``only`` — the one option that ran.
SCOPES = ("best", "edge", "only")
#: A declared question's verdict: change the library default to the advised value, or keep the default.
VERDICTS = ("change", "keep")
#: The suffix of the fact that flags another as an impossible result (:meth:`Facts.flagged`).
FLAGGED = ".flagged"


@dataclass(frozen=True)
class Fact:
    """One measured quantity of one run, or the ratio of two (a comparison)."""

    key: str
    value: float | int | str | None
    unit: str = ""                               #: "MB/s", "images/s", "ms", "×", "%", "" (counts, choices)
    label: str = ""                              #: what was measured, a noun phrase: "the sharded read, cold"
    quantity: str = "rate"                       #: one of :data:`QUANTITIES`
    better: str | None = "higher"                #: one of :data:`BETTER`
    n: int = 1                                   #: runs behind ``value``
    spread: tuple[float, float] | None = None    #: (lowest, highest) over the runs
    setting: dict = field(default_factory=dict)  #: the setting it belongs to: {"workers": 4, "cache": "cold"}
    of: str | None = None                        #: comparison: the key of the compared fact
    basis: str | None = None                     #: comparison: the key of the baseline fact
    level: bool = False                          #: comparison: the two spreads overlap (n ≥ 2 each)
    published: str | None = None                 #: a metric of the published figures with the same meaning

    def __post_init__(self):
        if self.quantity not in QUANTITIES:
            raise ValueError(f"fact {self.key!r}: quantity {self.quantity!r} is not one of {QUANTITIES}")
        if self.better not in BETTER:
            raise ValueError(f"fact {self.key!r}: better {self.better!r} is not one of {BETTER}")

    @property
    def number(self) -> float | None:
        """``value`` as a finite float, else None."""
        v = self.value
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return None
        return float(v)

    @property
    def is_comparison(self) -> bool:
        return self.basis is not None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["spread"] = list(self.spread) if self.spread is not None else None
        return {k: v for k, v in d.items()
                if v not in (None, {}, "", False) or k in ("key", "value", "better", "quantity")}

    @classmethod
    def from_dict(cls, d: Mapping) -> Fact:
        d = dict(d)
        if d.get("spread") is not None:
            d["spread"] = tuple(d["spread"])
        return cls(**d)


def measured(key: str, values: Iterable[float], *, unit: str, label: str, quantity: str = "rate",
             better: str | None = "higher", setting: Mapping | None = None, published: str | None = None) -> Fact:
    """A fact from the runs of one setting: the mean, the number of runs and their (min, max)."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not xs:
        return Fact(key, None, unit, label, quantity, better, 0, None, dict(setting or {}), published=published)
    spread = (min(xs), max(xs)) if len(xs) > 1 else None
    return Fact(key, sum(xs) / len(xs), unit, label, quantity, better, len(xs), spread, dict(setting or {}),
                published=published)


def compare(key: str, a: Fact, b: Fact, *, published: str | None = None) -> Fact:
    """``a`` against its baseline ``b``: the ratio a/b, with ``level`` set when both ran at least twice and
    their spreads overlap (then no direction is claimed)."""
    x, y = a.number, b.number
    ratio = x / y if x is not None and y not in (None, 0.0) else None
    level = stats.level(a.spread if a.n > 1 else None, b.spread if b.n > 1 else None)
    return Fact(key, ratio, "×", a.label, a.quantity, a.better, min(a.n, b.n), None, dict(a.setting),
                of=a.key, basis=b.key, level=level, published=published)


def best(facts: Iterable[Fact]) -> Fact | None:
    """The best of ``facts`` by their ``better`` direction (None when none has a number)."""
    have = [f for f in facts if f.number is not None]
    if not have:
        return None
    return (min if have[0].better == "lower" else max)(have, key=lambda f: f.number)


@dataclass(frozen=True)
class Advice:
    """A setting to change, chosen by the run: ``knob`` = ``value`` for ``workload``, gaining what the
    comparison fact ``gain`` measured. ``needs`` names hardware the advice needs ("gpu", "gpus", "root"):
    a run without it shows the advice as the reference host's."""

    key: str                       #: one question, one key: "image.num_workers"
    knob: str                      #: the parameter or setting a reader changes: "num_workers"
    value: object                  #: what to set it to
    workload: str = ""             #: the workload it was measured on: "ResNet-50 training from JPEG files"
    gain: str | None = None        #: the key of the comparison fact that measures the gain
    scope: str = "best"            #: one of :data:`SCOPES`
    evidence: tuple[str, ...] = ()  #: keys of the facts it rests on
    snippet: str | None = None     #: code a reader can paste (it must compile)
    needs: str | None = None
    #: the setting the gain was measured at where the value alone does not say it ("num_workers=0")
    at: str | None = None
    #: a declared question's answer (:mod:`datajourney.core.answers`): "change" the default, or "keep" it
    verdict: str = "change"
    default: str | None = None     #: the library default as a reader writes it: "bucket_cap_mb=25"
    question: str | None = None    #: the question it answers, in a reader's words
    within: float | None = None    #: keep: how far the default is from the best measured; change: gain - 1
    threshold: float | None = None  #: the smallest gain that would change the default (a fraction)
    cost: str | None = None        #: what the advised option costs (precision, convergence, alignment)
    call: str | None = None        #: the setting as a reader pastes it, where ``knob=value`` is not it
    best: str | None = None        #: keep: the best candidate measured, as a reader would set it

    def __post_init__(self):
        if self.scope not in SCOPES:
            raise ValueError(f"advice {self.key!r}: scope {self.scope!r} is not one of {SCOPES}")
        if self.verdict not in VERDICTS:
            raise ValueError(f"advice {self.key!r}: verdict {self.verdict!r} is not one of {VERDICTS}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["evidence"] = list(self.evidence)
        if d["verdict"] == "change":
            del d["verdict"]
        return {k: v for k, v in d.items() if v not in (None, (), [], "") or k in ("key", "value")}

    @classmethod
    def from_dict(cls, d: Mapping) -> Advice:
        d = dict(d)
        d["evidence"] = tuple(d.get("evidence") or ())
        return cls(**d)


@dataclass
class Facts:
    """Everything one chapter's analysis found in one result: facts by key, advice, and the keys it
    exports to the pages that summarise other chapters (the front page, chapter 12, the checklist)."""

    chapter: str
    facts: dict[str, Fact] = field(default_factory=dict)
    advice: list[Advice] = field(default_factory=list)
    exports: tuple[str, ...] = ()
    #: plain values the summarising pages need beside facts (a model name, a batch size, a curve)
    data: dict = field(default_factory=dict)

    def add(self, *facts: Fact | None) -> Facts:
        for f in facts:
            if f is not None:
                self.facts[f.key] = f
        return self

    def advise(self, *advice: Advice | None) -> Facts:
        for a in advice:
            if a is not None:
                self.advice.append(a)
        return self

    def __contains__(self, key: str) -> bool:
        return key in self.facts

    def __getitem__(self, key: str) -> Fact:
        try:
            return self.facts[key]
        except KeyError:
            raise KeyError(f"chapter {self.chapter} has no fact {key!r}; it has {sorted(self.facts)}") from None

    def get(self, key: str) -> Fact | None:
        return self.facts.get(key)

    def number(self, key: str) -> float | None:
        f = self.facts.get(key)
        return f.number if f is not None else None

    def flagged(self, key: str) -> bool:
        """Whether the analysis flagged the fact ``key`` as an impossible result (a measurement problem: a rate
        above its ceiling, an occupancy above 100%), stored as the fact ``<key>.flagged``; summaries show the
        flag, never the number as an outcome."""
        return f"{key}{FLAGGED}" in self.facts

    def advice_for(self, key: str) -> Advice | None:
        return next((a for a in self.advice if a.key == key), None)

    def to_dict(self) -> dict:
        return {"chapter": self.chapter, "facts": [f.to_dict() for f in self.facts.values()],
                "advice": [a.to_dict() for a in self.advice], "exports": list(self.exports), "data": self.data}

    @classmethod
    def from_dict(cls, d: Mapping) -> Facts:
        return cls(chapter=d["chapter"], facts={f["key"]: Fact.from_dict(f) for f in d.get("facts", [])},
                   advice=[Advice.from_dict(a) for a in d.get("advice", [])],
                   exports=tuple(d.get("exports", ())), data=dict(d.get("data") or {}))


def host_label(fingerprint: Mapping) -> str:
    """The machine of a result in a reader's words: "an NVIDIA H200 host (16 cores)" or "a CPU-only
    host (2 cores)" — the GPU and the cores a run had, which is what its findings depend on."""
    gpu = (fingerprint or {}).get("gpu") or {}
    cpu = (fingerprint or {}).get("cpu") or {}
    cores = cpu.get("usable_cores") or cpu.get("logical_cores")
    tail = f" ({cores} cores)" if cores else ""
    if gpu.get("available") and gpu.get("name"):
        count = int(gpu.get("count") or 1)
        name = str(gpu["name"]).replace("NVIDIA ", "")
        many = f"{count} × {name}" if count > 1 else name
        return f"{'an' if many[0] in 'AEFHILMNORSX8' else 'a'} {many} host{tail}"
    return f"a CPU-only host{tail}"
