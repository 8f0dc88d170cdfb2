// GPT-2 front end: config presets and JSON, the flat parameter layout, the activation plan, and
// the Gpt2 class (argument validation, weight init, dispatch to the CPU or CUDA backend).
// The math lives in the backends (gpt2_cpu.cpp, cuda/gpt2_cuda.cu).
#include "rtx/models/gpt2.hpp"

#include <climits>
#include <utility>
#include <cmath>
#include <string>
#include <vector>

#include "models/gpt2_backend.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"

namespace rtx::models {

// ---- config ------------------------------------------------------------------------------

namespace {
struct Preset {
  const char* name;
  Gpt2Config cfg;
};
Gpt2Config make_cfg(int L, int NH, int C, int Tm, int V) {
  Gpt2Config c;
  c.n_layer = L;
  c.n_head = NH;
  c.n_embd = C;
  c.block_size = Tm;
  c.vocab_size = V;
  return c;
}
const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = {
      {"gpt2", make_cfg(12, 12, 768, 1024, 50257)},
      {"gpt2-tiny", make_cfg(2, 2, 64, 64, 50257)},
      {"shakespeare-char", make_cfg(6, 6, 384, 256, 65)},
      {"shakespeare-char-cpu", make_cfg(4, 4, 128, 64, 65)},
  };
  return p;
}
}  // namespace

Gpt2Config Gpt2Config::preset(const std::string& name) {
  for (const auto& p : presets())
    if (name == p.name) return p.cfg;
  std::string known;
  for (const auto& p : presets()) known += (known.empty() ? "" : ", ") + std::string(p.name);
  throw_usage("unknown GPT-2 preset '" + name + "'", "preset", "use one of: " + known);
}

std::vector<std::string> Gpt2Config::preset_names() {
  std::vector<std::string> n;
  for (const auto& p : presets()) n.emplace_back(p.name);
  return n;
}

void Gpt2Config::validate() const {
  const std::pair<const char*, int> fields[] = {{"n_layer", n_layer},
                                                {"n_head", n_head},
                                                {"n_embd", n_embd},
                                                {"block_size", block_size},
                                                {"vocab_size", vocab_size}};
  for (const auto& [name, v] : fields)
    if (v <= 0)
      throw_input(std::string("GPT-2 config: ") + name + " = " + std::to_string(v) + " must be positive", name,
                  "set a positive value");
  if (n_embd % n_head != 0)
    throw_input("GPT-2 config: n_embd = " + std::to_string(n_embd) + " is not divisible by n_head = " +
                    std::to_string(n_head),
                "n_embd", "choose n_embd a multiple of n_head");
  // Matmul dimensions are int: the widest is 4*n_embd (c_fc) and vocab_size (logits).
  if (n_embd > INT_MAX / 4)
    throw_input("GPT-2 config: n_embd = " + std::to_string(n_embd) + " is too large", "n_embd",
                "use n_embd <= " + std::to_string(INT_MAX / 4));
}

nlohmann::json Gpt2Config::to_json() const {
  return {{"n_layer", n_layer}, {"n_head", n_head}, {"n_embd", n_embd}, {"block_size", block_size},
          {"vocab_size", vocab_size}};
}

