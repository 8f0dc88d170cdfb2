#!/usr/bin/env python3
"""PyTorch eager CPU baseline for rtx's GPT-2 training step (the peer of tests/models/gpt2_bench.cpp):
ms/step of zero_grad + forward + backward + clip_grad_norm_ + AdamW for nanoGPT's shakespeare-char
CPU config (n_layer 4, n_head 4, n_embd 128, block 64, vocab 65, batch 12), same model as
gpt2_golden.py (plain torch.nn, float32, no torch.compile, as nanoGPT's README CPU run with --compile=False).

    OMP_NUM_THREADS=2 /work/.venv-torch/bin/python tests/reference/gpt2_torch_bench.py --threads 2
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_golden import Gpt2, adamw_groups  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=12)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1337)
    cfg = dict(n_layer=4, n_head=4, n_embd=128, block_size=64, vocab_size=65)
    B, T = args.batch, cfg["block_size"]
    model = Gpt2(**cfg)
    opt = torch.optim.AdamW(adamw_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    times, cpu = [], []  # wall and process CPU time per step, ms
    for s in range(args.steps + 3):
        ids = torch.randint(0, cfg["vocab_size"], (B, T))
        tg = torch.randint(0, cfg["vocab_size"], (B, T))
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        _, loss = model(ids, tg)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        t1, c1 = time.perf_counter(), time.process_time()
        if s >= 3:
            times.append((t1 - t0) * 1e3)
            cpu.append((c1 - c0) * 1e3)
    times.sort()
    cpu.sort()
    ms = times[len(times) // 2]
    print(f"torch {torch.__version__} eager B={B} T={T} threads={torch.get_num_threads()}: {ms:.2f} ms/step, "
          f"{B * T * 1e3 / ms:.0f} tokens/s, min {times[0]:.2f} ms, cpu time {cpu[len(cpu) // 2]:.2f} ms/step, last loss {float(loss.detach()):.4f}")


if __name__ == "__main__":
    main()
