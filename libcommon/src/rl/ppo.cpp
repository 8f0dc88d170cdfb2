// PPO after CleanRL's ppo.py (ppo.hpp). Two IR graphs share one flat parameter vector: the
// acting graph (obs (N,O) -> logits (N,K), value (N,1)) and the loss graph over a minibatch
// (forward, the clipped PPO loss, and its IR-autodiff gradients). The IR has no min/max/clamp
// kind, so they are written with relu, exactly: max(a, b) = b + relu(a - b) and
// clamp(x, lo, hi) = lo + relu(x - lo) - relu(x - hi) (the gradients agree with torch's
// everywhere except on the measure-zero ties).
#include "rtx/rl/ppo.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <deque>
#include <numeric>

#include <omp.h>

#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/ir/autodiff.hpp"
#include "rtx/ir/exec.hpp"
#include "rtx/ir/graph.hpp"
#include "rtx/rl/env.hpp"

namespace rtx::rl {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Philox subsequences of one training run (seed = cfg.seed): one stream per purpose.
constexpr uint64_t kInitStream = 1, kActionStream = 2, kShuffleStream = 3;

// torch.nn.init.orthogonal_(w, gain) for w (rows, cols): QR of a standard normal matrix (the
// tall orientation), signs fixed so R's diagonal is positive (what Gram-Schmidt gives), times gain.
void orthogonal(float* w, int rows, int cols, double gain, Philox& rng) {
  const bool wide = rows < cols;
  const int r = wide ? cols : rows, c = wide ? rows : cols;  // tall r x c, r >= c
  std::vector<double> a(static_cast<size_t>(r) * c);
  for (double& x : a) {
    const double u1 = 1.0 - rng.next_double(), u2 = rng.next_double();
    x = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // Modified Gram-Schmidt over the c columns of the r x c matrix a (row-major).
  for (int j = 0; j < c; ++j) {
    for (int k = 0; k < j; ++k) {
      double d = 0;
      for (int i = 0; i < r; ++i) d += a[i * c + k] * a[i * c + j];
      for (int i = 0; i < r; ++i) a[i * c + j] -= d * a[i * c + k];
    }
    double nrm = 0;
    for (int i = 0; i < r; ++i) nrm += a[i * c + j] * a[i * c + j];
    nrm = std::sqrt(nrm);
    for (int i = 0; i < r; ++i) a[i * c + j] /= nrm;
  }
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j)
      w[i * cols + j] = static_cast<float>(gain * (wide ? a[j * c + i] : a[i * c + j]));
}

struct Net {
  std::vector<ir::V> p;  // actor.0.w, actor.0.b, ... critic.2.b (ppo_param_layout order)
};

// The two MLPs on x (rows, O): logits (rows, K) and value (rows, 1).
std::pair<ir::V, ir::V> mlp(ir::Graph& g, const Net& n, ir::V x) {
  ir::V a = g.tanh(g.linear(x, n.p[0], n.p[1]));
  a = g.tanh(g.linear(a, n.p[2], n.p[3]));
  ir::V logits = g.named(g.linear(a, n.p[4], n.p[5]), "logits");
  ir::V c = g.tanh(g.linear(x, n.p[6], n.p[7]));
  c = g.tanh(g.linear(c, n.p[8], n.p[9]));
  ir::V value = g.named(g.linear(c, n.p[10], n.p[11]), "value");
  return {logits, value};
}

Net params(ir::Graph& g, int O, int K, int H) {
  Net n;
  for (const auto& [name, count] : ppo_param_layout(O, K, H)) {
    (void)count;
    const bool actor = name.rfind("actor", 0) == 0;
    const int layer = name[actor ? 6 : 7] - '0';
    const bool w = name.back() == 'w';
    const int64_t out = layer < 2 ? H : (actor ? K : 1), in = layer == 0 ? O : H;
    n.p.push_back(w ? g.param(name, {out, in}) : g.param(name, {out}));
  }
  return n;
}

// The loss graph over M rows (inputs obs, act, act_flat = row*K + act, logp_old, adv (already
// normalised), ret, v_old). Outputs: loss, pg_loss, v_loss, entropy, ratio (M), logratio (M),
// then d(loss)/d(param) for every parameter in layout order.
struct LossGraph {
  ir::Graph g{"ppo_loss"};
  int n_params = 0;
};

void build_loss(LossGraph& lg, const PpoConfig& cfg, int M, int O, int K) {
  ir::Graph& g = lg.g;
  const Net n = params(g, O, K, cfg.hidden);
  lg.n_params = static_cast<int>(n.p.size());
  ir::V obs = g.input("obs", {M, O}), act = g.input("act", {M}, DType::I32), act_flat = g.input("act_flat", {M}, DType::I32);
  ir::V logp_old = g.input("logp_old", {M}), adv = g.input("adv", {M}), ret = g.input("ret", {M}),
        v_old = g.input("v_old", {M});
  auto [logits, value] = mlp(g, n, obs);
  auto c = [&](double x) { return g.full({1}, x); };
  const double eps = cfg.clip_coef;
  // log pi(a|s) = -cross_entropy(logits, a); ratio = exp(logp - logp_old)
  ir::V ce = g.cross_entropy(logits, act);
  ir::V logratio = g.named(g.scale(ce, -1.0) - logp_old, "logratio");
  ir::V ratio = g.named(g.exp(logratio), "ratio");
  // pg_loss = mean(max(-adv * ratio, -adv * clamp(ratio, 1 - eps, 1 + eps)))
  ir::V pg1 = g.scale(adv * ratio, -1.0);
  ir::V rc = c(1.0 - eps) + g.relu(ratio - c(1.0 - eps)) - g.relu(ratio - c(1.0 + eps));
  ir::V pg2 = g.scale(adv * rc, -1.0);
  ir::V pg_loss = g.named(g.mean(pg2 + g.relu(pg1 - pg2), 0), "pg_loss");
  // value loss: 0.5 * mean(max((v - R)^2, (v_old + clamp(v - v_old, -eps, eps) - R)^2)), or unclipped
  ir::V v = g.reshape(value, {M});
  ir::V du = v - ret;
  ir::V unclipped = du * du;
  ir::V vterm = unclipped;
  if (cfg.clip_vloss) {
    ir::V d = v - v_old;
    ir::V dc = c(-eps) + g.relu(d - c(-eps)) - g.relu(d - c(eps));
    ir::V dcl = (v_old + dc) - ret;
    ir::V clipped = dcl * dcl;
    vterm = clipped + g.relu(unclipped - clipped);
  }
  ir::V v_loss = g.named(g.scale(g.mean(vterm, 0), 0.5), "v_loss");
  // entropy = mean(lse - sum(softmax * logits)), lse = ce + logits[a]
  ir::V logit_a = g.gather(g.reshape(logits, {static_cast<int64_t>(M) * K}), act_flat);
  ir::V lse = ce + logit_a;
  ir::V ent = lse - g.sum(g.softmax(logits) * logits, 1);
  ir::V entropy = g.named(g.mean(ent, 0), "entropy");
  ir::V loss = g.named(pg_loss - g.scale(entropy, cfg.ent_coef) + g.scale(v_loss, cfg.vf_coef), "loss");
  for (ir::V o : {loss, pg_loss, v_loss, entropy, ratio, logratio}) g.mark_output(o);
  std::vector<int> wrt;
  for (ir::V p : n.p) wrt.push_back(p.id);
  for (int gr : ir::backward(g, loss.id, wrt).grads) g.mark_output(gr);
}

// Adam (torch.optim.Adam, no weight decay): m, v moments; bias-corrected step.
struct Adam {
  std::vector<float> m, v;
  int64_t t = 0;
  void step(std::vector<float>& p, const std::vector<float>& g, double lr, double eps) {
    if (m.empty()) m.assign(p.size(), 0.f), v.assign(p.size(), 0.f);
    ++t;
    const double b1 = 0.9, b2 = 0.999;
    const double bc1 = 1.0 - std::pow(b1, static_cast<double>(t)), bc2 = 1.0 - std::pow(b2, static_cast<double>(t));
    const float step_size = static_cast<float>(lr / bc1);
    const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    for (size_t i = 0; i < p.size(); ++i) {
      m[i] = static_cast<float>(b1) * m[i] + static_cast<float>(1 - b1) * g[i];
      v[i] = static_cast<float>(b2) * v[i] + static_cast<float>(1 - b2) * g[i] * g[i];
      const float denom = std::sqrt(v[i]) / bc2_sqrt + static_cast<float>(eps);
      p[i] -= step_size * m[i] / denom;
    }
  }
};

void set_param_feeds(ir::Feeds& f, const std::vector<std::pair<std::string, int64_t>>& layout, const std::vector<float>& p) {
  size_t off = 0;
  for (const auto& [name, count] : layout) {
    std::vector<double>& d = f[name];
    d.assign(p.begin() + static_cast<std::ptrdiff_t>(off), p.begin() + static_cast<std::ptrdiff_t>(off + count));
    off += static_cast<size_t>(count);
  }
}

}  // namespace

