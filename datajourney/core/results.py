"""Results are data: tidy tables + metadata + the environment fingerprint, as one JSON file.

Every chapter writes ``<run_dir>/<chapter>.json`` with this shape (schema
``datajourney.result/2``)::

    {"schema": ..., "chapter": "02_random_vs_sequential", "run_id": "...",
     "created_utc": "...", "parameters": {...}, "fingerprint": {...},
     "metadata": {...}, "tables": {"name": [{"column": value, ...}, ...], ...}}

Reference runs are the same files under ``data/reference/<host>/``. A file is checked when it
is loaded (:func:`check`): a result file from another host or an edited one that does not fit
this shape, or holds a number no measurement gives, is an error naming the file and the field,
never a plausible page.
"""
from __future__ import annotations

import copy
import datetime as _dt
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from datajourney.core.facts import Facts
from datajourney.core.files import write_atomic
from datajourney.core.fingerprint import fingerprint
from datajourney.core.paths import REFERENCE_DIR, REPO_ROOT, reference_hosts  # noqa: F401 - re-exported

SCHEMA = "datajourney.result/3"
#: Schemas :meth:`Result.load` reads (older ones are upgraded on load, see :func:`_upgrade_v1`; a file
#: without facts is analysed where results are loaded for pages, :func:`datajourney.book.registry.analysed`).
SCHEMAS = ("datajourney.result/1", "datajourney.result/2", SCHEMA)
#: The largest magnitude a number in a result file may have: beyond it no measurement of this book lies
#: (2 TB/s for a second, 10^15 bytes), so a larger one is damage or tampering.
MAX_MAGNITUDE = 1e15
#: Fields in microseconds or nanoseconds (``*_us``, ``*_ns``) may be time stamps since the epoch: larger.
MAX_TIMESTAMP = 2**63
#: The largest result file read (bytes): the largest reference result is about 1 MiB; a bigger file is refused
#: before it is parsed, as it would take seconds and gigabytes to load.
MAX_BYTES = 64 * 2**20
#: Table columns of rates (``*Bps``, ``*_per_s``, ``IOPS``): never negative.
NONNEGATIVE_COLUMN = re.compile(r"(Bps|_per_s|^IOPS)$")
#: The host whose committed results the book shows as "reference run".
DEFAULT_REFERENCE_HOST = "h200"
#: Where results go when a notebook is run by hand rather than by the runner: one directory per kernel
#: (its start time and process), so a later Run All in a new kernel never overwrites an earlier result.
INTERACTIVE_RUN_DIR = (REPO_ROOT / "results" / "interactive"
                       / f"{_dt.datetime.now(_dt.timezone.utc):%Y%m%d-%H%M%S}-{__import__('os').getpid()}")


def _clean(value):
    """JSON-safe: NaN/inf become None, numpy scalars become Python numbers, paths become text."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@dataclass
class Result:
    """One chapter's results from one run."""

    chapter: str
    run_id: str
    parameters: dict
    fingerprint: dict
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)
    created_utc: str = ""
    path: Path | None = None
    #: set when this result was replayed from another run (see :func:`replay`); never saved
    replayed_from: str | None = None
    #: what the chapter's analysis found in it (:class:`~datajourney.core.facts.Facts`); saved as "facts"
    facts: Facts | None = None

    def add(self, name: str, table: pd.DataFrame | list[dict]) -> pd.DataFrame:
        """Attach a tidy table (one row per observation) under ``name``."""
        df = table if isinstance(table, pd.DataFrame) else pd.DataFrame(table)
        self.tables[name] = df.reset_index(drop=True)
        return self.tables[name]

    def table(self, name: str) -> pd.DataFrame:
        if name not in self.tables:
            raise KeyError(f"result {self.chapter} has no table {name!r}; it has {sorted(self.tables)}")
        return self.tables[name]

    def to_dict(self) -> dict:
        return _clean(
            {
                "schema": SCHEMA,
                "chapter": self.chapter,
                "run_id": self.run_id,
                "created_utc": self.created_utc,
                "parameters": self.parameters,
                "fingerprint": self.fingerprint,
                "metadata": self.metadata,
                "tables": {k: v.to_dict(orient="records") for k, v in self.tables.items()},
                **({"facts": self.facts.to_dict()} if self.facts is not None else {}),
            }
        )

    def save(self, run_dir, *, created_utc: str | None = None) -> Path:
        """Write ``<run_dir>/<chapter>.json`` atomically (whole or not at all, mode 0644 under the
        usual umask) and return its path; a failed write names the file and leaves the old one.
        ``created_utc``: keep this creation time (a result analysed or rendered again, not measured)."""
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        self.created_utc = created_utc or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        target = write_atomic(run_dir / f"{self.chapter}.json",
                              json.dumps(self.to_dict(), indent=1, allow_nan=False))
        self.path = target
        return target

    @classmethod
    def load(cls, path) -> Result:
        """Read a result file, upgraded to the current schema and checked (:func:`check`); a file that
        is no result file or fails the check is a :class:`ResultError` naming the file and the field."""
        path = Path(path)
        d, tables = _checked(path)
        d = copy.deepcopy(d)   # the caller's to change
        return cls(
            chapter=d["chapter"],
            run_id=d["run_id"],
            parameters=d["parameters"],
            fingerprint=d["fingerprint"],
            tables={k: v.copy() for k, v in tables.items()},
            metadata=d.get("metadata", {}),
            created_utc=d.get("created_utc", ""),
            path=path,
            facts=_facts(d, path),
        )


