// Scheduler tuning: the batch runner (also rtx-evolve's serving trial), the scheduler space and
// the objective rtx-tune searches it with.
#include "rtx/serve/tuning.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <mutex>

#include "rtx/core/error.hpp"
#include "rtx/core/hash.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/tune/measure.hpp"

namespace rtx::serve {

namespace {


double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string tune_model_name(const std::string& model_path) {
  std::string stem = std::filesystem::path(model_path).stem().string();
  for (char& ch : stem)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '-' && ch != '_') ch = '_';
  return stem.empty() ? "_" : stem;
}

kernels::Shape BatchWorkload::shape() const { return {{"requests", requests}, {"prompt", prompt_tokens}, {"gen", max_tokens}}; }

BatchWorkload BatchWorkload::from_shape(const kernels::Shape& s, const std::string& where) {
  BatchWorkload w;
  for (const auto& [dim, v] : s) {
    const int64_t hi = dim == "prompt" ? 65536 : 4096;
    if (dim != "requests" && dim != "prompt" && dim != "gen")
      throw_input("unknown workload dim '" + dim + "'", where, "dims are requests, prompt and gen");
    if (v < 1 || v > hi)
      throw_input(dim + "=" + std::to_string(v) + " is outside [1, " + std::to_string(hi) + "]", where);
    (dim == "requests" ? w.requests : dim == "prompt" ? w.prompt_tokens : w.max_tokens) = static_cast<int>(v);
  }
  return w;
}

BatchRun run_batch(Model& model, const SchedulerConfig& cfg, const BatchWorkload& w) {
  const int vocab = model.info().vocab;
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(w.requests));
  for (int r = 0; r < w.requests; ++r) {
    auto& pr = prompts[static_cast<size_t>(r)];
    if (model.info().bos >= 0) pr.push_back(model.info().bos);
    for (int t = 0; t < w.prompt_tokens; ++t)
      pr.push_back(static_cast<int32_t>(philox_u32(w.seed, 0xe701u + static_cast<uint64_t>(r), static_cast<uint64_t>(t)) %
                                        static_cast<uint32_t>(vocab)));
  }
  BatchRun run;
  run.outputs.resize(prompts.size());
  std::mutex mu;
  Scheduler sch(model, cfg);
  const double t0 = now_s();
  for (int r = 0; r < w.requests; ++r) {
    GenRequest g;
    g.prompt = prompts[static_cast<size_t>(r)];
    g.max_tokens = w.max_tokens;
    g.sampling.temperature = 0;
    g.ignore_eos = true;
    Scheduler::Refusal why{};
    std::string detail;
    auto* dst = &run.outputs[static_cast<size_t>(r)];
    if (!sch.submit(g, [dst, &mu](const TokenEvent& ev) {
          std::lock_guard<std::mutex> lk(mu);
          if (ev.token >= 0) dst->push_back(ev.token);
          return true;
        }, &why, &detail))
      throw_input("batch: the scheduler refused request " + std::to_string(r) + ": " + detail, "config");
  }
  sch.shutdown(120);
  run.seconds = now_s() - t0;
  run.checksum = kFnv1a64Basis;
  for (const auto& t : run.outputs) {
    run.tokens += t.size();
    run.checksum = fnv1a64(t.data(), t.size() * sizeof(int32_t), run.checksum);
  }
  if (run.tokens == 0) throw_input("batch: no tokens generated", "serve");
  return run;
}

tune::Space scheduler_space(int max_threads, const BatchWorkload& w) {
  std::vector<int64_t> threads = {0};
  for (int t = 1; t < max_threads; t *= 2) threads.push_back(t);
  if (max_threads >= 1) threads.push_back(max_threads);
  const SchedulerConfig d;
  tune::Space s;
  s.params = {
      {"threads", threads, 0, "OpenMP threads of the forward pass (0 = OpenMP's default)"},
      {"max_batch", {1, 2, 4, 8, 16, 32, 64}, d.max_batch, "most sequences running at once"},
      {"token_budget", {64, 128, 256, 512, 1024, 2048}, d.token_budget, "most rows in one forward step"},
      {"prefill_chunk", {16, 32, 64, 128, 256}, d.prefill_chunk, "most prompt tokens of one sequence per step"},
      {"kv_block_tokens", {8, 16, 32}, d.kv_block_tokens, "positions per KV block"},
  };
  const int requests = w.requests;
  s.validate = [requests](const tune::Params& p) -> std::string {
    try {
      scheduler_config_from(p).validate();
    } catch (const Error& e) {
      return e.message();
    }
    const int64_t mb = p.at("max_batch");
    // A batch larger than the workload never fills; only the default (which must stay
    // measurable as the baseline) is allowed to exceed it.
    if (mb > requests && mb != SchedulerConfig{}.max_batch)
      return "max_batch " + std::to_string(mb) + " > the workload's " + std::to_string(requests) + " requests";
    return "";
  };
  return s;
}

