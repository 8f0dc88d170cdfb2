#!/usr/bin/env python3
"""Side-by-side GPT-2 training on tiny-shakespeare (char level): rtx-train vs PyTorch eager.

nanoGPT's CPU config from its README (n_layer 4, n_head 4, n_embd 128, block 64, batch 12,
2000 iters, lr 1e-3 -> 1e-4 cosine over 2000 iters, 100 warm-up, AdamW beta2 0.99, weight decay
0.1 on 2-D tensors, grad clip 1.0, dropout 0, eval_iters 20), the same data files
(`rtx-train prepare --tokenizer char`: nanoGPT's train.bin/val.bin layout) and the same thread
count for both. The PyTorch side is the model of tests/reference/gpt2_golden.py with nanoGPT's
init (N(0, 0.02), c_proj N(0, 0.02/sqrt(2L))) and train.py's loop (random offsets per batch,
get_lr, clip_grad_norm_, AdamW with two param groups). Prints one table: final val loss,
wall time, training tokens/s.

    OMP_NUM_THREADS=2 /work/.venv-torch/bin/python bench/train_char_vs_pytorch.py \
        --rtx build/bin/rtx-train --threads 2 [--iters 2000]

PyTorch is a development-time peer only; nothing in the build or CI imports it.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
from gpt2_golden import Gpt2, adamw_groups  # noqa: E402

CFG = dict(n_layer=4, n_head=4, n_embd=128, block_size=64, vocab_size=65)


def get_lr(it, lr, min_lr, warmup, decay):
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it > decay:
        return min_lr
    r = (it - warmup) / (decay - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * r)) * (lr - min_lr)


def torch_run(data_dir, iters, batch, eval_iters, eval_interval, threads, seed):
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    train = np.memmap(os.path.join(data_dir, "train.bin"), dtype=np.uint16, mode="r")
    val = np.memmap(os.path.join(data_dir, "val.bin"), dtype=np.uint16, mode="r")
    T = CFG["block_size"]

    def get_batch(split):
        d = train if split == "train" else val
        ix = torch.randint(len(d) - T, (batch,))
        x = torch.stack([torch.from_numpy(d[i:i + T].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(d[i + 1:i + 1 + T].astype(np.int64)) for i in ix])
        return x, y

    model = Gpt2(**CFG)
    with torch.no_grad():  # nanoGPT's _init_weights
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * CFG["n_layer"]) if name.endswith("c_proj.weight") else 0.02
                p.normal_(0.0, std)
            elif name.startswith("ln_") or ".ln_" in name:
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            else:
                p.zero_()
    opt = torch.optim.AdamW(adamw_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.99), eps=1e-8)

    @torch.no_grad()
    def estimate():
        out = {}
        for split in ("train", "val"):
            losses = [model(*get_batch(split))[1].item() for _ in range(eval_iters)]
            out[split] = sum(losses) / len(losses)
        return out

    t_start = time.perf_counter()
    train_s, losses = 0.0, {}
    for it in range(iters + 1):
        if it % eval_interval == 0 or it == iters:
            losses = estimate()
            print(f"torch: eval at {it}: train {losses['train']:.4f} val {losses['val']:.4f}", file=sys.stderr)
        if it == iters:
            break
        for g in opt.param_groups:
            g["lr"] = get_lr(it, 1e-3, 1e-4, 100, iters)
        x, y = get_batch("train")
        t0 = time.perf_counter()
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if it > 0:
            train_s += time.perf_counter() - t0
    wall = time.perf_counter() - t_start
    return dict(val_loss=losses["val"], train_loss=losses["train"], wall_s=wall,
                tokens_per_s=batch * T * (iters - 1) / train_s if train_s > 0 else 0)


def rtx_run(rtx, data_dir, iters, batch, eval_iters, eval_interval, threads, seed, matmul):
    cmd = [rtx, "run", "--data", data_dir, "--preset", "shakespeare-char-cpu", "--batch", str(batch),
           "--steps", str(iters), "--lr", "1e-3", "--min-lr", "1e-4", "--warmup", "100",
           "--lr-decay-steps", str(iters), "--beta2", "0.99", "--weight-decay", "0.1", "--grad-clip", "1",
           "--eval-iters", str(eval_iters), "--eval-interval", str(eval_interval), "--threads", str(threads),
           "--seed", str(seed), "--matmul", matmul, "--json"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, check=True)
    wall = time.perf_counter() - t0
    r = json.loads(p.stdout)
    return dict(val_loss=r["final_val_loss"], train_loss=r["final_train_loss"], wall_s=wall,
                tokens_per_s=r["tokens_per_s"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rtx", default=os.path.join(HERE, "..", "build", "bin", "rtx-train"))
    ap.add_argument("--data", default=os.environ.get("RTX_DATA", os.path.join(HERE, "..", "..", "shared", "data")))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--eval-iters", type=int, default=20)
    ap.add_argument("--eval-interval", type=int, default=250)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--matmul", default="blocked", choices=["blocked", "blas"])
    ap.add_argument("--skip-torch", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = os.path.join(tmp, "shakespeare_char")
        subprocess.run([a.rtx, "prepare", "--tokenizer", "char", os.path.join(a.data, "tinyshakespeare", "input.txt"),
                        "-o", data_dir, "-q"], check=True)
        rows = [("rtx-train (" + a.matmul + ")",
                 rtx_run(a.rtx, data_dir, a.iters, a.batch, a.eval_iters, a.eval_interval, a.threads, a.seed,
                         a.matmul))]
        if not a.skip_torch:
            rows.append((f"PyTorch {torch.__version__} eager",
                         torch_run(data_dir, a.iters, a.batch, a.eval_iters, a.eval_interval, a.threads, a.seed)))
    print(f"\n{a.iters} iters, batch {a.batch} x 64, {a.threads} threads, OPENBLAS_CORETYPE="
          f"{os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    print(f"{'':28} {'val loss':>9} {'train loss':>11} {'wall s':>8} {'train tokens/s':>15}")
    for name, r in rows:
        print(f"{name:28} {r['val_loss']:9.4f} {r['train_loss']:11.4f} {r['wall_s']:8.1f} {r['tokens_per_s']:15.0f}")
    if len(rows) == 2:
        print(f"rtx / PyTorch tokens/s: {rows[0][1]['tokens_per_s'] / rows[1][1]['tokens_per_s']:.2f}x")


if __name__ == "__main__":
    main()
