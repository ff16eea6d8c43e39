"""A main() with a while loop around a model in eval mode, a Python-only setup loop before it (which is
never the step: its iterations do no tensor work), and helper code in another file of the script's."""

import torch
import unmarked_helpers


def main() -> None:
    names = []
    for i in range(500):  # bookkeeping, not a step
        names.append(f"sample-{i}")
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128)).eval()
    x = torch.randn(32, 128)
    done = 0
    with torch.no_grad():
        while done < 60:
            x = unmarked_helpers.normalize(model(x))
            done += 1
    print("finished", done)


if __name__ == "__main__":
    main()