void PpoConfig::validate() const {
  auto bad = [](const std::string& field, const std::string& why) { throw_usage(field + ": " + why, "ppo config"); };
  const EnvSpec& s = env_spec(env);  // unknown env: Input error listing the known ones
  if (!s.discrete) bad("env", env + " has a continuous action space; PPO here is discrete-only (CartPole-v1, Acrobot-v1, MountainCar-v0)");
  if (total_steps < 1) bad("total_steps", "must be >= 1");
  if (num_envs < 1) bad("num_envs", "must be >= 1");
  if (num_steps < 1) bad("num_steps", "must be >= 1");
  if (num_minibatches < 1 || (static_cast<int64_t>(num_envs) * num_steps) % num_minibatches != 0)
    bad("num_minibatches", "must be >= 1 and divide num_envs * num_steps");
  if (update_epochs < 1) bad("update_epochs", "must be >= 1");
  if (hidden < 1) bad("hidden", "must be >= 1");
  if (threads < 0) bad("threads", "must be >= 0");
  if (!(lr > 0)) bad("lr", "must be > 0");
  if (!(gamma >= 0 && gamma <= 1)) bad("gamma", "must be in [0, 1]");
  if (!(gae_lambda >= 0 && gae_lambda <= 1)) bad("gae_lambda", "must be in [0, 1]");
  if (!(clip_coef > 0)) bad("clip_coef", "must be > 0");
  if (!(max_grad_norm > 0)) bad("max_grad_norm", "must be > 0");
}

