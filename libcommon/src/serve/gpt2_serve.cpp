// GPT-2 serving model (rtx/serve/gpt2_serve.hpp): packed weights, batched forward over a
// paged KV cache, loading from GGUF or an rtx checkpoint.
#include "rtx/serve/gpt2_serve.hpp"

#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>

#include "rtx/core/device.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/events.hpp"
#include "rtx/kernels/matmul.hpp"
#include "rtx/kernels/ops.hpp"
#include "rtx/models/checkpoint.hpp"
#include "rtx/models/export.hpp"
#include "rtx/serve/attention.hpp"
#include "rtx/telemetry/bus.hpp"
#include "serve/cuda_models.hpp"

namespace rtx::serve {

void detail::require_cuda_model(int device, int head_dim, const std::string& what, const std::string& path) {
  if (head_dim > kCudaMaxHeadDim)
    throw_input(what + ": head size " + std::to_string(head_dim) + " is above the CUDA attention's " +
                    std::to_string(kCudaMaxHeadDim),
                path, "serve it on the CPU: --device cpu");
#ifndef RTX_HAVE_CUDA
  throw Error(ErrorCategory::Environment,
              "cuda:" + std::to_string(device) + " asked for, but this rtx was built without CUDA (RTX_CUDA=OFF or no toolkit)",
              "--device", "serve on the CPU with --device cpu, or rebuild with the CUDA toolkit: cmake -DRTX_CUDA=ON");
#else
  const int n = cuda_device_count();
  if (n == 0)
    throw Error(ErrorCategory::Environment, "no usable CUDA device (" + cuda_unavailable_reason() + ")", "--device",
                "run on a machine with an NVIDIA GPU and driver, or serve on the CPU with --device cpu");
  if (device < 0 || device >= n)
    throw Error(ErrorCategory::Environment,
                "CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(n) + " present)",
                "--device", "pick a device in cuda:0 .. cuda:" + std::to_string(n - 1));
#endif
}

#ifndef RTX_HAVE_CUDA
// Unreachable (require_cuda_model throws first); they keep the link whole without CUDA objects.
std::unique_ptr<Model> detail::make_gpt2_cuda_model(const models::Gpt2Config&, const std::vector<float>&,
                                                    std::unique_ptr<io::Tokenizer>, ModelInfo, int device) {
  require_cuda_model(device, 0, "GPT-2 CUDA model", "");
  return nullptr;
}
std::unique_ptr<Model> detail::make_llama_cuda_model(const LlamaHostWeights&, std::unique_ptr<io::Tokenizer>, ModelInfo,
                                                     int device) {
  require_cuda_model(device, 0, "Llama CUDA model", "");
  return nullptr;
}
#endif

