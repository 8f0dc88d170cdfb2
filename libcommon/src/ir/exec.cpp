// Polygraph IR executors: the float64 interpreter (plain loops; the oracle) and the CPU f32
// executor (registry kernels where they exist, the same loops in f32 otherwise).
#include "rtx/ir/exec.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "rtx/core/error.hpp"
#include "rtx/ir/fusion.hpp"
#include "rtx/ir/serialize.hpp"
#include "rtx/kernels/reference.hpp"
#include "rtx/kernels/matmul.hpp"
#include "rtx/kernels/ops.hpp"
#include "rtx/telemetry/bus.hpp"

namespace rtx::ir {

using nlohmann::json;
using Dims = std::vector<int64_t>;

namespace {

// Product of d[from..to) (to clamped to the rank).
int64_t prod(const Dims& d, int64_t from = 0, int64_t to = INT64_MAX) {
  int64_t p = 1;
  const int64_t end = std::min<int64_t>(to, static_cast<int64_t>(d.size()));
  for (int64_t i = std::max<int64_t>(from, 0); i < end; ++i) p *= d[static_cast<size_t>(i)];
  return p;
}

std::string where_of(const Node& n) { return std::string("node ") + std::to_string(n.id) + " (" + kind_name(n.kind) + ")"; }

int64_t check_index(double v, int64_t limit, const Node& n, const char* what) {
  const int64_t i = static_cast<int64_t>(v);
  if (static_cast<double>(i) != v || i < 0 || i >= limit)
    throw_input(std::string(what) + " " + std::to_string(v) + " out of range [0," + std::to_string(limit) + ")", where_of(n));
  return i;
}

// Strides of `in` broadcast against `out` (0 on broadcast dims), numpy alignment from the right.
Dims bstrides(const Dims& in, const Dims& out) {
  Dims st(out.size(), 0);
  int64_t s = 1;
  for (size_t k = 0; k < in.size(); ++k) {
    const size_t i = in.size() - 1 - k, o = out.size() - 1 - k;
    st[o] = in[i] == 1 && out[o] != 1 ? 0 : s;
    s *= in[i];
  }
  return st;
}

// Visit every out index with the offsets of up to two broadcast inputs (row-major, serial).
template <class F>
void for_broadcast(const Dims& out, const Dims& sa, const Dims& sb, F f) {
  const int64_t n = prod(out);
  const size_t r = out.size();
  Dims idx(r, 0);
  int64_t oa = 0, ob = 0;
  for (int64_t i = 0; i < n; ++i) {
    f(i, oa, ob);
    for (size_t k = r; k-- > 0;) {
      ++idx[k];
      oa += sa[k];
      ob += sb[k];
      if (idx[k] < out[k]) break;
      oa -= sa[k] * idx[k];
      ob -= sb[k] * idx[k];
      idx[k] = 0;
    }
  }
}

constexpr double kGeluS = 0.7978845608028654;  // sqrt(2/pi)

template <class T>
T unary_f(const std::string& fn, T x) {
  if (fn == "relu") return x > T(0) ? x : T(0);
  if (fn == "silu") return x / (T(1) + std::exp(-x));
  if (fn == "tanh") return std::tanh(x);
  if (fn == "exp") return std::exp(x);
  // gelu, tanh form
  const T u = T(kGeluS) * (x + T(0.044715) * x * x * x);
  return T(0.5) * x * (T(1) + std::tanh(u));
}

template <class T>
T unary_d(const std::string& fn, T x) {
  if (fn == "relu") return x > T(0) ? T(1) : T(0);
  if (fn == "silu") {
    const T s = T(1) / (T(1) + std::exp(-x));
    return s * (T(1) + x * (T(1) - s));
  }
  if (fn == "tanh") {  // 1/cosh^2: 1 - tanh^2 cancels for |x| > 3 (6e-5 relative error in f32 at x = 4)
    const T c = std::cosh(x);
    return T(1) / (c * c);
  }
  if (fn == "exp") return std::exp(x);
  const T u = T(kGeluS) * (x + T(0.044715) * x * x * x);
  const T t = std::tanh(u);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * T(kGeluS) * (T(1) + T(3 * 0.044715) * x * x);
}

std::string unary_name(Kind k) {
  switch (k) {
    case Kind::Gelu: return "gelu";
    case Kind::Relu: return "relu";
    case Kind::Silu: return "silu";
    case Kind::Tanh: return "tanh";
    default: return "exp";
  }
}

// The generic loops, shared by both executors (T = double: the oracle; T = float: the kinds
// without a registry kernel). Index inputs are read through `I` (double or int32_t).
template <class T, class I>
struct Loops {
  const Node& n;
  const std::vector<const T*>& in;
  const std::vector<T*>& out;
  const std::vector<Dims>& is;
  const std::vector<Dims>& os;

