#!/usr/bin/env python3
"""PyG's side of bench/geom_vs_pyg.sh: GCN (PyG examples/gcn.py: 2 layers, 16 hidden, dropout 0.5,
Adam lr 0.01, weight decay 5e-4 on conv1) on Cora for 200 epochs, evaluating val/test after every
epoch as rtx-train does, on THREADS threads. Prints one JSON line per seed: test accuracy, seconds
of the 200 epochs (data loading excluded, as in rtx-train's figure)."""
import json, os, sys, tempfile, time

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch_geometric.datasets import Planetoid
from torch_geometric.nn import GCNConv

threads = int(os.environ.get("THREADS", "2"))
seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
torch.set_num_threads(threads)
data_dir = os.path.join(os.environ.get("RTX_DATA", "/work/shared/data"), "cora")
root = tempfile.mkdtemp()
os.makedirs(os.path.join(root, "Cora", "raw"))
for f in os.listdir(data_dir):
    os.symlink(os.path.join(data_dir, f), os.path.join(root, "Cora", "raw", f))
data = Planetoid(root, "Cora", transform=T.NormalizeFeatures())[0]


class GCN(torch.nn.Module):
    def __init__(self, i, h, o):
        super().__init__()
        self.conv1 = GCNConv(i, h, cached=True)
        self.conv2 = GCNConv(h, o, cached=True)

    def forward(self, x, ei):
        x = F.dropout(x, p=0.5, training=self.training)
        x = self.conv1(x, ei).relu()
        x = F.dropout(x, p=0.5, training=self.training)
        return self.conv2(x, ei)


for seed in range(seeds):
    torch.manual_seed(seed)
    model = GCN(data.num_features, 16, 7)
    opt = torch.optim.Adam([dict(params=model.conv1.parameters(), weight_decay=5e-4),
                            dict(params=model.conv2.parameters(), weight_decay=0)], lr=0.01)
    t0 = time.perf_counter()
    for epoch in range(200):
        model.train()
        opt.zero_grad()
        out = model(data.x, data.edge_index)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            pred = model(data.x, data.edge_index).argmax(-1)
            test_acc = float((pred[data.test_mask] == data.y[data.test_mask]).float().mean())
    secs = time.perf_counter() - t0
    print(json.dumps({"peer": "pyg", "seed": seed, "threads": threads, "test_acc": test_acc, "seconds": secs}))
