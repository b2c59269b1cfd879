#!/usr/bin/env bash
# The reference run on a GPU host: set up by ./journey (from a wheelhouse on a host without network),
# run as ONE detached job that survives a dropped connection, one chapter after another (each its own
# run of `python -m datajourney run`), resumable on the same or another machine of the same kind.
#
#   scripts/reference-run.sh start HOST OUTDIR [--wheelhouse DIR] [--profile full] [--chapters "1 2 ..."]
#       set up .venv (./journey setup), then start the job in the background and return. Default
#       chapters: every written one, but 11 (it needs two or more GPUs) only where torch sees two.
#       --chapters 11 on a multi-GPU host runs chapter 11 alone.
#   scripts/reference-run.sh status OUTDIR     which chapters are done, running, failed; elapsed time
#   scripts/reference-run.sh resume OUTDIR [--wheelhouse DIR]
#       start the job again for the chapters not yet finished 'ok' (after a dropped machine, on this
#       one or another of the same kind, from the same commit: the checkout's commit is checked)
#   scripts/reference-run.sh pack OUTDIR       assemble OUTDIR/<run-id>/ (one run directory, every
#       chapter from its latest run) and pack it with the journal and logs as OUTDIR/<run-id>.tgz,
#       without data sets and profiler traces (what comes back from the host)
#   scripts/reference-run.sh wait OUTDIR       block until the job ends (then print the status)
#
# OUTDIR keeps plan.json, journal.jsonl (which machine, hostname and boot id, ran which chapter, when, how
# long), job.log, runs/<run-id>-<NN>-<k>/ (each chapter's run directory) and, after pack, the assembled run
# directory whose run.json records each chapter's machine and the whole profile's time. Promote it on a
# checkout: python -m datajourney promote OUTDIR/<run-id> --host HOST (--only CHAPTER ... for a part).
# Every job exports NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 (no NVLink
# multicast) and DATAJOURNEY_DATA_DIR (default /var/tmp/datajourney).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY="$ROOT/.venv/bin/python"
BOOK="$ROOT/scripts/reference_run.py"
usage() { sed -n '5,21p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
say() { echo "$*" >&2; }

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DATAJOURNEY_DATA_DIR=${DATAJOURNEY_DATA_DIR:-/var/tmp/datajourney}

book() { "$PY" "$BOOK" "$@"; }

setup_env() {  # $@: ./journey options (--wheelhouse DIR); REFERENCE_SETUP=0: use .venv as it is
  [ "${REFERENCE_SETUP:-1}" = 0 ] || ./journey setup "$@"
}

launch() {  # $1: OUTDIR; the detached job (its own session: a dropped connection does not reach it)
  local out=$1
  : >>"$out/job.log"
  setsid nohup "$0" _job "$out" >>"$out/job.log" 2>&1 </dev/null &
  echo $! >"$out/job.pid"
  say "started the job (pid $!): poll with $0 status $out; its log is $out/job.log"
}

default_chapters() {
  "$PY" - <<'EOF'
from datajourney.book import registry
try:
    import torch
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
except Exception:
    gpus = 0
print(" ".join(str(c.number) for c in registry.available() if c.number != 11 or gpus >= 2))
EOF
}

job() {  # the detached job: every chapter not yet 'ok', one by one
  local out=$1 profile host run_id ch k rc extra
  profile=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["profile"])' "$out/plan.json")
  host=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["host"])' "$out/plan.json")
  run_id=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' "$out/plan.json")
  if ! ldconfig -p 2>/dev/null | grep -q "libavcodec\.so"; then  # spdl.io's FFmpeg, as ./journey sets it
    LD_LIBRARY_PATH="$("$PY" scripts/ffmpeg_from_av.py .venv/ffmpeg 2>/dev/null || true)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LD_LIBRARY_PATH
  fi
  mkdir -p "$DATAJOURNEY_DATA_DIR" "$out/runs"
  book job-start "$out"
  for ch in $(book todo "$out"); do
    k=1
    while [ -e "$out/runs/$run_id-$(printf %02d "$ch")-$k" ]; do k=$((k + 1)); done
    local id="$run_id-$(printf %02d "$ch")-$k"
    extra=()
    if [ "$ch" = 12 ]; then  # chapter 12 diagnoses the other chapters' results: the run assembled so far
      extra=(-p diagnose "$(book merge "$out")")
    fi
    book begin "$out" "$ch" "$id"
    echo "== chapter $ch: run $id ($(date -u +%FT%TZ), $(hostname))"
    rc=0
    "$PY" -m datajourney run "$ch" --profile "$profile" --as-reference "$host" --results "$out/runs" \
      --run-id "$id" --quiet --keep-going ${extra[@]+"${extra[@]}"} || rc=$?
    book end "$out" "$ch" "$id" "$rc"
  done
  book job-end "$out"
  book merge "$out" >/dev/null
  book status "$out"
}

