"""An eval script that builds its inputs with list comprehensions before its loop (as a detection eval's
`[img.to(device) for img in images]` does): a comprehension builds a value and is never the step, however
much tensor work its iterations do. The step is the `for` loop below them."""

import torch

model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).eval()
raw = [torch.randint(0, 255, (16, 64), dtype=torch.uint8) for _ in range(40)]
with torch.no_grad():
    inputs = [img.float() / 255 for img in raw]
    shapes = {i: x.shape for i, x in enumerate(inputs)}
    done = 0
    for features in inputs:
        scores = model(features).softmax(dim=1)
        done += 1
print("finished", done, len(shapes))
