#!/usr/bin/env python3
"""Peer for `rtx-train rl --algo random`: gymnasium's simulator throughput with uniform random
actions, env steps/s for N envs stepped together, in two vector forms: SyncVectorEnv (N python
envs, what CleanRL uses) and the numpy-batched CartPoleVectorEnv (gym.make_vec(...,
vectorization_mode="vector_entry_point"), gymnasium's fastest CPU form). Actions are drawn inside
the timed loop, as rtx's are.

    python bench/rl/gym_sim_throughput.py --env CartPole-v1 --envs 1 4 16 64 256 --steps 200000
"""
import argparse
import json
import time

import gymnasium as gym
import numpy as np


def run(envs, n, steps, rng):
    envs.reset(seed=0)
    batches = (steps + n - 1) // n
    space_n = getattr(envs.single_action_space, "n", None)
    t0 = time.perf_counter()
    for _ in range(batches):
        if space_n is not None:
            a = rng.integers(0, space_n, size=n)
        else:
            a = rng.uniform(envs.single_action_space.low, envs.single_action_space.high,
                            size=(n,) + envs.single_action_space.shape).astype(np.float32)
        envs.step(a)
    return batches * n / (time.perf_counter() - t0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--envs", type=int, nargs="+", default=[1, 4, 16, 64, 256])
    p.add_argument("--steps", type=int, default=200000)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for n in a.envs:
        sync = gym.vector.SyncVectorEnv([lambda: gym.make(a.env) for _ in range(n)])
        row = {"env": a.env, "num_envs": n, "sync_steps_per_s": run(sync, n, a.steps, rng)}
        try:
            vec = gym.make_vec(a.env, num_envs=n, vectorization_mode="vector_entry_point")
            row["vector_entry_point_steps_per_s"] = run(vec, n, a.steps, rng)
        except Exception as e:  # envs without a numpy-batched form
            row["vector_entry_point_steps_per_s"] = None
            row["note"] = str(e)[:80]
        rows.append(row)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
