#!/usr/bin/env python3
"""The peer for `rtx-train rl --algo ppo`: CleanRL's ppo.py loop (cleanrl/ppo.py, v1.0) re-typed with
torch + gymnasium, same hyperparameters and flags, nothing copied from rtx. Differences from the
original, all to make the comparison like for like: gymnasium 1.x's SyncVectorEnv with
AutoresetMode.SAME_STEP (rtx's semantics; CleanRL was written for gymnasium 0.29, which had it),
episode returns counted here instead of RecordEpisodeStatistics, no tensorboard, and the goal
(mean return of the last 100 episodes >= 475) recorded with its wall time.

    pip install torch gymnasium
    python bench/rl/ppo_torch_cleanrl.py --seed 1 --total-steps 100000 --threads 1 --json
"""
import argparse
import collections
import json
import time

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from torch.distributions.categorical import Categorical


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, obs_dim, n_actions, hidden=64):
        super().__init__()
        self.critic = nn.Sequential(layer_init(nn.Linear(obs_dim, hidden)), nn.Tanh(),
                                    layer_init(nn.Linear(hidden, hidden)), nn.Tanh(),
                                    layer_init(nn.Linear(hidden, 1), std=1.0))
        self.actor = nn.Sequential(layer_init(nn.Linear(obs_dim, hidden)), nn.Tanh(),
                                   layer_init(nn.Linear(hidden, hidden)), nn.Tanh(),
                                   layer_init(nn.Linear(hidden, n_actions), std=0.01))

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        logits = self.actor(x)
        probs = Categorical(logits=logits)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--total-steps", type=int, default=500000)
    p.add_argument("--lr", type=float, default=2.5e-4)
    p.add_argument("--num-envs", type=int, default=4)
    p.add_argument("--num-steps", type=int, default=128)
    p.add_argument("--no-anneal-lr", action="store_true")
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--num-minibatches", type=int, default=4)
    p.add_argument("--update-epochs", type=int, default=4)
    p.add_argument("--clip-coef", type=float, default=0.2)
    p.add_argument("--ent-coef", type=float, default=0.01)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--goal", type=float, default=475.0)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    torch.backends.cudnn.deterministic = True
    batch = a.num_envs * a.num_steps
    mb = batch // a.num_minibatches
    iterations = a.total_steps // batch

    envs = gym.vector.SyncVectorEnv([lambda: gym.make(a.env) for _ in range(a.num_envs)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    agent = Agent(int(np.prod(envs.single_observation_space.shape)), int(envs.single_action_space.n))
    opt = torch.optim.Adam(agent.parameters(), lr=a.lr, eps=1e-5)
    obs = torch.zeros((a.num_steps, a.num_envs) + envs.single_observation_space.shape)
    actions = torch.zeros((a.num_steps, a.num_envs) + envs.single_action_space.shape)
    logprobs = torch.zeros((a.num_steps, a.num_envs))
    rewards = torch.zeros((a.num_steps, a.num_envs))
    dones = torch.zeros((a.num_steps, a.num_envs))
    values = torch.zeros((a.num_steps, a.num_envs))

    t0 = time.perf_counter()
    global_step = 0
    next_obs, _ = envs.reset(seed=a.seed)
    next_obs = torch.Tensor(next_obs)
    next_done = torch.zeros(a.num_envs)
    ep_ret = np.zeros(a.num_envs)
    last100 = collections.deque(maxlen=100)
    goal_step, goal_s, curve = None, None, []
    for it in range(1, iterations + 1):
        if not a.no_anneal_lr:
            opt.param_groups[0]["lr"] = (1.0 - (it - 1.0) / iterations) * a.lr
        for step in range(a.num_steps):
            global_step += a.num_envs
            obs[step] = next_obs
            dones[step] = next_done
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob
            next_obs, reward, term, trunc, _ = envs.step(action.cpu().numpy())
            done = np.logical_or(term, trunc)
            rewards[step] = torch.tensor(reward).view(-1)
            next_obs, next_done = torch.Tensor(next_obs), torch.Tensor(done)
            ep_ret += reward
            for i in np.nonzero(done)[0]:
                last100.append(ep_ret[i])
                ep_ret[i] = 0
                if goal_step is None and len(last100) == 100 and np.mean(last100) >= a.goal:
                    goal_step, goal_s = global_step, time.perf_counter() - t0
        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages = torch.zeros_like(rewards)
            lastgaelam = 0
            for t in reversed(range(a.num_steps)):
                if t == a.num_steps - 1:
                    nextnonterminal, nextvalues = 1.0 - next_done, next_value
                else:
                    nextnonterminal, nextvalues = 1.0 - dones[t + 1], values[t + 1]
                delta = rewards[t] + a.gamma * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = delta + a.gamma * a.gae_lambda * nextnonterminal * lastgaelam
            returns = advantages + values
        b_obs = obs.reshape((-1,) + envs.single_observation_space.shape)
        b_logprobs, b_actions = logprobs.reshape(-1), actions.reshape((-1,) + envs.single_action_space.shape)
        b_adv, b_ret, b_val = advantages.reshape(-1), returns.reshape(-1), values.reshape(-1)
        b_inds = np.arange(batch)
        for epoch in range(a.update_epochs):
            np.random.shuffle(b_inds)
            for start in range(0, batch, mb):
                i = b_inds[start:start + mb]
                _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[i], b_actions.long()[i])
                logratio = newlogprob - b_logprobs[i]
                ratio = logratio.exp()
                adv = b_adv[i]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                pg_loss = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - a.clip_coef, 1 + a.clip_coef)).mean()
                newvalue = newvalue.view(-1)
                v_unclipped = (newvalue - b_ret[i]) ** 2
                v_clipped = b_val[i] + torch.clamp(newvalue - b_val[i], -a.clip_coef, a.clip_coef)
                v_loss = 0.5 * torch.max(v_unclipped, (v_clipped - b_ret[i]) ** 2).mean()
                loss = pg_loss - a.ent_coef * entropy.mean() + v_loss * a.vf_coef
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), a.max_grad_norm)
                opt.step()
        curve.append({"step": global_step, "mean_return_100": float(np.mean(last100)) if last100 else 0.0})
    secs = time.perf_counter() - t0
    out = {"peer": "cleanrl ppo.py (torch %s, gymnasium %s)" % (torch.__version__, gym.__version__),
           "env": a.env, "seed": a.seed, "threads": a.threads, "steps": global_step, "seconds": secs,
           "steps_per_second": global_step / secs, "goal_step": goal_step, "goal_seconds": goal_s,
           "final_mean_return_100": curve[-1]["mean_return_100"] if curve else 0.0}
    if a.json:
        out["curve"] = curve
        print(json.dumps(out))
    else:
        print(out)


if __name__ == "__main__":
    main()
