"""The one way the book words a fact: numbers, comparisons, advice, and text from result files.

Pages, the front page, chapter 12 and the command-line summary call these; none of them builds a
comparison or an advice sentence of its own, so the same fact reads the same everywhere.

Conventions (the reader's, not the author's):

* a comparison is "N× faster / slower / more / less than <baseline>", its direction taken from the
  quantity and its better-direction; the ratio printed is always ≥ 1;
* "level with" only when both sides ran at least twice and their spreads overlap, said as such;
* percentages only for shares; a published figure beside a finding only when it is the same metric;
* every string that comes from a result file goes through :func:`text` or :func:`code`, so a
  hostile string cannot end a code span or open an HTML tag.
"""
from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from datajourney.core.facts import Advice, Fact, Facts
from datajourney.core.stats import HIGH_SPREAD, cv, direction, mean, ratio
from datajourney.core.units import num, pct, prints_alike, signed, size_label, span, times  # noqa: F401 - the book's one way to print a number


@dataclass(frozen=True)
class Finding:
    """One computed sentence and the figure behind it."""

    key: str                          #: stable identifier, e.g. ``"shard_vs_small_cold_w0"``
    text: str                         #: Markdown, built from the result
    value: float | None = None        #: the headline number of this run
    unit: str = ""                    #: unit of ``value``: "MB/s", "ms", "×", "%", ...
    published: str | None = None      #: metric name in :data:`published.PUBLISHED` to show beside it
    interval: tuple[float, float] | None = None  #: (low, high) of ``value`` over runs
    values: dict = field(default_factory=dict)    #: other numbers the sentence uses

    @property
    def headline(self) -> str:
        """``value`` with its unit and interval, e.g. ``"5.1× (3.9–5.9)"``."""
        if self.value is None:
            return "—"
        text = num(self.value, self.unit)
        if self.interval is not None:
            lo, hi = self.interval
            rng = span(lo, hi)
            if rng != num(self.value, with_unit=False):  # no "(20.9)" beside 20.9
                text += f" ({rng})"
        return text


#: The most findings a chapter opens with, and the most words in each (one sentence each).
OPENING_FINDINGS, OPENING_WORDS = 3, 35


@dataclass(frozen=True)
class Action:
    """One thing to do on this machine, chosen from this run's data: the setting that won here and
    its measured gain (``text``), with a copy-pasteable ``snippet`` where code is the answer."""

    text: str
    snippet: str | None = None


@dataclass(frozen=True)
class Opening:
    """What a chapter opens with: at most :data:`OPENING_FINDINGS` short findings (one sentence of at
    most :data:`OPENING_WORDS` words each, with one number) and one to three :class:`Action` items."""

    findings: list[Finding]
    actions: list[Action]


def words(text: str) -> int:
    """Words a reader reads in ``text`` (Markdown emphasis, code ticks and links count as their words)."""
    plain = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    plain = re.sub(r"[*`_]", "", plain)
    return len(plain.split())


def and_list(items: Sequence[str]) -> str:
    """'', 'a', 'a and b', 'a, b and c'."""
    items = list(items)
    return "" if not items else items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def compare(a, b, *, more: str = "faster than", less: str = "slower than",
            same: str = "level with", tol: float = 0.05, as_ratio: bool = True) -> str:
    """A comparison phrase of a against b, e.g. '3.1× faster than', '1.4× slower than', 'level with' (within
    the runs' spread or ``tol``: no ratio then).

    For "higher is better" quantities (throughput): ``compare(shard, small)``. The ratio
    printed is always ≥ 1 (the larger over the smaller).
    """
    d = direction(a, b, tol=tol)
    ma, mb = mean(a), mean(b)
    if d == 0:  # no ratio beside "level": a number next to it reads as a difference the runs do not show
        return same
    r = ratio(ma, mb) if d > 0 else ratio(mb, ma)
    word = more if d > 0 else less
    return f"{times(r)} {word}" if as_ratio else word


def choose(d: int, more: str, less: str, same: str) -> str:
    """The phrase for a direction from :func:`direction`."""
    return more if d > 0 else less if d < 0 else same


