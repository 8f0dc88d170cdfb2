// Llama for rtx-serve (rtx/serve/llama.hpp): GGUF loading and the batched forward over a paged
// KV cache, CPU f32. The tokenizer is in llama_tokenizer.cpp.
//
// Shape letters: M rows (all new tokens of all sequences in a call), C dim, NH query heads,
// NKV key/value heads, HS head size, F ffn dim, V vocab, R = n_rot / 2 rotated pairs per head.
#include "rtx/serve/llama.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <optional>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/core/events.hpp"
#include "rtx/kernels/matmul.hpp"
#include "rtx/kernels/ops.hpp"
#include "rtx/serve/attention.hpp"
#include "rtx/telemetry/bus.hpp"
#include "serve/cuda_models.hpp"

namespace rtx::serve {

namespace {

using kernels::dot_fixed8;

/// out (C) = x (C) / sqrt(mean(x^2) + eps) * w (C)  (RMSNorm, Zhang & Sennrich 2019).
inline void rmsnorm_row(float* out, const float* x, const float* w, int C, float eps) {
  const float ms = dot_fixed8(x, x, C) / static_cast<float>(C);
  const float s = 1.0f / std::sqrt(ms + eps);
  for (int i = 0; i < C; ++i) out[i] = x[i] * s * w[i];
}

std::string shape_str(const std::vector<uint64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

/// Tensor `name` of `f` after checking that it exists, that its type can be read and its
/// extents (ggml order). Error(Input) naming the file and tensor otherwise.
const io::GgufTensorInfo& check_tensor(const io::GgufFile& f, const std::string& name, const std::vector<uint64_t>& ne) {
  const io::GgufTensorInfo* t = f.find_tensor(name);
  if (!t)
    throw_input("GGUF: missing tensor '" + name + "'", f.path() + ": " + name,
                "the Llama loader needs every tensor of llama.cpp's llama layout");
  if (!io::ggml_can_dequantize(t->type))
    throw_input("GGUF: tensor '" + name + "' has type " + io::ggml_type_name(t->type) +
                    ", the Llama loader reads F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K",
                f.path() + ": " + name, "requantize with llama.cpp's llama-quantize to one of those (e.g. Q4_K_M)");
  if (t->ne != ne)
    throw_input("GGUF: tensor '" + name + "' has extents " + shape_str(t->ne) + " (ggml order), expected " +
                    shape_str(ne),
                f.path() + ": " + name, "the tensor does not fit the llama.* hyperparameters");
  return *t;
}

/// Values of tensor `name` as f32 (dequantized when quantized), after check_tensor; a NaN or
/// infinite value is Error(Input) naming the tensor.
std::vector<float> load_tensor(const io::GgufFile& f, const std::string& name, const std::vector<uint64_t>& ne) {
  check_tensor(f, name, ne);
  std::vector<float> v = f.tensor_f32(name);
  io::require_finite(v, f.path() + ": " + name);
  return v;
}

int required_int(const io::GgufFile& f, const std::string& key) {
  const uint64_t v = f.get(key).as_u64(key);
  if (v > static_cast<uint64_t>(std::numeric_limits<int>::max()))
    throw_input("GGUF: " + key + " = " + std::to_string(v) + " is too large", f.path() + ": " + key);
  return static_cast<int>(v);
}

/// The ModelInfo fields a Llama file determines (not weights, param_bytes, device).
serve::ModelInfo llama_info(const io::GgufFile& f, const std::string& path, const LlamaConfig& cfg,
                            const LlamaVocab& vocab) {
  serve::ModelInfo info;
  info.arch = "llama";
  if (const io::GgufValue* n = f.find("general.name"); n && n->type == io::GgufType::STRING && !n->str.empty()) {
    info.name = n->str;
  } else {
    std::string base = path.substr(path.find_last_of('/') + 1);
    const size_t dot_pos = base.find_last_of('.');
    info.name = dot_pos == std::string::npos || dot_pos == 0 ? base : base.substr(0, dot_pos);
  }
  info.path = path;
  info.vocab = cfg.vocab;
  info.context = cfg.context;
  info.n_layer = cfg.n_layer;
  info.n_kv_head = cfg.n_kv_head;
  info.head_dim = cfg.head_dim();
  info.bos = vocab.add_bos ? vocab.bos : -1;
  info.eos = vocab.eos;
  return info;
}

/// RoPE's frequencies theta^(-2i / n_rot), i < n_rot / 2, in float64.
std::vector<double> rope_inv_freq(const LlamaConfig& cfg) {
  std::vector<double> f(cfg.n_rot / 2);
  for (int i = 0; i < cfg.n_rot / 2; ++i) f[i] = std::pow(static_cast<double>(cfg.rope_theta), -2.0 * i / cfg.n_rot);
  return f;
}

/// Restores OpenMP's thread count of the calling thread when it leaves scope.
struct OmpThreadsGuard {
  explicit OmpThreadsGuard(int n) : saved(omp_get_max_threads()), set(n > 0) {
    if (set) omp_set_num_threads(n);
  }
  ~OmpThreadsGuard() {
    if (set) omp_set_num_threads(saved);
  }
  int saved;
  bool set;
};

class LlamaModel final : public serve::Model {
 public:
  LlamaModel(const std::string& path, const serve::LoadOptions& opt) : threads_(opt.threads) {
    if (opt.threads < 0)
      throw_input("LoadOptions.threads = " + std::to_string(opt.threads) + " must be >= 0", "threads",
                  "pass 0 for OpenMP's default");
    const io::GgufFile f = io::GgufFile::open(path);
    const std::string arch = f.get("general.architecture").as_string("general.architecture");
    if (arch != "llama")
      throw_input("GGUF: general.architecture is '" + arch + "', not 'llama'", path + ": general.architecture");
    cfg_ = llama_config_from_gguf(f);
    const LlamaVocab vocab = llama_vocab_from_gguf(f);
    tok_ = make_llama_tokenizer(vocab, path + ": tokenizer.ggml.*");
    if (tok_->vocab_size() > cfg_.vocab)
      throw_input("GGUF: the tokenizer has " + std::to_string(tok_->vocab_size()) + " tokens but token_embd.weight " +
                      std::to_string(cfg_.vocab) + " rows",
                  path + ": tokenizer.ggml.tokens");

    const uint64_t C = cfg_.dim, V = cfg_.vocab, F = cfg_.ffn_dim, KVD = uint64_t(cfg_.n_kv_head) * cfg_.head_dim();
    emb_ = load_tensor(f, "token_embd.weight", {C, V});
    size_t bytes = emb_.size() * sizeof(float);
    using Part = std::pair<std::string, std::vector<uint64_t>>;  // tensor name, ggml extents {K, N}
    // Rows of the parts stacked into one (sum N, K) weight (fused projections): quantized blocks
    // (Q8_0, Q4_K, Q5_K, Q6_K) kept as they are when every part has the same such type (rows are
    // independent, so stacking is concatenation), else dequantized and packed f32.
    auto pack = [&](const std::vector<Part>& parts, int K) {
      const uint32_t type = check_tensor(f, parts[0].first, parts[0].second).type;
      bool keep = opt.keep_quantized && kernels::PackedMatmulWeight::can_hold(type) && K % io::ggml_type_block(type).first == 0;
      for (const auto& [name, ne] : parts) keep = keep && check_tensor(f, name, ne).type == type;
      kernels::PackedMatmulWeight pw;
      if (keep) {
        std::vector<uint8_t> blocks;
        int N = 0;
        for (const auto& [name, ne] : parts) {
          (void)load_tensor(f, name, ne);  // decoded once only to refuse non-finite scales
          const uint8_t* b = f.tensor_data(name);
          blocks.insert(blocks.end(), b, b + f.tensor(name).nbytes);
          N += static_cast<int>(ne[1]);
        }
        pw = type == static_cast<uint32_t>(io::GgmlType::Q8_0) ? kernels::PackedMatmulWeight::q8_0(blocks.data(), N, K, opt.int8_activations)
                                                                : kernels::PackedMatmulWeight::kquant(type, blocks.data(), N, K,
                                                                                                      opt.int8_activations);
      } else {
        std::vector<float> w;
        for (const auto& [name, ne] : parts) {
          const std::vector<float> v = load_tensor(f, name, ne);
          w.insert(w.end(), v.begin(), v.end());
        }
        pw = kernels::PackedMatmulWeight(w.data(), static_cast<int>(w.size() / static_cast<size_t>(K)), K);
      }
      bytes += pw.bytes();
      return pw;
    };
    layers_.resize(cfg_.n_layer);
    for (int l = 0; l < cfg_.n_layer; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      Layer& L = layers_[l];
      L.attn_norm = load_tensor(f, p + "attn_norm.weight", {C});
      L.ffn_norm = load_tensor(f, p + "ffn_norm.weight", {C});
      bytes += (L.attn_norm.size() + L.ffn_norm.size()) * sizeof(float);
      L.wqkv = pack({{p + "attn_q.weight", {C, C}}, {p + "attn_k.weight", {C, KVD}}, {p + "attn_v.weight", {C, KVD}}},
                    cfg_.dim);
      L.wo = pack({{p + "attn_output.weight", {C, C}}}, cfg_.dim);
      L.wgu = pack({{p + "ffn_gate.weight", {C, F}}, {p + "ffn_up.weight", {C, F}}}, cfg_.dim);
      L.wdown = pack({{p + "ffn_down.weight", {F, C}}}, cfg_.ffn_dim);
    }
    out_norm_ = load_tensor(f, "output_norm.weight", {C});
    bytes += out_norm_.size() * sizeof(float);
    // The head: output.weight, else the tied embeddings.
    wout_ = pack({{f.find_tensor("output.weight") ? "output.weight" : "token_embd.weight", {C, V}}}, cfg_.dim);
    std::vector<const kernels::PackedMatmulWeight*> all;
    for (const Layer& L : layers_)
      for (const auto* w : {&L.wqkv, &L.wo, &L.wgu, &L.wdown}) all.push_back(w);
    all.push_back(&wout_);
    info_ = llama_info(f, path, cfg_, vocab);
    info_.weights = kernels::weight_formats_summary(all);
    info_.param_bytes = bytes;
    inv_freq_ = rope_inv_freq(cfg_);
  }

  const serve::ModelInfo& info() const override { return info_; }
  const io::Tokenizer& tokenizer() const override { return *tok_; }

  void forward(const std::vector<serve::SeqBatch>& batch, serve::KvCache& kv, float* logits) override {
    const int C = cfg_.dim, NH = cfg_.n_head, NKV = cfg_.n_kv_head, HS = cfg_.head_dim(), F = cfg_.ffn_dim;
    const int R = cfg_.n_rot / 2, QKV = C + 2 * NKV * HS, group = NH / NKV;
    serve::check_forward(batch, kv, info_, logits, "Llama forward");
    if (batch.empty()) return;
    OmpThreadsGuard threads_guard(threads_);

    // Row bookkeeping: row r is token t of sequence s at position pos + t.
    size_t M = 0;
    for (const auto& s : batch) M += static_cast<size_t>(s.n);
    if (M > static_cast<size_t>(std::numeric_limits<int>::max() / std::max(QKV, 2 * F)))
      throw_input("Llama forward: " + std::to_string(M) + " rows in one call is too many", "batch",
                  "split the batch over several calls");
    const int Mi = static_cast<int>(M);
    row_seq_.resize(M);
    row_pos_.resize(M);
    for (size_t s = 0, r = 0; s < batch.size(); ++s)
      for (int t = 0; t < batch[s].n; ++t, ++r) {
        row_seq_[r] = static_cast<int>(s);
        row_pos_[r] = batch[s].pos + t;
      }
    x_.resize(M * C);
    xn_.resize(M * C);
    qkv_.resize(M * QKV);
    att_.resize(M * C);
    tmp_.resize(M * std::max(C, 2 * F));
    hb_.resize(M * F);
    rope_.resize(M * R * 2);
    const int nt = std::max(1, omp_get_max_threads());
    const size_t per_thread = serve::plan_attention_calls(calls_, batch, NH, nt, cfg_.context);  // any plan: same bits
    scores_.resize(static_cast<size_t>(nt) * per_thread);
    const bool par_rows = M >= 2 && static_cast<double>(M) * C >= 16384.0;  // per-row loops: worth threads?
    double attn_work = 0;  // multiply-adds of one layer's attention
    for (size_t r = 0; r < M; ++r) attn_work += 2.0 * (row_pos_[r] + 1) * NH * HS;

#pragma omp parallel for schedule(static) if (par_rows)
    for (int r = 0; r < Mi; ++r) {
      const int32_t tok = batch[row_seq_[r]].tokens[row_pos_[r] - batch[row_seq_[r]].pos];
      std::memcpy(&x_[static_cast<size_t>(r) * C], &emb_[static_cast<size_t>(tok) * C], sizeof(float) * C);
      float* cs = &rope_[static_cast<size_t>(r) * R * 2];
      for (int i = 0; i < R; ++i) {
        const double a = static_cast<double>(row_pos_[r]) * inv_freq_[i];
        cs[2 * i] = static_cast<float>(std::cos(a));
        cs[2 * i + 1] = static_cast<float>(std::sin(a));
      }
    }

    const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
    for (int l = 0; l < cfg_.n_layer; ++l) {
      // Engine spans (rtx-trace): serve.step > layer.N > kernel records; near-free when off.
      telemetry::ScopedSpan layer_span(telemetry::layer_span_name(l),
                                       telemetry::enabled() ? nlohmann::json{{"layer", l}} : nlohmann::json());
      const Layer& L = layers_[l];
      // attention block: xn = rmsnorm(x); qkv = xn Wqkv^T; rope on q and k; K, V into the cache
#pragma omp parallel for schedule(static) if (par_rows)
      for (int r = 0; r < Mi; ++r)
        rmsnorm_row(&xn_[static_cast<size_t>(r) * C], &x_[static_cast<size_t>(r) * C], L.attn_norm.data(), C,
                    cfg_.rms_eps);
      kernels::matmul_forward_packed(qkv_.data(), xn_.data(), L.wqkv, nullptr, Mi);
#pragma omp parallel for schedule(static) if (par_rows)
      for (int r = 0; r < Mi; ++r) {
        float* q = &qkv_[static_cast<size_t>(r) * QKV];
        const float* cs = &rope_[static_cast<size_t>(r) * R * 2];
        for (int h = 0; h < NH + NKV; ++h) {  // NH query heads, then NKV key heads
          float* v = q + static_cast<size_t>(h) * HS;
          for (int i = 0; i < R; ++i) {
            const float a = v[2 * i], b = v[2 * i + 1], c = cs[2 * i], s = cs[2 * i + 1];
            v[2 * i] = a * c - b * s;
            v[2 * i + 1] = a * s + b * c;
          }
        }
        serve::kv_store(kv, l, batch[row_seq_[r]].blocks, row_pos_[r], q + C, q + C + static_cast<size_t>(NKV) * HS);
      }
      // causal attention per (row, group of query heads) over keys 0..pos, through the block table
      std::optional<core::KernelRun> attn_run(std::in_place, "paged_attention", "cpu",
                                              std::initializer_list<core::KernelRun::Dim>{{"rows", Mi}, {"NH", NH}, {"NKV", NKV}, {"HS", HS}});
#pragma omp parallel if (attn_work >= 32768.0)
      {
        float* sc = scores_.data() + static_cast<size_t>(omp_get_thread_num()) * per_thread;
#pragma omp for schedule(dynamic, 1)
        for (size_t u = 0; u < calls_.size(); ++u) {
          const serve::AttentionCall& a = calls_[u];
          serve::paged_attention_tile(&att_[static_cast<size_t>(a.row) * C + static_cast<size_t>(a.h0) * HS], C,
                                      &qkv_[static_cast<size_t>(a.row) * QKV + static_cast<size_t>(a.h0) * HS], QKV,
                                      a.n_rows, row_pos_[a.row] + 1, kv, l, a.h0, a.n_heads, group,
                                      batch[row_seq_[a.row]].blocks, scale, sc);
        }
      }
      attn_run.reset();
      kernels::matmul_forward_packed(tmp_.data(), att_.data(), L.wo, nullptr, Mi);
      // residual, then the SwiGLU block: x += Wdown (silu(xn Wgate^T) * xn Wup^T), xn = rmsnorm(x)
#pragma omp parallel for schedule(static) if (par_rows)
      for (int r = 0; r < Mi; ++r) {
        float* x = &x_[static_cast<size_t>(r) * C];
        const float* y = &tmp_[static_cast<size_t>(r) * C];
        for (int i = 0; i < C; ++i) x[i] += y[i];
        rmsnorm_row(&xn_[static_cast<size_t>(r) * C], x, L.ffn_norm.data(), C, cfg_.rms_eps);
      }
      kernels::matmul_forward_packed(tmp_.data(), xn_.data(), L.wgu, nullptr, Mi);
#pragma omp parallel for schedule(static) if (par_rows)
      for (int r = 0; r < Mi; ++r) {
        const float* g = &tmp_[static_cast<size_t>(r) * 2 * F];
        const float* u = g + F;
        float* h = &hb_[static_cast<size_t>(r) * F];
        for (int i = 0; i < F; ++i) h[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
      }
      kernels::matmul_forward_packed(tmp_.data(), hb_.data(), L.wdown, nullptr, Mi);
#pragma omp parallel for schedule(static) if (par_rows)
      for (int r = 0; r < Mi; ++r) {
        float* x = &x_[static_cast<size_t>(r) * C];
        const float* y = &tmp_[static_cast<size_t>(r) * C];
        for (int i = 0; i < C; ++i) x[i] += y[i];
      }
    }

    // logits of the last row of each sequence that wants them: rmsnorm, then the output matmul
    int nw = 0;
    for (size_t s = 0, r = 0; s < batch.size(); r += static_cast<size_t>(batch[s].n), ++s) {
      if (!batch[s].want_logits) continue;
      const size_t last = r + static_cast<size_t>(batch[s].n) - 1;
      rmsnorm_row(&xn_[static_cast<size_t>(nw) * C], &x_[last * C], out_norm_.data(), C, cfg_.rms_eps);
      ++nw;
    }
    if (nw > 0) kernels::matmul_forward_packed(logits, xn_.data(), wout_, nullptr, nw);
  }

 private:
  struct Layer {
    std::vector<float> attn_norm, ffn_norm;  // (C)
    kernels::PackedMatmulWeight wqkv;        // (C + 2*NKV*HS, C): Wq | Wk | Wv
    kernels::PackedMatmulWeight wo;          // (C, C)
    kernels::PackedMatmulWeight wgu;         // (2F, C): Wgate | Wup
    kernels::PackedMatmulWeight wdown;       // (C, F)
  };

  LlamaConfig cfg_;
  serve::ModelInfo info_;
  std::unique_ptr<io::Tokenizer> tok_;
  int threads_ = 0;
  std::vector<float> emb_;       // (V, C)
  std::vector<Layer> layers_;
  std::vector<float> out_norm_;  // (C)
  kernels::PackedMatmulWeight wout_;  // (V, C)
  std::vector<double> inv_freq_;      // (R): theta^(-2i/n_rot)
  // workspaces of forward(), sized per call
  std::vector<int> row_seq_, row_pos_;  // (M)
  std::vector<float> x_, xn_, att_;     // (M, C)
  std::vector<float> qkv_;              // (M, C + 2*NKV*HS)
  std::vector<float> tmp_;              // (M, max(C, 2F))
  std::vector<float> hb_;               // (M, F)
  std::vector<float> rope_;             // (M, R, 2): cos, sin
  std::vector<float> scores_;           // (threads, plan_attention_calls' scratch per thread)
  std::vector<serve::AttentionCall> calls_;  // one layer's attention calls
};

}  // namespace

void LlamaConfig::validate(const std::string& where_in) const {
  const std::string where = where_in.empty() ? std::string("LlamaConfig") : where_in;
  auto positive = [&](const char* name, int v) {
    if (v < 1) throw_input(std::string("Llama config: ") + name + " = " + std::to_string(v) + " must be >= 1", where);
  };
  positive("n_layer", n_layer);
  positive("dim", dim);
  positive("n_head", n_head);
  positive("n_kv_head", n_kv_head);
  positive("ffn_dim", ffn_dim);
  positive("vocab", vocab);
  positive("context", context);
  if (dim % n_head != 0)
    throw_input("Llama config: dim " + std::to_string(dim) + " is not a multiple of n_head " + std::to_string(n_head),
                where);
  if (n_head % n_kv_head != 0)
    throw_input("Llama config: n_head " + std::to_string(n_head) + " is not a multiple of n_kv_head " +
                    std::to_string(n_kv_head),
                where);
  if (n_rot < 0 || n_rot % 2 != 0 || n_rot > head_dim())
    throw_input("Llama config: n_rot " + std::to_string(n_rot) + " must be even and <= the head size " +
                    std::to_string(head_dim()),
                where);
  if (!(rms_eps > 0) || !std::isfinite(rms_eps))
    throw_input("Llama config: rms_eps must be a positive finite number", where);
  if (!(rope_theta > 0) || !std::isfinite(rope_theta))
    throw_input("Llama config: rope_theta must be a positive finite number", where);
  if (static_cast<long long>(dim) * vocab > std::numeric_limits<int>::max() ||
      static_cast<long long>(ffn_dim) * 2 * dim > std::numeric_limits<int>::max())
    throw_input("Llama config: a weight matrix has more than 2^31 elements", where);
}

LlamaConfig llama_config_from_gguf(const io::GgufFile& f) {
  LlamaConfig c;
  c.n_layer = required_int(f, "llama.block_count");
  c.dim = required_int(f, "llama.embedding_length");
  c.n_head = required_int(f, "llama.attention.head_count");
  c.n_kv_head = f.find("llama.attention.head_count_kv") ? required_int(f, "llama.attention.head_count_kv") : c.n_head;
  c.ffn_dim = required_int(f, "llama.feed_forward_length");
  c.context = required_int(f, "llama.context_length");
  if (const io::GgufValue* v = f.find("llama.attention.layer_norm_rms_epsilon"))
    c.rms_eps = static_cast<float>(v->as_f64("llama.attention.layer_norm_rms_epsilon"));
  if (const io::GgufValue* v = f.find("llama.rope.freq_base"))
    c.rope_theta = static_cast<float>(v->as_f64("llama.rope.freq_base"));
  c.n_rot = f.find("llama.rope.dimension_count") ? required_int(f, "llama.rope.dimension_count") : c.head_dim();
  if (const io::GgufValue* v = f.find("llama.rope.scaling.type")) {
    const std::string t = v->as_string("llama.rope.scaling.type");
    if (t != "none")
      throw_input("GGUF: RoPE scaling '" + t + "' is not supported", f.path() + ": llama.rope.scaling.type",
                  "use a model without RoPE scaling");
  }
  if (f.find_tensor("rope_freqs.weight"))
    throw_input("GGUF: per-dimension RoPE frequencies (rope_freqs.weight, Llama 3.1 scaling) are not supported",
                f.path() + ": rope_freqs.weight");
  const io::GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
  if (!emb)
    throw_input("GGUF: missing tensor 'token_embd.weight'", f.path() + ": token_embd.weight",
                "the Llama loader needs every tensor of llama.cpp's llama layout");
  if (emb->ne.size() != 2 || emb->ne[1] > static_cast<uint64_t>(std::numeric_limits<int>::max()))
    throw_input("GGUF: tensor 'token_embd.weight' has extents " + shape_str(emb->ne) + ", expected [dim, vocab]",
                f.path() + ": token_embd.weight");
  c.vocab = static_cast<int>(emb->ne[1]);
  c.validate(f.path());
  return c;
}


namespace {

/// A Llama GGUF for the CUDA model: every tensor as f32 (quantized ones dequantized), the fused
/// projections stacked as the CPU model stacks them.
std::unique_ptr<serve::Model> load_llama_cuda(const std::string& path, const serve::LoadOptions& opt) {
  const io::GgufFile f = io::GgufFile::open(path);
  const std::string arch = f.get("general.architecture").as_string("general.architecture");
  if (arch != "llama")
    throw_input("GGUF: general.architecture is '" + arch + "', not 'llama'", path + ": general.architecture");
  serve::detail::LlamaHostWeights w;
  w.cfg = llama_config_from_gguf(f);
  const LlamaConfig& c = w.cfg;
  // Before reading any tensor: a missing device fails at once, not after the whole load.
  serve::detail::require_cuda_model(opt.cuda_device, c.head_dim(), "Llama CUDA model", path);
  const LlamaVocab vocab = llama_vocab_from_gguf(f);
  auto tok = make_llama_tokenizer(vocab, path + ": tokenizer.ggml.*");
  if (tok->vocab_size() > c.vocab)
    throw_input("GGUF: the tokenizer has " + std::to_string(tok->vocab_size()) + " tokens but token_embd.weight " +
                    std::to_string(c.vocab) + " rows",
                path + ": tokenizer.ggml.tokens");
  const uint64_t C = c.dim, V = c.vocab, F = c.ffn_dim, KVD = uint64_t(c.n_kv_head) * c.head_dim();
  const auto stack = [&](std::initializer_list<std::pair<std::string, std::vector<uint64_t>>> parts) {
    std::vector<float> out;
    for (const auto& [name, ne] : parts) {
      const std::vector<float> v = load_tensor(f, name, ne);
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  };
  w.emb = load_tensor(f, "token_embd.weight", {C, V});
  w.layers.resize(c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    auto& L = w.layers[l];
    L.attn_norm = load_tensor(f, p + "attn_norm.weight", {C});
    L.ffn_norm = load_tensor(f, p + "ffn_norm.weight", {C});
    L.wqkv = stack({{p + "attn_q.weight", {C, C}}, {p + "attn_k.weight", {C, KVD}}, {p + "attn_v.weight", {C, KVD}}});
    L.wo = load_tensor(f, p + "attn_output.weight", {C, C});
    L.wgu = stack({{p + "ffn_gate.weight", {C, F}}, {p + "ffn_up.weight", {C, F}}});
    L.wdown = load_tensor(f, p + "ffn_down.weight", {F, C});
  }
  w.out_norm = load_tensor(f, "output_norm.weight", {C});
  if (f.find_tensor("output.weight")) w.wout = load_tensor(f, "output.weight", {C, V});  // else tied: left empty
  w.inv_freq = rope_inv_freq(c);
  return serve::detail::make_llama_cuda_model(w, std::move(tok), llama_info(f, path, c, vocab), opt.cuda_device);
}

}  // namespace

std::unique_ptr<serve::Model> load_llama_gguf(const std::string& path, const serve::LoadOptions& opt) {
  if (opt.cuda_device >= 0) return load_llama_cuda(path, opt);
  return std::make_unique<LlamaModel>(path, opt);
}

}  // namespace rtx::serve