running() {  # $1: OUTDIR; true while its job runs on this machine
  [ -f "$1/job.pid" ] && kill -0 "$(cat "$1/job.pid")" 2>/dev/null
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  start)
    [ $# -ge 2 ] || usage
    host=$1 out=$2
    shift 2
    profile=full chapters="" jopts=()
    while [ $# -gt 0 ]; do
      case $1 in
        --wheelhouse) jopts+=(--wheelhouse "$2"); shift 2 ;;
        --profile) profile=$2; shift 2 ;;
        --chapters) chapters=$2; shift 2 ;;
        *) usage ;;
      esac
    done
    mkdir -p "$out"
    out=$(cd "$out" && pwd)
    [ ! -e "$out/plan.json" ] || { say "$out already holds a reference run: resume it, or choose another OUTDIR"; exit 2; }
    setup_env ${jopts[@]+"${jopts[@]}"}
    [ -n "$chapters" ] || chapters=$(default_chapters)
    "$PY" - "$out/plan.json" "$host" "$profile" "$chapters" "$(git rev-parse HEAD 2>/dev/null || echo unknown)" <<'EOF'
import json, sys, time
path, host, profile, chapters, commit = sys.argv[1:]
run_id = f"reference-{host}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
json.dump({"host": host, "profile": profile, "chapters": chapters.split(), "run_id": run_id, "commit": commit},
          open(path, "w"), indent=1)
EOF
    say "plan: chapters $chapters, profile $profile, run id $(grep -o '"reference-[^"]*' "$out/plan.json" | tr -d '"')"
    launch "$out"
    ;;
  resume)
    [ $# -ge 1 ] || usage
    out=$(cd "$1" && pwd)
    shift
    [ -f "$out/plan.json" ] || { say "$out has no plan.json: start a run first"; exit 2; }
    running "$out" && { say "the job is still running (pid $(cat "$out/job.pid")): status shows it"; exit 2; }
    commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
    planned=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["commit"])' "$out/plan.json")
    [ "$commit" = "$planned" ] || { say "this checkout is at $commit, the run started from $planned: check that one out"; exit 2; }
    setup_env "$@"
    say "chapters still to run: $(book todo "$out")"
    launch "$out"
    ;;
  status)
    [ $# -ge 1 ] || usage
    python3 "$BOOK" status "$1"
    ;;
  wait)
    [ $# -ge 1 ] || usage
    while running "$1"; do sleep 10; done
    python3 "$BOOK" status "$1"
    ;;
  pack)
    [ $# -ge 1 ] || usage
    out=$(cd "$1" && pwd)
    merged=$(python3 "$BOOK" merge "$out")
    name=$(basename "$merged")
    # profiler traces and any data stay on the host (large, never committed)
    tar czf "$out/$name.tgz" -C "$out" --exclude='*/traces' --exclude='*/data' \
      "$name" plan.json journal.jsonl job.log $(cd "$out" && ls -d runs/*/run.json 2>/dev/null)
    say "packed: $out/$name.tgz ($(du -h "$out/$name.tgz" | cut -f1)); unpack on a checkout and promote $name"
    [ "$(stat -c %s "$out/$name.tgz")" -le $((16 << 20)) ] || say "note: over 16 MiB"
    ;;
  _job)
    job "$1"
    ;;
  *)
    usage
    ;;
esac
