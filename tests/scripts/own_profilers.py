"""A training loop that profiles itself, in the form named by argv[1] (on the device argv[2], default cpu);
each step sleeps STEP_S on top of a small model's forward, backward and optimizer step, so that its step
time is known from below.

    schedule       torch.profiler.profile with a schedule and a tensorboard_trace_handler, prof.step()
    no_schedule    torch.profiler.profile without a schedule, prof.step(), then key_averages()
    start_stop     torch.profiler.profile without `with` over the first PROFILED steps: start(), step(),
                   stop(), export_chrome_trace, key_averages; then the training goes on
    legacy         torch.autograd.profiler.profile as a `with` block over the first PROFILED steps, then
                   export_chrome_trace, key_averages; then the training goes on
    record_only    no profiler: only record_function ranges around the forward

Every form writes its trace (if any) under the working directory: user_trace.json or tb/.
"""

import sys
import time

import torch

STEP_S = 0.004
STEPS = 60
PROFILED = 4

form = sys.argv[1]
device = sys.argv[2] if len(sys.argv) > 2 else "cpu"  # cuda on a GPU machine (benchmarks/jobs/s6_userprof.tsv)
activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device == "cuda" else [])
model = torch.nn.Linear(64, 64).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(16, 64, device=device)


def train_step():
    with torch.profiler.record_function("user/forward"):
        loss = model(x).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    time.sleep(STEP_S)


if form == "schedule":
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1)
    handler = torch.profiler.tensorboard_trace_handler("tb")
    with torch.profiler.profile(activities=activities, schedule=schedule, on_trace_ready=handler) as prof:
        for _ in range(STEPS):
            train_step()
            prof.step()
elif form == "no_schedule":
    with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
        for _ in range(STEPS):
            train_step()
            prof.step()
    print(prof.key_averages().table(row_limit=5))
elif form == "start_stop":
    # The first PROFILED steps profiled, then training goes on unprofiled.
    prof = torch.profiler.profile(activities=activities)
    prof.start()
    for _ in range(PROFILED):
        train_step()
        prof.step()
    prof.stop()
    prof.export_chrome_trace("user_trace.json")
    print(prof.key_averages().table(row_limit=5))
    for _ in range(STEPS - PROFILED):
        train_step()
elif form == "legacy":
    with torch.autograd.profiler.profile() as prof:
        for _ in range(PROFILED):
            train_step()
    prof.export_chrome_trace("user_trace.json")
    print(prof.key_averages().table(row_limit=5))
    for _ in range(STEPS - PROFILED):
        train_step()
elif form == "record_only":
    for _ in range(STEPS):
        train_step()
else:
    sys.exit(f"unknown form {form!r}")
