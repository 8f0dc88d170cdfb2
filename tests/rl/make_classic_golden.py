#!/usr/bin/env python3
"""Golden trajectories of gymnasium's classic-control envs for tests/rl/classic_control_test.cpp.

Not part of the build: run by hand (pip install gymnasium numpy) to regenerate tests/rl/data/*.bin.
For each env, 10^5 random-action steps on one gymnasium env (gym.make, so TimeLimit truncation is
in), reset by hand after terminated or truncated (a same-step reset, as rtx's VecEnv does).

Actions: not stored; they are rtx's Philox stream (core/philox.hpp), reimplemented here in numpy:
u = philox_u32(seed=ACTION_SEED, subseq=env index, i=t); discrete a = u % n; continuous
a = lo + (hi - lo) * float32(u >> 8) * 2^-24 in float32. The file holds the FNV-1a 64 of the action
bytes so the C++ side proves it drew the same ones.
Reset states: gymnasium draws them from numpy's PCG64 (seeded once by reset(seed=RESET_SEED), then
continuing); the file holds that generator's state before the first draw, and the C++ test replays
PCG64 + Generator.uniform (low + (high - low) * (next_uint64 >> 11) * 2^-53) to get every reset state.

What is committed (small files, a few KiB to ~60 KiB each):
  * the first N_FULL steps in full: post-step state (float64), observation (float32), reward
    (float64), terminated, truncated;
  * every SAMPLE_EVERY-th step over the whole 10^5 steps: post-step state and the running sum of
    rewards (float64, summed in step order);
  * every complete episode's length and its terminated/truncated flags over the whole run, so
    termination steps are checked for all 10^5 steps.
Binary layout (little endian) is documented in tests/rl/golden.hpp, the reader.
"""
import hashlib
import struct
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding

TOTAL_STEPS = 100_000
N_FULL = 500
SAMPLE_EVERY = 100
ACTION_SEED = 42
RESET_SEED = 2024
VERSION = 1

# name, state getter (the env's internal state as float64), discrete?, action count or (lo, hi)
ENVS = [
    ("CartPole-v1", True, 2, None),
    ("Acrobot-v1", True, 3, None),
    ("MountainCar-v0", True, 3, None),
    ("MountainCarContinuous-v0", False, 1, (-1.0, 1.0)),
    ("Pendulum-v1", False, 1, (-2.0, 2.0)),
]

M64 = (1 << 64) - 1


def philox_u32(seed: int, subseq: int, i: np.ndarray) -> np.ndarray:
    """rtx's philox_u32 (core/philox.hpp), vectorised over i (uint64 array)."""
    blk = i >> np.uint64(2)
    c0 = (blk & np.uint64(0xFFFFFFFF)).astype(np.uint64)
    c1 = (blk >> np.uint64(32)).astype(np.uint64)
    c2 = np.full_like(c0, subseq & 0xFFFFFFFF)
    c3 = np.full_like(c0, (subseq >> 32) & 0xFFFFFFFF)
    k0 = seed & 0xFFFFFFFF
    k1 = (seed >> 32) & 0xFFFFFFFF
    mask = np.uint64(0xFFFFFFFF)
    for r in range(10):
        if r > 0:
            k0 = (k0 + 0x9E3779B9) & 0xFFFFFFFF
            k1 = (k1 + 0xBB67AE85) & 0xFFFFFFFF
        p0 = np.uint64(0xD2511F53) * c0
        p1 = np.uint64(0xCD9E8D57) * c2
        hi0, lo0 = p0 >> np.uint64(32), p0 & mask
        hi1, lo1 = p1 >> np.uint64(32), p1 & mask
        c0, c1, c2, c3 = hi1 ^ c1 ^ np.uint64(k0), lo1, hi0 ^ c3 ^ np.uint64(k1), lo0
    words = np.stack([c0, c1, c2, c3])
    return words[(i & np.uint64(3)).astype(np.int64), np.arange(len(i))].astype(np.uint32)


def fnv1a64(b: bytes) -> int:
    h = 0xCBF29CE484222325
    for x in b:
        h = ((h ^ x) * 0x100000001B3) & M64
    return h


def env_state(env) -> np.ndarray:
    u = env.unwrapped
    return np.asarray(u.state, dtype=np.float64).reshape(-1)[: {"CartPoleEnv": 4, "AcrobotEnv": 4}.get(
        type(u).__name__, 2)]


def make(name, idx, discrete, n, bounds, out: Path):
    env = gym.make(name)
    max_steps = env.spec.max_episode_steps
    u = philox_u32(ACTION_SEED, idx, np.arange(TOTAL_STEPS, dtype=np.uint64))
    if discrete:
        actions = (u % np.uint32(n)).astype(np.int32)
    else:
        lo, hi = np.float32(bounds[0]), np.float32(bounds[1])
        unit = (u >> np.uint32(8)).astype(np.float32) * np.float32(1.0 / 16777216.0)
        actions = (lo + (hi - lo) * unit).astype(np.float32)
    rng, _ = seeding.np_random(RESET_SEED)
    pcg = rng.bit_generator.state["state"]
    obs0, _ = env.reset(seed=RESET_SEED)
    s0 = env_state(env)
    sd, od = len(s0), len(obs0)
    full, samples, episodes = [], [], []
    ret_sum, ep_len = 0.0, 0
    for t in range(TOTAL_STEPS):
        a = int(actions[t]) if discrete else np.array([actions[t]], dtype=np.float32)
        obs, r, term, trunc, _ = env.step(a)
        r = float(r)
        ret_sum += r
        ep_len += 1
        s = env_state(env)
        if t < N_FULL:
            full.append(struct.pack(f"<{sd}d{od}fdB", *s, *np.asarray(obs, np.float32), r, int(term) | (int(trunc) << 1)))
        if t % SAMPLE_EVERY == SAMPLE_EVERY - 1:
            samples.append(struct.pack(f"<{sd}dd", *s, ret_sum))
        if term or trunc:
            assert ep_len < (1 << 14)
            episodes.append(ep_len | (int(term) << 14) | (int(trunc) << 15))
            ep_len = 0
            env.reset()
    head = b"RTXRLGD1" + struct.pack("<I", VERSION)
    nb = name.encode()
    head += struct.pack("<I", len(nb)) + nb
    head += struct.pack("<IIIIIQQQ", sd, od, int(discrete), n, max_steps, TOTAL_STEPS, ACTION_SEED, idx)
    head += struct.pack("<QQQQ", pcg["state"] >> 64, pcg["state"] & M64, pcg["inc"] >> 64, pcg["inc"] & M64)
    head += struct.pack("<Q", fnv1a64(actions.tobytes()))
    head += struct.pack(f"<{sd}d", *s0)
    head += struct.pack("<III", N_FULL, SAMPLE_EVERY, len(episodes))
    body = b"".join(full) + b"".join(samples) + struct.pack(f"<{len(episodes)}H", *episodes)
    data = head + body
    out.write_bytes(data)
    print(f"{name}: {len(episodes)} episodes, return sum {ret_sum:.6f}, {len(data)} B -> {out} "
          f"(sha256 {hashlib.sha256(data).hexdigest()[:16]})")


def main():
    outdir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "data"
    outdir.mkdir(parents=True, exist_ok=True)
    print(f"gymnasium {gym.__version__}, numpy {np.__version__}")
    for idx, (name, discrete, n, bounds) in enumerate(ENVS):
        make(name, idx, discrete, n, bounds, outdir / f"{name}.bin")


if __name__ == "__main__":
    main()