def spread_note(label: str, values: Sequence[float], unit: str = "") -> str | None:
    """A sentence when the runs of ``label`` spread by more than :data:`HIGH_SPREAD`, else None."""
    c = cv(values)
    if not (c > HIGH_SPREAD):
        return None
    return spread_words(label, min(values), max(values), len(values), c, unit)


def spread_words(label: str, low: float, high: float, runs: int, c: float, unit: str = "") -> str:
    """The sentence of :func:`spread_note` from numbers an analysis stored: ``label``'s ``runs`` runs spread over
    ``low``–``high`` with the coefficient of variation ``c`` (the analysis decided it is above the threshold)."""
    return (f"{label} varied over {span(low, high, unit)} in {runs} runs (coefficient of variation {pct(c)}): "
            "read it as a range, not a point.")


def as_markdown(findings: Sequence[Finding]) -> str:
    """Findings as a Markdown bullet list."""
    return "\n".join(f"* {f.text}" for f in findings)


#: words for a ratio above 1 and below 1, by quantity (for a time, a ratio below 1 is faster)
_WORDS = {"rate": ("faster than", "slower than"), "time": ("slower than", "faster than"),
          "amount": ("more than", "less than"), "count": ("more than", "fewer than")}
#: Characters a string from a result file never brings into a page: C0 controls, bidirectional overrides,
#: embeddings, isolates and marks (which reverse how the text around them reads), zero-width characters.
_HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")


# ----------------------------------------------------------------------------- strings from results
def visible(value) -> str:
    """``value`` as a string without the characters that hide or reorder text (:data:`_HIDDEN`), so what a
    page shows reads as the result file says. Every escaper of result strings (here and in the book's
    tables) starts with this one."""
    return _HIDDEN.sub("", str(value))


def text(value) -> str:
    """A string from a result file as plain Markdown text: HTML special characters escaped and Markdown
    markup characters backslash-escaped, hidden characters dropped (:func:`visible`), one line."""
    s = visible(str(value).replace("\n", " ").replace("\r", " "))
    s = re.sub(r"([\\`*_\[\]{}#|!~])", r"\\\1", s)
    return html.escape(s, quote=False)


