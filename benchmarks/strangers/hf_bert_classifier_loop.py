"""A Hugging Face sequence-classification fine-tune written as a plain PyTorch loop, the way the course teaches
it: a BERT-base-sized encoder from a config (random init, no download), a word-piece tokenizer built from a
vocabulary written here, sentences of 8-200 words tokenized per batch with dynamic padding in the collate
function, bf16 autocast, AdamW with a linear warm-up schedule and gradient clipping."""

import tempfile
from pathlib import Path

import torch
from torch.utils.data import DataLoader
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    BertTokenizerFast,
    get_linear_schedule_with_warmup,
)

device = "cuda" if torch.cuda.is_available() else "cpu"
words = [f"w{i}" for i in range(8000)]
folder = Path(tempfile.mkdtemp())
(folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
tokenizer = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"))
generator = torch.Generator().manual_seed(0)
sentences = [" ".join(words[int(i)] for i in torch.randint(0, 8000, (int(n),), generator=generator))
             for n in torch.randint(8, 200, (4096,), generator=generator)]
labels = torch.randint(0, 3, (len(sentences),), generator=generator).tolist()


def collate(batch):
    encoded = tokenizer([text for text, _ in batch], padding=True, truncation=True, max_length=256,
                        return_tensors="pt")
    encoded["labels"] = torch.tensor([label for _, label in batch])
    return encoded


loader = DataLoader(list(zip(sentences, labels)), batch_size=32, shuffle=True, collate_fn=collate)
model = BertForSequenceClassification(BertConfig(vocab_size=tokenizer.vocab_size, num_labels=3)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01)
epochs = 2
scheduler = get_linear_schedule_with_warmup(optimizer, 100, epochs * len(loader))
model.train()
for epoch in range(epochs):
    for batch in loader:
        batch = {key: value.to(device) for key, value in batch.items()}
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    print("epoch", epoch, loss.item())