Gpt2Config Gpt2Config::from_json(const nlohmann::json& j, const std::string& where) {
  const std::string at = where.empty() ? std::string("GPT-2 config") : where;
  if (!j.is_object()) throw_input(at + ": expected a JSON object with the GPT-2 config", where, "see Gpt2Config::to_json");
  Gpt2Config c;
  const std::pair<const char*, int*> fields[] = {{"n_layer", &c.n_layer},
                                                 {"n_head", &c.n_head},
                                                 {"n_embd", &c.n_embd},
                                                 {"block_size", &c.block_size},
                                                 {"vocab_size", &c.vocab_size}};
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for (const auto& f : fields) known = known || it.key() == f.first;
    if (!known)
      throw_input("unknown field '" + it.key() + "' in the GPT-2 config", at,
                  "the fields are n_layer, n_head, n_embd, block_size, vocab_size");
  }
  for (const auto& [name, dst] : fields) {
    auto it = j.find(name);
    if (it == j.end()) throw_input(std::string("missing field '") + name + "'", at, "add the integer field");
    if (!it->is_number_integer())
      throw_input(std::string("field '") + name + "' must be an integer, got " + it->dump(), at,
                  "write a positive integer");
    if (it->is_number_unsigned() ? it->get<uint64_t>() > static_cast<uint64_t>(INT_MAX) : it->get<int64_t>() <= 0)
      throw_input(std::string("field '") + name + "' = " + it->dump() + " is out of range", at,
                  "write a positive 32-bit integer");
    *dst = static_cast<int>(it->get<int64_t>());
  }
  try {
    c.validate();
  } catch (const Error& e) {
    throw_input(e.message(), at, e.hint());
  }
  return c;
}

bool Gpt2Config::operator==(const Gpt2Config& o) const {
  return n_layer == o.n_layer && n_head == o.n_head && n_embd == o.n_embd && block_size == o.block_size &&
         vocab_size == o.vocab_size;
}

// ---- parameter layout ------------------------------------------------------------------------

std::vector<ParamTensor> gpt2_param_layout(const Gpt2Config& cfg) {
  cfg.validate();
  const int64_t C = cfg.n_embd, V = cfg.vocab_size, Tm = cfg.block_size;
  std::vector<ParamTensor> out;
  out.reserve(4 + 12 * static_cast<size_t>(cfg.n_layer));
  size_t off = 0;
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    ParamTensor t;
    t.name = std::move(name);
    t.numel = 1;
    for (int64_t d : shape) t.numel *= static_cast<size_t>(d);
    t.decay = shape.size() >= 2;
    t.shape = std::move(shape);
    t.offset = off;
    off += t.numel;
    out.push_back(std::move(t));
  };
  add("wte", {V, C});
  add("wpe", {Tm, C});
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    add(h + "ln_1.weight", {C});
    add(h + "ln_1.bias", {C});
    add(h + "attn.c_attn.weight", {3 * C, C});
    add(h + "attn.c_attn.bias", {3 * C});
    add(h + "attn.c_proj.weight", {C, C});
    add(h + "attn.c_proj.bias", {C});
    add(h + "ln_2.weight", {C});
    add(h + "ln_2.bias", {C});
    add(h + "mlp.c_fc.weight", {4 * C, C});
    add(h + "mlp.c_fc.bias", {4 * C});
    add(h + "mlp.c_proj.weight", {C, 4 * C});
    add(h + "mlp.c_proj.bias", {C});
  }
  add("ln_f.weight", {C});
  add("ln_f.bias", {C});
  return out;
}

size_t gpt2_num_params(const Gpt2Config& cfg) {
  const auto lay = gpt2_param_layout(cfg);
  return lay.back().offset + lay.back().numel;
}

// ---- activation plan -------------------------------------------------------------------------