def code(value) -> str:
    """A string from a result file as an inline code span that nothing inside it can end: fenced by one
    more backtick than its longest run of backticks, padded when it starts or ends with one; hidden
    characters dropped (:func:`visible`), one line. Inside a code span Markdown renders ``<`` as text, never
    as a tag."""
    s = visible(str(value).replace("\n", " ").replace("\r", " "))
    fence = "`" * (max((len(m) for m in re.findall(r"`+", s)), default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s.strip() else ""
    return f"{fence}{pad}{s}{pad}{fence}"


#: Python's words for a module that is not installed, as an exception's message records them.
_NO_MODULE = re.compile(r"No module named '([\w.]+)'")
#: An exception's class name where a recorded reason starts with it ("ModuleNotFoundError: ...").
_EXCEPTION = re.compile(r"\b[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b:\s*")


def reason(note) -> str:
    """A reason a result recorded for what did not run, as plain text for a reader: no exception class names
    and no traceback (its last line is the message), "No module named 'x'" said as "x is not installed", a
    leading "skipped:" dropped (the caller labels the line), one sentence ending in a full stop."""
    lines = [ln.strip() for ln in visible(str(note or "")).splitlines() if ln.strip()]
    if lines and lines[0].startswith("Traceback"):
        lines = lines[-1:]
    s = " ".join(lines)
    s = _NO_MODULE.sub(lambda m: f"{m.group(1).split('.')[0]} is not installed", s)
    s = _EXCEPTION.sub("", s)
    s = re.sub(r"^(skipped|not measured|failed)\s*[:—-]\s*", "", s, flags=re.I).strip().rstrip(" .;:,")
    return text(s + ".") if s else "no reason was recorded."


def skipped(label: str, note) -> str:
    """A section or measurement that did not run, as one labelled line: "**io_uring:** not measured:
    liburing is not installed." (``note``: the reason the result recorded, through :func:`reason`)."""
    return f"**{text(label)}:** not measured: {reason(note)}"


# ----------------------------------------------------------------------------- where the step ran
#: Words that depend on where a run's training step ran: (with a GPU, without one). The one table of them, so
#: no page words a CPU run's step, memory or ranks as a GPU's.
_WHERE = {"device": ("the GPU", "the CPU"),
          "step": ("the GPU's own step", "the model's step on the CPU"),
          "memory": ("GPU memory", "the training process's memory"),
          "normalise": ("on the GPU", "in the training process"),
          "ranks": ("GPUs", "CPU processes"),
          "rank": ("GPU", "CPU process")}


#: What "guest-cold" means, said where a page first uses the word (one phrasing for every chapter).
GUEST_COLD = "guest-cold (out of this virtual machine's page cache; its host may still cache the data)"


def define_guest_cold(text: str) -> str:
    """``text`` with its first "guest-cold" (or "Guest-cold") defined in place."""
    for word in ("Guest-cold", "guest-cold"):
        i = text.find(word)
        if i >= 0:
            return text[:i] + word[0] + GUEST_COLD[1:] + text[i + len(word):]
    return text


#: What "cold" means in a run whose latency check could not tell the device from a cache below the machine (a median
#: too close to a flash read): said once, where a page first uses the word; the labels themselves say just "cold".
UNDECIDED_COLD = "cold (device or host cache: cannot tell)"


def define_cold(text: str, state: Fact | None) -> str:
    """``text`` with its first word for the run's cold state defined in place, as the run's ``cold_state`` fact (the
    latency check's verdict, chapter 2's where the run holds it) classified its cold reads: "guest-cold" as
    :func:`define_guest_cold` does; where the check could not tell (state "undecided"), the first "cold" (or "Cold")
    as :data:`UNDECIDED_COLD`. A page calls it on its first sentence that names the cold state, once."""
    text = define_guest_cold(text)
    if state is None or (state.setting or {}).get("state") != "undecided" or UNDECIDED_COLD[4:] in text:
        return text
    m = re.search(r"(?<![-\w])([Cc])old\b", text)
    return text if m is None else text[:m.start()] + m.group(1) + UNDECIDED_COLD[1:] + text[m.end():]


def define_first_text(texts: Sequence[str], state: Fact | None) -> list[str]:
    """``texts`` with the first one that names the cold state defined there (:func:`define_cold`), the rest as they
    are: a page (or a table's column) says what its "cold" means once, at its first use."""
    out = list(texts)
    for i, t in enumerate(out):
        if (new := define_cold(t, state)) != t:
            out[i] = new
            break
    return out


def define_first(findings: Sequence[Finding], state: Fact | None) -> list[Finding]:
    """``findings`` with the cold state defined in the first that names it (:func:`define_first_text`)."""
    texts = define_first_text([f.text for f in findings], state)
    return [f if t == f.text else Finding(f.key, t, f.value, f.unit, f.published, f.interval, f.values)
            for f, t in zip(findings, texts)]


def on_gpu(device) -> bool:
    """Whether a step ran on a GPU: ``device`` is a result's fingerprint (its ``gpu.available``), the device a
    chapter recorded ("cuda", "cuda:0", "cpu"), or already a bool."""
    if isinstance(device, Mapping):
        return bool(((device.get("gpu") or {}) if "gpu" in device else device).get("available"))
    if isinstance(device, str):
        return device.startswith("cuda")
    return bool(device)


def where(word: str, device) -> str:
    """``word`` (a key of :data:`_WHERE`: "device", "step", "memory", "normalise", "ranks", "rank") as it reads
    for a step that ran where ``device`` says (:func:`on_gpu`): "GPU memory" on a GPU run, "the training
    process's memory" on a CPU run."""
    return _WHERE[word][0 if on_gpu(device) else 1]


# ----------------------------------------------------------------------------- one fact
#: Said beside a share that prints above 100%: a part cannot exceed its whole, so the reader is told it did.
OVER_WHOLE = "over 100%: more than the whole"


def _over_whole(f: Fact) -> str:
    """" (over 100%: more than the whole)" for a share (quantity "share", in %) that prints above 100%."""
    shown = num(f.number, f.unit, with_unit=False).replace(",", "").replace("−", "-")
    return f" ({OVER_WHOLE})" if f.quantity == "share" and f.unit == "%" and float(shown) > 100 else ""


def lost_or_kept(lost: Fact | None, kept: Fact, *, bold: bool = False) -> str:
    """One measurement, the share of a baseline's rate a change cost, worded one way wherever it appears: "lost 6.0%"
    where ``lost`` is measured and not negative, else "kept 101%" (the share kept, ``kept``): a change that cost
    nothing is never worded as a negative loss."""
    b = "**" if bold else ""
    if lost is not None and lost.number is not None and lost.number >= 0:
        return f"lost {b}{value(lost, runs=False)}{b}"
    return f"kept {b}{value(kept, runs=False)}{b}"


def value(f: Fact | None, *, runs: bool = True) -> str:
    """A fact's value with its unit, and its spread over the runs: "2,123 MB/s (2,050–2,200, 3 runs)", or "11.6
    steps/s (each of 3 runs)" where every run prints alike; a share above 100% says so ("133% (over 100%: more than
    the whole)"), never bare."""
    if f is None or f.value is None:
        return "—"
    if f.number is None:
        return code(f.value)
    out = num(f.number, f.unit)
    if runs and f.spread is not None and f.n > 1:
        lo, hi = f.spread
        if prints_alike(lo, hi, f.unit):   # every run printed alike: no range of one number
            out += f" (each of {f.n} runs)"
        else:
            out += f" ({span(lo, hi, f.unit, with_unit=f.unit in ('×', '%'))}, {f.n} runs)"
    return out + _over_whole(f)


def value_in_range(f: Fact) -> str:
    """A fact's value with its runs' range and no count, for a sentence that says the runs once: "52.5 ms (50.7–52.8
    ms)"; the value alone from one run or where the range prints as one number."""
    out = num(f.number, f.unit)
    if f.spread is not None and f.n > 1 and not prints_alike(*f.spread, f.unit):
        out += f" ({span(*f.spread, f.unit)})"
    return out


def headline(f: Fact | None) -> str:
    """A fact's number alone, as a table cell shows it ("5.1×", "2,123 MB/s"; a share above 100% flagged)."""
    if f is None or f.number is None:
        return "—"
    if f.is_comparison:
        return ratio_words(f) or num(f.number, "×")
    return num(f.number, f.unit) + _over_whole(f)


# ----------------------------------------------------------------------------- comparisons
def ratio_words(c: Fact) -> str | None:
    """"2.0× faster" / "1.4× less" / "level" for a comparison fact (no baseline named)."""
    r = c.number
    if r is None or r <= 0:
        return None
    if c.level:
        return "level"
    return num(r, "×") if c.quantity in _FACTOR else _ratio(r, c.quantity).removesuffix(" than")


#: Quantities compared as a factor of the baseline ("3.1× that of"): a percentage or a ratio, which "× more" would
#: leave open (3.1× or 4.1×?).
_FACTOR = ("share", "ratio")


def _ratio(r: float, quantity: str) -> str:
    """"2.0× faster than" for a ratio ``r`` > 0 of a ``quantity``: the printed ratio ≥ 1, the word its direction;
    "3.1× that of" (or "0.32× that of") for a share or a ratio."""
    if quantity in _FACTOR:
        return f"{num(r, '×')} that of"
    up, down = _WORDS.get(quantity, ("more than", "less than"))
    return f"{num(r if r >= 1 else 1 / r, '×')} {up if r >= 1 else down}"


def comparison(c: Fact, facts: Facts | Mapping[str, Fact] | None = None, *, baseline: str | None = None) -> str:
    """A comparison in the book's one phrasing: "2.0× faster than the DataLoader (16 workers)", or "level
    with the DataLoader (16 workers)" (the runs' ranges overlap: the glossary says so once, and the evidence shows
    the runs). ``baseline`` names the baseline; else the basis fact's label (looked up in ``facts``)."""
    base = baseline
    if base is None and facts is not None and c.basis is not None:
        b = facts.get(c.basis)
        base = text(b.label) if b is not None and b.label else None
    base = base or "the baseline"
    r = c.number
    if r is None or r <= 0:
        return f"not comparable with {base} (one side did not run)"
    if c.level:
        return f"level with {base}"
    if max(r, 1 / r) < SAME_WITHIN:  # "1.00× slower" would name a direction its own number does not show
        return f"about the same as {base}, within {num(100 * (SAME_WITHIN - 1), '%')}"
    if base.startswith("the ") and (c.quantity in _FACTOR or (c.quantity == "amount" and r > 1)):
        # "42.4× the efficiency of …", "2.8× the compute per step": a factor of a named quantity, where "2.8× more
        # than" would leave open whether it is 2.8 or 3.8 times as much (a smaller amount keeps "11.3× less than")
        return f"{num(r, '×')} {base}"
    return f"{_ratio(r, c.quantity)} {base}"


#: A ratio closer to 1 than this prints as "about the same" (it would read 1.00× at the book's precision).
SAME_WITHIN = 1.005


def _parts(label: str) -> list[str]:
    """``label`` split at its ", " outside parentheses ("a pool (16 threads, Pillow), cold": two parts; "10,000
    files" one)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(label):
        depth += (ch == "(") - (ch == ")")
        if label.startswith(", ", i) and depth == 0:
            parts.append(label[start:i].strip())
            start = i + 1
    return [*parts, label[start:].strip()]


def shared_setting(a: str, b: str) -> tuple[str, str, str]:
    """Two labels less the parts they end with alike: ``(a's own, b's own, shared)``. "shard, num_workers=0,
    cold" and "files, num_workers=0, cold" give ``("shard", "files", "num_workers=0, cold")``, so that a comparison
    names the setting both sides ran at once. Nothing shared (or nothing left of a side): ``(a, b, "")``."""
    pa, pb = _parts(a), _parts(b)
    n = 0
    while n < min(len(pa), len(pb)) - 1 and pa[-1 - n] == pb[-1 - n]:
        n += 1
    if not n:
        return a, b, ""
    return ", ".join(pa[:-n]), ", ".join(pb[:-n]), ", ".join(pa[-n:])


def contrast(c: Fact, facts: Facts | Mapping[str, Fact]) -> tuple[str, str, str]:
    """Comparison ``c`` as ``(subject, comparison, shared)``: its side's label and :func:`comparison` against its
    basis, each less the setting both share (:func:`shared_setting`), which ``shared`` holds ("" if none) for the
    sentence to name once ("A ran 2.0× faster than B, both cold"). A level comparison keeps the shared setting
    with its baseline, before the words on the runs' spread."""
    a, b = text(facts[c.of].label), text(facts[c.basis].label)
    a, b, shared = shared_setting(a, b)
    if shared and c.level:
        b, shared = f"{b}, both {shared}", ""
    return a, comparison(c, facts, baseline=b), shared


def beside_published(c: Fact, published_value: float | None, source: str) -> str:
    """The published figure beside a comparison: in the same phrasing when it is the same metric
    (``c.published`` set by the analysis), else what the published work found, in its own words."""
    if published_value is None:
        return ""
    return f"{source}: {_ratio(float(published_value), c.quantity).removesuffix(' than')}"


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def superscript(n: int) -> str:
    """An exponent as superscript digits: ``-7`` -> "⁻⁷"."""
    return str(int(n)).translate(_SUPERSCRIPT)


def magnitude(v: float | None) -> str:
    """A number that may be tiny or huge, without e-notation: "7.2 × 10⁻⁷", "0.21", "2.5"."""
    if v is None or v != v:
        return "—"
    if v == 0 or 1e-3 <= abs(v) < 1e6:
        return num(float(v))
    exp = int(f"{v:e}".split("e")[1])
    return f"{v / 10 ** exp:.1f} × 10{superscript(exp)}"


def share(fraction: float | None) -> str:
    """A share as a percentage ("76.3%"); the only place a percentage is used."""
    return "—" if fraction is None else num(100 * float(fraction), "%")


# ----------------------------------------------------------------------------- advice
def setting(knob: str, val) -> str:
    """``knob=value`` as code, the value as a reader types it (``True``, ``8``, ``"b"``)."""
    return code(f"{knob}={val!r}" if isinstance(val, str) else f"{knob}={val}")


_SCOPE = {"best": "", "edge": " (the largest value measured; more may help)",
          "only": " (the only option that ran here)"}


def without_workload(label: str, workload: str) -> str:
    """A baseline's label less the setting its advice's workload already names: the parts of its closing
    parentheses (or of its ", " list) that begin a part of ``workload``. With the workload "token files, cold page
    cache", "mmap over the whole sweep (cold)" reads "mmap over the whole sweep", and "num_workers=0 (read(),
    3 batches, cold)" reads "num_workers=0 (read(), 3 batches)"."""
    said = [w.lower() for w in _parts(workload)]

    def named(part: str) -> bool:
        return bool(part) and any(w == part.lower() or w.startswith(part.lower() + " ") for w in said)

    m = re.fullmatch(r"(.*\S) \((.*)\)", label)
    if m is not None and m[2].count("(") == m[2].count(")"):
        keep = [x for x in _parts(m[2]) if not named(x)]
        return f"{m[1]} ({', '.join(keep)})" if keep else m[1]
    parts = _parts(label)
    keep = parts[:1] + [x for x in parts[1:] if not named(x)]
    return ", ".join(keep)


def advice(a: Advice, facts: Facts | Mapping[str, Fact] | None = None, *, host: str | None = None,
           lead: str | None = None) -> str:
    """One piece of advice, the same text wherever it appears: "For ResNet-50 training from JPEG files, set
    `num_workers=8`: 1.9× faster than `num_workers=0` (the largest value measured; more may help)", or, for a
    declared question the default answers, "keep the default `bucket_cap_mb=25`: within 1.2% of the best
    measured (`bucket_cap_mb=500`), under the 3.0% minimum gain". ``host`` labels advice
    measured on another machine ("On the reference host, an H200 host: ..."); ``lead`` opens it in place of "For
    <workload>," (an answer beside another on the same workload: "If you keep one file per sample instead,")."""
    where = f"On {host}: " if host else ""
    gain = facts.get(a.gain) if facts is not None and a.gain else None
    basis = facts.get(gain.basis) if gain is not None and gain.basis else None
    base = without_workload(text(basis.label), text(a.workload)) if basis is not None and basis.label else None
    body = f": {comparison(gain, facts, baseline=base)}" if gain is not None and gain.number is not None else ""
    what = paste(a.call) if a.call else setting(a.knob, a.value)
    at = f" (at {code(a.at)})" if a.at else ""
    opening = lead or f"For {text(a.workload)},"
    if a.verdict == "keep":
        return where + _keep(a, what, at, body, opening)
    verb = "set" if not a.call or re.match(r"\w+=", a.call) else "use"
    head = f"{opening} {verb} {what}{at}"
    cost = f" Its cost: {text(a.cost)}." if a.cost else ""
    return f"{where}{head}{body}{_SCOPE.get(a.scope, '')}.{cost}"


def verdict(a: Advice, facts: Facts | Mapping[str, Fact] | None = None) -> str:
    """A question's answer in a table cell (chapter 12's checklist, chapter 1's key numbers), as plain text the
    table escapes: "set num_workers=8: 3.4× faster than num_workers=0", "keep the default bucket_cap_mb=25:
    within 0.5% of the best measured (bucket_cap_mb=1)"."""
    gain = facts.get(a.gain) if facts is not None and a.gain else None
    basis = facts.get(gain.basis) if gain is not None and gain.basis and facts is not None else None
    what = a.call or (f"{a.knob}={a.value!r}" if isinstance(a.value, str) else f"{a.knob}={a.value}")
    vs = (comparison(gain, baseline=basis.label if basis is not None and basis.label else None)
          if gain is not None and gain.number is not None else "")
    if a.verdict == "keep":   # as :func:`_keep` words it: the setting it was kept at, where that is not the default
        at = f" with {what}" if not a.best and a.default and a.call and a.call != a.default else ""
        return f"keep the default {a.default or what}{at}" + _keep_clause(a, vs, str)
    verb = "set" if re.match(r"\w+=", what) else "use"
    return f"{verb} {what}: {vs}" if vs else f"{verb} {what}"


def paste(call: str) -> str:
    """A setting as a reader writes it: code where it is code (``num_workers=8``, ``os.O_DIRECT``), else words
    ("one file per sample")."""
    return code(call) if _CODE.match(call) else text(call)


#: what reads as code: a call (``DataLoader(...)``), an assignment or environment setting (``num_workers=8``,
#: ``NCCL_MIN_NCHANNELS=4 …``) or a dotted name (``os.O_DIRECT``); a description with a comma or a space before its
#: first bracket ("pinned, double-buffered (O_DIRECT, 64 MiB × 2)") is a technique in words, not something to paste
_CODE = re.compile(r"[\w.]+(\(|=|$)")


def _keep_clause(a: Advice, vs: str, show, *, need: bool = False) -> str:
    """What follows "keep the default …", in the advice and in a table cell alike: how close the best measured
    came (``need``: and the gain that would have changed the default), or how the default ran (``vs``, the
    comparison's words); ``show`` renders a setting (code on a page, plain in a cell)."""
    if a.best:  # another candidate measured best, by less than would change the default (or level with it)
        if a.within and (a.threshold is None or a.within < a.threshold):
            more = f", under {_threshold_words(a.threshold)}" if need and a.threshold else ""
            return f": within {num(100 * a.within, '%')} of the best measured ({show(a.best)}){more}"
        return f": the best measured, {show(a.best)}, ran {vs}"
    return f", which ran {vs}" if vs else ""


def _threshold_words(threshold: float) -> str:
    """The gain a change had to clear: the question's minimum effect (3%, or 10% for an option with a cost); the
    runs' spread enters through "level", never through this number."""
    return f"the {num(100 * threshold, '%')} minimum gain"


def _keep(a: Advice, what: str, at: str, body: str, opening: str) -> str:
    """The words of a "keep the default" verdict, after ``opening`` ("For <workload>,")."""
    head = f"{opening} keep the default {paste(a.default) if a.default else what}"
    if not a.best and a.default and a.call and a.call != a.default:
        head += f" with {what}{at}"
    return head + _keep_clause(a, body.removeprefix(": "), paste, need=True) + "."


# ----------------------------------------------------------------------------- the reader's own data
def _kb(n) -> str:
    v = float(n) / 1e3
    return f"{v:,.1f}" if v < 10 else f"{v:,.0f}"


def your_data(f: Fact | None) -> str:
    """The reader's own data as a page names it, from the ``your_data`` fact (what the run read, no path):
    "your images (1,000 files, median 112 kB)", "your tokens (2,048,000 tokens in 9,000 documents, a Megatron
    .bin/.idx pair)" or "your tokens (3 Parquet files of text, median 120 tokens per document)"."""
    if f is None:
        return ""
    s = f.setting or {}
    if s.get("kind") == "diagnosis":   # chapter 12: each kind of data with the chapters that read it
        return " and ".join(your_data(Fact(f.key, None, setting=part)) + " in chapters "
                            + and_list([str(c) for c in part.get("chapters", [])]) for part in s.get("parts", []))
    if s.get("kind") == "images":
        return f"your images ({int(s.get('files', 0)):,} files, median {_kb(s.get('median_bytes', 0))} kB)"
    fmt = text(s.get("format", "?"))
    if s.get("format") == "Megatron":
        return (f"your tokens ({int(s.get('tokens', 0)):,} tokens in {int(s.get('documents', 0)):,} documents, "
                f"a Megatron .bin/.idx pair)")
    per = s.get("median_doc_tokens")
    return (f"your tokens ({int(s.get('files', 0)):,} {fmt} file{'s' if s.get('files', 0) != 1 else ''} of text"
            + (f", median {per:,.0f} tokens per document)" if per else ")"))
