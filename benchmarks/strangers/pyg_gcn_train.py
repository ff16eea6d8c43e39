"""A torch_geometric user's node classification: a two-layer GCN on a random graph of 50k nodes and 500k
edges (no dataset download), full-batch training with Adam."""

import torch
import torch.nn.functional as F
from torch_geometric.nn import GCNConv

device = "cuda" if torch.cuda.is_available() else "cpu"
num_nodes, num_edges, features, classes = 50_000, 500_000, 128, 16
x = torch.randn(num_nodes, features, device=device)
edge_index = torch.randint(0, num_nodes, (2, num_edges), device=device)
y = torch.randint(0, classes, (num_nodes,), device=device)


class GCN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = GCNConv(features, 256)
        self.conv2 = GCNConv(256, classes)

    def forward(self, x, edge_index):
        x = F.relu(self.conv1(x, edge_index))
        x = F.dropout(x, p=0.5, training=self.training)
        return self.conv2(x, edge_index)


model = GCN().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
for epoch in range(200):
    model.train()
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x, edge_index), y)
    loss.backward()
    optimizer.step()
    if epoch % 50 == 0:
        print(f"epoch {epoch} loss {loss.item():.4f}")
