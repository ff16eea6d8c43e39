# eager vs torch.compile(model) of healthy_pipelined_input, timed plainly: (T(230) - T(30)) / 200 steps
set -u
S=benchmarks/planted/healthy_pipelined_input.py
mkdir -p $RUN/s
cp benchmarks/planted/_planted.py $RUN/s/
cp $S $RUN/s/eager.py
sed 's/^model = model.to(memory_format=torch.channels_last)$/&\nmodel = torch.compile(model)/' $S > $RUN/s/compiled.py
grep -n "torch.compile" $RUN/s/compiled.py
for v in eager compiled; do for n in 30 230; do
  timeout 120 python3 $RUN/s/$v.py --steps $n 2>&1 | tail -1 | tee -a $RUN/times.txt
done; done