#: Result files already checked, by path and content digest: their fields but the tables, and the tables built.
_CHECKED: dict[tuple[str, bytes], tuple[dict, dict[str, pd.DataFrame]]] = {}


def _checked(path: Path) -> tuple[dict, dict[str, pd.DataFrame]]:
    """``path`` read, checked and its tables built, once for the same bytes: a page, chapter 12 and the front
    page read the same references many times, and parsing and checking a large one takes 75 ms (reading and
    hashing it, under 2 ms)."""
    raw = _raw(path)
    key = (str(path), hashlib.blake2b(raw, digest_size=16).digest())
    if key not in _CHECKED:
        d = check(_parse(raw, path), path)
        if len(_CHECKED) >= 64:
            _CHECKED.pop(next(iter(_CHECKED)))
        _CHECKED[key] = {k: v for k, v in d.items() if k != "tables"}, {k: _frame(v) for k, v in d["tables"].items()}
    return _CHECKED[key]


def _facts(d: dict, path) -> Facts | None:
    """The stored facts of a result file (None for a file written before schema 3)."""
    if "facts" not in d:
        return None
    try:
        return Facts.from_dict(d["facts"])
    except (KeyError, TypeError, ValueError) as e:
        raise ResultError(f"{path}: field facts is invalid: {e}") from None


class ResultError(ValueError):
    """A result file that cannot be read as one; the message names the file and the field."""


#: What ``json`` reads for the non-standard NaN and Infinity literals: refused by :func:`check`.
_NON_FINITE = object()


def read(path) -> dict:
    """A result file's JSON as a dict, upgraded to the current schema; not JSON, not a mapping or an
    unknown schema is a :class:`ResultError`. NaN and Infinity literals are kept for :func:`check`."""
    path = Path(path)
    return _parse(_raw(path), path)


def _raw(path: Path) -> bytes:
    """A result file's bytes; a file over :data:`MAX_BYTES` is refused unread."""
    with path.open("rb") as f:
        raw = f.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise ResultError(f"{path}: not a result file (larger than the limit of {MAX_BYTES // 2**20} MiB)")
    return raw


def _parse(raw: bytes, path: Path) -> dict:
    """:func:`read` of ``raw``, the bytes of ``path``."""
    try:
        d = json.loads(raw.decode("utf-8"), parse_constant=lambda _: _NON_FINITE)
    except UnicodeDecodeError as e:
        raise ResultError(f"{path}: not a result file (not UTF-8 text: {e.reason})") from None
    except RecursionError:
        raise ResultError(f"{path}: not a result file (nested too deeply to read)") from None
    except ValueError as e:
        raise ResultError(f"{path}: not a result file (not valid JSON: {getattr(e, 'msg', e)}, line "
                          f"{getattr(e, 'lineno', '?')})") from None
    if not isinstance(d, dict) or d.get("schema") not in SCHEMAS:
        schema = d.get("schema") if isinstance(d, dict) else None
        raise ResultError(f"{path} is not a {SCHEMA} file (field 'schema' = {schema!r}; read: "
                          + ", ".join(SCHEMAS) + ")")
    if d["schema"] != SCHEMA:
        d = _upgrade_v1(d)
    return d


