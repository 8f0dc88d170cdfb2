#!/usr/bin/env python3
"""PyTorch reference for rtx's GPT-2 (libcommon/src/models/gpt2*.cpp): writes the golden file that
tests/models/gpt2_test.cpp compares against. Not a training script; CI never runs it (no PyTorch
there): the test only reads the committed JSON.

Regenerate (PyTorch >= 2.0, CPU is enough):
    /work/.venv-torch/bin/python tests/reference/gpt2_golden.py \
        --out tests/reference/data/gpt2_golden.json

What it writes (schema "rtx.gpt2_golden.v1"), for a tiny config with odd sizes
(vocab 67, n_embd 24, n_head 3, n_layer 2, block 16):
  params      every parameter, float32 values, flattened in rtx's layout order
              (gpt2_param_layout: wte, wpe, per layer ln_1, c_attn, c_proj, ln_2, c_fc, mlp c_proj, ln_f;
              Linear weights (out, in) as torch.nn.Linear), so the test loads them with set_params;
  cases       batches with ids/targets and the step-0 reference computed in float64 (the model cast
              to double): loss, every parameter's gradient (same flat order), and for the first case
              the logits (B, T, V);
  adamw       the losses and pre-clip gradient norms of the first 10 AdamW steps (float64), with
              torch.optim.AdamW over nanoGPT's two param groups (weight decay on 2-D tensors only),
              torch.nn.utils.clip_grad_norm_, and the fixed batches used.
The model is written here with plain torch.nn modules (no nanoGPT import): learned positions,
pre-LN blocks, causal softmax attention, GELU (tanh), tied wte / output projection, no dropout.
"""
import argparse
import json
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = dict(n_layer=2, n_head=3, n_embd=24, block_size=16, vocab_size=67)
SEED = 1234
CASES = [(3, 11), (5, 1)]  # (B, T) of each step-0 case; logits are stored for the first
ADAMW = dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0, steps=10)
ADAMW_BT = (3, 11)