  // b holds one row broadcast over a's leading dims (a bias: [N] or [1,...,N] against [...,N])
  bool row_broadcast() const {
    return is[0] == os[0] && !os[0].empty() && prod(is[1]) == os[0].back() && !is[1].empty() && is[1].back() == os[0].back();
  }
  void binary() {
    const T *a = in[0], *b = in[1];
    T* o = out[0];
    if (row_broadcast()) {  // the same element order as for_broadcast, without its index arithmetic
      const int64_t N = os[0].back(), R = prod(os[0]) / N;
      for (int64_t r = 0; r < R; ++r) {
        const T* ar = a + r * N;
        T* orow = o + r * N;
        switch (n.kind) {
          case Kind::Add: for (int64_t j = 0; j < N; ++j) orow[j] = ar[j] + b[j]; break;
          case Kind::Sub: for (int64_t j = 0; j < N; ++j) orow[j] = ar[j] - b[j]; break;
          default: for (int64_t j = 0; j < N; ++j) orow[j] = ar[j] * b[j]; break;
        }
      }
      return;
    }
    const Dims sa = bstrides(is[0], os[0]), sb = bstrides(is[1], os[0]);
    switch (n.kind) {
      case Kind::Add: for_broadcast(os[0], sa, sb, [&](int64_t i, int64_t x, int64_t y) { o[i] = a[x] + b[y]; }); break;
      case Kind::Sub: for_broadcast(os[0], sa, sb, [&](int64_t i, int64_t x, int64_t y) { o[i] = a[x] - b[y]; }); break;
      default: for_broadcast(os[0], sa, sb, [&](int64_t i, int64_t x, int64_t y) { o[i] = a[x] * b[y]; }); break;
    }
  }
  void scale() {
    const T alpha = static_cast<T>(n.attrs["alpha"].get<double>());
    const int64_t N = prod(os[0]);
    for (int64_t i = 0; i < N; ++i) out[0][i] = alpha * in[0][i];
  }
  void unary() {
    const std::string fn = unary_name(n.kind);
    const int64_t N = prod(os[0]);
    for (int64_t i = 0; i < N; ++i) out[0][i] = unary_f<T>(fn, in[0][i]);
  }
  void unary_grad() {
    const std::string fn = n.attrs["fn"];
    const int64_t N = prod(os[0]);
    for (int64_t i = 0; i < N; ++i) out[0][i] = in[1][i] * unary_d<T>(fn, in[0][i]);
  }
  void reduce() {  // sum / mean over one axis, accumulated in double in index order
    const int ax = n.attrs["axis"].get<int>();
    const int64_t outer = prod(is[0], 0, ax), R = is[0][ax], inner = prod(is[0], ax + 1);
    const double div = n.kind == Kind::Mean ? static_cast<double>(R) : 1.0;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < inner; ++j) {
        double s = 0;
        for (int64_t r = 0; r < R; ++r) s += in[0][(o * R + r) * inner + j];
        out[0][o * inner + j] = static_cast<T>(s / div);
      }
  }
  void copy() { std::memmove(out[0], in[0], sizeof(T) * prod(os[0])); }
  void transpose() {
    const auto perm = n.attrs["perm"].get<std::vector<int>>();
    const size_t r = perm.size();
    Dims ist(r), st(r);
    int64_t s = 1;
    for (size_t k = r; k-- > 0;) {
      ist[k] = s;
      s *= is[0][k];
    }
    for (size_t k = 0; k < r; ++k) st[k] = ist[perm[k]];
    const Dims zero(r, 0);
    const T* x = in[0];
    T* o = out[0];
    for_broadcast(os[0], st, zero, [&](int64_t i, int64_t a, int64_t) { o[i] = x[a]; });
  }
  void broadcast() {
    const Dims sa = bstrides(is[0], os[0]), z(os[0].size(), 0);
    const T* x = in[0];
    T* o = out[0];
    for_broadcast(os[0], sa, z, [&](int64_t i, int64_t a, int64_t) { o[i] = x[a]; });
  }
  void sum_to() {  // out[j] = sum of the x elements that broadcast from j, in x's index order, in double
    std::vector<double> acc(prod(os[0]), 0.0);
    const T* x = in[0];
    if (!is[0].empty() && !os[0].empty() && os[0].back() == is[0].back() && prod(os[0]) == is[0].back()) {
      // column sums (a bias gradient: [...,N] -> [N]): rows in order, as for_broadcast visits them
      const int64_t N = is[0].back(), R = prod(is[0]) / N;
      for (int64_t r = 0; r < R; ++r)
        for (int64_t j = 0; j < N; ++j) acc[j] += x[r * N + j];
      for (size_t j = 0; j < acc.size(); ++j) out[0][j] = static_cast<T>(acc[j]);
      return;
    }
    const Dims sa = bstrides(os[0], is[0]), z(is[0].size(), 0);
    for_broadcast(is[0], sa, z, [&](int64_t i, int64_t a, int64_t) { acc[a] += x[i]; });
    for (size_t j = 0; j < acc.size(); ++j) out[0][j] = static_cast<T>(acc[j]);
  }
  void full() {
    const T v = static_cast<T>(n.attrs["value"].get<double>());
    std::fill(out[0], out[0] + prod(os[0]), v);
  }
  void softmax_backward() {
    const int64_t C = is[0].back(), N = prod(is[0]) / C;
    for (int64_t r = 0; r < N; ++r) {
      const T *y = in[0] + r * C, *dy = in[1] + r * C;
      double d = 0;
      for (int64_t c = 0; c < C; ++c) d += static_cast<double>(dy[c]) * y[c];
      for (int64_t c = 0; c < C; ++c) out[0][r * C + c] = static_cast<T>(y[c] * (dy[c] - d));
    }
  }
  void gather() {
    const int64_t S = is[0][0], row = prod(is[0], 1), E = prod(is[1]);
    const I* ids = reinterpret_cast<const I*>(in[1]);
    for (int64_t e = 0; e < E; ++e) {
      const int64_t s = check_index(static_cast<double>(ids[e]), S, n, "gather id");
      std::memcpy(out[0] + e * row, in[0] + s * row, sizeof(T) * row);
    }
  }
  void segment_sum() {
    const int64_t E = is[0][0], row = prod(is[0], 1), S = os[0][0];
    const I* ids = reinterpret_cast<const I*>(in[1]);
    std::vector<double> acc(static_cast<size_t>(S * row), 0.0);
    for (int64_t e = 0; e < E; ++e) {
      const int64_t s = check_index(static_cast<double>(ids[e]), S, n, "segment id");
      for (int64_t j = 0; j < row; ++j) acc[s * row + j] += in[0][e * row + j];
    }
    for (size_t j = 0; j < acc.size(); ++j) out[0][j] = static_cast<T>(acc[j]);
  }
};

// ---------------------------------------------------------------- float64 references of the kernel kinds

void matmul_f64(const Node& n, const double* a, const double* b, double* o, const Dims& as, const Dims& bs) {
  const bool ta = n.attrs.value("ta", false), tb = n.attrs.value("tb", false);
  const size_t r = as.size();
  const int64_t M = ta ? as[1] : prod(as, 0, static_cast<int64_t>(r) - 1), K = ta ? as[0] : as[r - 1];
  const int64_t N = tb ? bs[0] : bs[1];
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += (ta ? a[k * M + i] : a[i * K + k]) * (tb ? b[j * K + k] : b[k * N + j]);
      o[i * N + j] = s;
    }
}

