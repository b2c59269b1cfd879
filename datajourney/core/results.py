"""Results are data: tidy tables + metadata + the environment fingerprint, as one JSON file.

Every chapter writes ``<run_dir>/<chapter>.json`` with this shape (schema
``datajourney.result/1``)::

    {"schema": ..., "chapter": "02_random_vs_sequential", "run_id": "...",
     "created_utc": "...", "parameters": {...}, "fingerprint": {...},
     "metadata": {...}, "tables": {"name": [{"column": value, ...}, ...], ...}}

Reference runs are the same files under ``data/reference/<host>/``.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from datajourney.core.fingerprint import fingerprint
from datajourney.core.paths import REFERENCE_DIR, REPO_ROOT, reference_hosts  # noqa: F401 - re-exported

SCHEMA = "datajourney.result/1"
#: The host whose committed results the book shows as "reference run".
DEFAULT_REFERENCE_HOST = "h200"
#: Where results go when a notebook is run by hand rather than by the runner.
INTERACTIVE_RUN_DIR = REPO_ROOT / "results" / "interactive"


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
            }
        )

    def save(self, run_dir) -> Path:
        """Write ``<run_dir>/<chapter>.json`` atomically and return its path."""
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        self.created_utc = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        target = run_dir / f"{self.chapter}.json"
        fd, tmp = tempfile.mkstemp(dir=run_dir, prefix=f".{self.chapter}.", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(self.to_dict(), f, indent=1, allow_nan=False)
        os.replace(tmp, target)
        self.path = target
        return target

    @classmethod
    def load(cls, path) -> Result:
        path = Path(path)
        d = json.loads(path.read_text())
        if d.get("schema") != SCHEMA:
            raise ValueError(f"{path} is not a {SCHEMA} file (schema={d.get('schema')!r})")
        return cls(
            chapter=d["chapter"],
            run_id=d["run_id"],
            parameters=d["parameters"],
            fingerprint=d["fingerprint"],
            tables={k: pd.DataFrame(v) for k, v in d["tables"].items()},
            metadata=d.get("metadata", {}),
            created_utc=d.get("created_utc", ""),
            path=path,
        )


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
    import shutil

    src = Path(source) / f"{chapter}.json"
    if not src.is_file():
        from datajourney.core.params import ParameterError

        raise ParameterError("replay", str(source), f"a run directory that holds {chapter}.json")
    res = Result.load(src)
    dest = resolve_run_dir(run_dir)
    dest.mkdir(parents=True, exist_ok=True)
    if dest.resolve() != src.parent.resolve():
        shutil.copyfile(src, dest / src.name)
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
