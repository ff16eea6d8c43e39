set -u
prev=$(ls -d /tmp/hybrid-gpu-runs/*/nsys_pass_options/run 2>/dev/null | head -1)
[ -n "$prev" ] || { echo "no earlier run"; exit 1; }
recorded=$(head -1 "$prev/nsys/command.txt")
variant() {
    local name=$1 cmd start end
    cmd=$(echo "$recorded" | sed -e "$2" -e "s#-o [^ ]*/profile #-o $RUN/$name #" -e "s#--out [^ ]*/nsys #--out $RUN/inj_$name #")
    start=$(date +%s%N); eval "$cmd" > "$RUN/$name.log" 2>&1; end=$(date +%s%N)
    echo "$name: profile $(( (end - start) / 1000000 )) ms"; rm -f "$RUN/$name.nsys-rep"
}
variant recorded2 's/^/ /'
variant no_osrt2 's/-t cuda,nvtx,osrt/-t cuda,nvtx/; s/--osrt-threshold=[0-9]* --osrt-backtrace-threshold=[0-9]*//'
variant neither 's/-t cuda,nvtx,osrt/-t cuda,nvtx/; s/--osrt-threshold=[0-9]* --osrt-backtrace-threshold=[0-9]*//; s/--python-sampling=true --python-sampling-frequency=1000//'
variant no_python_sampling2 's/--python-sampling=true --python-sampling-frequency=1000//'