void softmax_f64(const double* x, double* y, int64_t N, int64_t C) {
  for (int64_t r = 0; r < N; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < C; ++c) m = std::max(m, x[r * C + c]);
    for (int64_t c = 0; c < C; ++c) s += std::exp(x[r * C + c] - m);
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = std::exp(x[r * C + c] - m) / s;
  }
}

void layernorm_f64(const double* x, const double* w, const double* b, double* y, double* mean, double* rstd, int64_t N, int64_t C) {
  kernels::reference::layernorm_forward(x, w, b, y, mean, rstd, N, C);
}

void layernorm_backward_f64(const double* dy, const double* x, const double* w, const double* mean, const double* rstd,
                            double* dx, double* dw, double* db, int64_t N, int64_t C) {
  for (int64_t r = 0; r < N; ++r) {
    double a = 0, b = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double norm = (x[r * C + c] - mean[r]) * rstd[r], dn = w[c] * dy[r * C + c];
      a += dn;
      b += dn * norm;
    }
    a /= C;
    b /= C;
    for (int64_t c = 0; c < C; ++c) {
      const double norm = (x[r * C + c] - mean[r]) * rstd[r], dn = w[c] * dy[r * C + c];
      dx[r * C + c] = rstd[r] * (dn - a - norm * b);
      dw[c] += norm * dy[r * C + c];
      db[c] += dy[r * C + c];
    }
  }
}

// Causal MHA, llm.c layout: qkv (B,T,3C) = [q | k | v], head h at h*HS; scale 1/sqrt(HS).
void attention_f64(const double* qkv, double* out, double* lse, int64_t B, int64_t T, int64_t NH, int64_t HS) {
  const int64_t C = NH * HS;
  const double sc = 1.0 / std::sqrt(static_cast<double>(HS));
  std::vector<double> s(T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const double* q = qkv + (b * T + t) * 3 * C + h * HS;
        double m = -INFINITY;
        for (int64_t u = 0; u <= t; ++u) {
          const double* k = qkv + (b * T + u) * 3 * C + C + h * HS;
          double d = 0;
          for (int64_t i = 0; i < HS; ++i) d += q[i] * k[i];
          s[u] = d * sc;
          m = std::max(m, s[u]);
        }
        double z = 0;
        for (int64_t u = 0; u <= t; ++u) z += std::exp(s[u] - m);
        const double l = m + std::log(z);
        lse[(b * NH + h) * T + t] = l;
        double* o = out + (b * T + t) * C + h * HS;
        for (int64_t i = 0; i < HS; ++i) o[i] = 0;
        for (int64_t u = 0; u <= t; ++u) {
          const double p = std::exp(s[u] - l);
          const double* v = qkv + (b * T + u) * 3 * C + 2 * C + h * HS;
          for (int64_t i = 0; i < HS; ++i) o[i] += p * v[i];
        }
      }
}

void attention_backward_f64(const double* dout, const double* qkv, double* dqkv, int64_t B, int64_t T, int64_t NH, int64_t HS) {
  const int64_t C = NH * HS;
  const double sc = 1.0 / std::sqrt(static_cast<double>(HS));
  std::vector<double> p(T), dp(T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const double* q = qkv + (b * T + t) * 3 * C + h * HS;
        const double* dO = dout + (b * T + t) * C + h * HS;
        double m = -INFINITY;
        for (int64_t u = 0; u <= t; ++u) {
          const double* k = qkv + (b * T + u) * 3 * C + C + h * HS;
          double d = 0;
          for (int64_t i = 0; i < HS; ++i) d += q[i] * k[i];
          p[u] = d * sc;
          m = std::max(m, p[u]);
        }
        double z = 0;
        for (int64_t u = 0; u <= t; ++u) z += (p[u] = std::exp(p[u] - m));
        double D = 0;
        for (int64_t u = 0; u <= t; ++u) {
          p[u] /= z;
          const double* v = qkv + (b * T + u) * 3 * C + 2 * C + h * HS;
          double d = 0;
          for (int64_t i = 0; i < HS; ++i) d += dO[i] * v[i];
          dp[u] = d;
          D += p[u] * d;
        }
        double* dq = dqkv + (b * T + t) * 3 * C + h * HS;
        for (int64_t u = 0; u <= t; ++u) {
          const double ds = p[u] * (dp[u] - D) * sc;
          const double* k = qkv + (b * T + u) * 3 * C + C + h * HS;
          double* dk = dqkv + (b * T + u) * 3 * C + C + h * HS;
          double* dv = dqkv + (b * T + u) * 3 * C + 2 * C + h * HS;
          for (int64_t i = 0; i < HS; ++i) {
            dq[i] += ds * k[i];
            dk[i] += ds * q[i];
            dv[i] += p[u] * dO[i];
          }
        }
      }
}

