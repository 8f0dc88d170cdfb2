// One arm of a proposal's A/B validation, run inside the sandboxed child: kernel cases, a
// serving batch through serve::Scheduler, a seeded allocation trace, or GPT-2 training steps
// with fused or unfused attention. Prints numbers only.
#include "rtx/evolve/trial.hpp"
#include "rtx/evolve/canary.hpp"

#include <fcntl.h>
#include <omp.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>

#include "rtx/measure/measure.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/hash.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/dist/comm.hpp"
#include "rtx/io/atomic_file.hpp"
#include "rtx/io/dataset.hpp"
#include "rtx/models/checkpoint.hpp"
#include "rtx/models/train.hpp"
#include "rtx/evolve/gates.hpp"
#include "rtx/kernels/registry.hpp"
#include "rtx/models/gpt2.hpp"
#include "rtx/serve/model.hpp"
#include "rtx/serve/tuning.hpp"

namespace rtx::evolve {

using nlohmann::json;

namespace {

std::string hex64(uint64_t v) {
  char b[20];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}


double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

size_t peak_rss_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<size_t>(ru.ru_maxrss) * 1024;
}

template <class T>
T get(const json& j, const char* k, const T& dflt) {
  if (!j.contains(k)) return dflt;
  try {
    return j.at(k).get<T>();
  } catch (const json::exception&) {
    throw_input(std::string("trial spec: field '") + k + "' has the wrong type", k);
  }
}

/// One dimension of a GPT-2 trial's "shape" {B, T, L, C, NH, V}: an integer in [1, 2^20].
/// Error(Input) naming the field otherwise, or when "shape" is not an object.
int shape_dim(const json& spec, const char* k) {
  if (!spec.contains("shape") || !spec["shape"].is_object())
    throw_input("trial spec: 'shape' must be an object {B, T, L, C, NH, V}", "shape");
  const json& sh = spec["shape"];
  if (!sh.contains(k) || !sh[k].is_number_integer() || sh[k].get<int64_t>() < 1 || sh[k].get<int64_t>() > (1 << 20))
    throw_input(std::string("trial spec: shape.") + k + " must be an integer in [1, 2^20]", std::string("shape.") + k);
  return static_cast<int>(sh[k].get<int64_t>());
}

/// The host evidence of one measuring window, judged by rtx-bench's per-window rule (rtx::measure),
/// with the CPU-share rule where the measuring thread is runnable for the whole window.
measure::HostEvidence host_evidence(const measure::HostSample& before, const measure::HostSample& after,
                                       bool cpu_share_rule) {
  return measure::contention_evidence(before, after, omp_get_max_threads(),
                                         cpu_share_rule ? measure::CpuShareRule::Apply : measure::CpuShareRule::Off);
}

json run_kernels(const json& spec, const std::function<measure::HostSample()>& sample, measure::HostSample& win_before,
                 measure::HostSample& win_after) {
  const auto& reg = measure::registry();
  const size_t samples = get<size_t>(spec, "samples", 7), warmup = get<size_t>(spec, "warmup", 1);
  const uint64_t seed = get<uint64_t>(spec, "seed", 0);
  const int threads = get<int>(spec, "threads", 0);
  const int default_threads = omp_get_max_threads();
  if (threads > 0) omp_set_num_threads(threads);
  struct C {
    std::string id;
    std::unique_ptr<kernels::Instance> inst;
    kernels::CheckResult chk;
    uint64_t checksum = 0;
    std::vector<double> s;
    json parity;  // null, or the comparison with the baseline configuration's output
  };
  std::vector<C> cs;
  if (!spec.contains("cases") || !spec["cases"].is_array()) throw_input("trial spec: 'cases' must be an array", "cases");
  const int baseline_threads = get<int>(spec, "baseline_threads", 0);  // 0: the process default
  const int own_threads = omp_get_max_threads();
  for (const json& c : spec["cases"]) {
    const auto& op = reg.op(c.at("op").get<std::string>());
    const auto& v = reg.variant(op.name, c.at("variant").get<std::string>());
    const kernels::Shape shape = c.at("shape").get<kernels::Shape>();
    const DType dt = parse_dtype(c.at("dtype").get<std::string>());
    const std::string id = c.at("id").get<std::string>();
    auto params_of = [&](const char* field) {
      kernels::Params p = v.space.defaults();
      for (const auto& nv : c.value(field, json::object()).get<kernels::Params>()) {
        const std::string& name = nv.first;  // named copies: C++17 lambdas cannot capture bindings
        const auto value = nv.second;
        const auto it = std::find_if(v.space.params.begin(), v.space.params.end(), [&](const kernels::Param& q) { return q.name == name; });
        if (it == v.space.params.end() || std::find(it->values.begin(), it->values.end(), value) == it->values.end())
          throw_input("trial: " + name + "=" + std::to_string(value) + " is not in the parameter space of " + op.name + "/" + v.name,
                      std::string("cases.") + field);
        p[name] = value;
      }
      if (std::string why = v.validate ? v.validate(shape, p) : ""; !why.empty())
        throw_input("trial: " + std::string(field) + " " + kernels::params_to_string(p) + " invalid for " + id + ": " + why,
                    std::string("cases.") + field);
      return p;
    };
    const kernels::Params p = params_of("params");
    C x;
    x.id = id;
    x.inst = v.make(shape, dt, p, seed);
    x.inst->run();
    x.inst->sync();
    x.chk = x.inst->check();
    x.checksum = x.inst->checksum();
    if (c.contains("baseline_params")) {
      // The baseline configuration on the same seeded inputs, run once in its own instance
      // (under the baseline's thread count): the determinism gate's parity check.
      const kernels::Params bp = params_of("baseline_params");
      const auto cand_out = x.inst->output_values();
      omp_set_num_threads(baseline_threads > 0 ? baseline_threads : default_threads);
      std::vector<std::vector<float>> base_out;
      {
        auto b = v.make(shape, dt, bp, seed);
        b->run();
        b->sync();
        base_out = b->output_values();
      }
      omp_set_num_threads(own_threads);
      const double tol = parity_tolerance(dtype_name(dt));
      if (cand_out.empty() || base_out.empty()) {
        x.parity = {{"available", false}};
      } else {
        const Parity par = output_parity(cand_out, base_out);
        x.parity = {{"available", true},
                    {"rel_diff", par.rel_diff},
                    {"max_rel_diff", par.max_rel_diff},
                    {"tolerance", tol},
                    {"ok", par.rel_diff <= tol},
                    {"worst_output", par.worst_output},
                    {"worst_index", par.worst_index}};
      }
    }
    for (size_t w = 0; w < warmup; ++w) x.inst->run();
    x.inst->sync();
    cs.push_back(std::move(x));
  }
  // The measuring window is the timed loop alone (setup, reference checks and warm-up are not in it).
  win_before = sample();
  for (size_t i = 0; i < samples; ++i)
    for (C& x : cs) x.s.push_back(x.inst->timed_run());
  win_after = sample();
  json out = {{"schema", kTrialResultSchema}, {"threads", omp_get_max_threads()}, {"cases", json::array()}};
  for (C& x : cs) {
    // The output after all timed runs must still hash the same (repeat runs are deterministic).
    x.inst->sync();
    const uint64_t again = x.inst->checksum();
    out["cases"].push_back({{"id", x.id},
                            {"samples", x.s},
                            {"checksum", hex64(x.checksum)},
                            {"repeat_checksum_equal", again == x.checksum},
                            {"max_rel_err", x.chk.max_rel_err},
                            {"tolerance", x.chk.tolerance},
                            {"ok", x.chk.ok},
                            {"detail", x.chk.detail}});
    if (!x.parity.is_null()) out["cases"].back()["parity"] = x.parity;
  }
  return out;
}

json run_serve(const json& spec) {
  const std::string path = get<std::string>(spec, "model", "");
  serve::LoadOptions lo;
  lo.threads = get<int>(spec, "threads", 0);
  auto model = serve::load_model(path, lo);
  const serve::SchedulerConfig cfg = serve::SchedulerConfig::from_json(spec.value("config", json::object()), "trial config");
  serve::BatchWorkload w;
  w.requests = get<int>(spec, "requests", 8);
  w.prompt_tokens = get<int>(spec, "prompt_tokens", 16);
  w.max_tokens = get<int>(spec, "max_tokens", 24);
  w.seed = get<uint64_t>(spec, "seed", 0);
  const int nreq = w.requests, plen = w.prompt_tokens, max_tokens = w.max_tokens;
  const size_t samples = get<size_t>(spec, "samples", 5), warmup = get<size_t>(spec, "warmup", 1);
  std::vector<double> s;
  uint64_t checksum = 0;
  bool first = true, stable = true;
  for (size_t i = 0; i < warmup + samples; ++i) {
    const serve::BatchRun run = serve::run_batch(*model, cfg, w);
    if (first) checksum = run.checksum, first = false;
    else if (run.checksum != checksum) stable = false;
    if (i >= warmup) s.push_back(run.seconds / static_cast<double>(run.tokens));
  }
  return {{"schema", kTrialResultSchema},
          {"cases", json::array({{{"id", "serve:" + model->info().name + "/req=" + std::to_string(nreq) + ",prompt=" +
                                             std::to_string(plen) + ",gen=" + std::to_string(max_tokens)},
                                   {"samples", s},
                                   {"unit", "s/token"},
                                   {"checksum", hex64(checksum)},
                                   {"repeat_checksum_equal", stable},
                                   {"max_rel_err", 0.0},
                                   {"tolerance", 0.0},
                                   {"ok", stable},
                                   {"detail", stable ? "" : "tokens differ between repeated batches"}}})}};
}

// A seeded trace shaped like a small GPT training step (B=12, T=64, C=128, NH=4, L=4, V=65):
// forward keeps each layer's activations, backward frees them in reverse while short-lived
// gradient temporaries come and go. Each block carries a seeded tag at both ends that is checked
// before it is freed (overlapping blocks would corrupt it).
json run_alloc(const json& spec) {
  const AllocatorConfig cfg = allocator_config_from_json(spec.value("config", json::object()), "trial config");
  const size_t samples = get<size_t>(spec, "samples", 7), warmup = get<size_t>(spec, "warmup", 1);
  const size_t steps = get<size_t>(spec, "steps", 20);
  const uint64_t seed = get<uint64_t>(spec, "seed", 0);
  const size_t B = 12, T = 64, C = 128, NH = 4, L = 4, V = 65, f = 4;
  const std::vector<size_t> layer = {B * T * C * f, B * T * 3 * C * f, B * NH * T * T * f, B * T * C * f,
                                     B * T * C * f, B * T * 4 * C * f, B * T * 4 * C * f, B * T * C * f, 3 * B * T * f + 8};
  CachingAllocator a(host_backing(), cfg);
  uint64_t h = kFnv1a64Basis;
  bool ok = true;
  uint64_t counter = 0;
  auto tag_of = [&](uint64_t i) { return (static_cast<uint64_t>(philox_u32(seed, 0xa110c, i)) << 32) | (i & 0xffffffffu); };
  struct Blk { void* p; size_t n; uint64_t tag; };
  auto take = [&](size_t n) {
    // Odd sizes on purpose: allocations are rarely multiples of the rounding.
    const size_t jitter = philox_u32(seed, 0x517e, counter) % 97;
    const size_t bytes = n + jitter * 8;
    void* p = a.allocate(bytes);
    const uint64_t tag = tag_of(counter++);
    std::memcpy(p, &tag, 8);
    std::memcpy(static_cast<char*>(p) + bytes - 8, &tag, 8);
    return Blk{p, bytes, tag};
  };
  auto give = [&](const Blk& b) {
    uint64_t t0 = 0, t1 = 0;
    std::memcpy(&t0, b.p, 8);
    std::memcpy(&t1, static_cast<char*>(b.p) + b.n - 8, 8);
    if (t0 != b.tag || t1 != b.tag) ok = false;
    h = fnv1a64(&t0, 8, h);
    a.deallocate(b.p);
  };
  auto one_step = [&]() {
    std::vector<Blk> acts;
    acts.push_back(take(B * T * C * f));
    for (size_t l = 0; l < L; ++l)
      for (size_t n : layer) acts.push_back(take(n));
    acts.push_back(take(B * T * V * f));
    for (size_t i = acts.size(); i-- > 0;) {
      const Blk g = take(acts[i].n);
      Blk small = take(C * f);
      give(small);
      give(acts[i]);
      give(g);
    }
  };
  std::vector<double> s;
  for (size_t i = 0; i < warmup + samples; ++i) {
    const double t0 = now_s();
    for (size_t k = 0; k < steps; ++k) one_step();
    const double el = (now_s() - t0) / static_cast<double>(steps);
    if (i >= warmup) s.push_back(el);
  }
  const AllocatorStats st = a.stats();
  const double frag = st.peak_reserved_bytes == 0 ? 0.0
                      : 100.0 * static_cast<double>(st.peak_reserved_bytes - st.peak_allocated_bytes) /
                            static_cast<double>(st.peak_reserved_bytes);
  return {{"schema", kTrialResultSchema},
          {"peak_reserved_bytes", st.peak_reserved_bytes},
          {"peak_allocated_bytes", st.peak_allocated_bytes},
          {"frag_pct", frag},
          {"cases", json::array({{{"id", "alloc:gpt2-small-step"},
                                   {"samples", s},
                                   {"unit", "s/step"},
                                   {"checksum", hex64(h)},
                                   {"repeat_checksum_equal", ok},
                                   {"max_rel_err", 0.0},
                                   {"tolerance", 0.0},
                                   {"ok", ok},
                                   {"detail", ok ? "" : "a block's guard tags were overwritten (overlapping blocks)"}}})}};
}

/// GPT-2 training steps (zero_grad, forward, backward, AdamW at lr 1e-4, as the bench pack's
/// gpt2_train_step cpu.model case) with attention fused or unfused. The first step's loss and
/// gradients are compared with the reference configuration's (run first, in its own scope, so
/// the process peak RSS is the larger model's, not the sum).
json run_fusion(const json& spec) {
  const bool fused = fusion_attention_fused(spec.value("config", json::object()), "trial config");
  const bool ref_fused = fusion_attention_fused(spec.value("reference_config", fusion_default_config()), "trial reference_config");
  auto dim = [&](const char* k) { return shape_dim(spec, k); };
  const int B = dim("B"), T = dim("T");
  models::Gpt2Config cfg;
  cfg.n_layer = dim("L");
  cfg.n_head = dim("NH");
  cfg.n_embd = dim("C");
  cfg.block_size = T;
  cfg.vocab_size = dim("V");
  cfg.validate();
  const size_t samples = get<size_t>(spec, "samples", 5), warmup = get<size_t>(spec, "warmup", 1);
  const uint64_t seed = get<uint64_t>(spec, "seed", 0);
  const int threads = get<int>(spec, "threads", 0);
  if (threads > 0) omp_set_num_threads(threads);
  std::vector<int32_t> ids(static_cast<size_t>(B) * T), tgt(ids.size());
  Philox rng(seed, 1);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>(rng.next_u32() % static_cast<uint32_t>(cfg.vocab_size));
    tgt[i] = static_cast<int32_t>(rng.next_u32() % static_cast<uint32_t>(cfg.vocab_size));
  }
  auto make_model = [&](bool f) {
    models::Gpt2KernelParams kp;
    kp.attention.algo = f ? kernels::AttentionParams::Algo::Flash : kernels::AttentionParams::Algo::Naive;
    auto m = std::make_unique<models::Gpt2>(cfg, B, T, models::Backend::Cpu, kp);
    m->init_weights(seed);
    return m;
  };
  // Loss and gradients of one step from the current weights (no update).
  auto grads_of = [&](models::Gpt2& m, std::vector<float>& g) {
    m.zero_grad();
    const float loss = m.forward(ids.data(), tgt.data(), B, T);
    m.backward(1.0f);
    g.resize(m.num_params());
    m.get_grads(g.data());
    return loss;
  };
  auto hash_of = [](float loss, const std::vector<float>& g) {
    return fnv1a64(g.data(), g.size() * sizeof(float), fnv1a64(&loss, sizeof loss));
  };
  // The reference runs in every arm, the baseline's too, so both arms allocate and free the
  // same buffers before their own model: the peak RSS difference is the configuration's.
  float ref_loss = 0;
  std::vector<float> ref_g;
  {
    auto r = make_model(ref_fused);
    ref_loss = grads_of(*r, ref_g);
  }
  auto m = make_model(fused);
  std::vector<float> init(m->num_params()), g;
  m->get_params(init.data());
  const float loss = grads_of(*m, g);
  const uint64_t checksum = hash_of(loss, g);
  // Parity with the reference (baseline) configuration: the loss and each parameter tensor's
  // gradient as separate outputs, ||a-b||_2 / ||b||_2 each (output_parity).
  bool finite = std::isfinite(loss);
  std::vector<std::vector<float>> outs = {{loss}}, ref_outs = {{ref_loss}};
  std::vector<std::string> names = {"loss"};
  for (const models::ParamTensor& t : m->layout()) {
    const auto a = g.begin() + static_cast<std::ptrdiff_t>(t.offset), b = ref_g.begin() + static_cast<std::ptrdiff_t>(t.offset);
    outs.emplace_back(a, a + static_cast<std::ptrdiff_t>(t.numel));
    ref_outs.emplace_back(b, b + static_cast<std::ptrdiff_t>(t.numel));
    names.push_back(t.name);
    for (float x : outs.back())
      if (!std::isfinite(x)) finite = false;
  }
  const Parity par = output_parity(outs, ref_outs);
  const double err = par.rel_diff;
  const std::string worst = names[par.worst_output];
  outs.clear();
  ref_outs.clear();
  const double tol = parity_tolerance("f32");  // sums in another order, same math
  const double gnorm = m->grad_norm();
  // Timed steps continue from the first step's gradients (its AdamW update is step 1).
  models::AdamWConfig opt;
  int step = 0;
  m->step(++step, 1e-4f, opt);
  std::vector<double> s;
  for (size_t i = 0; i < warmup + samples; ++i) {
    const double t0 = now_s();
    m->zero_grad();
    m->forward(ids.data(), tgt.data(), B, T);
    m->backward(1.0f);
    m->step(++step, 1e-4f, opt);
    if (i >= warmup) s.push_back(now_s() - t0);
  }
  // The first step again from the initial weights: the same bits (deterministic on CPU).
  m->set_params(init.data());
  std::vector<float> g2;
  const float loss2 = grads_of(*m, g2);
  const bool repeat = hash_of(loss2, g2) == checksum;
  const bool ok = finite && err <= tol && repeat;
  char detail[256] = "";
  if (!finite) std::snprintf(detail, sizeof detail, "non-finite loss or gradient");
  else if (err > tol)
    std::snprintf(detail, sizeof detail, "%s differs from the reference (attention %s) by %.3g relative (bound %.0e)",
                  worst.c_str(), ref_fused ? "fused" : "unfused", err, tol);
  else if (!repeat) std::snprintf(detail, sizeof detail, "the first step's loss/gradients differ when repeated");
  char id[160];
  std::snprintf(id, sizeof id, "gpt2_train_step/B=%d,T=%d,L=%d,C=%d,NH=%d,V=%d", B, T, cfg.n_layer, cfg.n_embd, cfg.n_head,
                cfg.vocab_size);
  return {{"schema", kTrialResultSchema},
          {"threads", omp_get_max_threads()},
          {"cases", json::array({{{"id", get<std::string>(spec, "case", id)},
                                   {"samples", s},
                                   {"unit", "s/step"},
                                   {"attention", fused ? "fused" : "unfused"},
                                   {"loss", loss},
                                   {"reference_loss", ref_loss},
                                   {"grad_norm", gnorm},
                                   {"worst_tensor", worst},
                                   {"checksum", hex64(checksum)},
                                   {"repeat_checksum_equal", repeat},
                                   {"max_rel_err", err},
                                   {"max_abs_rel_diff", par.max_rel_diff},
                                   {"tolerance", tol},
                                   {"ok", ok},
                                   {"detail", detail}}})}};
}

