#!/usr/bin/env bash
# The reference run: every written chapter at full scale on a GPU host, labelled as the
# reference of HOST, packed as OUTPUT_DIR/<run-id>.tgz. Promote it on a checkout with
#   python -m datajourney promote <unpacked run dir> --host HOST
# usage: scripts/reference-run.sh HOST OUTPUT_DIR [PROFILE [CHAPTER ...]]
set -euo pipefail
host=${1:?usage: reference-run.sh HOST OUTPUT_DIR [PROFILE [CHAPTER ...]]}
out=${2:?usage: reference-run.sh HOST OUTPUT_DIR [PROFILE [CHAPTER ...]]}
profile=${3:-full}
shift $(( $# < 3 ? $# : 3 ))
export DATAJOURNEY_DATA_DIR=${DATAJOURNEY_DATA_DIR:-/var/tmp/datajourney}
mkdir -p "$DATAJOURNEY_DATA_DIR" "$out"
run_id="reference-$host-$(date -u +%Y%m%d-%H%M%S)"
python3 -m datajourney run "$@" --profile "$profile" --as-reference "$host" --results "$out" --run-id "$run_id" --quiet --keep-going || echo "some chapters failed: promote the finished ones with --only"
# profiler traces stay in the run directory on this host (they are large and never committed)
tar czf "$out/$run_id.tgz" --exclude="$run_id/traces" -C "$out" "$run_id"
echo "packed: $out/$run_id.tgz"