// The fused chain's reference: each element through the steps in double; a layernorm tail over
// each row of the chain's values (layernorm_f64).
void fused_f64(const Node& n, const std::vector<const double*>& in, const std::vector<double*>& out, const std::vector<Dims>& is) {
  FusedProgram p;
  if (const std::string why = parse_fused(n.attrs, in.size(), p); !why.empty()) throw_input(why, where_of(n));
  const Dims& S = is[0];
  const int64_t N = S.back(), R = prod(S) / N;
  std::vector<double> val(p.steps.size()), xrow(static_cast<size_t>(N));
  const size_t ne = p.emit.size();
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t j = 0; j < N; ++j) {
      auto arg = [&](int a) {
        if (a < 0) return val[static_cast<size_t>(-a - 1)];
        const size_t k = static_cast<size_t>(a);
        return is[k] == S ? in[k][r * N + j] : in[k][j];
      };
      for (size_t k = 0; k < p.steps.size(); ++k) {
        const FusedStep& st = p.steps[k];
        switch (st.kind) {
          case Kind::Add: val[k] = arg(st.args[0]) + arg(st.args[1]); break;
          case Kind::Sub: val[k] = arg(st.args[0]) - arg(st.args[1]); break;
          case Kind::Mul: val[k] = arg(st.args[0]) * arg(st.args[1]); break;
          case Kind::Scale: val[k] = st.alpha * arg(st.args[0]); break;
          case Kind::LayerNorm: xrow[static_cast<size_t>(j)] = arg(st.args[0]); break;
          default: val[k] = unary_f<double>(unary_name(st.kind), arg(st.args[0])); break;
        }
      }
      for (size_t e = 0; e < ne; ++e) out[e][r * N + j] = val[static_cast<size_t>(p.emit[e])];
    }
    if (p.layernorm_tail()) {
      const FusedStep& ln = p.steps.back();
      layernorm_f64(xrow.data(), in[static_cast<size_t>(ln.args[1])], in[static_cast<size_t>(ln.args[2])], out[ne] + r * N, out[ne + 1] + r,
                    out[ne + 2] + r, 1, N);
    }
  }
}

// The fused chain in f32, composed from the step kernels over tiles of whole rows
// (fused_tile_rows): each step runs on the tile (binary and scale steps as plain loops, gelu and
// layernorm through the registry kernels the unfused nodes use), so the tile's intermediates stay
// in cache and the steps not emitted never reach the arena. Tiles are fixed-size and independent:
// parallel over tiles, the same bits at any thread count.
void fused_f32(const Node& n, const std::vector<const float*>& in, const std::vector<float*>& out, const std::vector<Dims>& is) {
  FusedProgram p;
  if (const std::string why = parse_fused(n.attrs, in.size(), p); !why.empty()) throw_input(why, where_of(n));
  const Dims& S = is[0];
  const int64_t N = S.back(), R = prod(S) / N, TR = fused_tile_rows(N), tiles = (R + TR - 1) / TR;
  const size_t ns = p.steps.size(), ne = p.emit.size();
  std::vector<int> emit_at(ns, -1);
  for (size_t e = 0; e < ne; ++e) emit_at[static_cast<size_t>(p.emit[e])] = static_cast<int>(e);
  std::vector<bool> row_in(in.size());
  for (size_t k = 0; k < in.size(); ++k) row_in[k] = is[k] != S;
#pragma omp parallel if (tiles > 1)
  {
    std::vector<float> scratch(ns * static_cast<size_t>(TR * N));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t r0 = t * TR, rows = std::min(TR, R - r0), cnt = rows * N;
      std::vector<float*> dst(ns);
      for (size_t k = 0; k < ns; ++k)
        dst[k] = emit_at[k] >= 0 ? out[static_cast<size_t>(emit_at[k])] + r0 * N : scratch.data() + k * static_cast<size_t>(TR * N);
      // operand a's row r of this tile, and whether it is one row broadcast
      auto src = [&](int a, int64_t r) -> const float* {
        if (a < 0) return dst[static_cast<size_t>(-a - 1)] + r * N;
        const size_t k = static_cast<size_t>(a);
        return row_in[k] ? in[k] : in[k] + (r0 + r) * N;
      };
      for (size_t k = 0; k < ns; ++k) {
        const FusedStep& st = p.steps[k];
        float* d = dst[k];
        switch (st.kind) {
          case Kind::Add: case Kind::Sub: case Kind::Mul:
            for (int64_t r = 0; r < rows; ++r) {
              const float *a = src(st.args[0], r), *b = src(st.args[1], r);
              float* o = d + r * N;
              if (st.kind == Kind::Add)
                for (int64_t j = 0; j < N; ++j) o[j] = a[j] + b[j];
              else if (st.kind == Kind::Sub)
                for (int64_t j = 0; j < N; ++j) o[j] = a[j] - b[j];
              else
                for (int64_t j = 0; j < N; ++j) o[j] = a[j] * b[j];
            }
            break;
          case Kind::Scale: {
            const float alpha = static_cast<float>(st.alpha);
            for (int64_t r = 0; r < rows; ++r) {
              const float* a = src(st.args[0], r);
              for (int64_t j = 0; j < N; ++j) d[r * N + j] = alpha * a[j];
            }
            break;
          }
          case Kind::Gelu: kernels::gelu_forward(d, src(st.args[0], 0), cnt); break;
          case Kind::LayerNorm:
            kernels::layernorm_forward(out[ne] + r0 * N, out[ne + 1] + r0, out[ne + 2] + r0, src(st.args[0], 0), in[static_cast<size_t>(st.args[1])],
                                       in[static_cast<size_t>(st.args[2])], rows, N);
            break;
          default: {  // relu, silu, tanh, exp: the f32 loops of the unfused kinds
            const float* a = src(st.args[0], 0);
            switch (st.kind) {
              case Kind::Relu: for (int64_t i = 0; i < cnt; ++i) d[i] = a[i] > 0.0f ? a[i] : 0.0f; break;
              case Kind::Silu: for (int64_t i = 0; i < cnt; ++i) d[i] = a[i] / (1.0f + std::exp(-a[i])); break;
              case Kind::Tanh: for (int64_t i = 0; i < cnt; ++i) d[i] = std::tanh(a[i]); break;
              default: for (int64_t i = 0; i < cnt; ++i) d[i] = std::exp(a[i]); break;
            }
          }
        }
      }
    }
  }
}