/// The data-parallel bucket size of a parallelism config, MiB: "dp_bucket_mb" when present, else
/// rtx-train's default (TrainConfig::bucket_mb).
double dp_bucket_of(const json& config, const std::string& where) {
  if (!config.is_object()) throw_input(where + " must be a JSON object", where);
  if (!config.contains("dp_bucket_mb")) return models::TrainConfig{}.bucket_mb;
  const json& b = config["dp_bucket_mb"];
  if (!b.is_number() || !(b.get<double>() >= 0) || b.get<double>() > 65536)
    throw_input("dp_bucket_mb must be a number of MiB in [0, 65536] (0: one all-reduce after the backward), not " + b.dump(),
                where + ".dp_bucket_mb");
  return b.get<double>();
}

/// The GPT-2 config and run config of a data-parallel trial (shape {B, T, L, C, NH, V}).
models::TrainConfig dp_train_config(const json& spec, double bucket_mb, int steps, const std::string& out) {
  auto dim = [&](const char* k) { return shape_dim(spec, k); };
  models::TrainConfig c;
  c.model.n_layer = dim("L");
  c.model.n_head = dim("NH");
  c.model.n_embd = dim("C");
  c.model.block_size = dim("T");
  c.model.vocab_size = dim("V");
  c.preset.clear();
  c.batch = dim("B");
  c.seq_len = c.model.block_size;
  c.steps = steps;
  c.warmup_steps = 0;
  c.eval_iters = 0;  // no evaluation: every step is a training step
  c.eval_interval = steps;
  c.ckpt_interval = out.empty() ? 0 : steps;  // the parity run writes its final weights
  c.bucket_mb = static_cast<float>(bucket_mb);
  c.seed = get<uint64_t>(spec, "seed", 0) + 1;
  c.validate();
  return c;
}