namespace {

using models::Gpt2Config;

class Gpt2Serve final : public Model {
 public:
  Gpt2Serve(const Gpt2Config& cfg, std::vector<float> params, std::unique_ptr<io::Tokenizer> tok, ModelInfo base,
            const LoadOptions& opt, const std::map<std::string, QuantizedMatrix>& quantized)
      : cfg_(cfg), params_(std::move(params)), tok_(std::move(tok)), info_(std::move(base)), threads_(opt.threads) {
    const kernels::MatmulParams* mp = &opt.matmul;
    const int C = cfg_.n_embd;  // cfg, params and tok were checked by make_gpt2_model
    for (const auto& t : models::gpt2_param_layout(cfg_)) off_[t.name] = t.offset;
    layers_.resize(cfg_.n_layer);
    size_t packed = 0;
    auto pack = [&](const std::string& name, int N, int K) {
      if (auto it = quantized.find(name); it != quantized.end()) {
        const uint32_t t = it->second.ggml_type;
        const auto [block, bytes] = io::ggml_type_block(t);
        if (!kernels::PackedMatmulWeight::can_hold(t) || K % block != 0 ||
            it->second.blocks.size() != static_cast<size_t>(N) * (K / block) * bytes)
          throw_input("GPT-2 model: " + std::string(io::ggml_type_name(t)) + " blocks of " + name + " do not fit (" +
                          std::to_string(N) + ", " + std::to_string(K) + ")",
                      info_.path);
        return t == 8 ? kernels::PackedMatmulWeight::q8_0(it->second.blocks.data(), N, K, opt.int8_activations)
                      : kernels::PackedMatmulWeight::kquant(t, it->second.blocks.data(), N, K, opt.int8_activations);
      }
      return kernels::PackedMatmulWeight(p(name), N, K, mp);
    };
    for (int l = 0; l < cfg_.n_layer; ++l) {
      const std::string h = "h." + std::to_string(l) + ".";
      Layer& L = layers_[l];
      L.qkv = pack(h + "attn.c_attn.weight", 3 * C, C);
      L.proj = pack(h + "attn.c_proj.weight", C, C);
      L.fc = pack(h + "mlp.c_fc.weight", 4 * C, C);
      L.fcproj = pack(h + "mlp.c_proj.weight", C, 4 * C);
      packed += L.qkv.bytes() + L.proj.bytes() + L.fc.bytes() + L.fcproj.bytes();
    }
    head_ = pack("wte", cfg_.vocab_size, C);
    packed += head_.bytes();
    std::vector<const kernels::PackedMatmulWeight*> all;
    for (const Layer& L : layers_)
      for (const auto* w : {&L.qkv, &L.proj, &L.fc, &L.fcproj}) all.push_back(w);
    all.push_back(&head_);
    info_.weights = kernels::weight_formats_summary(all);
    // Keep only what forward() reads flat (embeddings, norms, biases); the four per-layer
    // matrices live on in their packed copies, so weights are not held twice.
    std::vector<float> small;
    std::map<std::string, size_t> small_off;
    for (const auto& t : models::gpt2_param_layout(cfg_)) {
      const bool packed_matrix = t.shape.size() == 2 && t.name != "wte" && t.name != "wpe";
      if (packed_matrix) continue;
      small_off[t.name] = small.size();
      small.insert(small.end(), params_.begin() + static_cast<std::ptrdiff_t>(t.offset),
                   params_.begin() + static_cast<std::ptrdiff_t>(t.offset + t.numel));
    }
    params_ = std::move(small);
    off_ = std::move(small_off);
    info_.arch = "gpt2";
    info_.vocab = cfg_.vocab_size;
    info_.context = cfg_.block_size;
    info_.n_layer = cfg_.n_layer;
    info_.n_kv_head = cfg_.n_head;
    info_.head_dim = C / cfg_.n_head;
    info_.bos = -1;
    info_.eos = tok_->eot_id();
    info_.param_bytes = packed + params_.size() * sizeof(float);
  }

  const ModelInfo& info() const override { return info_; }
  const io::Tokenizer& tokenizer() const override { return *tok_; }

