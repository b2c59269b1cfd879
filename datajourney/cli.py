"""Command line: ``python -m datajourney COMMAND ...`` (``--help`` lists every command)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from datajourney.core.params import ParameterError
from datajourney.core.paths import REPO_ROOT

#: The chapters' notebooks: present in a checkout, absent where a non-editable install put the package.
CHECKOUT_NOTEBOOKS = REPO_ROOT / "notebooks"


#: What a reader runs when the book's build tools are missing (``./journey setup`` installs none of them).
BOOK_TOOLS_HINT = "run ./journey book, or install them with: pip install -e '.[book]'"


def _check_book_tools() -> None:
    """Refuse, in one line and before any work, to build the book where Jupyter Book is not installed."""
    import importlib.util

    from datajourney.book.runner import RunError

    if importlib.util.find_spec("jupyter_book") is None:
        raise RunError(f"building the book needs Jupyter Book (the 'book' extra), which is not installed here: "
                       f"{BOOK_TOOLS_HINT}", exit_code=2)


def _run(a) -> int:
    from datajourney.book import runner

    if a.book:
        _check_book_tools()
    overrides = {}
    for name, value in a.param or []:
        overrides[name] = runner.parse_value(value, name)
    if a.verify_data:
        from datajourney.toolkit.datasets import VERIFY_ENV

        os.environ[VERIFY_ENV] = a.verify_data  # the kernels inherit it
    extra = {"reference_host": a.as_reference, "is_reference_run": True} if a.as_reference else None
    run_dir = runner.run(a.chapters, profile=a.profile, overrides=overrides, run_id=a.run_id,
                         results_root=a.results, extra=extra, progress=not a.quiet, replace=a.replace,
                         keep_going=a.keep_going)
    print(f"results and executed notebooks: {run_dir}")
    if a.book:
        from datajourney.book import sphinx_ext

        t0 = time.monotonic()
        index = sphinx_ext.build(run_dir)
        runner.note_book_build(run_dir, time.monotonic() - t0)
        print(f"book built: open file://{index}")
    _print_diagnosis(run_dir)
    return 0


def _print_diagnosis(run_dir: Path) -> None:
    """Chapter 12's one-screen summary of this run's weakest links, when chapter 12 ran."""
    from datajourney.chapters.c12_conclusion.params import CHAPTER
    from datajourney.core.results import Result

    f = Path(run_dir) / f"{CHAPTER}.json"
    if f.is_file():
        from datajourney.chapters.c12_conclusion.page import summary_lines

        res = Result.load(f)
        lines = summary_lines(res.facts) if res.facts is not None else []
        print("\nYour pipeline, diagnosed (chapter 12):\n" + "\n".join(f"  {line}" for line in lines))


def _rerender(a) -> int:
    from datajourney.book import runner

    run_dir = runner.rerender(a.run_dir, run_id=a.run_id, results_root=a.results, replace=a.replace,
                              progress=not a.quiet)
    print(f"rendered notebooks: {run_dir}")
    return 0


def _book(a) -> int:
    from datajourney.book import runner, sphinx_ext

    _check_book_tools()
    run_dir = None
    if a.run:
        run_dir = Path(a.run)
        if not run_dir.is_absolute() and not run_dir.exists():
            run_dir = runner.RESULTS_ROOT / a.run
        if not (run_dir / "run.json").exists():
            raise ParameterError("--run", a.run, "a run directory made by 'python -m datajourney run' "
                                 f"(looked in {run_dir})")
        record = runner.check_run(run_dir)
        if record.get("status") == "running":  # read_record: its runner is alive (or on another host)
            print(f"note: run {run_dir.name} is still running (pid {record.get('pid')} on {record.get('host')}): "
                  "the book shows the chapters it has finished so far", file=sys.stderr)
        elif record.get("status") != "ok":
            bad = [c["chapter"] for c in record.get("chapters", []) if c.get("status") != "ok"]
            print(f"note: run {run_dir.name} ended with status {record.get('status', 'unknown')!r}"
                  + (f"; the page of {', '.join(bad)} shows where it stopped" if bad else ""), file=sys.stderr)
    index = sphinx_ext.build(run_dir, strict=not a.no_strict)
    print(f"book built: open file://{index}")
    return 0


def _promote(a) -> int:
    """Make a finished run the committed reference: results to data/reference/<host>/,
    executed notebooks to notebooks/ (all or nothing, see :func:`~datajourney.book.runner.promote`)."""
    from datajourney.book import runner
    from datajourney.core.results import EXTRA_DIR, REPEAT_DIR

    # a further reference (e.g. more GPUs) or a repeat of the reference run: results only, beside the
    # chapter's main reference, each named by its run id; the main reference and the notebooks stay
    side = EXTRA_DIR if a.extra else REPEAT_DIR if a.repeat else None
    runner.promote(a.run_dir, a.host, only=a.only, side=side)
    return 0


def _bench(a) -> int:
    """Record how long each chapter takes under a profile on this machine, data generation included
    (``bench``), or what verifying data sets on reuse costs against generating them (``bench verify``)."""
    if a.what == "verify":
        return _bench_verify(a)
    if a.what == "book":
        return _bench_book(a)
    import tempfile

    from datajourney.book import runner

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(dir=a.tmp) as tmp:
        # data sets and the run directory side by side, never one inside the other (a data folder is refused as
        # the results folder)
        data, runs = Path(tmp) / "data", Path(tmp) / "results"
        data.mkdir()
        run_dir = runner.run(profile=a.profile, overrides={"data_dir": str(data)}, run_id="bench",
                             results_root=runs, progress=False)
        record = json.loads((run_dir / "run.json").read_text())
        extra = {}
        if a.book:  # what `./journey book` does after the chapters: build the HTML book
            from datajourney.book import sphinx_ext

            t1 = time.monotonic()
            sphinx_ext.build(run_dir)
            extra = dict(book_build_seconds=time.monotonic() - t1, total_seconds=time.monotonic() - t0,
                         target_total_seconds=a.target_total)
        out = _record(a, f"wall time of each chapter under the {a.profile} profile"
                      + (", then the book build" if a.book else ""), record, tmp, **extra)
    for k, v in out["seconds"].items():
        print(f"{k:<28} {v:6.1f} s  (target < {a.target:.0f} s)")
    print(f"recorded in {a.out}")
    return 0


def _record(a, benchmark: str, rec: dict, where, **extra) -> dict:
    """Write a benchmark of chapter times to ``a.out``: each chapter's seconds and status from the run record
    ``rec``, ``extra`` (book build, totals), and the machine's fingerprint (its storage: ``where``'s)."""
    from datajourney.core.fingerprint import fingerprint, summary

    fp = fingerprint(where)
    out = {"benchmark": benchmark, "target_seconds_per_chapter": a.target,
           "seconds": {c["chapter"]: c["seconds"] for c in rec["chapters"]},
           "status": {c["chapter"]: c["status"] for c in rec["chapters"]}, **extra,
           "machine": summary(fp), "fingerprint": fp}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=1))
    return out


def _bench_book(a) -> int:
    """Record a finished ``./journey book`` run as a reader meets it: each chapter's time and the book build
    (from its ``run.json``) and the whole command's wall time (``--wall-seconds``, measured by its caller,
    scripts/bench-book.sh), so that what is left, the install and start-up, is counted against the target too."""
    from datajourney.book import runner

    if a.run is None or a.wall_seconds is None:
        raise ParameterError("--run", "missing", "bench book: --run RUN_DIR and --wall-seconds S")
    rec = runner.read_record(a.run)
    if rec is None or "book_build_seconds" not in rec:
        raise ParameterError("--run", str(a.run), "a run of `./journey book` (its run.json records the book build)")
    chapters = sum(c["seconds"] for c in rec["chapters"])
    if a.wall_seconds < chapters + rec["book_build_seconds"]:
        raise ParameterError("--wall-seconds", a.wall_seconds, "the whole command's time, at least its chapters' "
                                                               "and the book build's")
    out = _record(a, f"`./journey book {rec['profile']}` from a fresh clone: install, every chapter, the book build",
                  rec, a.tmp, book_build_seconds=rec["book_build_seconds"],
                  install_and_start_seconds=round(a.wall_seconds - chapters - rec["book_build_seconds"], 1),
                  total_seconds=a.wall_seconds, target_total_seconds=a.target_total)
    print(f"{a.wall_seconds:.0f} s in all, {out['install_and_start_seconds']:.0f} s of it install and start-up "
          f"(target {a.target_total:.0f} s): recorded in {a.out}")
    return 0


def _bench_verify(a) -> int:
    """Generate every data set of the chosen chapters under a profile, then time verification on
    reuse, warm (page cache) and cold (caches dropped where permitted), against generation."""
    import importlib
    import tempfile

    from datajourney.book import runner
    from datajourney.book.registry import lookup
    from datajourney.core.fingerprint import fingerprint, summary
    from datajourney.toolkit import datasets

    profile = a.profile
    chapters = [lookup(c) for c in (a.chapters or ["2", "3"])]
    plans = []
    for ch in chapters:
        if ch.number not in (2, 3):
            raise ParameterError("--chapters", ch.number, "chapters whose data sets are small files and shards (2, 3)")
        params = {**runner.chapter_parameters(ch), **(runner.profiles()[profile].get(ch.name) or {})}
        mod = importlib.import_module(ch.module)
        p = mod.Params.coerce(params).checked()
        plans += mod.plans(p) if hasattr(mod, "plans") else [datasets.small_files_plan(p.n_files, p.file_size, p.seed)]
    unique = list({n: (n, q, b) for n, q, b in plans}.values())
    rows = []
    with tempfile.TemporaryDirectory(dir=a.tmp, prefix="dj-bench-verify-") as tmp:
        for name, q, nbytes in unique:
            t0 = time.perf_counter()
            if q["kind"] == "small_files":
                datasets.small_files(tmp, n_files=q["n_files"], file_size=q["file_size"], seed=q["seed"],
                                     progress=False)
            else:
                datasets.shard(tmp, size=q["size"], seed=q["seed"], progress=False)
            gen = time.perf_counter() - t0
            root = Path(tmp) / name
            times = {}
            for state in ("warm", "cold"):
                method = _make_cold(root) if state == "cold" else "none"
                stats = {}
                t0 = time.perf_counter()
                problems = datasets.check(root, full=False, stats=stats)
                times[state] = time.perf_counter() - t0
                if problems:
                    raise RuntimeError(f"{name}: verification failed on a fresh data set: {problems}")
                times[f"{state}_purge"] = method
            t0 = time.perf_counter()
            datasets.check(root, full=True)
            full = time.perf_counter() - t0
            rows.append({"data_set": name, "bytes": nbytes, "files": stats["files"], "generate_s": round(gen, 3),
                         "verify_warm_s": round(times["warm"], 4), "verify_cold_s": round(times["cold"], 4),
                         "cold_purge": times["cold_purge"], "bytes_hashed": stats["bytes_hashed"],
                         "verify_full_warm_s": round(full, 3),
                         "ratio_warm": round(times["warm"] / gen, 4), "ratio_cold": round(times["cold"] / gen, 4)})
            print(f"{name:<34} generate {gen:7.2f} s   verify warm {times['warm']:6.3f} s  "
                  f"cold {times['cold']:6.3f} s ({times['cold'] / gen:5.1%})   full {full:6.2f} s", flush=True)
            datasets.release(tmp, name)
        fp = fingerprint(tmp)
    gen = sum(r["generate_s"] for r in rows)
    out = {
        "benchmark": f"verification on reuse vs generation of the {profile}-profile data sets of chapters "
                     + ", ".join(str(c.number) for c in chapters),
        "method": "each data set generated into an empty directory (timed: generation, indexing, publish), then "
                  "datasets.check() timed with the page cache warm and after dropping it (drop_caches as root, "
                  "else per-file fadvise); check(full=True) hashes every block, for comparison",
        "target_ratio": a.target_ratio,
        "profile": profile,
        "rows": rows,
        "total": {"generate_s": round(gen, 3),
                  "verify_warm_s": round(sum(r["verify_warm_s"] for r in rows), 4),
                  "verify_cold_s": round(sum(r["verify_cold_s"] for r in rows), 4),
                  "verify_full_warm_s": round(sum(r["verify_full_warm_s"] for r in rows), 3)},
        "machine": summary(fp),
        "fingerprint": fp,
    }
    out["total"]["ratio_warm"] = round(out["total"]["verify_warm_s"] / gen, 4)
    out["total"]["ratio_cold"] = round(out["total"]["verify_cold_s"] / gen, 4)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=1))
    t = out["total"]
    print(f"total: generate {t['generate_s']:.1f} s, verify warm {t['verify_warm_s']:.2f} s "
          f"({t['ratio_warm']:.1%}), cold {t['verify_cold_s']:.2f} s ({t['ratio_cold']:.1%}); "
          f"target <= {a.target_ratio:.0%}")
    print(f"recorded in {a.out}")
    return 0


def _make_cold(root: Path) -> str:
    """Drop the page cache (and the inode and dentry caches) where permitted, else evict the files."""
    from datajourney.toolkit import pagecache

    if pagecache.can_drop_caches():
        pagecache.drop_caches()
        return "drop_caches"
    pagecache.fadvise_dontneed([p for p in root.rglob("*") if p.is_file()])
    return "fadvise"


def _fingerprint(a) -> int:
    from datajourney.core.fingerprint import fingerprint, summary

    fp = fingerprint(a.data_dir)
    if a.json:
        print(json.dumps(fp, indent=1))
    else:
        for k, v in summary(fp).items():
            print(f"{k:>26}: {v}")
    return 0


def _restore(a) -> int:
    """Put back the system settings (e.g. a device's read_ahead_kb) that a killed run left changed."""
    from datajourney.toolkit import sysfs

    done = sysfs.restore_pending()
    for e in done:
        print(f"{e['file']}: {e['error']}" if e.get("error") else
              f"{e['file']}: found {e['value_found']}, restored to {e['restored_to']}")
    if not done:
        print(f"nothing to restore (no journal of a dead run in {sysfs.state_dir()})")
    return 1 if any(e.get("error") for e in done) else 0


def _chapters(a) -> int:
    from datajourney.book.registry import CHAPTERS

    for c in CHAPTERS:
        print(f"{c.number:>3}  {c.name:<28} {'ready' if c.available else 'not yet written'}")
    return 0


#: What ``--help`` says above the commands (plain text: argparse shows it as it is).
DESCRIPTION = ("The Data Journey: measure each hop of a training sample from disk to GPU memory on this "
               "machine, and build the book from the measurements. 'python -m datajourney COMMAND --help' "
               "tells more about a command.")


class _Help(argparse.HelpFormatter):
    """argparse's help with each command and its help on one line: argparse measures command names
    two columns short of the indent it prints them at, which puts the longest one's help on a line
    of its own."""

    def add_argument(self, action):
        super().add_argument(action)
        subactions = list(self._iter_indented_subactions(action)) if action.help is not argparse.SUPPRESS else []
        if subactions:
            longest = max(len(self._format_action_invocation(a)) for a in subactions)
            self._action_max_length = max(self._action_max_length, longest + self._current_indent + 2)


def _restart_in_utf8_mode(argv) -> None:
    """Under a C locale without Python's UTF-8 mode, a non-ASCII argument (a path) arrives as
    surrogate escapes, which neither YAML nor a notebook can hold: start again in UTF-8 mode
    (``PYTHONUTF8=1``, which the kernels inherit), so the runner and the kernels read the same path.
    Only for the process's own command line (``argv`` None)."""
    if argv is not None or sys.flags.utf8_mode or os.environ.get("PYTHONUTF8") == "1":
        return
    if any("\udc80" <= ch <= "\udcff" for arg in sys.argv[1:] for ch in arg):
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], {**os.environ, "PYTHONUTF8": "1"})