def _upgrade_v1(d: dict) -> dict:
    """A ``datajourney.result/1`` or ``/2`` file as ``/3``. The tables are the same: version 2 says that
    its files pass :func:`check` when written (version 1 files are checked the same way on load), version 3
    adds the chapter's facts, which an older file lacks until it is analysed
    (:func:`datajourney.book.registry.analysed`), so the conversion is the version bump."""
    return {**d, "schema": SCHEMA}


#: Top-level fields: name -> (type, required).
_FIELDS = {"schema": (str, True), "chapter": (str, True), "run_id": (str, True), "created_utc": (str, False),
           "parameters": (dict, True), "fingerprint": (dict, True), "metadata": (dict, False),
           "tables": (dict, True), "facts": (dict, False)}
_SCALARS = (str, int, float, bool, type(None))


def check(d: dict, path) -> dict:
    """Refuse a result that fits no measurement: top-level fields of the wrong type, table rows that
    are not mappings of JSON scalars, NaN or Infinity literals, numbers beyond :data:`MAX_MAGNITUDE`
    (fields in µs or ns: :data:`MAX_TIMESTAMP`), negative rates (bandwidths, steps per second). Returns ``d``."""
    def bad(field: str, value, why: str):
        text = "NaN/Infinity" if value is _NON_FINITE else repr(value)
        raise ResultError(f"{path}: field {field} = {text[:80]} is invalid: {why}")

    for name, (kind, required) in _FIELDS.items():
        if name not in d:
            if required:
                raise ResultError(f"{path}: field {name} is missing")
        elif not isinstance(d[name], kind):
            bad(name, d[name], f"a {kind.__name__} is expected")
    for name in ("parameters", "fingerprint", "metadata", "facts"):
        _check_numbers(d.get(name, {}), name, bad)
    for tname, rows in d["tables"].items():
        where = f"tables.{tname}"
        if not isinstance(rows, list):
            bad(where, rows, "a list of rows is expected")
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                bad(f"{where}[{i}]", row, "a row is a mapping of column -> value")
            for col, v in row.items():
                at = f"{where}[{i}].{col}"
                if not isinstance(v, _SCALARS):
                    bad(at, v, "a table cell is a number, text, true/false or null")
                _check_numbers(v, at, bad)
                if isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0 \
                        and NONNEGATIVE_COLUMN.search(col):
                    bad(at, v, "a rate is never negative")
        _check_columns(rows, where, bad)
    return d


#: Table columns of measured amounts, by their unit: durations (``*_s``, ``*_ms``, ``*_us``, ``*_ns``,
#: ``seconds*``), sizes (``*bytes``, ``*_kb``, ``*_mb``) and rates (:data:`NONNEGATIVE_COLUMN`). They hold
#: numbers (or null), never true/false or text, and are never negative ...
MEASURE_COLUMN = re.compile(r"(Bps|_per_s|^IOPS)$|(^|_)(s|ms|us|ns|seconds|bytes|kb|mb)(_|$)")
#: ... unless the name says a difference (``added_ms``, ``d_ms``, ``delta_s``, ``gain_bytes``, ...).
SIGNED_COLUMN = re.compile(r"^(added|d|delta|diff|change|gain|net|offset|saved|saving|excess|error)_"
                           r"|^dataset_pss_mb$")  # chapter 8: the PSS a data set added, noise below a tiny one


def _kind(v) -> str | None:
    return (None if v is None else "true/false" if isinstance(v, bool) else
            "a number" if isinstance(v, (int, float)) else "text")


def _check_columns(rows: list, where: str, bad) -> None:
    """Each column of a table holds one kind of value (numbers, text or true/false; null anywhere): a
    number where the column's other rows hold true/false is no measurement (true would count as 1). A
    column of measured amounts (:data:`MEASURE_COLUMN`) holds numbers and, unless its name says a
    difference (:data:`SIGNED_COLUMN`), never a negative one."""
    first: dict[str, tuple[int, str]] = {}
    for i, row in enumerate(rows):
        for col, v in row.items():
            kind = _kind(v)
            if kind is None:
                continue
            at = f"{where}[{i}].{col}"
            measure = MEASURE_COLUMN.search(col) is not None
            if measure and kind != "a number":
                bad(at, v, f"column {col} holds a measured amount: a number or null")
            if measure and v < 0 and not SIGNED_COLUMN.match(col):
                bad(at, v, f"column {col} holds a measured amount (a duration, size or rate): never negative")
            seen = first.setdefault(col, (i, kind))
            if seen[1] != kind:
                bad(at, v, f"column {col} holds {seen[1]} (row {seen[0]}), so here too: {kind} is no value of it")


