"""Hugging Face GPT-2 (random init, no download), batch 1, greedy `generate()` of 64 new tokens per call.

Unmarked inference: no optimizer, no step marks. One `generate()` call is 64 decode steps (one
top-level GPT2LMHeadModel.forward each) after a prefill.
"""

import _timing
import torch
from transformers import GPT2Config, GPT2LMHeadModel

args = _timing.parse_args(__doc__, default_iters=12, extra=[("--new-tokens", {"type": int, "default": 64})])
args.skip = min(args.skip, 2)
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config()).to(args.device).eval()
prompt = torch.randint(0, 50000, (1, 16), device=args.device)
clock = _timing.IterClock(args.device, args.skip, unit="generate")
with torch.inference_mode():
    for _ in range(args.iters):
        clock.tick()
        out = model.generate(prompt, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                             do_sample=False, pad_token_id=0, attention_mask=torch.ones_like(prompt))
clock.report("hf_generate_gpt2", per=args.new_tokens)
