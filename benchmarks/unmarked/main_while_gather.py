"""A `main()` with a `while` loop: random row gathers from a 2 GB embedding table (index_select with
random indices, then a sum), as a recommender's lookup benchmark would. No nn.Module, no optimizer."""

import _timing
import torch


def main() -> None:
    args = _timing.parse_args(__doc__, default_iters=60)
    rows, dim = (4_000_000, 128) if args.device == "cuda" else (10_000, 16)
    table = torch.randn(rows, dim, device=args.device)
    clock = _timing.IterClock(args.device, args.skip)
    checksum = torch.zeros((), device=args.device)
    done = 0
    while done < args.iters:
        clock.tick()
        index = torch.randint(0, rows, (1_048_576 if args.device == "cuda" else 1024,), device=args.device)
        pooled = table.index_select(0, index).view(-1, 32, dim).sum(dim=1)
        checksum += pooled.mean()
        done += 1
    clock.report("main_while_gather")


if __name__ == "__main__":
    main()
