#!/usr/bin/env bash
# One `--verify 3` job of benchmarks/jobs/s7_verify.tsv on the GPU machine, in the repo root with $RUN set:
#   bash benchmarks/verify_job.sh LIMIT_S run|diagnose [hybrid options] [SCRIPT [script args]]
# Every job shares one realized-ratio history (HYBRID_CACHE_DIR), so each fix's predictions are corrected once
# three earlier jobs on this GPU verified it. A fresh machine starts from benchmarks/results/s7_realized_seed.json
# where that file exists (copy the last job's realized_after.json there between device calls). The run folder
# is $RUN/run; a run stopped by its limit is re-analyzed with what it verified by then.
set -u
limit=$1
command=$2
shift 2
cache=/tmp/hybrid-verify-cache-s7
mkdir -p "$cache"
[ -f "$cache/realized.json" ] || cp benchmarks/results/s7_realized_seed.json "$cache/realized.json" 2>/dev/null
export HYBRID_CACHE_DIR=$cache
timeout "$limit" python3 -m hybrid "$command" --verify 3 --out "$RUN/run" "$@" > "$RUN/report.txt" 2> "$RUN/progress.txt"
rc=$?
[ -f "$RUN/run/results.json" ] || python3 -m hybrid report "$RUN/run" > "$RUN/report.txt" 2>&1
cp "$cache/realized.json" "$RUN/realized_after.json" 2>/dev/null
cat "$RUN/report.txt"
tail -8 "$RUN/progress.txt"
exit $rc
