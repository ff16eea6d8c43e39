"""Says it is ready, then waits (without stepping) for Ctrl-C; gives up after 60 s."""

import time

print("ready", flush=True)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    time.sleep(0.05)
