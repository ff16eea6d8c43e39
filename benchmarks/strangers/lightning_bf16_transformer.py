"""A Lightning `Trainer.fit` of a small Transformer language model with `precision="bf16-mixed"` (Lightning's
precision plugin runs the step under autocast), AdamW with gradient clipping by the Trainer, random tokens from
a DataLoader with two workers. Nothing is marked; written as a Lightning user would."""

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl

VOCAB, SEQ, WIDTH = 8192, 256, 512


class RandomTokens(Dataset):
    def __len__(self):
        return 64 * 40

    def __getitem__(self, index):
        tokens = torch.randint(0, VOCAB, (SEQ + 1,))
        return tokens[:-1], tokens[1:]


class LanguageModel(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        layer = nn.TransformerEncoderLayer(WIDTH, 8, 4 * WIDTH, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, 6)
        self.head = nn.Linear(WIDTH, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(SEQ), persistent=False)

    def training_step(self, batch, batch_idx):
        tokens, targets = batch
        logits = self.head(self.blocks(self.embed(tokens), mask=self.mask, is_causal=True))
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-4, weight_decay=0.1)


trainer = pl.Trainer(max_steps=120, precision="bf16-mixed", gradient_clip_val=1.0, accelerator="auto", devices=1,
                     logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(LanguageModel(), DataLoader(RandomTokens(), batch_size=32, num_workers=2))