SchedulerConfig scheduler_config_from(const tune::Params& p, SchedulerConfig base) {
  for (const auto& [k, v] : p) {
    if (k == "threads") continue;
    if (v < 0 || v > (1 << 24)) throw_input("scheduler knob " + k + "=" + std::to_string(v) + " is out of range", k);
    const int x = static_cast<int>(v);
    if (k == "max_batch") base.max_batch = x;
    else if (k == "token_budget") base.token_budget = x;
    else if (k == "prefill_chunk") base.prefill_chunk = x;
    else if (k == "kv_block_tokens") base.kv_block_tokens = x;
    else throw_input("unknown scheduler knob '" + k + "'", k, "knobs: threads, max_batch, token_budget, prefill_chunk, kv_block_tokens");
  }
  base.validate();
  return base;
}

int tuned_threads(const tune::Params& p) {
  auto it = p.find("threads");
  return it == p.end() ? 0 : static_cast<int>(std::clamp<int64_t>(it->second, 0, 4096));
}

SchedulerObjective::SchedulerObjective(std::string model_path, BatchWorkload w) : path_(std::move(model_path)), w_(w) {}

Model& SchedulerObjective::model_for(int threads) {
  auto& m = models_[threads];
  if (!m) {
    LoadOptions lo;
    lo.threads = threads;
    m = load_model(path_, lo);
    // Every request must fit: BOS + prompt + generated tokens within the context, or the
    // tokens per second would count requests cut short by the context.
    const int need = (m->info().bos >= 0 ? 1 : 0) + w_.prompt_tokens + w_.max_tokens;
    if (need > m->info().context)
      throw_input("the workload needs " + std::to_string(need) + " positions per request (prompt " +
                      std::to_string(w_.prompt_tokens) + " + gen " + std::to_string(w_.max_tokens) +
                      "), the model's context holds " + std::to_string(m->info().context),
                  "--workload", "lower prompt or gen");
  }
  return *m;
}

tune::Evaluation SchedulerObjective::evaluate(const tune::Params& p, const tune::EvalBudget& b) {
  tune::Evaluation e;
  SchedulerConfig cfg;
  try {
    cfg = scheduler_config_from(p);
  } catch (const Error& err) {
    e.status = tune::Evaluation::Status::Skip;
    e.reason = err.message();
    e.counts = false;
    return e;
  }
  Model& m = model_for(tuned_threads(p));
  if (reference_.empty()) reference_ = run_batch(model_for(0), SchedulerConfig{}, w_).outputs;
  const BatchRun warm = run_batch(m, cfg, w_);
  for (size_t r = 0; r < warm.outputs.size(); ++r)
    if (warm.outputs[r] != reference_[r]) {
      e.status = tune::Evaluation::Status::Fail;
      e.reason = "wrong output: request " + std::to_string(r) + " generated other ids than under the default config";
      return e;
    }
  return tune::sample_until(b, [&] {
    const BatchRun run = run_batch(m, cfg, w_);
    return run.seconds / static_cast<double>(run.tokens);
  });
}

std::optional<std::pair<std::vector<double>, std::vector<double>>> SchedulerObjective::interleaved(const tune::Params& a,
                                                                                                   const tune::Params& b,
                                                                                                   size_t n) {
  SchedulerConfig ca, cb;
  try {
    ca = scheduler_config_from(a);
    cb = scheduler_config_from(b);
  } catch (const Error&) {
    return std::nullopt;
  }
  Model& ma = model_for(tuned_threads(a));
  Model& mb = model_for(tuned_threads(b));
  auto per_token = [this](Model& m, const SchedulerConfig& c) {
    const BatchRun run = run_batch(m, c, w_);
    return run.seconds / static_cast<double>(run.tokens);
  };
  per_token(ma, ca);
  per_token(mb, cb);
  return tune::sample_interleaved([&] { return per_token(ma, ca); }, [&] { return per_token(mb, cb); }, n);
}

}  // namespace rtx::serve