/// One rank of a data-parallel trial, started by mpirun from run_dp: K steps under the
/// reference bucket size and K under the arm's (both write their weights), then warmup +
/// samples timed steps under the arm's. Rank 0 writes the result to spec.result_file.
json run_dp_rank(const json& spec) {
  dist::Communicator& w = dist::world();
  const std::string ds = get<std::string>(spec, "dataset", "");
  const int parity_steps = get<int>(spec, "parity_steps", 2);
  const size_t samples = get<size_t>(spec, "samples", 5), warmup = get<size_t>(spec, "warmup", 1);
  const double bucket = dp_bucket_of(spec.value("config", json::object()), "trial config");
  const double ref_bucket = dp_bucket_of(spec.value("reference_config", json::object()), "trial reference_config");
  const int threads = get<int>(spec, "threads", 0);
  if (threads > 0) omp_set_num_threads(threads);
  const std::string dir = get<std::string>(spec, "workdir", ".");
  const std::string ref_dir = dir + "/ref", own_dir = dir + "/own";
  const models::TrainResult ref = models::train(dp_train_config(spec, ref_bucket, parity_steps, ref_dir), ds, ref_dir, "", {}, &w);
  const models::TrainResult own = models::train(dp_train_config(spec, bucket, parity_steps, own_dir), ds, own_dir, "", {}, &w);
  std::vector<double> s;
  models::TrainCallbacks cb;
  size_t step = 0;
  cb.on_step = [&](const models::StepRecord& r) {
    if (step++ >= warmup) s.push_back(r.ms / 1e3);
  };
  const models::TrainResult timed =
      models::train(dp_train_config(spec, bucket, static_cast<int>(warmup + samples), ""), ds, "", "", cb, &w);
  if (w.rank() != 0) return {{"schema", kTrialResultSchema}, {"rank", w.rank()}};
  const models::Checkpoint a = models::load_checkpoint(own_dir + "/ckpt.safetensors", false),
                           b = models::load_checkpoint(ref_dir + "/ckpt.safetensors", false);
  const Parity par = output_parity({a.params}, {b.params});
  const double tol = parity_tolerance("f32");
  bool finite = true;
  for (float x : a.params) finite = finite && std::isfinite(x);
  const bool ok = finite && par.rel_diff <= tol;
  char detail[200] = "";
  if (!finite) std::snprintf(detail, sizeof detail, "non-finite weights after %d steps", parity_steps);
  else if (!ok)
    std::snprintf(detail, sizeof detail, "weights after %d steps differ from bucket %g MiB's by %.3g relative (bound %.0e)",
                  parity_steps, ref_bucket, par.rel_diff, tol);
  char id[200];
  const json& sh = spec["shape"];
  std::snprintf(id, sizeof id, "dp_train_step/ranks=%d,B=%d,T=%d,L=%d,C=%d,NH=%d,V=%d", w.size(), sh["B"].get<int>(),
                sh["T"].get<int>(), sh["L"].get<int>(), sh["C"].get<int>(), sh["NH"].get<int>(), sh["V"].get<int>());
  json out = {{"schema", kTrialResultSchema},
              {"threads", omp_get_max_threads()},
              {"ranks", w.size()},
              {"cases", json::array({{{"id", get<std::string>(spec, "case", id)},
                                       {"samples", s},
                                       {"unit", "s/step"},
                                       {"dp_bucket_mb", bucket},
                                       {"comm_s", timed.comm_s},
                                       {"exposed_comm_s", timed.exposed_comm_s},
                                       {"checksum", hex64(own.params_fnv)},
                                       {"reference_checksum", hex64(ref.params_fnv)},
                                       {"repeat_checksum_equal", true},
                                       {"max_rel_err", par.rel_diff},
                                       {"max_abs_rel_diff", par.max_rel_diff},
                                       {"tolerance", tol},
                                       {"ok", ok},
                                       {"detail", detail}}})}};
  io::atomic_write_file(dir + "/result.json", out.dump());
  return out;
}