  void forward(const std::vector<SeqBatch>& batch, KvCache& kv, float* logits) override {
    const int R = check_forward(batch, kv, info_, logits, "GPT-2 forward");
    if (R == 0) return;  // an empty batch
    const int C = cfg_.n_embd, NH = cfg_.n_head, HS = C / NH, Tm = cfg_.block_size;
    const int saved_threads = omp_get_max_threads();
    if (threads_ > 0) omp_set_num_threads(threads_);
    struct Restore {
      int n;
      ~Restore() { omp_set_num_threads(n); }
    } restore{saved_threads};
    // Row metadata: sequence and position of every row.
    row_seq_.resize(R);
    row_pos_.resize(R);
    ids_.resize(R);
    for (int s = 0, r = 0; s < static_cast<int>(batch.size()); ++s)
      for (int i = 0; i < batch[s].n; ++i, ++r) {
        row_seq_[r] = s;
        row_pos_[r] = batch[s].pos + i;
        ids_[r] = batch[s].tokens[i];
      }
    x_.resize(static_cast<size_t>(R) * C);
    ln_.resize(x_.size());
    mean_.resize(R);
    rstd_.resize(R);
    qkv_.resize(static_cast<size_t>(R) * 3 * C);
    att_.resize(x_.size());
    proj_.resize(x_.size());
    fc_.resize(static_cast<size_t>(R) * 4 * C);
    fcg_.resize(fc_.size());
    const int nthreads = std::max(1, omp_get_max_threads());
    const size_t per_thread = plan_attention_calls(calls_, batch, NH, nthreads, Tm);  // same bits for any plan
    scores_.resize(static_cast<size_t>(nthreads) * per_thread);
    const float* wte = p("wte");
    const float* wpe = p("wpe");
    for (int r = 0; r < R; ++r) {
      const float* te = wte + static_cast<size_t>(ids_[r]) * C;
      const float* pe = wpe + static_cast<size_t>(row_pos_[r]) * C;
      float* xr = x_.data() + static_cast<size_t>(r) * C;
      for (int c = 0; c < C; ++c) xr[c] = te[c] + pe[c];
    }
    const float scale = 1.f / std::sqrt(static_cast<float>(HS));
    for (int l = 0; l < cfg_.n_layer; ++l) {
      // Engine spans (rtx-trace): serve.step > layer.N > kernel records; near-free when off.
      telemetry::ScopedSpan layer_span(telemetry::layer_span_name(l),
                                       telemetry::enabled() ? nlohmann::json{{"layer", l}} : nlohmann::json());
      const std::string h = "h." + std::to_string(l) + ".";
      const Layer& L = layers_[l];
      kernels::layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), x_.data(), p(h + "ln_1.weight"),
                                 p(h + "ln_1.bias"), R, C);
      kernels::matmul_forward_packed(qkv_.data(), ln_.data(), L.qkv, p(h + "attn.c_attn.bias"), R);
      for (int r = 0; r < R; ++r) {
        const float* q = qkv_.data() + static_cast<size_t>(r) * 3 * C;
        kv_store(kv, l, batch[row_seq_[r]].blocks, row_pos_[r], q + C, q + 2 * C);
      }
      std::optional<core::KernelRun> attn_run(std::in_place, "paged_attention", "cpu",
                                              std::initializer_list<core::KernelRun::Dim>{{"rows", R}, {"NH", NH}, {"HS", HS}});
#pragma omp parallel for schedule(dynamic, 1) if (calls_.size() > 1)
      for (size_t u = 0; u < calls_.size(); ++u) {
        const AttentionCall& a = calls_[u];
        float* scratch = scores_.data() + static_cast<size_t>(omp_get_thread_num()) * per_thread;
        const float* q = qkv_.data() + static_cast<size_t>(a.row) * 3 * C + static_cast<size_t>(a.h0) * HS;
        paged_attention_tile(att_.data() + static_cast<size_t>(a.row) * C + static_cast<size_t>(a.h0) * HS, C, q, 3 * C,
                             a.n_rows, row_pos_[a.row] + 1, kv, l, a.h0, a.n_heads, 1, batch[row_seq_[a.row]].blocks,
                             scale, scratch);
      }
      attn_run.reset();
      kernels::matmul_forward_packed(proj_.data(), att_.data(), L.proj, p(h + "attn.c_proj.bias"), R);
      kernels::residual_forward(x_.data(), x_.data(), proj_.data(), static_cast<int64_t>(R) * C);
      kernels::layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), x_.data(), p(h + "ln_2.weight"),
                                 p(h + "ln_2.bias"), R, C);
      kernels::matmul_forward_packed(fc_.data(), ln_.data(), L.fc, p(h + "mlp.c_fc.bias"), R);
      kernels::gelu_forward(fcg_.data(), fc_.data(), static_cast<int64_t>(R) * 4 * C);
      kernels::matmul_forward_packed(proj_.data(), fcg_.data(), L.fcproj, p(h + "mlp.c_proj.bias"), R);
      kernels::residual_forward(x_.data(), x_.data(), proj_.data(), static_cast<int64_t>(R) * C);
    }
    // Final norm and the tied head, only for the rows whose logits are wanted.
    int W = 0;
    for (int s = 0, r = 0; s < static_cast<int>(batch.size()); r += batch[s].n, ++s)
      if (batch[s].want_logits) {
        std::memcpy(ln_.data() + static_cast<size_t>(W) * C, x_.data() + static_cast<size_t>(r + batch[s].n - 1) * C,
                    sizeof(float) * C);
        ++W;
      }
    if (W == 0) return;
    kernels::layernorm_forward(proj_.data(), mean_.data(), rstd_.data(), ln_.data(), p("ln_f.weight"), p("ln_f.bias"),
                               W, C);
    kernels::matmul_forward_packed(logits, proj_.data(), head_, nullptr, W);
  }

 private:
  struct Layer {
    kernels::PackedMatmulWeight qkv, proj, fc, fcproj;
  };
  const float* p(const std::string& name) const { return params_.data() + off_.at(name); }

  Gpt2Config cfg_;
  std::vector<float> params_;
  std::unique_ptr<io::Tokenizer> tok_;
  ModelInfo info_;
  int threads_ = 0;
  std::map<std::string, size_t> off_;
  std::vector<Layer> layers_;
  kernels::PackedMatmulWeight head_;
  // Scratch for one forward (R rows).
  std::vector<int> row_seq_, row_pos_;
  std::vector<AttentionCall> calls_;  // one layer's attention calls (plan_attention_calls)
  std::vector<int32_t> ids_;
  std::vector<float> x_, ln_, mean_, rstd_, qkv_, att_, proj_, fc_, fcg_, scores_;
};

