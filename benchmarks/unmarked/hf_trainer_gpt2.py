"""Hugging Face Trainer on a small GPT-2 (4 layers, d 512, random init, no download) over random
token sequences: batch 16 x 256 tokens, AdamW as the Trainer configures it, fp32 by default,
`--bf16` for TrainingArguments(bf16=True). Steps come from the optimizer; nothing is marked."""

import tempfile

import _timing
import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments


class RandomTokens(Dataset):
    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, index: int) -> dict:
        ids = torch.randint(0, 8192, (256,), generator=torch.Generator().manual_seed(index))
        return {"input_ids": ids, "labels": ids.clone()}


class StepClock(TrainerCallback):
    def __init__(self, clock: _timing.IterClock) -> None:
        self.clock = clock

    def on_step_begin(self, args, state, control, **kwargs):
        self.clock.tick()


args = _timing.parse_args(__doc__, default_iters=60, extra=[("--bf16", {"action": "store_true"})])
model = GPT2LMHeadModel(GPT2Config(vocab_size=8192, n_positions=256, n_embd=512, n_layer=4, n_head=8))
clock = _timing.IterClock(args.device, args.skip, unit="step")
training = TrainingArguments(output_dir=tempfile.mkdtemp(prefix="hf_trainer_gpt2_"), max_steps=args.iters,
                             per_device_train_batch_size=16, learning_rate=3e-4, bf16=args.bf16,
                             report_to="none", save_strategy="no", logging_strategy="no", disable_tqdm=True,
                             use_cpu=args.device == "cpu")
Trainer(model=model, args=training, train_dataset=RandomTokens(), callbacks=[StepClock(clock)]).train()
clock.report("hf_trainer_gpt2" + ("_bf16" if args.bf16 else ""))