class Attention(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.n_head = NH
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)

    def forward(self, x):
        B, T, C = x.shape
        NH = self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, NH, C // NH).transpose(1, 2)
        k = k.view(B, T, NH, C // NH).transpose(1, 2)
        v = v.view(B, T, NH, C // NH).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // NH))
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Mlp(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = Attention(C, NH)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = Mlp(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt2(nn.Module):
    def __init__(self, n_layer, n_head, n_embd, block_size, vocab_size):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd, eps=1e-5)

    def forward(self, ids, targets):
        T = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(T))
        for blk in self.h:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied output projection, no bias
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        return logits, loss


def layout_names(n_layer):
    """rtx's layout order with torch's parameter names (rtx names 'wte'/'wpe' are '*.weight' here)."""
    names = ["wte.weight", "wpe.weight"]
    for l in range(n_layer):
        h = f"h.{l}."
        names += [h + s for s in ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                  "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                  "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")]
    return names + ["ln_f.weight", "ln_f.bias"]


def rtx_name(torch_name):
    return torch_name[: -len(".weight")] if torch_name in ("wte.weight", "wpe.weight") else torch_name


def init_params(model, gen):
    """Fixed random weights with every tensor non-trivial (so every gradient path is exercised):
    2-D weights N(0, 0.12), biases N(0, 0.05), LayerNorm weight 1 + N(0, 0.1), bias N(0, 0.1)."""
    with torch.no_grad():
        for name in layout_names(CONFIG["n_layer"]):
            p = dict(model.named_parameters())[name]
            n = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if p.dim() >= 2:
                p.copy_(0.12 * n)
            elif "ln_" in name and name.endswith(".weight"):
                p.copy_(1.0 + 0.1 * n)
            elif "ln_" in name:
                p.copy_(0.1 * n)
            else:
                p.copy_(0.05 * n)


def flat(model, what):
    named = dict(model.named_parameters())
    parts = []
    for name in layout_names(CONFIG["n_layer"]):
        t = named[name] if what == "param" else named[name].grad
        parts.append(t.detach().reshape(-1))
    return torch.cat(parts)


def r9(xs):
    """Floats rounded to 9 significant digits (exact for float32, 1e-9 relative for float64)."""
    return [float("%.9g" % x) for x in xs]


def batch(gen, B, T, V):
    ids = torch.randint(0, V, (B, T), generator=gen)
    targets = torch.randint(0, V, (B, T), generator=gen)
    return ids, targets


def adamw_groups(model, wd):
    ps = [p for p in model.parameters()]
    return [{"params": [p for p in ps if p.dim() >= 2], "weight_decay": wd},
            {"params": [p for p in ps if p.dim() < 2], "weight_decay": 0.0}]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="golden JSON to write")
    args = ap.parse_args()
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    V = CONFIG["vocab_size"]

    model32 = Gpt2(**CONFIG)
    init_params(model32, gen)
    params32 = flat(model32, "param").clone()

    doc = {
        "schema": "rtx.gpt2_golden.v1",
        "generator": "tests/reference/gpt2_golden.py",
        "torch_version": torch.__version__,
        "seed": SEED,
        "config": CONFIG,
        "layout": [{"name": rtx_name(n), "shape": list(dict(model32.named_parameters())[n].shape)}
                   for n in layout_names(CONFIG["n_layer"])],
        "params": r9(params32.tolist()),
        "cases": [],
    }

    # Step 0 in float64: the model's float32 weights cast to double.
    model64 = Gpt2(**CONFIG).double()
    model64.load_state_dict(model32.state_dict())
    for i, (B, T) in enumerate(CASES):
        ids, targets = batch(gen, B, T, V)
        model64.zero_grad(set_to_none=True)
        logits, loss = model64(ids, targets)
        loss.backward()
        case = {"B": B, "T": T, "ids": ids.reshape(-1).tolist(), "targets": targets.reshape(-1).tolist(),
                "loss": float(loss.detach()), "grads": r9(flat(model64, "grad").tolist())}
        if i == 0:
            case["logits"] = r9(logits.detach().reshape(-1).tolist())
        doc["cases"].append(case)
        print(f"case B={B} T={T}: loss {float(loss):.6f}")

    # 10 AdamW steps (float64 reference; float32 torch shown for scale).
    B, T = ADAMW_BT
    batches = [batch(gen, B, T, V) for _ in range(ADAMW["steps"])]
    hist = {}
    for name, dtype in (("float64", torch.float64), ("float32", torch.float32)):
        m = Gpt2(**CONFIG).to(dtype)
        m.load_state_dict(model32.state_dict())
        opt = torch.optim.AdamW(adamw_groups(m, ADAMW["weight_decay"]), lr=ADAMW["lr"],
                                betas=(ADAMW["beta1"], ADAMW["beta2"]), eps=ADAMW["eps"])
        losses, norms = [], []
        for ids, targets in batches:
            opt.zero_grad(set_to_none=True)
            _, loss = m(ids, targets)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(m.parameters(), ADAMW["grad_clip"])
            opt.step()
            losses.append(float(loss))
            norms.append(float(norm))
        hist[name] = (losses, norms)
    l64, n64 = hist["float64"]
    l32, _ = hist["float32"]
    rel = max(abs(a - b) for a, b in zip(l32, l64)) / max(abs(b) for b in l64)
    print("losses:", " ".join(f"{x:.5f}" for x in l64))
    print("grad norms (pre-clip):", " ".join(f"{x:.4f}" for x in n64))
    print(f"torch float32 vs float64 losses: max-norm rel err {rel:.2e}")
    doc["adamw"] = dict(ADAMW, B=B, T=T,
                        batches=[{"ids": i.reshape(-1).tolist(), "targets": t.reshape(-1).tolist()}
                                 for i, t in batches],
                        losses=r9(l64), grad_norms=r9(n64))

    with open(args.out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