/// llama.cpp's llama_unescape_rwkv_token: \\ \n \t \r \xNN escapes in a token's text.
std::string unescape_rwkv(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 >= s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    if (c == 'n') out += '\n';
    else if (c == 't') out += '\t';
    else if (c == 'r') out += '\r';
    else if (c == 'x' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
             std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::strtol(s.substr(i + 1, 2).c_str(), nullptr, 16));
      i += 2;
    } else out += c;
  }
  return out;
}

std::unique_ptr<io::Tokenizer> gguf_tokenizer(const io::GgufFile& f) {
  const std::string model = f.get("tokenizer.ggml.model").as_string("tokenizer.ggml.model");
  const std::vector<std::string> tokens = f.get("tokenizer.ggml.tokens").as_strings("tokenizer.ggml.tokens");
  std::vector<int64_t> types(tokens.size(), 1);
  if (const auto* t = f.find("tokenizer.ggml.token_type"))
    for (size_t i = 0; i < t->array.size() && i < types.size(); ++i) types[i] = t->array[i].as_i64("token_type");
  // Padding rows (type 5, unused) are past the tokenizer's own vocabulary.
  size_t n = tokens.size();
  while (n > 0 && types[n - 1] == 5) --n;
  if (model == "gpt2") {
    nlohmann::json enc = nlohmann::json::object();
    for (size_t i = 0; i < n; ++i) enc[tokens[i]] = static_cast<int64_t>(i);
    nlohmann::json j = {{"kind", "gpt2"}, {"encoder", enc},
                        {"merges", f.get("tokenizer.ggml.merges").as_strings("tokenizer.ggml.merges")}};
    return io::tokenizer_from_json(j, f.path() + ": tokenizer.ggml.*");
  }
  if (model == "rwkv") {
    nlohmann::json chars = nlohmann::json::array();
    for (size_t i = 0; i < n; ++i) chars.push_back(unescape_rwkv(tokens[i]));
    return io::tokenizer_from_json({{"kind", "char"}, {"chars", chars}}, f.path() + ": tokenizer.ggml.tokens");
  }
  throw_input(f.path() + ": tokenizer.ggml.model \"" + model + "\" is not supported for gpt2 (gpt2 or rwkv)",
              "tokenizer.ggml.model");
}

}  // namespace

std::unique_ptr<Model> make_gpt2_model(const models::Gpt2Config& cfg, std::vector<float> params,
                                       std::unique_ptr<io::Tokenizer> tok, ModelInfo base, const LoadOptions& opt,
                                       const std::map<std::string, QuantizedMatrix>& quantized) {
  cfg.validate();
  if (params.size() != models::gpt2_num_params(cfg))
    throw_input("GPT-2 model: " + std::to_string(params.size()) + " parameters, the config needs " +
                    std::to_string(models::gpt2_num_params(cfg)),
                base.path);
  if (!tok) throw_input("GPT-2 model: no tokenizer", base.path);
  if (tok->vocab_size() > cfg.vocab_size)
    throw_input("GPT-2 model: the tokenizer has " + std::to_string(tok->vocab_size()) + " tokens, the model's vocabulary " +
                    std::to_string(cfg.vocab_size),
                base.path);
  // On CUDA every matrix runs in f32: `params` already holds the quantized ones dequantized.
  if (opt.cuda_device >= 0) {
    detail::require_cuda_model(opt.cuda_device, cfg.n_embd / cfg.n_head, "GPT-2 CUDA model", base.path);
    return detail::make_gpt2_cuda_model(cfg, params, std::move(tok), std::move(base), opt.cuda_device);
  }
  return std::make_unique<Gpt2Serve>(cfg, std::move(params), std::move(tok), std::move(base), opt, quantized);
}