void run_node_f64(const Node& n, const std::vector<const double*>& in, const std::vector<double*>& out,
                  const std::vector<Dims>& is, const std::vector<Dims>& os) {
  Loops<double, double> L{n, in, out, is, os};
  switch (n.kind) {
    case Kind::Input: break;
    case Kind::Full: L.full(); break;
    case Kind::MatMul:
      matmul_f64(n, in[0], in[1], out[0], is[0], is[1]);
      if (in.size() == 3) {  // bias (fuse_matmul_bias)
        const int64_t N = os[0].back(), R = prod(os[0]) / N;
        for (int64_t r = 0; r < R; ++r)
          for (int64_t j = 0; j < N; ++j) out[0][r * N + j] += in[2][j];
      }
      break;
    case Kind::Fused: fused_f64(n, in, out, is); break;
    case Kind::Add: case Kind::Sub: case Kind::Mul: L.binary(); break;
    case Kind::Scale: L.scale(); break;
    case Kind::Gelu: case Kind::Relu: case Kind::Silu: case Kind::Tanh: case Kind::Exp: L.unary(); break;
    case Kind::Sum: case Kind::Mean: L.reduce(); break;
    case Kind::Reshape: L.copy(); break;
    case Kind::Transpose: L.transpose(); break;
    case Kind::Broadcast: L.broadcast(); break;
    case Kind::SumTo: L.sum_to(); break;
    case Kind::Softmax: softmax_f64(in[0], out[0], prod(is[0]) / is[0].back(), is[0].back()); break;
    case Kind::LayerNorm:
      layernorm_f64(in[0], in[1], in[2], out[0], out[1], out[2], prod(is[0]) / is[0].back(), is[0].back());
      break;
    case Kind::Attention: {
      const int64_t NH = n.attrs["NH"];
      attention_f64(in[0], out[0], out[1], is[0][0], is[0][1], NH, is[0][2] / 3 / NH);
      break;
    }
    case Kind::Gather: L.gather(); break;
    case Kind::SegmentSum: L.segment_sum(); break;
    case Kind::Encoder: {
      const int64_t B = is[0][0], T = is[0][1], V = is[1][0], C = is[1][1], P = is[2][0];
      if (T > P) throw_input(where_of(n) + ": T=" + std::to_string(T) + " exceeds wpe's " + std::to_string(P) + " positions", where_of(n));
      for (int64_t bt = 0; bt < B * T; ++bt) {
        const int64_t id = check_index(in[0][bt], V, n, "token id");
        for (int64_t c = 0; c < C; ++c) out[0][bt * C + c] = in[1][id * C + c] + in[2][(bt % T) * C + c];
      }
      break;
    }
    case Kind::CrossEntropy: {
      const int64_t V = is[0].back(), N = prod(is[0]) / V;
      for (int64_t r = 0; r < N; ++r) {
        const double* x = in[0] + r * V;
        const int64_t t = check_index(in[1][r], V, n, "target");
        double m = -INFINITY, z = 0;
        for (int64_t v = 0; v < V; ++v) m = std::max(m, x[v]);
        for (int64_t v = 0; v < V; ++v) z += std::exp(x[v] - m);
        out[0][r] = m + std::log(z) - x[t];
      }
      break;
    }
    case Kind::UnaryGrad: L.unary_grad(); break;
    case Kind::SoftmaxBackward: L.softmax_backward(); break;
    case Kind::LayerNormBackward:
      layernorm_backward_f64(in[0], in[1], in[2], in[3], in[4], out[0], out[1], out[2], prod(is[1]) / is[1].back(), is[1].back());
      break;
    case Kind::AttentionBackward: {
      const int64_t NH = n.attrs["NH"];
      attention_backward_f64(in[0], in[1], out[0], is[1][0], is[1][1], NH, is[1][2] / 3 / NH);
      break;
    }
    case Kind::EncoderBackward: {
      const int64_t B = is[0][0], T = is[0][1], C = is[0][2], V = os[0][0], P = os[1][0];
      if (T > P) throw_input(where_of(n) + ": T exceeds P", where_of(n));
      for (int64_t bt = 0; bt < B * T; ++bt) {
        const int64_t id = check_index(in[1][bt], V, n, "token id");
        for (int64_t c = 0; c < C; ++c) {
          out[0][id * C + c] += in[0][bt * C + c];
          out[1][(bt % T) * C + c] += in[0][bt * C + c];
        }
      }
      break;
    }
    case Kind::CrossEntropyBackward: {
      const int64_t V = is[1].back(), N = prod(is[1]) / V;
      for (int64_t r = 0; r < N; ++r) {
        softmax_f64(in[1] + r * V, out[0] + r * V, 1, V);
        const int64_t t = check_index(in[2][r], V, n, "target");
        out[0][r * V + t] -= 1.0;
        for (int64_t v = 0; v < V; ++v) out[0][r * V + v] *= in[0][r];
      }
      break;
    }
  }
}

