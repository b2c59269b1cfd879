"""Facts for result files written before schema 3, or after an analysis changed: each file analysed by its
own chapter (through the registry, the one place a result is upgraded) and written back whole, its
measurements untouched; chapter 12's diagnosed again from the facts beside it.

``python -m datajourney.book.analyse PATH ...`` (a result file or a run directory; ``--force`` analyses
files that already hold facts again, after an analysis changed). The render script and the tests call
:func:`analyse_dir` on a run directory before chapter 12 reads the facts of its chapters.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from datajourney.book import harness, registry
from datajourney.core import results
from datajourney.core.files import write_atomic


def analyse_file(path: Path, *, force: bool = False) -> bool:
    """Store the facts of the result file ``path`` in it; True when it was written. Its tables,
    parameters, fingerprint and creation time stay as they were."""
    res = results.Result.load(path)
    if res.facts is not None and not force:
        return False
    try:
        registry.lookup(res.chapter)
    except KeyError:
        return False
    res.facts = registry.lookup(res.chapter).analyse(res)
    d = res.to_dict()
    d["created_utc"] = res.created_utc
    write_atomic(Path(path), json.dumps(d, indent=1, allow_nan=False))
    return True


def rediagnose(path: Path) -> bool:
    """Chapter 12's result file ``path`` diagnosed again from the facts its sibling result files hold now
    (its measured token step kept; what its notebook does when it renders a replayed result)."""
    harness.regather(results.Result.load(path), Path(path).parent)
    return True


def analyse_dir(run_dir: Path, *, force: bool = False) -> list[Path]:
    """:func:`analyse_file` for every chapter result file in ``run_dir``, then chapter 12's diagnosed again
    from them (:func:`rediagnose`, when ``force`` or it has no facts); the files written."""
    out = []
    files = sorted(Path(run_dir).glob("[0-9][0-9]_*.json"))
    for f in files:
        if not f.name.startswith("12_") and analyse_file(f, force=force):
            out.append(f)
    for f in files:
        if f.name.startswith("12_") and (force or results.Result.load(f).facts is None) and rediagnose(f):
            out.append(f)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m datajourney.book.analyse", description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", type=Path, help="result files or run directories")
    ap.add_argument("--force", action="store_true", help="analyse files that already hold facts again")
    a = ap.parse_args(argv)
    for p in a.paths:
        done = analyse_dir(p, force=a.force) if p.is_dir() else ([p] if analyse_file(p, force=a.force) else [])
        for f in done:
            print(f"facts stored: {f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