def _check_numbers(value, field: str, bad) -> None:
    """Every number in ``value`` (nested) finite and within range; ``bad(field, value, why)`` otherwise."""
    if value is _NON_FINITE:
        bad(field, value, "a finite number or null (NaN and Infinity are not JSON)")
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_numbers(v, f"{field}.{k}", bad)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_numbers(v, f"{field}[{i}]", bad)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        limit = MAX_TIMESTAMP if field.endswith(("_us", "_ns")) else MAX_MAGNITUDE
        if not math.isfinite(value) or abs(value) >= limit:
            bad(field, value, f"a number of magnitude below {limit:.0e}")


def _frame(rows: list) -> pd.DataFrame:
    """A stored table as the run had it: a column stored as nulls only (a measure this host could not take,
    such as GPU utilisation on a CPU run) was missing numbers (NaN, saved as null), so it reads back as
    numbers, not as an untyped column that numeric selections would drop."""
    df = pd.DataFrame(rows)
    for col in df.columns:
        if df[col].dtype == object and df[col].isna().all():
            df[col] = df[col].astype(float)
    return df


def resolve_run_dir(run_dir) -> Path:
    """The run directory a notebook writes to (``None``: the interactive one)."""
    return Path(run_dir) if run_dir else INTERACTIVE_RUN_DIR


def start(chapter: str, parameters: dict, run_dir=None, data_dir=None) -> Result:
    """A new, empty result with this machine's fingerprint, taken now."""
    rd = resolve_run_dir(run_dir)
    return Result(
        chapter=chapter,
        run_id=rd.name,
        parameters=_clean(dict(parameters)),
        fingerprint=fingerprint(data_dir, parameters),
    )


def replay(chapter: str, source, run_dir=None) -> Result | None:
    """The measurements of ``chapter`` from the finished run directory ``source``, copied unchanged
    into this run's directory, so that a notebook renders them with this checkout's code instead
    of measuring again (``python -m datajourney rerender``). None when ``source`` is None."""
    if source is None:
        return None
    src = Path(source) / f"{chapter}.json"
    if not src.is_file():
        from datajourney.core.params import ParameterError

        raise ParameterError("replay", str(source), f"a run directory that holds {chapter}.json")
    res = Result.load(src)
    dest = resolve_run_dir(run_dir)
    dest.mkdir(parents=True, exist_ok=True)
    if dest.resolve() != src.parent.resolve():
        write_atomic(dest / src.name, src.read_bytes())
    res.path = dest / src.name
    res.replayed_from = str(src.parent)
    return res


#: Further reference runs of a chapter on bigger hosts of the same kind (e.g. more GPUs), beside the main one.
EXTRA_DIR = "more"
#: Repeats of a chapter's reference run (same parameters, another time or host), to show how stable it is.
REPEAT_DIR = "repeats"


def side_references(folder: str, chapter: str, host: str | None = None) -> list[Result]:
    """The committed results of ``chapter`` kept beside its main reference in ``<host>/<folder>/``
    (files ``<chapter>-<run id>.json``), oldest run id first."""
    d = REFERENCE_DIR / (host or DEFAULT_REFERENCE_HOST) / folder
    return [Result.load(p) for p in sorted(d.glob(f"{chapter}-*.json"))] if d.is_dir() else []


def extra_references(chapter: str, host: str | None = None) -> list[Result]:
    """The committed further reference runs of ``chapter`` (``<host>/more/<chapter>-<run id>.json``), oldest first."""
    return side_references(EXTRA_DIR, chapter, host)


def repeat_references(chapter: str, host: str | None = None) -> list[Result]:
    """The committed repeats of ``chapter``'s reference run (``<host>/repeats/<chapter>-<run id>.json``),
    oldest first."""
    return side_references(REPEAT_DIR, chapter, host)


def load_reference(chapter: str, host: str | None = None) -> Result | None:
    """The committed reference result of ``chapter`` (``None`` when there is none)."""
    path = REFERENCE_DIR / (host or DEFAULT_REFERENCE_HOST) / f"{chapter}.json"
    return Result.load(path) if path.exists() else None