/// Run argv (argv[0] a path) with extra environment, stdout and stderr to files; the exit status
/// (128 + signal when killed, 127 when exec failed).
int run_to_files(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& out,
                 const std::string& err) {
  std::vector<char*> a;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  // The environment is built before fork: the child of a threaded process may not allocate.
  std::vector<std::string> envs = env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('='));
    if (std::none_of(env.begin(), env.end(), [&](const std::string& x) { return x.compare(0, key.size() + 1, key + "=") == 0; }))
      envs.push_back(kv);
  }
  std::vector<char*> envp;
  for (auto& kv : envs) envp.push_back(kv.data());
  envp.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw_env(std::string("fork failed: ") + std::strerror(errno), "trial");
  if (pid == 0) {
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600), e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (o < 0 || e < 0) ::_exit(127);
    ::dup2(o, 1);
    ::dup2(e, 2);
    ::execve(a[0], a.data(), envp.data());
    ::_exit(127);
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/// Data-parallel GPT-2 training steps over `ranks` processes (mpirun on this host), gradients
/// all-reduced in buckets of the config's dp_bucket_mb while the backward runs. Works in a
/// fresh folder under $TMPDIR (the sandbox's scratch), removed afterwards: a seeded synthetic
/// character corpus, its dataset, the rank spec and the weights of the parity runs.
json run_dp(const json& spec) {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/rtx-dp-XXXXXX";
  if (!::mkdtemp(tmpl.data())) throw_env(std::string("cannot create a work folder: ") + std::strerror(errno), tmpl);
  struct Cleanup {
    std::string d;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  } cleanup{tmpl};
  const std::string dir = tmpl;
  const int ranks = get<int>(spec, "ranks", 2);
  if (ranks < 2 || ranks > 64) throw_input("trial spec: 'ranks' must be in [2, 64]", "ranks");
  dp_train_config(spec, dp_bucket_of(spec.value("config", json::object()), "trial config"), 2, "");  // shape errors here
  dp_bucket_of(spec.value("reference_config", json::object()), "trial reference_config");
  const std::string mpiexec = dist::mpiexec_path();
  if (mpiexec.empty() || !dist::have_mpi())
    throw_env("a data-parallel trial needs MPI: this build found no MPI launcher (install libopenmpi-dev and rebuild)",
              "trial");
  // A seeded corpus over nanoGPT shakespeare-char's 65-character alphabet: the trial needs
  // tokens, not meaning, and a corpus of its own keeps it independent of $RTX_DATA.
  static const char kAlphabet[] = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  const uint64_t seed = get<uint64_t>(spec, "seed", 0);
  std::string text(200000, ' ');
  Philox rng(seed, 0xd9);
  for (char& c : text) c = kAlphabet[rng.next_u32() % (sizeof kAlphabet - 1)];
  io::atomic_write_file(dir + "/corpus.txt", text);
  io::prepare_dataset(dir + "/corpus.txt", "char", "", dir + "/ds");
  json rank = spec;
  rank["kind"] = "dp_rank";
  rank["dataset"] = dir + "/ds";
  rank["workdir"] = dir;
  io::atomic_write_file(dir + "/rank.json", json{{"schema", kTrialSpecSchema}, {"parts", json::array({rank})}}.dump());
  // The ranks run this program's `__trial` (rtx-evolve), or "self_exe" when the caller is not it.
  std::string self = get<std::string>(spec, "self_exe", "");
  if (self.empty()) {
    char buf[4096];
    const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) throw_env("cannot resolve /proc/self/exe", "trial");
    self.assign(buf, static_cast<size_t>(n));
  }
  const int threads = std::max(1, get<int>(spec, "threads", 1));
  std::vector<std::string> argv = {mpiexec, "-n", std::to_string(ranks), "--oversubscribe", "--bind-to", "none",
                                   "-x", "OMP_NUM_THREADS=" + std::to_string(threads), self, "__trial", "--spec", dir + "/rank.json"};
  // Open MPI refuses root without these; its session and shared-memory files go to the work
  // folder (the sandbox lets the trial write nowhere else).
  const std::vector<std::string> env = {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                                        "OMPI_MCA_btl_vader_backing_directory=" + dir, "TMPDIR=" + dir};
  const int rc = run_to_files(argv, env, dir + "/mpirun.out", dir + "/mpirun.err");
  std::string result;
  try {
    result = io::read_text_file(dir + "/result.json");
  } catch (const Error&) {
  }
  if (rc != 0 || result.empty()) {
    std::string err;
    try {
      err = io::read_text_file(dir + "/mpirun.err");
    } catch (const Error&) {
    }
    if (err.size() > 1500) err = "..." + err.substr(err.size() - 1500);
    throw_env("mpirun -n " + std::to_string(ranks) + " exited with status " + std::to_string(rc) + ": " + err, "trial");
  }
  try {
    return json::parse(result);
  } catch (const json::exception& e) {
    throw_env(std::string("the data-parallel ranks wrote no valid result: ") + e.what(), dir + "/result.json");
  }
}

}  // namespace

