// Gpt2Decoder: GPT-2 forward over new positions only, with a per-layer KV cache (CPU, f32),
// built on the op library (layernorm, matmul, gelu, residual); attention over the cache is here.
#include "rtx/models/infer.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "rtx/core/error.hpp"
#include "rtx/kernels/ops.hpp"

namespace rtx::models {

namespace {

constexpr int kTensorsPerLayer = 12;

/// Offsets (floats) of every tensor of gpt2.hpp's canonical layout, in its order:
/// wte, wpe, 12 per layer, ln_f.weight, ln_f.bias; the last entry is the total.
std::vector<size_t> layout_offsets(const Gpt2Config& c) {
  const size_t C = c.n_embd, V = c.vocab_size, Tm = c.block_size;
  std::vector<size_t> sizes = {V * C, Tm * C};
  for (int l = 0; l < c.n_layer; ++l) {
    const size_t per_layer[kTensorsPerLayer] = {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C};
    sizes.insert(sizes.end(), per_layer, per_layer + kTensorsPerLayer);
  }
  sizes.push_back(C);
  sizes.push_back(C);
  std::vector<size_t> off(sizes.size() + 1, 0);
  for (size_t i = 0; i < sizes.size(); ++i) off[i + 1] = off[i] + sizes[i];
  return off;
}

using kernels::dot_fixed8;

}  // namespace

Gpt2Decoder::Gpt2Decoder(const Gpt2Config& cfg, const float* params, const DecoderParams& kp, int chunk)
    : cfg_(cfg), params_(params), kp_(kp), chunk_(chunk) {
  cfg_.validate();
  if (!params_)
    throw_input("Gpt2Decoder: the parameter pointer is null", "params",
                "pass gpt2_num_params(cfg) floats in the layout of gpt2.hpp");
  if (chunk_ < 1)
    throw_input("Gpt2Decoder: chunk = " + std::to_string(chunk_) + " must be >= 1", "chunk",
                "pass the most positions one forward pass processes (e.g. 64)");
  offsets_ = layout_offsets(cfg_);
  const size_t C = cfg_.n_embd, L = cfg_.n_layer, Tm = cfg_.block_size, ch = chunk_;
  kcache_.assign(L * Tm * C, 0.f);
  vcache_.assign(L * Tm * C, 0.f);
  x_.resize(ch * C);
  x2_.resize(ch * C);
  ln_.resize(ch * C);
  mean_.resize(ch);
  rstd_.resize(ch);
  qkv_.resize(ch * 3 * C);
  atty_.resize(ch * C);
  proj_.resize(ch * C);
  fch_.resize(ch * 4 * C);
  fcg_.resize(ch * 4 * C);
  scores_.resize(static_cast<size_t>(std::max(1, omp_get_max_threads())) * Tm);
  logits_.resize(cfg_.vocab_size);
}

size_t Gpt2Decoder::memory_bytes() const {
  const size_t floats = kcache_.size() + vcache_.size() + x_.size() + x2_.size() + ln_.size() + mean_.size() +
                        rstd_.size() + qkv_.size() + atty_.size() + proj_.size() + fch_.size() + fcg_.size() +
                        scores_.size() + logits_.size();
  return floats * sizeof(float);
}

void Gpt2Decoder::reset() { pos_ = 0; }

void Gpt2Decoder::check_tokens(const int32_t* ids, int n, const char* fn) const {
  if (n < 1) throw_input(std::string(fn) + ": n = " + std::to_string(n) + " must be >= 1", "n", "pass at least one token");
  if (!ids) throw_input(std::string(fn) + ": ids pointer is null", "ids", "pass n token ids");
  if (n > cfg_.block_size - pos_)
    throw_input(std::string(fn) + ": " + std::to_string(n) + " more position(s) after " + std::to_string(pos_) +
                    " exceed block_size " + std::to_string(cfg_.block_size),
                "block_size", "stop generating, or crop the context and reset() the decoder");
  for (int i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= cfg_.vocab_size)
      throw_input(std::string(fn) + ": token id ids[" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
                      " is outside [0, vocab_size=" + std::to_string(cfg_.vocab_size) + ")",
                  "ids", "token ids must come from the model's tokenizer");
}

const std::vector<float>& Gpt2Decoder::prefill(const int32_t* ids, int n) {
  check_tokens(ids, n, "Gpt2Decoder::prefill");
  const int saved = pos_;
  try {
    for (int done = 0; done < n; done += chunk_) forward_chunk(ids + done, std::min(chunk_, n - done));
  } catch (...) {
    pos_ = saved;  // a kernel error in a later chunk: the sequence is as before the call
    throw;
  }
  return logits_;
}

const std::vector<float>& Gpt2Decoder::step(int32_t token) {
  check_tokens(&token, 1, "Gpt2Decoder::step");
  forward_chunk(&token, 1);
  return logits_;
}

// Positions p0..p0+n-1 (p0 = pos_), ids already validated. Per layer (pre-LN block):
//   ln = LN1(x); qkv = ln Wqkv^T + b; K,V cache rows p0.. <- k,v; atty = attention(q, K, V);
//   x += atty Wproj^T + b; ln = LN2(x); x += gelu(ln Wfc^T + b) Wfcproj^T + b.
// Then logits (V) = LN_f(x[n-1]) wte^T (tied head).
void Gpt2Decoder::forward_chunk(const int32_t* ids, int n) {
  const int C = cfg_.n_embd, NH = cfg_.n_head, HS = C / NH, Tm = cfg_.block_size, V = cfg_.vocab_size;
  const int p0 = pos_;
  const kernels::MatmulParams* mp = &kp_.matmul;
  const kernels::OpParams* op = &kp_.elementwise;
  const auto P = [&](size_t idx) { return params_ + offsets_[idx]; };
  const float* wte = P(0);
  const float* wpe = P(1);

  float* x = x_.data();
  float* x2 = x2_.data();
  float* ln = ln_.data();
  float* qkv = qkv_.data();
  float* atty = atty_.data();
  float* proj = proj_.data();
  kernels::encoder_forward(x, ids, wte, wpe + static_cast<size_t>(p0) * C, 1, n, C, V);

  const int nthreads = std::max(1, omp_get_max_threads());
  if (scores_.size() < static_cast<size_t>(nthreads) * Tm) scores_.resize(static_cast<size_t>(nthreads) * Tm);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));

  for (int l = 0; l < cfg_.n_layer; ++l) {
    const size_t b = 2 + static_cast<size_t>(l) * kTensorsPerLayer;
    const float *ln1w = P(b + 0), *ln1b = P(b + 1), *attn_w = P(b + 2), *attn_b = P(b + 3);
    const float *aproj_w = P(b + 4), *aproj_b = P(b + 5), *ln2w = P(b + 6), *ln2b = P(b + 7);
    const float *fc_w = P(b + 8), *fc_b = P(b + 9), *fproj_w = P(b + 10), *fproj_b = P(b + 11);
    float* kc = kcache_.data() + static_cast<size_t>(l) * NH * Tm * HS;  // (NH, Tm, HS)
    float* vc = vcache_.data() + static_cast<size_t>(l) * NH * Tm * HS;

    kernels::layernorm_forward(ln, mean_.data(), rstd_.data(), x, ln1w, ln1b, n, C, op);
    kernels::matmul_forward(qkv, ln, attn_w, attn_b, n, 3 * C, C, mp);
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < NH; ++h) {
        const size_t row = (static_cast<size_t>(h) * Tm + p0 + t) * HS;
        std::memcpy(kc + row, qkv + static_cast<size_t>(t) * 3 * C + C + h * HS, sizeof(float) * HS);
        std::memcpy(vc + row, qkv + static_cast<size_t>(t) * 3 * C + 2 * C + h * HS, sizeof(float) * HS);
      }

    // Causal attention of the new queries over cache rows 0..p0+t, one (head, query) per item:
    // scores, max-subtracted softmax, weighted sum of V rows in order s = 0, 1, ...
    const double work = static_cast<double>(NH) * n * (p0 + n) * HS;