std::array<F32Kernel, kNumKinds>& hooks() {
  static std::array<F32Kernel, kNumKinds> h;
  return h;
}

int to_int(int64_t v, const Node& n, const char* what) {
  if (v > INT32_MAX) throw_input(std::string(what) + " = " + std::to_string(v) + " exceeds the kernel's int range", where_of(n));
  return static_cast<int>(v);
}

// Does this kind's f32 implementation accumulate (+=) into its outputs (zero them first)?
bool accumulates(Kind k) {
  return k == Kind::LayerNormBackward || k == Kind::AttentionBackward || k == Kind::EncoderBackward;
}

void run_node_f32(const Node& n, const std::vector<const float*>& in, const std::vector<float*>& out,
                  const std::vector<Dims>& is, const std::vector<Dims>& os, const kernels::MatmulParams* mm) {
  using namespace rtx::kernels;
  if (const auto& h = hooks()[static_cast<int>(n.kind)]) {
    F32Args a{&n, in, out, is, os};
    h(a);
    return;
  }
  Loops<float, int32_t> L{n, in, out, is, os};
  switch (n.kind) {
    case Kind::Input: break;
    case Kind::Full: L.full(); break;
    case Kind::MatMul: {
      // registry kernel over the strided operands (no transposed copies): a (M,K) or (K,M), b (K,N) or (N,K)
      const bool ta = n.attrs.value("ta", false), tb = n.attrs.value("tb", false);
      const size_t r = is[0].size();
      const int64_t M = ta ? is[0][1] : prod(is[0], 0, static_cast<int64_t>(r) - 1), K = ta ? is[0][0] : is[0][r - 1];
      const int64_t N = tb ? is[1][0] : is[1][1];
      matmul_forward_t(out[0], in[0], ta, in[1], tb, in.size() == 3 ? in[2] : nullptr, to_int(M, n, "M"), to_int(N, n, "N"),
                       to_int(K, n, "K"), false, mm);
      break;
    }
    case Kind::Fused: fused_f32(n, in, out, is); break;
    case Kind::Add:
      if (is[0] == is[1]) residual_forward(out[0], in[0], in[1], prod(os[0]));
      else L.binary();
      break;
    case Kind::Sub: case Kind::Mul: L.binary(); break;
    case Kind::Scale: L.scale(); break;
    case Kind::Gelu: gelu_forward(out[0], in[0], prod(os[0])); break;
    case Kind::Relu: case Kind::Silu: case Kind::Tanh: case Kind::Exp: L.unary(); break;
    case Kind::Sum: case Kind::Mean: L.reduce(); break;
    case Kind::Reshape: if (out[0] != in[0]) L.copy(); break;
    case Kind::Transpose: L.transpose(); break;
    case Kind::Broadcast: L.broadcast(); break;
    case Kind::SumTo: L.sum_to(); break;
    case Kind::Softmax: softmax_forward(out[0], in[0], prod(is[0]) / is[0].back(), is[0].back()); break;
    case Kind::LayerNorm:
      layernorm_forward(out[0], out[1], out[2], in[0], in[1], in[2], prod(is[0]) / is[0].back(), is[0].back());
      break;
    case Kind::Attention: {
      const int64_t NH = n.attrs["NH"];
      attention_forward(out[0], in[0], is[0][0], is[0][1], NH, is[0][2] / 3 / NH, nullptr, out[1]);
      break;
    }
    case Kind::Gather: L.gather(); break;
    case Kind::SegmentSum: L.segment_sum(); break;
    case Kind::Encoder: {
      const int64_t B = is[0][0], T = is[0][1], V = is[1][0], C = is[1][1], P = is[2][0];
      if (T > P) throw_input(where_of(n) + ": T=" + std::to_string(T) + " exceeds wpe's " + std::to_string(P) + " positions", where_of(n));
      encoder_forward(out[0], reinterpret_cast<const int32_t*>(in[0]), in[1], in[2], B, T, C, V);
      break;
    }
    case Kind::CrossEntropy: {
      const int64_t V = is[0].back(), N = prod(is[0]) / V;
      crossentropy_forward(out[0], in[0], reinterpret_cast<const int32_t*>(in[1]), N, V);
      break;
    }
    case Kind::UnaryGrad:
      if (n.attrs["fn"] == "gelu") {
        std::fill(out[0], out[0] + prod(os[0]), 0.0f);
        gelu_backward(out[0], in[0], in[1], prod(os[0]));
      } else {
        L.unary_grad();
      }
      break;
    case Kind::SoftmaxBackward: L.softmax_backward(); break;
    case Kind::LayerNormBackward:
      layernorm_backward(out[0], out[1], out[2], in[0], in[1], in[2], in[3], in[4], prod(is[1]) / is[1].back(), is[1].back());
      break;
    case Kind::AttentionBackward: {
      const int64_t NH = n.attrs["NH"];
      attention_backward(out[0], in[0], in[1], is[1][0], is[1][1], NH, is[1][2] / 3 / NH, nullptr, in[2], in[3]);
      break;
    }
    case Kind::EncoderBackward: {
      const int64_t B = is[0][0], T = is[0][1], C = is[0][2], V = os[0][0], P = os[1][0];
      if (T > P) throw_input(where_of(n) + ": T exceeds P", where_of(n));
      // the kernel's dwpe has T rows; rows T..P-1 stay zero
      encoder_backward(out[0], out[1], in[0], reinterpret_cast<const int32_t*>(in[1]), B, T, C, V);
      break;
    }
    case Kind::CrossEntropyBackward: {
      // registry kernel (dloss = 1/N per row), rescaled per row to dlosses[n] when that differs
      const int64_t V = is[1].back(), N = prod(is[1]) / V;
      crossentropy_backward(out[0], in[1], reinterpret_cast<const int32_t*>(in[2]), N, V);
      const float inv = 1.0f / static_cast<float>(N);
      for (int64_t r = 0; r < N; ++r)
        if (in[0][r] != inv) {
          const float f = in[0][r] * static_cast<float>(N);
          for (int64_t v = 0; v < V; ++v) out[0][r * V + v] *= f;
        }
      break;
    }
  }
}

