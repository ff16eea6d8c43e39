#!/usr/bin/env bash
# What each of the nsys pass's options costs in wall time (issue 21: resnet50's nsys pass took 19.5 s against
# a 12.1 s plain run on the H100, session 21). Runs `hybrid diagnose --model resnet50 --mode nsys` once for
# the pass's own command (run/nsys/command.txt), then that command again as recorded and with one option
# left out at a time, each timed with its SQLite export. On the GPU machine, in the repo root, with $RUN set:
#   bash benchmarks/probe/nsys_pass_options.sh
set -u
python3 -m hybrid diagnose --model resnet50 --mode nsys --out "$RUN/run" > "$RUN/report.txt" 2>&1 || exit 1
recorded=$(head -1 "$RUN/run/nsys/command.txt")
variant() {  # NAME SED-EXPRESSION: the recorded command with the expression applied, timed with its export
    local name=$1 cmd
    cmd=$(echo "$recorded" | sed -e "$2" -e "s#-o [^ ]*/profile #-o $RUN/$name #" -e "s#--out [^ ]*/nsys #--out $RUN/inj_$name #")
    local start end
    start=$(date +%s%N)
    eval "$cmd" > "$RUN/$name.log" 2>&1
    end=$(date +%s%N)
    nsys export --type sqlite --force-overwrite true -o "$RUN/$name.sqlite" "$RUN/$name.nsys-rep" > /dev/null 2>&1
    local exported
    exported=$(date +%s%N)
    echo "$name: profile $(( (end - start) / 1000000 )) ms, export $(( (exported - end) / 1000000 )) ms"
    rm -f "$RUN/$name.nsys-rep" "$RUN/$name.sqlite"
}
variant recorded 's/^/ /'
variant no_python_sampling 's/--python-sampling=true --python-sampling-frequency=1000//'
variant no_osrt 's/-t cuda,nvtx,osrt/-t cuda,nvtx/; s/--osrt-threshold=[0-9]* --osrt-backtrace-threshold=[0-9]*//'
variant no_graph_trace 's/--cuda-graph-trace=node//'