namespace detail {

size_t Gpt2ActSizes::total_floats() const {
  return encoded + ln1 + 2 * ln1_stat + qkv + atty + att_lse + residual2 + ln2 + 2 * ln2_stat + fch + fch_gelu +
         residual3 + lnf + 2 * lnf_stat + logits + losses + proj + dresidual + dqkv + dfch_gelu + dfch + dlogits;
}

Gpt2ActSizes gpt2_act_sizes(const Gpt2Config& cfg, int B, int T) {
  const size_t L = static_cast<size_t>(cfg.n_layer), C = static_cast<size_t>(cfg.n_embd);
  const size_t NH = static_cast<size_t>(cfg.n_head), V = static_cast<size_t>(cfg.vocab_size);
  const size_t BT = static_cast<size_t>(B) * static_cast<size_t>(T);
  Gpt2ActSizes s;
  s.encoded = BT * C;
  s.ln1 = L * BT * C;
  s.ln1_stat = L * BT;
  s.qkv = L * BT * 3 * C;
  s.atty = L * BT * C;
  s.att_lse = L * NH * BT;
  s.residual2 = L * BT * C;
  s.ln2 = L * BT * C;
  s.ln2_stat = L * BT;
  s.fch = L * BT * 4 * C;
  s.fch_gelu = L * BT * 4 * C;
  s.residual3 = L * BT * C;
  s.lnf = BT * C;
  s.lnf_stat = BT;
  s.logits = BT * V;
  s.losses = BT;
  s.proj = BT * C;
  s.dresidual = BT * C;
  s.dqkv = BT * 3 * C;
  s.dfch_gelu = BT * 4 * C;
  s.dfch = BT * 4 * C;
  s.dlogits = BT * V;
  s.token_bytes = 2 * BT * sizeof(int32_t);
  return s;
}

#ifndef RTX_HAVE_CUDA
std::unique_ptr<Gpt2Backend> make_gpt2_cuda(const Gpt2Config&, const std::vector<ParamTensor>&, int, int,
                                            const Gpt2KernelParams&) {
  throw_env("GPT-2 on Backend::Cuda: this rtx was built without the CUDA backend", "backend",
            "rebuild with -DRTX_CUDA=ON on a machine with the CUDA toolkit, or use the CPU backend");
}
#endif

}  // namespace detail

// ---- Gpt2 ------------------------------------------------------------------------------------

struct Gpt2::Impl {
  Gpt2Config cfg;
  Backend backend = Backend::Cpu;
  Engine engine = Engine::Direct;
  std::vector<ParamTensor> layout;
  size_t nparams = 0;
  int max_B = 0, max_T = 0;
  std::unique_ptr<detail::Gpt2Backend> be;
  // State of the last forward, for get_logits() and backward().
  bool have_forward = false, have_targets = false;
};

namespace {
void check_tokens(const int32_t* p, size_t n, int V, int T, const char* what) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] < 0 || p[i] >= V)
      throw_input(std::string("Gpt2::forward: ") + what + "[b=" + std::to_string(i / T) + ", t=" +
                      std::to_string(i % T) + "] = " + std::to_string(p[i]) + " is outside [0, vocab_size=" +
                      std::to_string(V) + ")",
                  what, "token ids must be smaller than the model's vocab_size (check the tokenizer/dataset)");
}
}  // namespace

Engine parse_engine(const std::string& s) {
  if (s == "direct") return Engine::Direct;
  if (s == "graph") return Engine::Graph;
  throw_usage("unknown engine '" + s + "' (expected direct or graph)", "engine");
}

const char* engine_name(Engine e) { return e == Engine::Graph ? "graph" : "direct"; }

Gpt2::Gpt2(const Gpt2Config& cfg, int max_B, int max_T, Backend backend, const Gpt2KernelParams& kp, Engine engine)
    : impl_(std::make_unique<Impl>()) {
  cfg.validate();
  if (max_B <= 0) throw_input("Gpt2: max_B = " + std::to_string(max_B) + " must be positive", "max_B", "pass B >= 1");
  if (max_T <= 0 || max_T > cfg.block_size)
    throw_input("Gpt2: max_T = " + std::to_string(max_T) + " must be in [1, block_size=" +
                    std::to_string(cfg.block_size) + "]",
                "max_T", "use a sequence length no longer than the model's block_size");
  const int64_t BT = static_cast<int64_t>(max_B) * max_T;
  if (BT > INT_MAX / 4)
    throw_input("Gpt2: max_B * max_T = " + std::to_string(BT) + " is too large", "max_B",
                "use a batch of at most " + std::to_string(INT_MAX / 4) + " tokens");
  impl_->cfg = cfg;
  impl_->backend = backend;
  impl_->layout = gpt2_param_layout(cfg);
  impl_->nparams = impl_->layout.back().offset + impl_->layout.back().numel;
  impl_->max_B = max_B;
  impl_->max_T = max_T;
  impl_->engine = engine;
  if (engine == Engine::Graph) {
    if (backend == Backend::Cuda)
      throw_usage("the graph engine runs on the CPU only (no CUDA executor yet)", "engine", "use --engine direct with the CUDA backend");
    if (kp.attention.algo != kernels::AttentionParams::Algo::Flash)
      throw_usage("the graph engine runs flash attention only", "Gpt2KernelParams.attention", "use the flash algorithm or --engine direct");
    impl_->be = detail::make_gpt2_graph(cfg, impl_->layout, max_B, max_T, kp);
  } else {
    impl_->be = backend == Backend::Cuda ? detail::make_gpt2_cuda(cfg, impl_->layout, max_B, max_T, kp)
                                         : detail::make_gpt2_cpu(cfg, impl_->layout, max_B, max_T, kp);
  }
}