void check_feeds(const Graph& g, const Bindings& b, const Feeds& feeds) {
  for (int v : g.inputs()) {
    const Value& x = g.value(v);
    auto it = feeds.find(x.name);
    if (it == feeds.end()) throw_input("no feed for input '" + x.name + "'", "graph '" + g.name() + "'");
    const int64_t n = eval_numel(x.shape, b);
    if (static_cast<int64_t>(it->second.size()) != n)
      throw_input("feed '" + x.name + "' has " + std::to_string(it->second.size()) + " elements, input " + shape_str(x.shape) +
                      " needs " + std::to_string(n),
                  "graph '" + g.name() + "'");
  }
  for (const auto& [name, _] : feeds)
    if (g.find_input(name) < 0) throw_input("feed '" + name + "' names no input of the graph", "graph '" + g.name() + "'");
}

}  // namespace

void set_f32_kernel(Kind kind, F32Kernel k) { hooks()[static_cast<int>(kind)] = std::move(k); }

std::vector<std::vector<double>> interpret_f64(const Graph& g, const Bindings& b, const Feeds& feeds) {
  check_feeds(g, b, feeds);
  std::vector<std::vector<double>> val(g.values().size());
  for (int nid : schedule(g)) {
    const Node& n = g.node(nid);
    std::vector<const double*> in;
    std::vector<double*> out;
    std::vector<Dims> is, os;
    for (int i : n.inputs) {
      in.push_back(val[i].data());
      is.push_back(eval(g.value(i).shape, b));
    }
    for (int o : n.outputs) {
      const Value& v = g.value(o);
      os.push_back(eval(v.shape, b));
      val[o].assign(static_cast<size_t>(prod(os.back())), 0.0);
      out.push_back(val[o].data());
    }
    if (n.kind == Kind::Input) {
      val[n.outputs[0]] = feeds.at(g.value(n.outputs[0]).name);
      if (g.value(n.outputs[0]).dtype == DType::I32)
        for (double x : val[n.outputs[0]])
          if (x != std::floor(x) || std::fabs(x) > 2147483647.0)
            throw_input("feed '" + g.value(n.outputs[0]).name + "' is i32 but holds " + std::to_string(x), "graph '" + g.name() + "'");
      continue;
    }
    run_node_f64(n, in, out, is, os);
  }
  return val;
}

Executor::Executor(const Graph& g, const Bindings& b, const ExecOptions& opt) : g_(g), opt_(opt) {
  plan_ = ir::plan(g, b, opt.plan);
  const size_t arena = static_cast<size_t>(std::max<int64_t>(plan_.arena_bytes, 64));
  arena_ = static_cast<float*>(std::aligned_alloc(64, (arena + 63) / 64 * 64));
  if (!arena_) throw_env("cannot allocate the graph arena (" + std::to_string(arena) + " B)", "graph '" + g.name() + "'");
  bound_.assign(g.values().size(), nullptr);
  shape_.reserve(g.values().size());
  for (const Value& v : g.values()) shape_.push_back(eval(v.shape, b));
}

Executor::~Executor() { std::free(arena_); }

