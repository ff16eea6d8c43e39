"""Lightning `Trainer.fit` of a small CNN on random 64x64 images (batch 128), precision from
`--precision` (Lightning's own switch: 32-true, bf16-mixed, ...). Steps come from the optimizer that
Lightning drives; nothing is marked."""

import _timing
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl


class Classifier(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(128, 256, 3, padding=1), nn.BatchNorm2d(256), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
            nn.Flatten(), nn.Linear(256, 10))

    def training_step(self, batch, batch_idx):
        images, labels = batch
        return nn.functional.cross_entropy(self.net(images), labels)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


class StepClock(pl.Callback):
    def __init__(self, clock: _timing.IterClock) -> None:
        self.clock = clock

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.clock.tick()


args = _timing.parse_args(__doc__, default_iters=60, extra=[("--precision", {"default": "32-true"})])
data = TensorDataset(torch.randn(128 * 16, 3, 64, 64), torch.randint(0, 10, (128 * 16,)))
clock = _timing.IterClock(args.device, args.skip, unit="step")
trainer = pl.Trainer(max_steps=args.iters, precision=args.precision, accelerator="gpu" if args.device == "cuda" else "cpu",
                     devices=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, callbacks=[StepClock(clock)])
trainer.fit(Classifier(), DataLoader(data, batch_size=128, shuffle=True))
clock.report("lightning_fit_cnn")
