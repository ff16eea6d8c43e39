#!/usr/bin/env bash
# Why did every nn.Sequential.compile() of a `--verify` run on the device compile no graph (benchmarks/results/
# s27_h100/README.md)? For deep_narrow_conv_b1 (reduce-overhead) and healthy_pipelined_input (default), each
# plainly: eager, and with model.compile(...) written into the script (the API the fix calls), timed as
# (T(long) - T(short)) / extra steps, with the graphs dynamo compiled printed at the end; then hybrid's verify
# pass of each with dynamo's log, whose skip lines say what it left eager. Usage (gpu_session job):
#   bash benchmarks/jobs/plain_compile_sequential.sh $RUN
set -u
RUN=${1:?run folder}
mkdir -p "$RUN/s"
cp benchmarks/planted/_planted.py benchmarks/unmarked/_timing.py "$RUN/s/"
GRAPHS='import torch._dynamo.utils as _du; print("dynamo graphs:", _du.counters["stats"]["unique_graphs"], "cudagraph skips:", _du.counters["inductor"]["cudagraph_skips"])'
cp benchmarks/unmarked/deep_narrow_conv_b1.py "$RUN/s/narrow_eager.py"
sed 's/^                      nn.Linear(32, 10)).to(args.device).eval()$/&\nmodel.compile(mode="reduce-overhead")/' \
  benchmarks/unmarked/deep_narrow_conv_b1.py > "$RUN/s/narrow_compiled.py"
cp benchmarks/planted/healthy_pipelined_input.py "$RUN/s/pipelined_eager.py"
sed 's/^model = model.to(memory_format=torch.channels_last)$/&\nmodel.compile()/' \
  benchmarks/planted/healthy_pipelined_input.py > "$RUN/s/pipelined_compiled.py"
for f in "$RUN"/s/*_compiled.py; do echo "$GRAPHS" >> "$f"; grep -c "\.compile(" "$f"; done
for v in narrow_eager narrow_compiled; do for n in 60 560; do
  /usr/bin/time -f "$v iters=$n wall %e s" timeout 150 python3 "$RUN/s/$v.py" --iters $n 2>&1 | tail -3
done; done
for v in pipelined_eager pipelined_compiled; do for n in 20 120; do
  /usr/bin/time -f "$v steps=$n wall %e s" timeout 150 python3 "$RUN/s/$v.py" --steps $n 2>&1 | tail -3
done; done
for fix in "compile_reduce_overhead benchmarks/unmarked/deep_narrow_conv_b1.py" "compile benchmarks/planted/healthy_pipelined_input.py"; do
  set -- $fix
  TORCH_LOGS="+dynamo" timeout 150 python3 -m hybrid.inject.script --pass plain --out "$RUN/verify_$1" --warmup 5 \
    --steps 10 --apply-fix "$1" -- "$2" > "$RUN/verify_$1.log" 2>&1
  echo "== $1: $(grep -c . "$RUN/verify_$1.log") log lines"
  grep -iE "skip|start tracing|torchdynamo start compiling|convert_frame|eval_frame" "$RUN/verify_$1.log" | cut -c1-300 | head -25
  python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['config']['compile']; print(c)" "$RUN/verify_$1/inject.json"
done