void Executor::bind(int v, float* p) {
  if (v < 0 || v >= static_cast<int>(bound_.size()) || plan_.ext[static_cast<size_t>(v)] != v)
    throw_usage("value " + std::to_string(v) + " is not external (PlanOptions::external)", "Executor::bind, graph '" + g_.name() + "'");
  if (!p) throw_usage("null pointer for value " + std::to_string(v), "Executor::bind, graph '" + g_.name() + "'");
  bound_[static_cast<size_t>(v)] = p;
}

float* Executor::data(int v) {
  if (v < 0 || v >= static_cast<int>(bound_.size()))
    throw_usage("no value " + std::to_string(v), "Executor::data, graph '" + g_.name() + "'");
  const int e = plan_.ext[static_cast<size_t>(v)];
  if (e >= 0) return bound_[static_cast<size_t>(e)];
  return reinterpret_cast<float*>(reinterpret_cast<char*>(arena_) + plan_.offset[static_cast<size_t>(v)]);
}

size_t Executor::position_of(int n) const {
  size_t best = plan_.order.size();
  for (size_t i = 0; i < plan_.order.size(); ++i)
    if (plan_.order[i] >= n && (best == plan_.order.size() || plan_.order[i] < plan_.order[best])) best = i;
  return best;
}

void Executor::run(size_t begin, size_t end) {
  const Plan& p = plan_;
  end = std::min(end, p.order.size());
  if (begin > end) throw_usage("run range [" + std::to_string(begin) + ", " + std::to_string(end) + ") is empty or reversed", "Executor::run, graph '" + g_.name() + "'");
  const bool tel = opt_.telemetry && telemetry::enabled();
  if (tel && !captured_) {
    captured_ = true;
    telemetry::publish(telemetry::topic::graph_capture,
                       json{{"graph", g_.name()}, {"hash", graph_hash(g_)}, {"nodes", g_.nodes().size()}, {"values", g_.values().size()},
                            {"arena_bytes", p.arena_bytes}, {"sum_bytes", p.sum_bytes}, {"inplace", p.inplace}, {"views", p.views},
                            {"executor", "cpu.f32"}});
  }
  for (size_t pos = begin; pos < end; ++pos) {
    const Node& n = g_.node(p.order[pos]);
    if (n.kind == Kind::Input) continue;
    in_.clear();
    out_.clear();
    is_.clear();
    os_.clear();
    for (int i : n.inputs) {
      in_.push_back(data(i));
      is_.push_back(shape_[static_cast<size_t>(i)]);
    }
    for (int o : n.outputs) {
      out_.push_back(data(o));
      os_.push_back(shape_[static_cast<size_t>(o)]);
    }
    for (size_t k = 0; k < in_.size(); ++k)
      if (!in_[k]) throw_usage("external value " + std::to_string(n.inputs[k]) + " is not bound", "Executor::run, " + where_of(n));
    for (size_t k = 0; k < out_.size(); ++k)
      if (!out_[k]) throw_usage("external value " + std::to_string(n.outputs[k]) + " is not bound", "Executor::run, " + where_of(n));
    if (accumulates(n.kind) || hooks()[static_cast<int>(n.kind)])
      for (size_t k = 0; k < out_.size(); ++k)
        if (p.shares[n.outputs[k]] < 0) std::memset(out_[k], 0, static_cast<size_t>(p.bytes[n.outputs[k]]));
    if (tel) {
      telemetry::ScopedSpan span(std::string("ir.") + kind_name(n.kind),
                                 json{{"node", n.id}, {"graph", g_.name()}, {"shape", shape_str(g_.value(n.outputs[0]).shape)},
                                      {"name", g_.value(n.outputs[0]).name}});
      run_node_f32(n, in_, out_, is_, os_, &opt_.matmul);
    } else {
      run_node_f32(n, in_, out_, is_, os_, &opt_.matmul);
    }
  }
}

ExecResult run_f32(const Graph& g, const Bindings& b, const Feeds& feeds, const ExecOptions& opt) {
  check_feeds(g, b, feeds);
  ExecOptions o = opt;
  o.plan.external.clear();  // run_f32 owns every buffer
  Executor ex(g, b, o);
  for (int vid : g.inputs()) {
    const Value& v = g.value(vid);
    const auto& f = feeds.at(v.name);
    float* dst = ex.data(vid);
    if (v.dtype == DType::I32) {
      int32_t* q = reinterpret_cast<int32_t*>(dst);
      for (size_t i = 0; i < f.size(); ++i) {
        if (f[i] != std::floor(f[i]) || std::fabs(f[i]) > 2147483647.0)
          throw_input("feed '" + v.name + "' is i32 but holds " + std::to_string(f[i]), "graph '" + g.name() + "'");
        q[i] = static_cast<int32_t>(f[i]);
      }
    } else {
      for (size_t i = 0; i < f.size(); ++i) dst[i] = static_cast<float>(f[i]);
    }
  }
  ex.run();
  ExecResult res;
  res.plan = ex.plan();
  for (int o2 : g.outputs()) {
    const Value& v = g.value(o2);
    const int64_t cnt = eval_numel(v.shape, b);
    std::vector<float> r(static_cast<size_t>(cnt));
    if (v.dtype == DType::I32) {
      const int32_t* q = reinterpret_cast<const int32_t*>(ex.data(o2));
      for (int64_t i = 0; i < cnt; ++i) r[i] = static_cast<float>(q[i]);
    } else {
      std::memcpy(r.data(), ex.data(o2), sizeof(float) * cnt);
    }
    res.outputs.push_back(std::move(r));
  }
  return res;
}

}  // namespace rtx::ir