std::unique_ptr<Model> load_gpt2_gguf(const io::GgufFile& f, const LoadOptions& opt) {
  const auto u = [&](const char* key) {
    const uint64_t v = f.get(key).as_u64(key);
    if (v < 1 || v > (1u << 30)) throw_input(f.path() + ": " + key + " = " + std::to_string(v) + " is out of range", key);
    return static_cast<int>(v);
  };
  Gpt2Config cfg;
  cfg.n_layer = u("gpt2.block_count");
  cfg.n_head = u("gpt2.attention.head_count");
  cfg.n_embd = u("gpt2.embedding_length");
  cfg.block_size = u("gpt2.context_length");
  const auto& te = f.tensor("token_embd.weight");
  if (te.ne.size() != 2 || te.ne[0] != static_cast<uint64_t>(cfg.n_embd))
    throw_input(f.path() + ": token_embd.weight must be (vocab, " + std::to_string(cfg.n_embd) + ")", "token_embd.weight");
  cfg.vocab_size = static_cast<int>(te.ne[1]);
  if (const auto* ff = f.find("gpt2.feed_forward_length"); ff && ff->as_u64("gpt2.feed_forward_length") != 4u * cfg.n_embd)
    throw_input(f.path() + ": gpt2.feed_forward_length must be 4 x embedding_length for this model",
                "gpt2.feed_forward_length");
  cfg.validate();
  std::vector<float> params(models::gpt2_num_params(cfg));
  std::map<std::string, QuantizedMatrix> quantized;  // matrices kept quantized (see make_gpt2_model)
  for (const auto& t : models::gpt2_param_layout(cfg)) {
    const std::string name = models::gpt2_gguf_tensor_name(t.name);
    const auto& info = f.tensor(name);
    // ggml extents are the reverse of the row-major shape.
    std::vector<uint64_t> want(t.shape.rbegin(), t.shape.rend());
    if (info.ne != want) {
      std::string got, exp;
      for (auto v : info.ne) got += (got.empty() ? "" : ",") + std::to_string(v);
      for (auto v : want) exp += (exp.empty() ? "" : ",") + std::to_string(v);
      throw_input(f.path() + ": tensor " + name + " has ne [" + got + "], expected [" + exp + "]", name);
    }
    const bool matrix = t.shape.size() == 2 && t.name != "wpe";  // the packed ones (wte: the tied head)
    if (matrix && opt.keep_quantized && opt.cuda_device < 0 && kernels::PackedMatmulWeight::can_hold(info.type)) {
      const uint8_t* b = f.tensor_data(name);
      quantized[t.name] = QuantizedMatrix{info.type, std::vector<uint8_t>(b, b + info.nbytes)};
    }
    const std::vector<float> v = f.tensor_f32(name);  // wte's rows are also the embedding table
    io::require_finite(v, f.path() + ": " + name);
    std::copy(v.begin(), v.end(), params.begin() + static_cast<std::ptrdiff_t>(t.offset));
  }
  if (f.find_tensor("output.weight")) {
    const std::vector<float> out = f.tensor_f32("output.weight");
    if (out.size() != static_cast<size_t>(cfg.vocab_size) * cfg.n_embd ||
        !std::equal(out.begin(), out.end(), params.begin()))
      throw_input(f.path() + ": output.weight differs from token_embd.weight (an untied head is not supported "
                  "for gpt2)", "output.weight");
  }
  ModelInfo base;
  base.path = f.path();
  if (const auto* n = f.find("general.name")) base.name = n->as_string("general.name");
  if (base.name.empty()) base.name = std::filesystem::path(f.path()).stem().string();
  return make_gpt2_model(cfg, std::move(params), gguf_tokenizer(f), std::move(base), opt, quantized);
}

std::unique_ptr<Model> load_gpt2_checkpoint(const std::string& path, const LoadOptions& opt) {
  models::Checkpoint ck = models::load_checkpoint(path, false);
  if (ck.tokenizer.is_null())
    throw_input(path + ": the checkpoint holds no tokenizer (written before rtx-train stored one?)", "tokenizer");
  ModelInfo base;
  base.path = path;
  base.name = std::filesystem::path(path).stem().string();
  return make_gpt2_model(ck.model, std::move(ck.params), io::tokenizer_from_json(ck.tokenizer, path), std::move(base),
                         opt);
}

}  // namespace rtx::serve
