#!/usr/bin/env python3
"""Writes tests/geom/data/cora_golden.json: facts of PyG's Planetoid('Cora') with
NormalizeFeatures, read from the same pickles ($RTX_DATA/cora), for geom_planetoid_test.
Run once on a machine with torch-geometric (pip install torch-geometric); never a build dep.
    RTX_DATA=/work/shared/data python3 tests/geom/make_cora_golden.py
"""
import hashlib, json, os, sys, tempfile

import numpy as np
import torch
import torch_geometric
import torch_geometric.transforms as T
from torch_geometric.datasets import Planetoid

data_dir = os.path.join(os.environ.get("RTX_DATA", "/work/shared/data"), "cora")
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "cora_golden.json")
with tempfile.TemporaryDirectory() as root:
    raw = os.path.join(root, "Cora", "raw")
    os.makedirs(raw)
    for f in os.listdir(data_dir):
        os.symlink(os.path.join(data_dir, f), os.path.join(raw, f))
    ds = Planetoid(root, "Cora", transform=T.NormalizeFeatures())
    d = ds[0]
ei = d.edge_index.to(torch.int32)  # (2, E): row = source, col = target, sorted by (row, col)
pairs = ei.t().contiguous().numpy().astype("<i4")  # [src0, dst0, src1, dst1, ...]
x = d.x.numpy().astype("<f4")
nz = (x != 0)
golden = {
    "schema": "rtx.test.cora_golden.v1",
    "made_with": f"torch_geometric {torch_geometric.__version__}, torch {torch.__version__}",
    "num_nodes": int(d.num_nodes),
    "num_edges": int(d.num_edges),
    "num_features": int(d.num_features),
    "num_classes": int(ds.num_classes),
    "is_undirected": bool(d.is_undirected()),
    "edges_sha256": hashlib.sha256(pairs.tobytes()).hexdigest(),
    "first_edges": pairs[:10].tolist(),
    "x_sha256": hashlib.sha256(x.tobytes()).hexdigest(),
    "x_row_nnz": nz.sum(1).astype(int).tolist(),
    "x_row0_cols": np.nonzero(nz[0])[0].tolist(),
    "x_row0_value": float(x[0][nz[0]][0]),
    "y": d.y.tolist(),
    "train": torch.nonzero(d.train_mask).flatten().tolist(),
    "val": torch.nonzero(d.val_mask).flatten().tolist(),
    "test_sorted": torch.nonzero(d.test_mask).flatten().tolist(),
}
with open(out, "w") as f:
    json.dump(golden, f, separators=(",", ":"))
    f.write("\n")
print(out, golden["num_nodes"], golden["num_edges"], golden["num_features"], golden["num_classes"])
