"""Leaves through os._exit() in the middle of its loop, as some launchers and benchmark harnesses do:
no finally-block, no atexit. The step count to stop at is argv[1]."""

import os
import sys

import torch

stop_after = int(sys.argv[1])
a = torch.randn(128, 128)
for i in range(200):
    a = torch.tanh(a @ a)
    if i == stop_after:
        print("leaving now", flush=True)
        os._exit(0)