std::vector<std::pair<std::string, int64_t>> ppo_param_layout(int O, int K, int H) {
  std::vector<std::pair<std::string, int64_t>> l;
  for (const char* net : {"actor", "critic"}) {
    const int64_t out_last = std::string(net) == "actor" ? K : 1;
    const int64_t outs[3] = {H, H, out_last}, ins[3] = {O, H, H};
    for (int i = 0; i < 3; ++i) {
      const std::string pre = std::string(net) + "." + std::to_string(i) + ".";
      l.emplace_back(pre + "w", outs[i] * ins[i]);
      l.emplace_back(pre + "b", outs[i]);
    }
  }
  return l;
}

PpoResult train_ppo(const PpoConfig& cfg, const PpoCallback& on_iteration) {
  cfg.validate();
  struct ThreadScope {  // cfg.threads for the run, the caller's setting restored after
    int saved = omp_get_max_threads();
    explicit ThreadScope(int n) {
      if (n > 0) omp_set_num_threads(n);
    }
    ~ThreadScope() { omp_set_num_threads(saved); }
  } threads_scope(cfg.threads);
  const auto t0 = Clock::now();
  const std::clock_t c0 = std::clock();
  const EnvSpec& spec = env_spec(cfg.env);
  const int N = cfg.num_envs, T = cfg.num_steps, O = spec.obs_dim, K = spec.num_actions, H = cfg.hidden;
  const int batch = N * T, M = batch / cfg.num_minibatches;
  const int64_t iterations = cfg.total_steps / batch;
  const auto layout = ppo_param_layout(O, K, H);

  // Parameters: orthogonal init (gain sqrt(2) hidden, 0.01 actor head, 1 critic head), zero biases.
  std::vector<float> theta;
  {
    Philox rng(cfg.seed, kInitStream);
    for (const auto& [name, count] : layout) {
      const size_t off = theta.size();
      theta.resize(off + static_cast<size_t>(count), 0.f);
      if (name.back() != 'w') continue;
      const bool actor = name.rfind("actor", 0) == 0;
      const int layer = name[actor ? 6 : 7] - '0';
      const int in = layer == 0 ? O : H, out = static_cast<int>(count / in);
      const double gain = layer < 2 ? std::sqrt(2.0) : (actor ? 0.01 : 1.0);
      orthogonal(theta.data() + off, out, in, gain, rng);
    }
  }

  ir::Graph act_g("ppo_act");
  {
    const Net n = params(act_g, O, K, H);
    auto [logits, value] = mlp(act_g, n, act_g.input("obs", {N, O}));
    act_g.mark_output(logits);
    act_g.mark_output(value);
  }
  LossGraph lg;
  build_loss(lg, cfg, M, O, K);
  ir::ExecOptions xo;
  xo.telemetry = false;
  const ir::Bindings none;

  VecEnv env(cfg.env, N, cfg.seed);
  env.reset();
  ir::Feeds act_feeds, loss_feeds;
  set_param_feeds(act_feeds, layout, theta);

  // Rollout storage, (T, N) row-major.
  std::vector<float> obs_buf(static_cast<size_t>(T) * N * O), logp_buf(static_cast<size_t>(T) * N),
      val_buf(static_cast<size_t>(T) * N);
  std::vector<int32_t> act_buf(static_cast<size_t>(T) * N);
  std::vector<double> rew_buf(static_cast<size_t>(T) * N), done_buf(static_cast<size_t>(T) * N);
  std::vector<double> adv(static_cast<size_t>(batch)), ret(static_cast<size_t>(batch));
  std::vector<double> next_done(N, 0.0);
  std::vector<int32_t> actions(N);
  std::vector<int> inds(batch);
  Philox act_rng(cfg.seed, kActionStream), shuffle_rng(cfg.seed, kShuffleStream);
  Adam adam;
  PpoResult res;
  std::deque<double> last100;
  double sum100 = 0;
  int64_t global_step = 0;
  std::vector<float> grad(theta.size());
  std::vector<float> logits_v, value_v;

  auto act_forward = [&]() {
    act_feeds["obs"].assign(env.obs(), env.obs() + static_cast<size_t>(N) * O);
    ir::ExecResult r = ir::run_f32(act_g, none, act_feeds, xo);
    logits_v = std::move(r.outputs[0]);
    value_v = std::move(r.outputs[1]);
  };

  for (int64_t it = 1; it <= iterations; ++it) {
    const double frac = cfg.anneal_lr ? 1.0 - static_cast<double>(it - 1) / static_cast<double>(iterations) : 1.0;
    const double lr = frac * cfg.lr;
    const auto tr = Clock::now();
    for (int t = 0; t < T; ++t) {
      global_step += N;
      std::copy(env.obs(), env.obs() + static_cast<size_t>(N) * O, obs_buf.begin() + static_cast<size_t>(t) * N * O);
      for (int i = 0; i < N; ++i) done_buf[static_cast<size_t>(t) * N + i] = next_done[i];
      act_forward();
      for (int i = 0; i < N; ++i) {
        // Categorical(logits): inverse CDF in float64 with one Philox uniform per env step.
        const float* l = logits_v.data() + static_cast<size_t>(i) * K;
        double mx = l[0];
        for (int k = 1; k < K; ++k) mx = std::max(mx, static_cast<double>(l[k]));
        double z = 0;
        for (int k = 0; k < K; ++k) z += std::exp(l[k] - mx);
        const double u = act_rng.next_double() * z;
        int a = K - 1;
        double cum = 0;
        for (int k = 0; k < K; ++k) {
          cum += std::exp(l[k] - mx);
          if (u < cum) {
            a = k;
            break;
          }
        }
        actions[i] = a;
        act_buf[static_cast<size_t>(t) * N + i] = a;
        logp_buf[static_cast<size_t>(t) * N + i] = static_cast<float>(l[a] - mx - std::log(z));
        val_buf[static_cast<size_t>(t) * N + i] = value_v[i];
      }
      env.step(actions);
      for (int i = 0; i < N; ++i) {
        rew_buf[static_cast<size_t>(t) * N + i] = env.reward()[i];
        const bool done = env.terminated()[i] || env.truncated()[i];
        next_done[i] = done ? 1.0 : 0.0;  // CleanRL: truncation ends the episode like termination
        if (done) {
          res.episodes.push_back({global_step, env.episode_return()[i], env.episode_length()[i]});
          last100.push_back(env.episode_return()[i]);
          sum100 += env.episode_return()[i];
          if (last100.size() > 100) sum100 -= last100.front(), last100.pop_front();
          if (res.goal_step < 0 && last100.size() == 100 && sum100 / 100.0 >= cfg.goal_return) {
            res.goal_step = global_step;
            res.goal_seconds = since(t0);
          }
        }
      }
    }
    // GAE over the rollout, bootstrapped from the value of the next observation.
    act_forward();
    for (int i = 0; i < N; ++i) {
      double lastgaelam = 0;
      for (int t = T - 1; t >= 0; --t) {
        const size_t k = static_cast<size_t>(t) * N + i;
        const double nonterminal = 1.0 - (t == T - 1 ? next_done[i] : done_buf[k + N]);
        const double next_value = t == T - 1 ? value_v[i] : val_buf[k + N];
        const double delta = rew_buf[k] + cfg.gamma * next_value * nonterminal - val_buf[k];
        lastgaelam = delta + cfg.gamma * cfg.gae_lambda * nonterminal * lastgaelam;
        adv[k] = lastgaelam;
        ret[k] = lastgaelam + val_buf[k];
      }
    }
    res.rollout_seconds += since(tr);

    // Update: epochs of shuffled minibatches.
    const auto tu = Clock::now();
    std::iota(inds.begin(), inds.end(), 0);
    double clipfrac_sum = 0, kl = 0, last[4] = {0, 0, 0, 0};
    int64_t clip_count = 0, mb_count = 0;
    std::vector<double>& f_obs = loss_feeds["obs"];
    std::vector<double>& f_act = loss_feeds["act"];
    std::vector<double>& f_flat = loss_feeds["act_flat"];
    std::vector<double>& f_logp = loss_feeds["logp_old"];
    std::vector<double>& f_adv = loss_feeds["adv"];
    std::vector<double>& f_ret = loss_feeds["ret"];
    std::vector<double>& f_vold = loss_feeds["v_old"];
    f_obs.resize(static_cast<size_t>(M) * O), f_act.resize(M), f_flat.resize(M), f_logp.resize(M), f_adv.resize(M),
        f_ret.resize(M), f_vold.resize(M);
    for (int ep = 0; ep < cfg.update_epochs; ++ep) {
      for (int i = batch - 1; i > 0; --i) {  // Fisher-Yates
        const int j = static_cast<int>(shuffle_rng.next_u32() % static_cast<uint32_t>(i + 1));
        std::swap(inds[i], inds[j]);
      }
      for (int start = 0; start < batch; start += M) {
        double mean = 0, var = 0;
        for (int r = 0; r < M; ++r) mean += adv[inds[start + r]];
        mean /= M;
        for (int r = 0; r < M; ++r) var += (adv[inds[start + r]] - mean) * (adv[inds[start + r]] - mean);
        const double sd = M > 1 ? std::sqrt(var / (M - 1)) : 0.0;
        for (int r = 0; r < M; ++r) {
          const int b = inds[start + r];
          for (int o = 0; o < O; ++o) f_obs[static_cast<size_t>(r) * O + o] = obs_buf[static_cast<size_t>(b) * O + o];
          f_act[r] = act_buf[b];
          f_flat[r] = static_cast<double>(r) * K + act_buf[b];
          f_logp[r] = logp_buf[b];
          // float32, as CleanRL's tensors
          f_adv[r] = cfg.norm_adv ? static_cast<float>((adv[b] - mean) / (sd + 1e-8)) : static_cast<float>(adv[b]);
          f_ret[r] = static_cast<float>(ret[b]);
          f_vold[r] = val_buf[b];
        }
        set_param_feeds(loss_feeds, layout, theta);
        ir::ExecResult r = ir::run_f32(lg.g, none, loss_feeds, xo);
        for (int q = 0; q < 4; ++q) last[q] = r.outputs[q][0];
        const std::vector<float>& ratio = r.outputs[4];
        const std::vector<float>& logratio = r.outputs[5];
        double kls = 0;
        for (int q = 0; q < M; ++q) {
          kls += (ratio[q] - 1.0) - logratio[q];
          clip_count += std::fabs(ratio[q] - 1.0) > cfg.clip_coef ? 1 : 0;
        }
        kl = kls / M;
        ++mb_count;
        const bool first = it == 1 && ep == 0 && start == 0;
        const bool final_mb = it == iterations && ep == cfg.update_epochs - 1 && start + M == batch;
        if (first || final_mb) {
          PpoMinibatch& fm = first ? res.first_minibatch : res.last_minibatch;
          fm.rows = M, fm.obs_dim = O, fm.num_actions = K, fm.hidden = H;
          fm.params = theta;
          fm.obs.assign(f_obs.begin(), f_obs.end());
          fm.actions.assign(f_act.begin(), f_act.end());
          fm.logp_old.assign(f_logp.begin(), f_logp.end());
          fm.adv.assign(f_adv.begin(), f_adv.end());
          fm.ret.assign(f_ret.begin(), f_ret.end());
          fm.v_old.assign(f_vold.begin(), f_vold.end());
          fm.loss = last[0], fm.pg_loss = last[1], fm.v_loss = last[2], fm.entropy = last[3];
          fm.clip_coef = cfg.clip_coef, fm.ent_coef = cfg.ent_coef, fm.vf_coef = cfg.vf_coef, fm.clip_vloss = cfg.clip_vloss;
        }
        // Gradients (layout order), global norm clipping (torch clip_grad_norm_), Adam.
        size_t off = 0;
        double sq = 0;
        for (int q = 0; q < lg.n_params; ++q) {
          const std::vector<float>& gq = r.outputs[6 + q];
          std::copy(gq.begin(), gq.end(), grad.begin() + static_cast<std::ptrdiff_t>(off));
          off += gq.size();
          for (float x : gq) sq += static_cast<double>(x) * x;
        }
        const double norm = std::sqrt(sq), coef = cfg.max_grad_norm / (norm + 1e-6);
        if (coef < 1.0)
          for (float& x : grad) x = static_cast<float>(x * coef);
        adam.step(theta, grad, lr, 1e-5);
      }
    }
    clipfrac_sum = mb_count ? static_cast<double>(clip_count) / (static_cast<double>(mb_count) * M) : 0.0;
    set_param_feeds(act_feeds, layout, theta);
    res.update_seconds += since(tu);

    PpoIteration rec{static_cast<int>(it), global_step, lr, last[0], last[1], last[2], last[3], kl, clipfrac_sum,
                     last100.empty() ? 0.0 : sum100 / static_cast<double>(last100.size()), since(t0)};
    res.iterations.push_back(rec);
    if (on_iteration && !on_iteration(rec)) break;
  }
  res.total_steps = global_step;
  res.seconds = since(t0);
  res.cpu_seconds = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  res.params = theta;
  return res;
}

}  // namespace rtx::rl
