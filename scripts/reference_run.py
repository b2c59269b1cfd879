"""The bookkeeping of scripts/reference-run.sh: its journal, its status, and the one run directory
assembled from the chapters' runs (which may come from several machines of the same kind).

    python scripts/reference_run.py todo OUTDIR          chapters of the plan not yet finished 'ok'
    python scripts/reference_run.py begin OUTDIR CH RUN_ID / end OUTDIR CH RUN_ID RC
    python scripts/reference_run.py status OUTDIR        what is done, running, failed; elapsed time
    python scripts/reference_run.py merge OUTDIR         OUTDIR/<run id>/: one run directory for promote

OUTDIR holds plan.json (host, profile, chapters, run id), journal.jsonl (one line per event: which
machine, hostname and boot id, ran which chapter, when, how long, how it ended), runs/ (one run
directory per chapter run, written by python -m datajourney run) and the merged run directory."""
from __future__ import annotations

import json
import os
import socket
import sys
import time
from datetime import datetime, timezone
from pathlib import Path


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "?"


def plan(out: Path) -> dict:
    return json.loads((out / "plan.json").read_text())


def journal(out: Path) -> list[dict]:
    f = out / "journal.jsonl"
    if not f.is_file():
        return []
    return [json.loads(line) for line in f.read_text().splitlines() if line.strip()]


def log(out: Path, **event) -> None:
    event = {"time": now(), "epoch": round(time.time(), 1), "host": socket.gethostname(), "boot_id": boot_id(),
             "pid": os.getppid(), **event}
    with open(out / "journal.jsonl", "a") as f:
        f.write(json.dumps(event) + "\n")


def chapter_state(out: Path) -> dict[str, dict]:
    """chapter -> its last event (begin or end) in the journal."""
    state = {}
    for e in journal(out):
        if e.get("chapter"):
            state[e["chapter"]] = e
    return state


def alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except (OSError, ValueError, TypeError):
        return False
    return True


def todo(out: Path) -> list[str]:
    state = chapter_state(out)
    return [c for c in plan(out)["chapters"] if state.get(c, {}).get("status") != "ok"]


def _record(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        return {}


def end(out: Path, chapter: str, run_id: str, rc: str) -> None:
    rec = _record(out / "runs" / run_id)
    entry = next((c for c in rec.get("chapters") or [] if c.get("chapter", "").startswith(chapter_name(chapter))),
                 {})
    status = entry.get("status") or ("ok" if rc == "0" else "failed")
    log(out, event="end", chapter=chapter, run_id=run_id, status=status, rc=int(rc),
        seconds=entry.get("seconds"), error=(entry.get("error") or {}).get("evalue"))


def chapter_name(key: str) -> str:
    return f"{int(key):02d}_" if key.isdigit() else key


def status(out: Path) -> int:
    p, events, state = plan(out), journal(out), chapter_state(out)
    job = next((e for e in reversed(events) if e.get("event") in ("job-start", "job-end")), None)
    running_job = job and job["event"] == "job-start" and alive(job.get("pid")) and job.get("boot_id") == boot_id()
    first = next((e for e in events if e.get("event") == "job-start"), None)
    print(f"reference run {p['run_id']} (host {p['host']}, profile {p['profile']}) in {out}")
    done = 0
    for c in p["chapters"]:
        e = state.get(c)
        if e is None:
            what = "to do"
        elif e.get("event") == "begin":
            if running_job:
                what = f"running for {time.time() - e['epoch']:.0f} s on {e['host']}"
            else:
                what = f"interrupted (started {e['time']} on {e['host']}): resume runs it again"
        else:
            what = f"{e['status']} in {e.get('seconds') or 0:.0f} s on {e['host']} (boot {e['boot_id'][:8]})"
            if e.get("error"):
                what += f": {e['error'][:100]}"
            done += e["status"] == "ok"
        print(f"  chapter {c:>3}: {what}")
    chapter_s = sum(e.get("seconds") or 0 for e in events if e.get("event") == "end" and e.get("status") == "ok")
    if first:
        last = time.time() if running_job else (events[-1]["epoch"] if events else first["epoch"])
        print(f"{done} of {len(p['chapters'])} chapters ok; chapters' own time {chapter_s / 60:.1f} min; "
              f"{(last - first['epoch']) / 60:.1f} min since the first start; job "
              + ("running (pid " + str(job['pid']) + ")" if running_job else "not running"))
    return 0


def merge(out: Path) -> Path:
    """One run directory (OUTDIR/<run id>) holding every chapter that finished 'ok', each from its
    latest run, with a run record naming the machine of each chapter: what promote takes."""
    import shutil

    p, state = plan(out), chapter_state(out)
    dest = out / p["run_id"]
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "notebooks").mkdir(parents=True)
    chapters, machines = [], {}
    for c in p["chapters"]:
        e = state.get(c)
        if not e or e.get("event") != "end":
            continue
        run = out / "runs" / e["run_id"]
        rec = _record(run)
        for entry in rec.get("chapters") or []:
            entry = {**entry, "host": rec.get("host"), "boot_id": rec.get("boot_id"), "run_id": rec.get("run_id")}
            chapters.append(entry)
            machines.setdefault(f"{rec.get('host')} (boot {rec.get('boot_id')})", []).append(entry["chapter"])
            if entry.get("status") == "ok":
                for f in (run / f"{entry['chapter']}.json", run / "notebooks" / f"{entry['chapter']}.ipynb"):
                    if f.is_file():
                        shutil.copy2(f, dest / f.relative_to(run))
    events = journal(out)
    starts = [e["epoch"] for e in events if e.get("event") == "begin"]
    ends = [e["epoch"] for e in events if e.get("event") == "end"]
    ok = [c for c in chapters if c.get("status") == "ok"]
    record = {"run_id": p["run_id"], "profile": p["profile"], "reference_host": p["host"],
              "status": "ok" if len(ok) == len(p["chapters"]) and len(chapters) == len(ok) else "failed",
              "started": events[0]["time"] if events else None, "finished": events[-1]["time"] if events else None,
              "chapters": chapters, "machines": machines,
              "profile_seconds": round(sum(c.get("seconds") or 0 for c in ok), 1),
              "wall_seconds": round(max(ends) - min(starts), 1) if starts and ends else None,
              "note": "assembled by scripts/reference-run.sh from one run per chapter (runs/ holds each)"}
    (dest / "run.json").write_text(json.dumps(record, indent=1))
    return dest


def main(argv) -> int:
    cmd, out = argv[0], Path(argv[1])
    if cmd == "todo":
        print(" ".join(todo(out)))
    elif cmd == "begin":
        log(out, event="begin", chapter=argv[2], run_id=argv[3])
    elif cmd == "end":
        end(out, argv[2], argv[3], argv[4])
    elif cmd in ("job-start", "job-end"):
        log(out, event=cmd, chapters=todo(out))
    elif cmd == "status":
        return status(out)
    elif cmd == "merge":
        print(merge(out))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
