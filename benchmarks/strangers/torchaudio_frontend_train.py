"""A torchaudio keyword-spotting style training loop: one-second 16 kHz waveforms through MelSpectrogram and
AmplitudeToDB on the GPU, a small 2-D CNN, AdamW; a DataLoader over an in-memory dataset of CPU waveforms."""

import torch
import torchaudio
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"
waveforms = torch.randn(4096, 16000)
labels = torch.randint(0, 35, (4096,))
loader = DataLoader(TensorDataset(waveforms, labels), batch_size=128, shuffle=True)
frontend = torch.nn.Sequential(torchaudio.transforms.MelSpectrogram(16000, n_fft=512, n_mels=64),
                               torchaudio.transforms.AmplitudeToDB()).to(device)
model = torch.nn.Sequential(
    torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.BatchNorm2d(64), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Conv2d(64, 128, 3, padding=1), torch.nn.BatchNorm2d(128), torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(128, 35)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for epoch in range(3):
    for wave, label in loader:
        wave, label = wave.to(device), label.to(device)
        features = frontend(wave).unsqueeze(1)
        loss = torch.nn.functional.cross_entropy(model(features), label)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print("epoch", epoch, float(loss))
