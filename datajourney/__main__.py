"""Command line: ``python -m datajourney {run,book,promote,fingerprint,chapters} ...``."""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from . import REPO_ROOT
from .book.params import ParameterError


def _run(a) -> int:
    from .book import runner

    overrides = {}
    for name, value in a.param or []:
        overrides[name] = runner.parse_value(value)
    extra = {"reference_host": a.as_reference, "is_reference_run": True} if a.as_reference else None
    run_dir = runner.run(a.chapters, profile=a.profile, overrides=overrides, run_id=a.run_id,
                         results_root=a.results, extra=extra, progress=not a.quiet)
    print(f"results and executed notebooks: {run_dir}")
    if a.book:
        from .book import sphinx_ext

        index = sphinx_ext.build(run_dir)
        print(f"book built: open file://{index}")
    return 0


def _book(a) -> int:
    from .book import sphinx_ext, runner

    run_dir = None
    if a.run:
        run_dir = Path(a.run)
        if not run_dir.is_absolute() and not run_dir.exists():
            run_dir = runner.RESULTS_ROOT / a.run
        if not (run_dir / "run.json").exists():
            raise ParameterError("--run", a.run, "a run directory made by 'python -m datajourney run' "
                                 f"(looked in {run_dir})")
    index = sphinx_ext.build(run_dir, strict=not a.no_strict)
    print(f"book built: open file://{index}")
    return 0


def _promote(a) -> int:
    """Make a finished run the committed reference: results to data/reference/<host>/,
    executed notebooks to notebooks/."""
    from .book.results import REFERENCE_DIR

    run_dir = Path(a.run_dir)
    record = json.loads((run_dir / "run.json").read_text())
    if record.get("status") != "ok":
        raise ParameterError("run_dir", str(run_dir), "a run whose status is 'ok'")
    dest = REFERENCE_DIR / a.host
    dest.mkdir(parents=True, exist_ok=True)
    for f in sorted(run_dir.glob("*.json")):  # run.json is kept per run: several runs may make one reference
        name = f"run-{record['run_id']}.json" if f.name == "run.json" else f.name
        shutil.copyfile(f, dest / name)
        print(f"  {f.name} -> {dest.relative_to(REPO_ROOT)}/{name}")
    import nbformat

    for nb in sorted((run_dir / "notebooks").glob("*.ipynb")):
        doc = nbformat.read(nb, as_version=4)
        pm = doc.metadata.get("papermill", {})
        for key in ("input_path", "output_path"):  # machine-local paths of the run host
            if key in pm:
                pm[key] = f"notebooks/{nb.name}"
        nbformat.write(doc, REPO_ROOT / "notebooks" / nb.name)
        print(f"  {nb.name} -> notebooks/")
    return 0


def _bench(a) -> int:
    """Record how long each chapter takes under a profile on this machine, data generation included."""
    import tempfile

    from .book import runner
    from .book.fingerprint import fingerprint, summary

    with tempfile.TemporaryDirectory(dir=a.tmp) as tmp:
        run_dir = runner.run(profile=a.profile, overrides={"data_dir": tmp}, run_id="bench",
                             results_root=Path(tmp), progress=False)
        record = json.loads((run_dir / "run.json").read_text())
        fp = fingerprint(tmp)
    out = {
        "benchmark": f"wall time of each chapter under the {a.profile} profile",
        "target_seconds_per_chapter": a.target,
        "seconds": {c["chapter"]: c["seconds"] for c in record["chapters"]},
        "machine": summary(fp),
        "fingerprint": fp,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=1))
    for k, v in out["seconds"].items():
        print(f"{k:<28} {v:6.1f} s  (target < {a.target:.0f} s)")
    print(f"recorded in {a.out}")
    return 0


def _fingerprint(a) -> int:
    from .book.fingerprint import fingerprint, summary

    fp = fingerprint(a.data_dir)
    if a.json:
        print(json.dumps(fp, indent=1))
    else:
        for k, v in summary(fp).items():
            print(f"{k:>26}: {v}")
    return 0


def _chapters(a) -> int:
    from .book.chapters import CHAPTERS

    for c in CHAPTERS:
        print(f"{c.number:>3}  {c.name:<28} {'ready' if c.available else 'not yet written'}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m datajourney", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("run", help="execute chapter notebooks into results/<run-id>/")
    r.add_argument("chapters", nargs="*", help="chapter numbers or names (default: all written)")
    r.add_argument("--profile", default="quick", help="ci, quick or full (datajourney/book/profiles.yaml)")
    r.add_argument("-p", "--param", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help="override one parameter (YAML value: 4, [0, 4], true, null)")
    r.add_argument("--run-id", help="name of the run directory (default: date-time-profile)")
    r.add_argument("--results", type=Path, help="parent of run directories (default: results/)")
    r.add_argument("--as-reference", metavar="HOST", help="label this run as the reference run of HOST")
    r.add_argument("--book", action="store_true", help="build the book from this run afterwards")
    r.add_argument("--quiet", action="store_true", help="no progress bars")
    r.set_defaults(fn=_run)

    b = sub.add_parser("book", help="build the HTML book")
    b.add_argument("--run", help="run directory or run id (default: the committed reference notebooks)")
    b.add_argument("--no-strict", action="store_true", help="do not treat warnings as errors")
    b.set_defaults(fn=_book)

    p = sub.add_parser("promote", help="make a run the committed reference run of HOST")
    p.add_argument("run_dir")
    p.add_argument("--host", required=True)
    p.set_defaults(fn=_promote)

    f = sub.add_parser("fingerprint", help="print this machine's environment fingerprint")
    f.add_argument("--data-dir", help="describe the storage under this directory")
    f.add_argument("--json", action="store_true")
    f.set_defaults(fn=_fingerprint)

    be = sub.add_parser("bench", help="record each chapter's wall time under a profile")
    be.add_argument("--profile", default="ci")
    be.add_argument("--target", type=float, default=60.0, help="seconds per chapter to meet")
    be.add_argument("--out", type=Path, default=REPO_ROOT / "data" / "benchmarks" / "ci_profile.json")
    be.add_argument("--tmp", help="directory for the temporary run and data (default: system temp)")
    be.set_defaults(fn=_bench)

    c = sub.add_parser("chapters", help="list the chapters")
    c.set_defaults(fn=_chapters)

    a = ap.parse_args(argv)
    from .book.runner import RunError

    try:
        return a.fn(a)
    except (ParameterError, RunError, KeyError, RuntimeError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"error: {msg}", file=sys.stderr)
        return 2 if isinstance(e, (ParameterError, KeyError)) else 1
    except KeyboardInterrupt:
        print("interrupted: partial results stay in the run directory; data sets are only ever "
              "published complete", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
