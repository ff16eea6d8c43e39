#!/usr/bin/env bash
# What each of the nsys pass's options costs in wall time (issue 21: resnet50's nsys pass took 19.5 s against
# a 12.1 s plain run on the H100, session 21). Runs `hybrid diagnose --model resnet50 --mode nsys` once for
# the pass's own command (run/nsys/command.txt), or reuses the run folder REUSE_RUN names (a second reading
# on the same machine), then times that command as recorded, with one option left out at a time, with
# neither Python sampling nor the OS-runtime trace, and with the OS-runtime trace the pass dropped in
# session 22 added back (its flags as they were), each followed by its SQLite export and that export's exit
# status. On the GPU machine, in the repo root, with $RUN set:
#   bash benchmarks/probe/nsys_pass_options.sh
#   REUSE_RUN=/path/to/earlier/RUN/run bash benchmarks/probe/nsys_pass_options.sh
set -u
run=${REUSE_RUN:-$RUN/run}
if [ -z "${REUSE_RUN:-}" ]; then
    python3 -m hybrid diagnose --model resnet50 --mode nsys --out "$run" > "$RUN/report.txt" 2>&1 || exit 1
fi
recorded=$(head -1 "$run/nsys/command.txt")
sampling='s/--python-sampling=true --python-sampling-frequency=1000//'
osrt_off='s/-t cuda,nvtx,osrt/-t cuda,nvtx/; s/--osrt-threshold=[0-9]* --osrt-backtrace-threshold=[0-9]*//'
osrt_on='s/-t cuda,nvtx /-t cuda,nvtx,osrt --osrt-threshold=10000 --osrt-backtrace-threshold=1000000000 /'
variant() {  # NAME SED-EXPRESSION: the recorded command with the expression applied, timed with its export
    local name=$1 cmd start end exported rc
    cmd=$(echo "$recorded" | sed -e "$2" -e "s#-o [^ ]*/profile #-o $RUN/$name #" -e "s#--out [^ ]*/nsys #--out $RUN/inj_$name #")
    start=$(date +%s%N)
    eval "$cmd" > "$RUN/$name.log" 2>&1
    end=$(date +%s%N)
    nsys export --type sqlite --force-overwrite true -o "$RUN/$name.sqlite" "$RUN/$name.nsys-rep" > "$RUN/$name.export.log" 2>&1
    rc=$?
    exported=$(date +%s%N)
    echo "$name: profile $(( (end - start) / 1000000 )) ms, export $(( (exported - end) / 1000000 )) ms (rc $rc)"
    rm -f "$RUN/$name.nsys-rep" "$RUN/$name.sqlite"
}
variant recorded 's/^/ /'
variant no_python_sampling "$sampling"
variant no_osrt "$osrt_off"
variant neither "$sampling; $osrt_off"
variant with_osrt "$osrt_on"
variant no_graph_trace 's/--cuda-graph-trace=node//'