Gpt2::~Gpt2() = default;

const Gpt2Config& Gpt2::config() const { return impl_->cfg; }
Backend Gpt2::backend() const { return impl_->backend; }
Engine Gpt2::engine() const { return impl_->engine; }
const std::vector<ParamTensor>& Gpt2::layout() const { return impl_->layout; }
size_t Gpt2::num_params() const { return impl_->nparams; }
Gpt2Memory Gpt2::memory() const { return impl_->be->memory(); }

size_t Gpt2::activation_bytes(const Gpt2Config& cfg, int B, int T) {
  cfg.validate();
  if (B <= 0 || T <= 0)
    throw_input("Gpt2::activation_bytes: B = " + std::to_string(B) + ", T = " + std::to_string(T) +
                    " must be positive",
                "B/T", "pass a positive batch shape");
  const auto s = detail::gpt2_act_sizes(cfg, B, T);
  return s.total_floats() * sizeof(float) + s.token_bytes;
}

void Gpt2::init_weights(uint64_t seed) {
  const auto& lay = impl_->layout;
  std::vector<float> p(impl_->nparams);
  const float std_proj = 0.02f / std::sqrt(2.0f * static_cast<float>(impl_->cfg.n_layer));
  for (size_t i = 0; i < lay.size(); ++i) {
    const ParamTensor& t = lay[i];
    float* dst = p.data() + t.offset;
    const bool is_ln = t.name.find("ln_") != std::string::npos;
    if (t.decay) {
      const bool c_proj = t.name.find("c_proj.weight") != std::string::npos;
      const float sd = c_proj ? std_proj : 0.02f;
      Philox rng(seed, i);
      for (size_t k = 0; k < t.numel; ++k) dst[k] = sd * rng.next_normal();
    } else {
      const bool ln_weight = is_ln && t.name.size() >= 7 && t.name.compare(t.name.size() - 7, 7, ".weight") == 0;
      const float v = ln_weight ? 1.0f : 0.0f;
      for (size_t k = 0; k < t.numel; ++k) dst[k] = v;
    }
  }
  impl_->be->set_params(p.data());
  std::fill(p.begin(), p.end(), 0.0f);
  impl_->be->set_moments(p.data(), p.data());
  impl_->be->zero_grad();
}

namespace {
void need_host(const void* p, const char* fn, const char* what) {
  if (!p) throw_input(std::string("Gpt2::") + fn + ": " + what + " is null", what, "pass a host buffer");
}
}  // namespace

void Gpt2::set_params(const float* host) {
  need_host(host, "set_params", "host");
  impl_->be->set_params(host);
}
void Gpt2::get_params(float* host) const {
  need_host(host, "get_params", "host");
  impl_->be->get_params(host);
}
void Gpt2::get_grads(float* host) const {
  need_host(host, "get_grads", "host");
  impl_->be->get_grads(host);
}
void Gpt2::get_moments(float* m_host, float* v_host) const {
  need_host(m_host, "get_moments", "m_host");
  need_host(v_host, "get_moments", "v_host");
  impl_->be->get_moments(m_host, v_host);
}
void Gpt2::set_moments(const float* m_host, const float* v_host) {
  need_host(m_host, "set_moments", "m_host");
  need_host(v_host, "set_moments", "v_host");
  impl_->be->set_moments(m_host, v_host);
}