bool fusion_attention_fused(const json& c, const std::string& where) {
  if (!c.is_object()) throw_input("a fusion config must be a JSON object like {\"attention\": \"fused\"}", where);
  bool fused = true;
  for (const auto& item : c.items()) {
    const json& v = item.value();
    if (item.key() != "attention")
      throw_input("unknown fusion knob '" + item.key() + "'", where + "." + item.key(), "known: attention");
    if (!v.is_string() || (v != "fused" && v != "unfused"))
      throw_input("fusion knob 'attention' must be \"fused\" or \"unfused\", not " + v.dump(), where + ".attention",
                  "fused: FlashAttention (cpu.flash); unfused: naive (T,T) scores, softmax, x V (cpu.naive)");
    fused = v == "fused";
  }
  return fused;
}

json fusion_default_config() { return {{"attention", "fused"}}; }

json allocator_config_json(const AllocatorConfig& c) {
  return {{"caching", c.caching},
          {"round_bytes", c.round_bytes},
          {"small_limit", c.small_limit},
          {"small_segment_bytes", c.small_segment_bytes},
          {"large_round_bytes", c.large_round_bytes},
          {"pool_limit_bytes", c.pool_limit_bytes}};
}

AllocatorConfig allocator_config_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) throw_input(where + ": expected a JSON object", where);
  AllocatorConfig c;
  for (const auto& item : j.items()) {
    const std::string k = item.key();  // named copies: C++17 lambdas cannot capture bindings
    const json& v = item.value();
    const auto as_size = [&](size_t& dst) {
      if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
        throw_input(where + ": '" + k + "' must be a non-negative integer (bytes)", where + "." + k);
      dst = v.get<size_t>();
    };
    if (k == "caching") {
      if (!v.is_boolean()) throw_input(where + ": 'caching' must be true or false", where + ".caching");
      c.caching = v.get<bool>();
    } else if (k == "round_bytes") as_size(c.round_bytes);
    else if (k == "small_limit") as_size(c.small_limit);
    else if (k == "small_segment_bytes") as_size(c.small_segment_bytes);
    else if (k == "large_round_bytes") as_size(c.large_round_bytes);
    else if (k == "pool_limit_bytes") as_size(c.pool_limit_bytes);
    else throw_input(where + ": unknown allocator knob '" + k + "'", where + "." + k,
                     "known: caching, round_bytes, small_limit, small_segment_bytes, large_round_bytes, pool_limit_bytes");
  }
  return c;
}

