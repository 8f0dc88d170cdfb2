// Problem factories of every op except matmul: seeded inputs (Philox), output sizes/initial values and
// the float64 plain-loop reference of each output (the oracle the tests and the tuner check against).
// Adding an op: step 1 of the recipe at the head of registry.cpp (the problem and its oracle).
#include <cmath>
#include <string>
#include <vector>

#include "problems.hpp"
#include "rtx/core/error.hpp"
#include "rtx/kernels/check.hpp"
#include "rtx/kernels/ops.hpp"
#include "rtx/kernels/reference.hpp"

namespace rtx::kernels {
namespace {

using Vec = std::vector<double>;

int64_t dim(const Shape& s, const char* name, const char* op) {
  auto it = s.find(name);
  if (it == s.end())
    throw_input(std::string(op) + ": shape '" + shape_to_string(s) + "' lacks dimension " + name, name,
                std::string("add ") + name + "=<positive integer>");
  if (it->second <= 0)
    throw_input(std::string(op) + ": dimension " + name + " = " + std::to_string(it->second) + " must be positive",
                name, "use a positive size");
  return it->second;
}

void need_f32(DType dt, const char* op) {
  if (dt != DType::F32)
    throw_input(std::string(op) + ": dtype " + dtype_name(dt) + " is not supported", "dtype", "this op runs f32 only");
}

std::vector<float> uniform(size_t n, uint64_t seed, uint64_t subseq, float lo, float hi) {
  std::vector<float> v(n);
  fill_uniform(v.data(), n, seed, subseq, lo, hi);
  return v;
}

using problem_util::base;
using problem_util::in;

// llm.c's GELU constants: sqrt(2/pi) and the cubic coefficient of the tanh form.
constexpr double kGeluK = 0.79788456080286535588, kGeluA = 0.044715;

}  // namespace

Problem make_softmax_forward_problem(const Shape& s, DType dt, uint64_t seed) {
  const char* op = "softmax_forward";
  const int64_t N = dim(s, "N", op), C = dim(s, "C", op);
  need_f32(dt, op);
  Problem p = base(s, dt, seed);
  p.inputs.push_back({"inp", uniform(N * C, seed, 0, -5.f, 5.f)});
  p.outputs.push_back({"out", static_cast<size_t>(N * C), {}});
  p.reference = [N, C](const Problem& p) {
    const auto& x = in(p, 0);
    Vec out(N * C);
    for (int64_t n = 0; n < N; ++n) {
      double m = x[n * C];
      for (int64_t c = 0; c < C; ++c) m = std::fmax(m, x[n * C + c]);
      double sum = 0;
      for (int64_t c = 0; c < C; ++c) sum += std::exp(x[n * C + c] - m);
      for (int64_t c = 0; c < C; ++c) out[n * C + c] = std::exp(x[n * C + c] - m) / sum;
    }
    return std::vector<Vec>{out};
  };
  return p;
}

Problem make_layernorm_forward_problem(const Shape& s, DType dt, uint64_t seed) {
  const char* op = "layernorm_forward";
  const int64_t N = dim(s, "N", op), C = dim(s, "C", op);
  need_f32(dt, op);
  Problem p = base(s, dt, seed);
  p.inputs.push_back({"inp", uniform(N * C, seed, 0, -2.f, 3.f)});
  p.inputs.push_back({"weight", uniform(C, seed, 1, -1.5f, 1.5f), true});
  p.inputs.push_back({"bias", uniform(C, seed, 2, -0.5f, 0.5f), true});
  p.outputs.push_back({"out", static_cast<size_t>(N * C), {}});
  p.outputs.push_back({"mean", static_cast<size_t>(N), {}});
  p.outputs.push_back({"rstd", static_cast<size_t>(N), {}});
  p.reference = [N, C](const Problem& p) {
    const auto &x = in(p, 0), &w = in(p, 1), &b = in(p, 2);
    Vec out(N * C), mean(N), rstd(N);
    reference::layernorm_forward(x.data(), w.data(), b.data(), out.data(), mean.data(), rstd.data(), N, C);
    return std::vector<Vec>{out, mean, rstd};
  };
  return p;
}

Problem make_layernorm_backward_problem(const Shape& s, DType dt, uint64_t seed) {
  const char* op = "layernorm_backward";
  const int64_t N = dim(s, "N", op), C = dim(s, "C", op);
  need_f32(dt, op);
  Problem p = base(s, dt, seed);
  auto x = uniform(N * C, seed, 1, -2.f, 3.f);
  // mean and rstd as the forward pass stores them (float), computed in double then rounded.
  std::vector<float> mean(N), rstd(N);
  for (int64_t n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += x[n * C + c];
    m /= C;
    for (int64_t c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m);
    mean[n] = static_cast<float>(m);
    rstd[n] = static_cast<float>(1.0 / std::sqrt(v / C + 1e-5));
  }
  p.inputs.push_back({"dout", uniform(N * C, seed, 0, -1.f, 1.f)});
  p.inputs.push_back({"inp", std::move(x)});
  p.inputs.push_back({"weight", uniform(C, seed, 2, -1.5f, 1.5f), true});
  p.inputs.push_back({"mean", std::move(mean), true});
  p.inputs.push_back({"rstd", std::move(rstd), true});
  p.outputs.push_back({"dinp", static_cast<size_t>(N * C), uniform(N * C, seed, 3, -0.1f, 0.1f)});
  p.outputs.push_back({"dweight", static_cast<size_t>(C), uniform(C, seed, 4, -0.1f, 0.1f)});
  p.outputs.push_back({"dbias", static_cast<size_t>(C), uniform(C, seed, 5, -0.1f, 0.1f)});
  p.reference = [N, C](const Problem& p) {
    const auto &dy = in(p, 0), &x = in(p, 1), &w = in(p, 2), &mu = in(p, 3), &rs = in(p, 4);
    Vec dinp(p.outputs[0].init.begin(), p.outputs[0].init.end());
    Vec dw(p.outputs[1].init.begin(), p.outputs[1].init.end());
    Vec db(p.outputs[2].init.begin(), p.outputs[2].init.end());
    for (int64_t n = 0; n < N; ++n) {
      double dmean = 0, dnmean = 0;
      for (int64_t c = 0; c < C; ++c) {
        const double norm = (x[n * C + c] - static_cast<double>(mu[n])) * rs[n];
        const double dnorm = static_cast<double>(w[c]) * dy[n * C + c];
        dmean += dnorm;
        dnmean += dnorm * norm;
        db[c] += dy[n * C + c];
        dw[c] += norm * dy[n * C + c];
      }
      dmean /= C;
      dnmean /= C;
      for (int64_t c = 0; c < C; ++c) {
        const double norm = (x[n * C + c] - static_cast<double>(mu[n])) * rs[n];
        const double dnorm = static_cast<double>(w[c]) * dy[n * C + c];
        dinp[n * C + c] += (dnorm - dmean - norm * dnmean) * rs[n];
      }
    }
    return std::vector<Vec>{dinp, dw, db};
  };
  return p;
}

Problem make_gelu_forward_problem(const Shape& s, DType dt, uint64_t seed) {
  const char* op = "gelu_forward";
  const int64_t N = dim(s, "N", op);
  need_f32(dt, op);
  Problem p = base(s, dt, seed);
  p.inputs.push_back({"inp", uniform(N, seed, 0, -5.f, 5.f)});
  p.outputs.push_back({"out", static_cast<size_t>(N), {}});
  p.reference = [N](const Problem& p) {
    const auto& x = in(p, 0);
    Vec out(N);
    for (int64_t i = 0; i < N; ++i) {
      const double v = x[i];
      out[i] = 0.5 * v * (1.0 + std::tanh(kGeluK * (v + kGeluA * v * v * v)));
    }
    return std::vector<Vec>{out};
  };
  return p;
}

Problem make_gelu_backward_problem(const Shape& s, DType dt, uint64_t seed) {
  const char* op = "gelu_backward";
  const int64_t N = dim(s, "N", op);
  need_f32(dt, op);
  Problem p = base(s, dt, seed);
  p.inputs.push_back({"inp", uniform(N, seed, 0, -5.f, 5.f)});
  p.inputs.push_back({"dout", uniform(N, seed, 1, -1.f, 1.f)});
  p.outputs.push_back({"dinp", static_cast<size_t>(N), uniform(N, seed, 2, -0.1f, 0.1f)});
  p.reference = [N](const Problem& p) {
    const auto &x = in(p, 0), &dy = in(p, 1);
    Vec d(p.outputs[0].init.begin(), p.outputs[0].init.end());
    for (int64_t i = 0; i < N; ++i) {
      const double v = x[i], u = kGeluK * (v + kGeluA * v * v * v), th = std::tanh(u), ch = std::cosh(u);
      const double g = 0.5 * (1.0 + th) + v * 0.5 * (1.0 / (ch * ch)) * kGeluK * (1.0 + 3.0 * kGeluA * v * v);
      d[i] += g * dy[i];
    }
    return std::vector<Vec>{d};
  };
  return p;
}

Problem make_residual_forward_problem(const Shape& s, DType dt, uint64_t seed) {
  const char* op = "residual_forward";
  const int64_t N = dim(s, "N", op);
  need_f32(dt, op);
  Problem p = base(s, dt, seed);
  p.inputs.push_back({"inp1", uniform(N, seed, 0, -1.f, 1.f)});
  p.inputs.push_back({"inp2", uniform(N, seed, 1, -1.f, 1.f)});
  p.outputs.push_back({"out", static_cast<size_t>(N), {}});
  p.reference = [N](const Problem& p) {
    Vec out(N);
    for (int64_t i = 0; i < N; ++i) out[i] = static_cast<double>(in(p, 0)[i]) + in(p, 1)[i];
    return std::vector<Vec>{out};
  };
  return p;
}

Problem make_encoder_forward_problem(const Shape& s, DType dt, uint64_t seed) {
  const char* op = "encoder_forward";
  const int64_t B = dim(s, "B", op), T = dim(s, "T", op), C = dim(s, "C", op), V = dim(s, "V", op);
  need_f32(dt, op);
  if (V > INT32_MAX) throw_input("encoder_forward: V exceeds int32", "V", "use V < 2^31");
  Problem p = base(s, dt, seed);
  p.ids.resize(B * T);
  fill_ids(p.ids.data(), p.ids.size(), seed, 100, static_cast<int32_t>(V));
  p.inputs.push_back({"wte", uniform(V * C, seed, 0, -1.f, 1.f)});
  p.inputs.push_back({"wpe", uniform(T * C, seed, 1, -1.f, 1.f)});
  p.outputs.push_back({"out", static_cast<size_t>(B * T * C), {}});
  p.reference = [B, T, C](const Problem& p) {
    const auto &wte = in(p, 0), &wpe = in(p, 1);
    Vec out(B * T * C);
    for (int64_t bt = 0; bt < B * T; ++bt)
      for (int64_t c = 0; c < C; ++c)
        out[bt * C + c] = static_cast<double>(wte[p.ids[bt] * C + c]) + wpe[(bt % T) * C + c];
    return std::vector<Vec>{out};
  };
  return p;
}

Problem make_encoder_backward_problem(const Shape& s, DType dt, uint64_t seed) {
  const char* op = "encoder_backward";
  const int64_t B = dim(s, "B", op), T = dim(s, "T", op), C = dim(s, "C", op), V = dim(s, "V", op);
  need_f32(dt, op);
  if (V > INT32_MAX) throw_input("encoder_backward: V exceeds int32", "V", "use V < 2^31");
  Problem p = base(s, dt, seed);
  p.ids.resize(B * T);
  fill_ids(p.ids.data(), p.ids.size(), seed, 100, static_cast<int32_t>(V));
  p.inputs.push_back({"dout", uniform(B * T * C, seed, 0, -1.f, 1.f)});
  p.outputs.push_back({"dwte", static_cast<size_t>(V * C), uniform(V * C, seed, 1, -0.1f, 0.1f)});
  p.outputs.push_back({"dwpe", static_cast<size_t>(T * C), uniform(T * C, seed, 2, -0.1f, 0.1f)});
  p.reference = [B, T, C](const Problem& p) {
    const auto& dy = in(p, 0);
    Vec dwte(p.outputs[0].init.begin(), p.outputs[0].init.end());
    Vec dwpe(p.outputs[1].init.begin(), p.outputs[1].init.end());
    for (int64_t bt = 0; bt < B * T; ++bt)
      for (int64_t c = 0; c < C; ++c) {
        dwte[p.ids[bt] * C + c] += dy[bt * C + c];
        dwpe[(bt % T) * C + c] += dy[bt * C + c];
      }
    return std::vector<Vec>{dwte, dwpe};
  };
  return p;
}

namespace {
Problem ce_problem(const Shape& s, DType dt, uint64_t seed, const char* op, bool backward) {
  const int64_t N = dim(s, "N", op), V = dim(s, "V", op);
  need_f32(dt, op);
  if (V > INT32_MAX) throw_input(std::string(op) + ": V exceeds int32", "V", "use V < 2^31");
  Problem p = base(s, dt, seed);
  p.ids.resize(N);
  fill_ids(p.ids.data(), p.ids.size(), seed, 100, static_cast<int32_t>(V));
  p.inputs.push_back({"logits", uniform(N * V, seed, 0, -4.f, 4.f)});
  p.outputs.push_back({backward ? "dlogits" : "losses", static_cast<size_t>(backward ? N * V : N), {}});
  p.reference = [N, V, backward](const Problem& p) {
    const auto& x = in(p, 0);
    Vec out(backward ? N * V : N);
    for (int64_t n = 0; n < N; ++n) {
      double m = x[n * V];
      for (int64_t v = 0; v < V; ++v) m = std::fmax(m, x[n * V + v]);
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(x[n * V + v] - m);
      const int64_t t = p.ids[n];
      if (!backward) {
        out[n] = m + std::log(sum) - x[n * V + t];
      } else {
        for (int64_t v = 0; v < V; ++v)
          out[n * V + v] = (std::exp(x[n * V + v] - m) / sum - (v == t ? 1.0 : 0.0)) / static_cast<double>(N);
      }
    }
    return std::vector<Vec>{out};
  };
  return p;
}
}  // namespace

Problem make_crossentropy_forward_problem(const Shape& s, DType dt, uint64_t seed) {
  return ce_problem(s, dt, seed, "crossentropy_forward", false);
}
Problem make_crossentropy_backward_problem(const Shape& s, DType dt, uint64_t seed) {
  return ce_problem(s, dt, seed, "crossentropy_backward", true);
}

Problem make_adamw_update_problem(const Shape& s, DType dt, uint64_t seed) {
  const char* op = "adamw_update";
  const int64_t N = dim(s, "N", op);
  need_f32(dt, op);
  Problem p = base(s, dt, seed);
  p.inputs.push_back({"grad", uniform(N, seed, 0, -1.f, 1.f)});
  p.outputs.push_back({"param", static_cast<size_t>(N), uniform(N, seed, 1, -1.f, 1.f)});
  // Moments as after a few steps on gradients of this size: |m| ~ 0.1 |g|, v ~ 0.01 g^2 scale.
  p.outputs.push_back({"m", static_cast<size_t>(N), uniform(N, seed, 2, -0.02f, 0.02f)});
  p.outputs.push_back({"v", static_cast<size_t>(N), uniform(N, seed, 3, 0.f, 0.01f)});
  p.reference = [N](const Problem& p) {
    const AdamWParams hp{};  // the float hyperparameters the kernel sees, widened exactly
    const double b1 = hp.beta1, b2 = hp.beta2, lr = hp.lr, eps = hp.eps, wd = hp.weight_decay;
    const int t = 3;
    const auto& g = in(p, 0);
    Vec par(N), m(N), v(N);
    for (int64_t i = 0; i < N; ++i) {
      m[i] = b1 * p.outputs[1].init[i] + (1 - b1) * g[i];
      v[i] = b2 * p.outputs[2].init[i] + (1 - b2) * g[i] * static_cast<double>(g[i]);
      const double mh = m[i] / (1 - std::pow(b1, t)), vh = v[i] / (1 - std::pow(b2, t));
      const double p0 = p.outputs[0].init[i];
      par[i] = p0 - lr * (mh / (std::sqrt(vh) + eps) + wd * p0);
    }
    return std::vector<Vec>{par, m, v};
  };
  return p;
}

namespace {
struct AttnDims {
  int64_t B, T, NH, HS, C;
};
AttnDims attn_dims(const Shape& s, DType dt, const char* op) {
  AttnDims d{dim(s, "B", op), dim(s, "T", op), dim(s, "NH", op), dim(s, "HS", op), 0};
  need_f32(dt, op);
  d.C = d.NH * d.HS;
  return d;
}

/// float64 causal attention of head (b,h): probabilities P (T,T) (row i, cols <= i) and lse (T).
void ref_attention_head(const std::vector<float>& qkv, const AttnDims& d, int64_t b, int64_t h, Vec& P, Vec& lse) {
  const int64_t T = d.T, HS = d.HS, C3 = 3 * d.C;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  P.assign(T * T, 0.0);
  lse.assign(T, 0.0);
  for (int64_t i = 0; i < T; ++i) {
    const float* q = &qkv[(b * T + i) * C3 + h * HS];
    double mx = -INFINITY;
    for (int64_t j = 0; j <= i; ++j) {
      const float* k = &qkv[(b * T + j) * C3 + d.C + h * HS];
      double dot = 0;
      for (int64_t e = 0; e < HS; ++e) dot += static_cast<double>(q[e]) * k[e];
      P[i * T + j] = dot * scale;
      mx = std::fmax(mx, P[i * T + j]);
    }
    double sum = 0;
    for (int64_t j = 0; j <= i; ++j) sum += std::exp(P[i * T + j] - mx);
    for (int64_t j = 0; j <= i; ++j) P[i * T + j] = std::exp(P[i * T + j] - mx) / sum;
    lse[i] = mx + std::log(sum);
  }
}
}  // namespace

Problem make_attention_forward_problem(const Shape& s, DType dt, uint64_t seed) {
  const AttnDims d = attn_dims(s, dt, "attention_forward");
  Problem p = base(s, dt, seed);
  p.inputs.push_back({"qkv", uniform(d.B * d.T * 3 * d.C, seed, 0, -1.f, 1.f)});
  p.outputs.push_back({"out", static_cast<size_t>(d.B * d.T * d.C), {}});
  p.outputs.push_back({"lse", static_cast<size_t>(d.B * d.NH * d.T), {}});
  p.reference = [d](const Problem& p) {
    const auto& qkv = in(p, 0);
    Vec out(d.B * d.T * d.C, 0.0), lse(d.B * d.NH * d.T);
    // Each (b, h) writes its own slices of out and lse, summing in a fixed order: threads
    // change nothing but speed.
#pragma omp parallel for schedule(dynamic)
    for (int64_t bh = 0; bh < d.B * d.NH; ++bh) {
      const int64_t b = bh / d.NH, h = bh % d.NH;
      Vec P, L;
        ref_attention_head(qkv, d, b, h, P, L);
        for (int64_t i = 0; i < d.T; ++i) {
          lse[(b * d.NH + h) * d.T + i] = L[i];
          for (int64_t j = 0; j <= i; ++j) {
            const float* v = &qkv[(b * d.T + j) * 3 * d.C + 2 * d.C + h * d.HS];
            for (int64_t e = 0; e < d.HS; ++e) out[(b * d.T + i) * d.C + h * d.HS + e] += P[i * d.T + j] * v[e];
          }
        }
      }
    return std::vector<Vec>{out, lse};
  };
  return p;
}

Problem make_attention_backward_problem(const Shape& s, DType dt, uint64_t seed) {
  const AttnDims d = attn_dims(s, dt, "attention_backward");
  Problem p = base(s, dt, seed);
  p.inputs.push_back({"qkv", uniform(d.B * d.T * 3 * d.C, seed, 0, -1.f, 1.f)});
  p.inputs.push_back({"dout", uniform(d.B * d.T * d.C, seed, 1, -1.f, 1.f)});
  p.outputs.push_back({"dqkv", static_cast<size_t>(d.B * d.T * 3 * d.C), uniform(d.B * d.T * 3 * d.C, seed, 2, -0.01f, 0.01f)});
  p.reference = [d](const Problem& p) {
    const auto &qkv = in(p, 0), &dout = in(p, 1);
    const int64_t T = d.T, HS = d.HS, C = d.C, C3 = 3 * C;
    const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
    Vec dqkv(p.outputs[0].init.begin(), p.outputs[0].init.end());
    // Each (b, h) updates only head h's columns of batch b's q, k and v gradients, in a fixed
    // order: threads change nothing but speed.
#pragma omp parallel for schedule(dynamic)
    for (int64_t bh = 0; bh < d.B * d.NH; ++bh) {
      const int64_t b = bh / d.NH, h = bh % d.NH;
      Vec P, L, dp(T);
        ref_attention_head(qkv, d, b, h, P, L);
        for (int64_t i = 0; i < T; ++i) {
          const float* go = &dout[(b * T + i) * C + h * HS];
          double D = 0;
          for (int64_t j = 0; j <= i; ++j) {
            const float* v = &qkv[(b * T + j) * C3 + 2 * C + h * HS];
            double dot = 0;
            for (int64_t e = 0; e < HS; ++e) dot += static_cast<double>(go[e]) * v[e];
            dp[j] = dot;
            D += P[i * T + j] * dot;
          }
          for (int64_t j = 0; j <= i; ++j) {
            const double pij = P[i * T + j], ds = pij * (dp[j] - D) * scale;
            for (int64_t e = 0; e < HS; ++e) {
              dqkv[(b * T + i) * C3 + h * HS + e] += ds * qkv[(b * T + j) * C3 + C + h * HS + e];
              dqkv[(b * T + j) * C3 + C + h * HS + e] += ds * qkv[(b * T + i) * C3 + h * HS + e];
              dqkv[(b * T + j) * C3 + 2 * C + h * HS + e] += pij * go[e];
            }
          }
        }
      }
    return std::vector<Vec>{dqkv};
  };
  return p;
}

Problem make_allreduce_problem(const Shape& s, DType dt, uint64_t seed) {
  const char* op = "allreduce";
  const int64_t R = dim(s, "R", op), N = dim(s, "N", op);
  need_f32(dt, op);
  if (R > 256) throw_input("allreduce: R = " + std::to_string(R) + " ranks exceeds 256", "R", "use 1 to 256 ranks");
  Problem p = base(s, dt, seed);
  p.outputs.push_back({"bufs", static_cast<size_t>(R * N), uniform(R * N, seed, 0, -1.f, 1.f)});
  p.reference = [R, N](const Problem& p) {
    const auto& x = p.outputs[0].init;
    Vec out(R * N);
    for (int64_t i = 0; i < N; ++i) {
      double sum = 0;
      for (int64_t r = 0; r < R; ++r) sum += x[r * N + i];
      for (int64_t r = 0; r < R; ++r) out[r * N + i] = sum;
    }
    return std::vector<Vec>{out};
  };
  return p;
}

}  // namespace rtx::kernels
