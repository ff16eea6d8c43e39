#!/usr/bin/env bash
# nsys with Python sampling and CUDA backtraces, degrading flag by flag where this nsys lacks one.
# Usage: nsys_sampled.sh OUT_PREFIX COMMAND... ; writes OUT_PREFIX.sqlite and OUT_PREFIX.flags (what ran).
set -u
out=$1; shift
help=$(nsys profile --help 2>&1)
flags=(-t cuda,nvtx,osrt --export sqlite -f true -o "$out")
for f in "--python-sampling=true" "--python-sampling-frequency=1000" "--python-backtrace=cuda" \
         "--cudabacktrace=all" "--sample=process-tree" "--cpuctxsw=none"; do
  name=${f%%=*}
  grep -q -- "$name" <<<"$help" && flags+=("$f")
done
echo "${flags[*]}" > "$out.flags"
nsys profile "${flags[@]}" "$@"
