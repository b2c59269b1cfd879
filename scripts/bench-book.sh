#!/usr/bin/env bash
# Time `./journey book PROFILE` as a reader meets it, install included, and record it with each chapter's
# time (python -m datajourney bench book). Run it in a fresh clone, so that the install is part of the time:
#
#   git clone REPO fresh && cd fresh && scripts/bench-book.sh OUT.json [PROFILE] [--wheelhouse DIR]
#
# OUT.json: where the record goes (data/benchmarks/quick_book*.json are the committed ones). PROFILE: quick.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: scripts/bench-book.sh OUT.json [PROFILE] [--wheelhouse DIR]" >&2; exit 2; }
out=$(realpath -m "$1"); shift   # from where it was called, before moving to the checkout
cd "$(dirname "$0")/.."
profile=quick
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then profile=$1; shift; fi
if [ -e .venv ]; then echo "bench-book: .venv exists; run it in a fresh clone so that the install is timed" >&2; exit 2; fi
start=$(date +%s%N)
./journey book "$profile" "$@"
wall=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
run=$(readlink -f results/latest)  # the run ./journey book just made
.venv/bin/python -m datajourney bench book --run "$run" --wall-seconds "$wall" --out "$out"
