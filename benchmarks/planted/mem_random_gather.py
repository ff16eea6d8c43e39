"""PLANTED (MEMORY_HIERARCHY): random 4-byte gathers from a 256 MB table (5x the H200's 50 MB L2).

Sizing on an H200: 4 lookups of 32 M random indices a step into a 64 M-entry fp32 table. Each
lookup reads one 4-byte value but DRAM moves whole 32-byte sectors and L2 holds a fifth of the
table, so ~32 M x 32 B = 1 GB moves per lookup for 128 MB used (8x amplification, L2 hit rate
~20%): ~4 x 1.3 GB / ~3 TB/s achievable random-access bandwidth = ~2 ms of gathers a step against
~0.5 ms for the rest. The gathers dominate and run far below the DRAM roof in useful bytes.
Fix (twin): sort each index batch once when it is built (the sum does not depend on order): neighbouring
threads then read neighbouring entries, each sector is fetched once and used ~8 times.
"""

import _planted
import torch

args = _planted.parse_args(__doc__)
device = args.device
table_size = _planted.pick(device, 64 * 2**20, 2**20)
lookups = _planted.pick(device, 32 * 2**20, 2**18)
LOOKUPS_PER_STEP = 4

generator = torch.Generator(device=device).manual_seed(0)
table = torch.rand(table_size, device=device, generator=generator)
index_batches = [torch.randint(0, table_size, (lookups,), device=device, generator=generator)
                 for _ in range(LOOKUPS_PER_STEP)]  # PLANTED: random order, no locality

timer = _planted.Timer(device)
with torch.inference_mode():
    total = torch.zeros((), device=device)
    for step in range(args.steps):
        for indices in index_batches:
            total += torch.index_select(table, 0, indices).sum()
        _planted.mark_step()
timer.report("mem_random_gather", args.steps)