float Gpt2::forward(const int32_t* ids, const int32_t* targets, int B, int T) {
  Impl& m = *impl_;
  need_host(ids, "forward", "ids");
  if (B <= 0 || B > m.max_B)
    throw_input("Gpt2::forward: B = " + std::to_string(B) + " is outside [1, max_B=" + std::to_string(m.max_B) + "]",
                "B", "construct the model with a larger max_B or split the batch");
  if (T <= 0 || T > m.max_T)
    throw_input("Gpt2::forward: T = " + std::to_string(T) + " is outside [1, max_T=" + std::to_string(m.max_T) +
                    "] (block_size " + std::to_string(m.cfg.block_size) + ")",
                "T", "use sequences no longer than max_T (at most the model's block_size)");
  const size_t n = static_cast<size_t>(B) * static_cast<size_t>(T);
  check_tokens(ids, n, m.cfg.vocab_size, T, "ids");
  if (targets) check_tokens(targets, n, m.cfg.vocab_size, T, "targets");
  m.have_forward = false;
  const float loss = m.be->forward(ids, targets, B, T);
  m.have_forward = true;
  m.have_targets = targets != nullptr;
  return loss;
}

void Gpt2::get_logits(float* host) const {
  need_host(host, "get_logits", "host");
  if (!impl_->have_forward)
    throw_usage("Gpt2::get_logits: no forward pass has run yet", "get_logits", "call forward() first");
  impl_->be->get_logits(host);
}

void Gpt2::zero_grad() { impl_->be->zero_grad(); }

void Gpt2::backward(float loss_scale) {
  if (!impl_->have_forward || !impl_->have_targets)
    throw_usage("Gpt2::backward: the last forward had no targets (or none ran)", "backward",
                "call forward(ids, targets, B, T) with targets before backward()");
  if (!std::isfinite(loss_scale))
    throw_input("Gpt2::backward: loss_scale = " + std::to_string(loss_scale) + " is not finite", "loss_scale",
                "pass 1/K for K accumulation steps");
  impl_->be->backward(loss_scale);
}

double Gpt2::grad_norm() const { return impl_->be->grad_norm(); }

bool Gpt2::set_grad_ready_hook(GradReadyHook hook) { return impl_->be->set_grad_ready_hook(std::move(hook)); }

float* Gpt2::grad_data() {
  float* p = impl_->be->grad_data();
  if (!p) throw_env("Gpt2::grad_data: this backend does not expose its gradient buffer", "grad_data");
  return p;
}

double Gpt2::step(int t, float lr, const AdamWConfig& opt) {
  auto bad = [](const std::string& what, const std::string& hint) {
    throw_input("Gpt2::step: " + what, "AdamWConfig", hint);
  };
  if (t < 1) bad("step t = " + std::to_string(t) + " must be >= 1", "count optimizer steps from 1");
  if (!std::isfinite(lr) || lr < 0) bad("lr = " + std::to_string(lr) + " must be finite and >= 0", "fix the schedule");
  if (!(opt.beta1 >= 0 && opt.beta1 < 1) || !(opt.beta2 >= 0 && opt.beta2 < 1))
    bad("beta1 = " + std::to_string(opt.beta1) + ", beta2 = " + std::to_string(opt.beta2) + " must be in [0, 1)",
        "use e.g. beta1 0.9, beta2 0.95");
  if (!(opt.eps > 0) || !std::isfinite(opt.eps)) bad("eps must be positive", "use e.g. 1e-8");
  if (!std::isfinite(opt.weight_decay) || opt.weight_decay < 0) bad("weight_decay must be >= 0", "use e.g. 0.1");
  if (!std::isfinite(opt.grad_clip) || opt.grad_clip < 0) bad("grad_clip must be >= 0 (0: off)", "use e.g. 1.0");
  return impl_->be->step(t, lr, opt);
}

}  // namespace rtx::models