def main(argv=None) -> int:
    _restart_in_utf8_mode(argv)
    ap = argparse.ArgumentParser(prog="python -m datajourney", description=DESCRIPTION, formatter_class=_Help)
    sub = ap.add_subparsers(dest="cmd", required=True, title="commands", metavar="COMMAND")

    r = sub.add_parser("run", help="run chapter notebooks into results/<run-id>/")
    r.add_argument("chapters", nargs="*", help="chapter numbers or names (default: all written)")
    r.add_argument("--profile", default="quick", help="ci, quick or full (datajourney/book/profiles.yaml)")
    r.add_argument("-p", "--param", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help="override one parameter (YAML value: 4, [0, 4], true, null)")
    r.add_argument("--run-id", help="name of the run directory (default: date-time-profile, made unique); "
                   "an existing one is refused unless --replace")
    r.add_argument("--replace", action="store_true",
                   help="with --run-id: delete the existing run of that name (after every check passed)")
    r.add_argument("--verify-data", choices=("quick", "full"),
                   help="how data sets are verified on reuse: quick (sizes, time stamps, a 0.5%% sample; the "
                        "default) or full (every byte); same as DATAJOURNEY_VERIFY")
    r.add_argument("--results", type=Path, help="parent of run directories (default: results/)")
    r.add_argument("--as-reference", metavar="HOST", help="label this run as the reference run of HOST")
    r.add_argument("--book", action="store_true", help="build the book from this run afterwards")
    r.add_argument("--quiet", action="store_true", help="no progress bars")
    r.add_argument("--keep-going", action="store_true",
                   help="run the remaining chapters after one fails (the run still ends 'failed')")
    r.set_defaults(fn=_run)

    b = sub.add_parser("book", help="build the HTML book (the reference, or a run's)")
    b.add_argument("--run", help="run directory or run id (default: the committed reference notebooks)")
    b.add_argument("--no-strict", action="store_true", help="do not treat warnings as errors")
    b.set_defaults(fn=_book)

    rr = sub.add_parser("rerender", help="render a finished run again with this code",
                        description="Render a finished run's results again with this code (no measuring).")
    rr.add_argument("run_dir", help="a finished run directory (its run.json says 'ok')")
    rr.add_argument("--run-id", help="name of the new run directory (default: <run-id>-rendered)")
    rr.add_argument("--replace", action="store_true", help="replace an existing run of that name")
    rr.add_argument("--results", help="parent of run directories (default: results/)")
    rr.add_argument("--quiet", action="store_true", help="no progress bars")
    rr.set_defaults(fn=_rerender)

    p = sub.add_parser("promote", help="make a finished run the committed reference",
                       description="Make a finished run the committed reference run of HOST: all its files "
                                   "or none, checked first.")
    p.add_argument("run_dir")
    p.add_argument("--host", required=True, help="the reference host's name (lower-case letters, digits, "
                   "'_' and '-'): data/reference/HOST/")
    p.add_argument("--only", nargs="+", metavar="CHAPTER", help="promote only these chapters of the run (each "
                   "must have finished 'ok'; the run record is kept as it is, saying how the run ended)")
    beside = p.add_mutually_exclusive_group()
    beside.add_argument("--extra", action="store_true", help="a further reference beside the main one (e.g. a "
                        "host with more GPUs): results go to data/reference/HOST/more/, notebooks stay")
    beside.add_argument("--repeat", action="store_true", help="a repeat of the reference run (same parameters, "
                        "another time or host): results go to data/reference/HOST/repeats/, notebooks stay")
    p.set_defaults(fn=_promote)

    f = sub.add_parser("fingerprint", help="print this machine's environment fingerprint")
    f.add_argument("--data-dir", help="describe the storage under this directory")
    f.add_argument("--json", action="store_true")
    f.set_defaults(fn=_fingerprint)

    be = sub.add_parser("bench", help="time each chapter, or data-set verification",
                        description="Record each chapter's wall time under a profile (bench), or the cost of "
                                    "verifying data sets on reuse against generating them (bench verify).")
    be.add_argument("what", nargs="?", choices=("chapters", "verify", "book"), default="chapters")
    be.add_argument("--profile", help="profile (default: ci; full for 'bench verify')")
    be.add_argument("--target", type=float, default=60.0, help="seconds per chapter to meet")
    be.add_argument("--book", action="store_true", help="bench chapters: also build the book and record the total")
    be.add_argument("--target-total", type=float, default=600.0, help="bench chapters --book, bench book: seconds for "
                    "it all")
    be.add_argument("--target-ratio", type=float, default=0.10, help="bench verify: verification / generation to meet")
    be.add_argument("--chapters", nargs="*", help="bench verify: chapters whose data sets to measure (default: 2 3)")
    be.add_argument("--out", type=Path, help="where to record it (default: data/benchmarks/ci_profile.json, "
                    "quick_book.json for 'bench book', verify_<profile>.json for 'bench verify')")
    be.add_argument("--run", type=Path, help="bench book: the run directory `./journey book` made")
    be.add_argument("--wall-seconds", type=float, help="bench book: the whole `./journey book` command's wall time")
    be.add_argument("--tmp", help="directory for the temporary run and data (default: system temp; for "
                    "'bench verify' put it on the disk to measure)")
    be.set_defaults(fn=_bench)

    c = sub.add_parser("chapters", help="list the chapters")
    c.set_defaults(fn=_chapters)

    rs = sub.add_parser("restore", help="put back system settings (e.g. read_ahead_kb) a killed run left changed")
    rs.set_defaults(fn=_restore)

    a = ap.parse_args(argv)
    if a.cmd != "fingerprint" and not CHECKOUT_NOTEBOOKS.is_dir():
        print(f"error: '{a.cmd}' needs a checkout of the project (no {CHECKOUT_NOTEBOOKS}): clone it and "
              "install it with pip install -e . from there", file=sys.stderr)
        return 2
    if a.cmd == "bench":
        a.profile = a.profile or ("full" if a.what == "verify" else "ci")
        a.out = a.out or REPO_ROOT / "data" / "benchmarks" / {
            "chapters": "ci_profile.json", "book": "quick_book.json"}.get(a.what, f"verify_{a.profile}.json")
    from datajourney.book.runner import Interrupted, RunError, absolute_data_dir_env, missing_module
    from datajourney.core.results import ResultError

    absolute_data_dir_env()  # a relative $DATAJOURNEY_DATA_DIR means the directory it names from here, once
    try:
        return a.fn(a)
    except Interrupted as e:
        print(f"interrupted: {e}", file=sys.stderr)
        return e.exit_code
    except (ParameterError, ResultError, RunError, KeyError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"error: {msg}", file=sys.stderr)
        return e.exit_code if isinstance(e, RunError) else 2
    except ModuleNotFoundError as e:
        err = missing_module(e, f"'{a.cmd}'")
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    except (RuntimeError, OSError) as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted before any chapter started: nothing was run", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
