"""A sentence-transformers user embedding a corpus: a BERT-small-sized encoder with mean pooling, built from
a config and a word-piece vocabulary written here (no model download), `model.encode(...)` in batches of 64."""

import tempfile
from pathlib import Path

import torch
from sentence_transformers import SentenceTransformer, models
from transformers import BertConfig, BertModel, BertTokenizerFast

words = [f"w{i}" for i in range(5000)]
folder = Path(tempfile.mkdtemp())
(folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(folder)
BertModel(BertConfig(vocab_size=5005, hidden_size=512, num_hidden_layers=4, num_attention_heads=8,
                     intermediate_size=2048)).save_pretrained(folder)
device = "cuda" if torch.cuda.is_available() else "cpu"
encoder = SentenceTransformer(modules=[models.Transformer(str(folder), max_seq_length=128),
                                       models.Pooling(512, pooling_mode="mean")], device=device)
generator = torch.Generator().manual_seed(0)
corpus = [" ".join(words[int(i)] for i in torch.randint(0, 5000, (int(n),), generator=generator))
          for n in torch.randint(8, 120, (20_000,), generator=generator)]
embeddings = encoder.encode(corpus, batch_size=64, convert_to_tensor=True)
print(embeddings.shape)