#pragma omp parallel if (work > 16384.0)
    {
      float* sc = scores_.data() + static_cast<size_t>(omp_get_thread_num()) * Tm;
#pragma omp for collapse(2) schedule(static)
      for (int h = 0; h < NH; ++h)
        for (int t = 0; t < n; ++t) {
          const float* q = qkv + static_cast<size_t>(t) * 3 * C + h * HS;
          const float* kh = kc + static_cast<size_t>(h) * Tm * HS;
          const float* vh = vc + static_cast<size_t>(h) * Tm * HS;
          const int S = p0 + t + 1;
          float mx = -std::numeric_limits<float>::infinity();
          for (int s = 0; s < S; ++s) {
            sc[s] = dot_fixed8(q, kh + static_cast<size_t>(s) * HS, HS) * scale;
            mx = std::max(mx, sc[s]);
          }
          float sum = 0.f;
          for (int s = 0; s < S; ++s) {
            sc[s] = std::exp(sc[s] - mx);
            sum += sc[s];
          }
          const float inv = 1.0f / sum;
          float* o = atty + static_cast<size_t>(t) * C + h * HS;
          for (int i = 0; i < HS; ++i) o[i] = 0.f;
          for (int s = 0; s < S; ++s) {
            const float w = sc[s] * inv;
            const float* vr = vh + static_cast<size_t>(s) * HS;
            for (int i = 0; i < HS; ++i) o[i] += w * vr[i];
          }
        }
    }

    kernels::matmul_forward(proj, atty, aproj_w, aproj_b, n, C, C, mp);
    kernels::residual_forward(x2, x, proj, static_cast<int64_t>(n) * C, op);
    std::swap(x, x2);
    kernels::layernorm_forward(ln, mean_.data(), rstd_.data(), x, ln2w, ln2b, n, C, op);
    kernels::matmul_forward(fch_.data(), ln, fc_w, fc_b, n, 4 * C, C, mp);
    kernels::gelu_forward(fcg_.data(), fch_.data(), static_cast<int64_t>(n) * 4 * C, op);
    kernels::matmul_forward(proj, fcg_.data(), fproj_w, fproj_b, n, C, 4 * C, mp);
    kernels::residual_forward(x2, x, proj, static_cast<int64_t>(n) * C, op);
    std::swap(x, x2);
  }

  const size_t f = 2 + static_cast<size_t>(cfg_.n_layer) * kTensorsPerLayer;
  kernels::layernorm_forward(ln, mean_.data(), rstd_.data(), x + static_cast<size_t>(n - 1) * C, P(f), P(f + 1), 1,
                             C, op);
  kernels::matmul_forward(logits_.data(), ln, wte, nullptr, 1, V, C, mp);
  pos_ = p0 + n;
}

}  // namespace rtx::models