json run_trial(const json& spec, const std::function<measure::HostSample()>& sampler) {
  if (!spec.is_object() || spec.value("schema", "") != kTrialSpecSchema)
    throw_input(std::string("trial spec: expected schema ") + kTrialSpecSchema, "schema");
  const std::string kind = spec.value("kind", "");
  const std::function<measure::HostSample()> sample = sampler ? sampler : measure::sample_host;
  json out;
  // Kinds other than kernels are judged on the part's whole run (setup included): serving,
  // allocation and training time every step of their loop, and a dp launcher only waits
  // for mpirun (its own CPU share and switches say nothing; PSI covers the ranks).
  const bool timed = kind == "kernels" || kind == "serve" || kind == "alloc" || kind == "fusion" || kind == "dp";
  const measure::HostSample before = timed ? sample() : measure::HostSample{};
  measure::HostSample win_before, win_after;
  if (kind == "kernels") out = run_kernels(spec, sample, win_before, win_after);
  else if (kind == "serve") out = run_serve(spec);
  else if (kind == "alloc") out = run_alloc(spec);
  else if (kind == "canary") out = run_canary_trial(spec);
  else if (kind == "fusion") out = run_fusion(spec);
  else if (kind == "dp") out = run_dp(spec);
  else if (kind == "dp_rank") out = run_dp_rank(spec);
  else throw_input("trial spec: unknown kind '" + kind + "' (kernels, serve, alloc, fusion, canary, dp)", "kind");
  // The serving engine's and the launcher's measuring thread waits by design (workers, mpirun):
  // no CPU-share rule there. A canary is judged by its own latency rule; a dp rank by its launcher.
  if (timed) {
    const measure::HostSample after = sample();
    const bool cpu_rule = kind == "kernels" || kind == "alloc" || kind == "fusion";
    measure::HostEvidence whole = host_evidence(before, after, cpu_rule);
    if (kind == "kernels") {
      // The timed loop of microsecond kernels can be shorter than a judged window (0.05 s):
      // it then takes the verdict of the part's whole run (setup, checks, warm-up and the loop;
      // judged_on "run"), as rtx-bench does for a short case.
      measure::HostEvidence loop = host_evidence(win_before, win_after, cpu_rule);
      measure::inherit_run_contention(loop, whole);
      whole = loop;
    }
    out["host"] = measure::to_json(whole);
  }
  out["peak_rss_bytes"] = peak_rss_bytes();
  return out;
}

std::optional<measure::HostEvidence> trial_host_evidence(const json& part, const std::string& source,
                                                            const std::string& pointer) {
  if (!part.is_object() || !part.contains("host")) return std::nullopt;
  const json& h = part["host"];
  // host_evidence_from_json checks types and ranges; a trial window is one process, never merged.
  measure::HostEvidence e = measure::host_evidence_from_json(h, source, pointer + "/host");
  auto bad = [&](const std::string& field, const std::string& what) {
    throw_input(what, source + ": field '" + pointer + "/host/" + field + "'", "report this: the trial child wrote it");
  };
  for (const char* key : {"rounds", "rounds_contended", "judged_rounds", "rounds_left_out"})
    if (h.contains(key)) bad(key, "a trial's host evidence is one window, not merged rounds");
  if (!h.contains("window_s")) bad("window_s", "missing");
  // (host_evidence_from_json fills a missing reason in; a trial child always writes its evidence.)
  if (e.contended && (!h.contains("reason") || h["reason"].get<std::string>().empty()))
    bad("reason", "a contended window must name its evidence");
  if (e.contended && e.judged_on.empty()) bad("judged_on", "a contended window must have been judged (\"case\")");
  return e;
}

}  // namespace rtx::evolve
