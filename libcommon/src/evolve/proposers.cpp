// The proposers: tuner (best recorded trial not yet current, exploring a few configurations
// when the store has too few), parallelism (thread count), scheduler, memory and fusion
// (single-knob moves from an ordered list). Each skips what already failed on this SKU.
#include "rtx/evolve/proposers.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <ostream>

#include "rtx/core/build_info.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/dist/comm.hpp"
#include "rtx/evolve/deploy.hpp"
#include "rtx/evolve/trial.hpp"
#include "rtx/models/train.hpp"
#include "rtx/serve/scheduler.hpp"
#include "rtx/telemetry/hwprofile.hpp"
#include "rtx/tune/measure.hpp"
#include "rtx/tune/records.hpp"

namespace rtx::evolve {

using nlohmann::json;

std::string config_key(const std::string& domain, const std::string& sku) { return domain + "|" + sku; }

json baseline_config(store::Store& st, const std::string& domain, const std::string& key, const kernels::Registry& reg) {
  if (domain == "tuner") {
    if (auto c = current_profile(st, key)) return c->config;
    const tune::TuneKey k = tune::TuneKey::parse(key);
    return json(reg.variant(k.op, k.variant).space.defaults());
  }
  if (auto c = current_config(st, key)) return c->config;
  if (domain == "parallelism")  // threads, and rtx-train's data-parallel bucket size (MiB)
    return {{"threads", omp_get_max_threads()}, {"dp_bucket_mb", models::TrainConfig{}.bucket_mb}};
  if (domain == "scheduler") return serve::SchedulerConfig{}.to_json();
  if (domain == "memory") return allocator_config_json(AllocatorConfig{});
  if (domain == "fusion") return fusion_default_config();
  throw_input("unknown domain '" + domain + "'", "domain");
}

json make_provenance(const std::string& sku, const std::vector<std::string>& data_files, uint64_t seed) {
  json data = json::object();
  std::string all;
  for (const auto& f : data_files) {
    if (f.empty()) continue;
    try {
      data[f] = file_sha256(f);
    } catch (const Error&) {
      data[f] = "unreadable";
    }
    all += data[f].get<std::string>();
  }
  std::string code;
  try {
    code = file_sha256("/proc/self/exe");
  } catch (const Error&) {
    code = "unreadable";
  }
  json env = {{"hardware", telemetry::identity_json()}, {"compiler", compiler_id()}, {"build_type", build_type()}};
  for (const char* v : {"OMP_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES"})
    env[v] = std::getenv(v) ? std::getenv(v) : "";
  return {{"git_sha", git_sha()},
          {"rtx_version", version()},
          {"sku", sku},
          {"code_sha256", code},
          {"data_sha256", sha256_hex(all)},
          {"data_files", data},
          {"env_sha256", sha256_hex(env.dump())},
          {"seeds", {{"seed", seed}, {"inputs", "philox(seed)"}}}};
}

void finish_proposal(Proposal& p, const ProposeContext& ctx) {
  p.target = target_of(p.domain);
  // A fusion candidate names a knob and value the trial can run (`rtx-evolve submit` comes here).
  if (p.domain == "fusion") fusion_attention_fused(p.changeset.value("candidate", json(nullptr)), "changeset.candidate");
  p.fingerprint = make_fingerprint(p.domain, p.key, p.changeset["candidate"]);
  p.rollback = {{"restore_version", p.changeset.value("base_version", json(nullptr))},
                {"command", "rtx-evolve rollback <ID>"},
                {"what", p.changeset.value("base_version", json(nullptr)).is_null()
                             ? "remove the promoted version: the built-in defaults apply again"
                             : "make version " + p.changeset["base_version"].dump() + " of '" + p.key + "' current again"}};
  if (p.provenance.empty()) p.provenance = make_provenance(ctx.sku, {ctx.pack_path, ctx.model_path}, ctx.seed);
}

namespace {

void say(const ProposeContext& c, const std::string& s) {
  if (c.log) *c.log << "  " << s << "\n";
}

json actions_of(const json& base, const json& cand) {
  json a = json::array();
  for (const auto& [k, v] : cand.items())
    if (!base.contains(k) || base[k] != v) a.push_back({{"set", k}, {"from", base.value(k, json(nullptr))}, {"to", v}});
  return a;
}

json case_json(const measure::BenchCase& c) {
  return {{"id", c.id}, {"op", c.op}, {"variant", c.variant}, {"shape", c.shape}, {"dtype", dtype_name(c.dtype)}};
}

/// Held-out shapes for an op/variant: the op's small test shapes the proposer never measured.
json heldout_for(const kernels::Registry& reg, const std::string& op, const std::string& variant, DType dt, size_t n) {
  json h = json::array();
  const auto& o = reg.op(op);
  for (const auto& s : o.test_shapes) {
    if (h.size() >= n) break;
    if (!kernels::shape_problem(o, s, dt, 64.0 * (1 << 20)).empty()) continue;
    h.push_back({{"id", "heldout:" + op + "/" + variant + "/" + kernels::shape_to_string(s) + "/" + dtype_name(dt)},
                 {"op", op},
                 {"variant", variant},
                 {"shape", s},
                 {"dtype", dtype_name(dt)}});
  }
  return h;
}

std::optional<int64_t> base_version_of(store::Store& st, const std::string& domain, const std::string& key) {
  auto c = domain == "tuner" ? current_profile(st, key) : current_config(st, key);
  if (c) return c->version;
  return std::nullopt;
}

Proposal make(const ProposeContext& ctx, const std::string& domain, const std::string& key, const json& base,
              const json& cand, const std::string& why, const json& workload) {
  Proposal p;
  p.domain = domain;
  p.key = key;
  p.plan = {{"why", why}, {"proposer", domain}, {"workload", workload}};
  p.actions = actions_of(base, cand);
  const auto bv = base_version_of(*ctx.st, domain, key);
  p.changeset = {{"base_version", bv ? json(*bv) : json(nullptr)}, {"base", base}, {"candidate", cand}};
  finish_proposal(p, ctx);
  return p;
}

// ---- tuner ------------------------------------------------------------------------------------
class TunerProposer : public Proposer {
 public:
  std::string domain() const override { return "tuner"; }
  std::vector<Proposal> propose(ProposeContext& ctx) override {
    struct Cand {
      Proposal p;
      double gain;
    };
    std::vector<Cand> found;
    for (const auto& bc : ctx.cases) {
      if (ctx.should_stop && ctx.should_stop()) break;  // Ctrl-C: the measured trials are stored
      if (!bc.skip_reason.empty()) continue;
      const auto& op = ctx.reg->op(bc.op);
      const auto& v = ctx.reg->variant(bc.op, bc.variant);
      if (v.space.grid_size() <= 1) continue;
      tune::TuneKey k{bc.op, bc.variant, bc.shape, bc.dtype, kernels::Backend::CPU, ctx.sku};
      const std::string key = k.str();
      tune::TrialStore trials(*ctx.st, k);
      const tune::Space sp = tune::variant_space(v, bc.shape);
      const json base = baseline_config(*ctx.st, "tuner", key, *ctx.reg);
      const kernels::Params base_p = base.get<kernels::Params>();
      // Only timings taken on a quiet host are cited: a trial measured while other work held
      // the CPU (tuning_trials.contended) can read 40x slow and would fake a gain.
      size_t busy = 0;
      std::string busy_reason;
      auto ok_trials = [&] {
        std::vector<tune::TrialRecord> v2;
        busy = 0;
        for (auto& t : trials.all()) {
          if (t.eval.status != tune::Evaluation::Status::Ok) continue;
          if (t.eval.contended) {
            if (!busy++) busy_reason = t.eval.contention_reason;
            continue;
          }
          v2.push_back(std::move(t));
        }
        return v2;
      };
      std::vector<tune::TrialRecord> oks = ok_trials();
      if (oks.size() < ctx.explore_evals) {
        // Few recorded trials: measure the baseline and a few seeded random points (recorded as
        // rtx-tune trials, so rtx-tune resumes from them).
        say(ctx, "tuner: exploring " + std::to_string(ctx.explore_evals) + " configurations of " + bc.id);
        tune::KernelObjective kobj(op, v, bc.shape, bc.dtype, ctx.seed);
        tune::HostJudgedObjective obj(kobj);
        obj.mark();
        tune::EvalBudget b;
        b.min_samples = 5;
        b.max_samples = 15;
        b.max_time = 0.1;
        std::vector<kernels::Params> pts = {base_p};
        for (uint64_t i = 0; pts.size() < ctx.explore_evals + 1 && i < 64; ++i) {
          const kernels::Params q = sp.at(philox_u32(ctx.seed, 0x7e5e, i + 97 * found.size()) % sp.size());
          if (sp.validate && !sp.validate(q).empty()) continue;
          if (std::find(pts.begin(), pts.end(), q) == pts.end()) pts.push_back(q);
        }
        for (const auto& q : pts) {
          if (ctx.should_stop && ctx.should_stop()) break;
          const auto rec = trials.find(q);
          if (!rec || (rec->eval.status == tune::Evaluation::Status::Ok && rec->eval.contended))
            trials.put(q, obj.evaluate(q, b), 0);
        }
        oks = ok_trials();
      }
      if (busy)
        say(ctx, "tuner: " + bc.id + ": " + std::to_string(busy) + " recorded trial" + (busy == 1 ? "" : "s") +
                     " measured on a busy host not cited (first: " + busy_reason + ")");
      if (oks.empty()) continue;
      const auto best = std::min_element(oks.begin(), oks.end(), [](const auto& a, const auto& b2) {
        return a.eval.median < b2.eval.median;
      });
      if (best->config == base_p) continue;
      double base_median = 0;
      for (const auto& t : oks)
        if (t.config == base_p) base_median = t.eval.median;
      const double gain = base_median > 0 ? 1 - best->eval.median / base_median : 0;
      const json cand = json(best->config);
      if (base_median > 0 && gain < 0.03) continue;  // recorded trials predict no real gain
      json work = {{"affected", json::array({case_json(bc)})}, {"heldout", json::array()}};
      for (const auto& o : ctx.cases)
        if (o.op == bc.op && o.variant == bc.variant && o.id != bc.id && o.dtype == bc.dtype && o.skip_reason.empty())
          work["heldout"].push_back(case_json(o));
      for (auto& h : heldout_for(*ctx.reg, bc.op, bc.variant, bc.dtype, 2)) work["heldout"].push_back(h);
      char why[320];
      if (base_median > 0)
        std::snprintf(why, sizeof why, "recorded trials: %s runs in %.3g s vs %.3g s for the current parameters (%+.1f%%)",
                      kernels::params_to_string(best->config).c_str(), best->eval.median, base_median, -100 * gain);
      else
        std::snprintf(why, sizeof why,
                      "recorded trials: %s runs in %.3g s, the fastest quiet trial; the current parameters have no "
                      "quiet-host trial to compare with",
                      kernels::params_to_string(best->config).c_str(), best->eval.median);
      Proposal p = make(ctx, "tuner", key, base, cand, why, work);
      p.plan["expected"] = {{"improvement", gain}};
      if (failed_before(*ctx.st, p.fingerprint, ctx.sku)) {
        say(ctx, "tuner: skip " + bc.id + " " + kernels::params_to_string(best->config) + ": already failed on this SKU");
        continue;
      }
      found.push_back({std::move(p), gain});
    }
    std::stable_sort(found.begin(), found.end(), [](const Cand& a, const Cand& b) { return a.gain > b.gain; });
    std::vector<Proposal> out;
    for (auto& c : found)
      if (out.size() < ctx.budget) out.push_back(std::move(c.p));
    return out;
  }
};

/// Shared by the three config domains: walk an ordered list of single-knob moves from the
/// baseline and return the first `budget` that change something and have not failed here.
std::vector<Proposal> from_moves(ProposeContext& ctx, const std::string& domain, const std::vector<json>& moves,
                                 const json& work, const std::string& why_prefix) {
  const std::string key = config_key(domain, ctx.sku);
  const json base = baseline_config(*ctx.st, domain, key, *ctx.reg);
  std::vector<Proposal> out;
  std::vector<json> seen;
  for (const json& m : moves) {
    if (out.size() >= ctx.budget) break;
    json cand = base;
    for (const auto& [k, v] : m.items()) cand[k] = v;
    if (cand == base || std::find(seen.begin(), seen.end(), cand) != seen.end()) continue;
    seen.push_back(cand);
    try {  // a move that makes the configuration invalid is never proposed
      if (domain == "scheduler") serve::SchedulerConfig::from_json(cand, "candidate");
      if (domain == "memory") allocator_config_from_json(cand, "candidate");
      if (domain == "fusion") fusion_attention_fused(cand, "candidate");
    } catch (const Error& e) {
      say(ctx, domain + ": skip " + m.dump() + ": " + e.message());
      continue;
    }
    Proposal p = make(ctx, domain, key, base, cand, why_prefix + ": " + m.dump(), work);
    if (failed_before(*ctx.st, p.fingerprint, ctx.sku)) {
      say(ctx, domain + ": skip " + m.dump() + ": already failed on this SKU");
      continue;
    }
    out.push_back(std::move(p));
  }
  return out;
}

/// Data-parallel gradient bucket size (dp_bucket_mb, what rtx-train's --bucket-mb sets), when
/// the run is distributed (ctx.dp_ranks >= 2 and an MPI launcher): single-knob moves around the
/// current size, measured as data-parallel GPT-2 training steps over ctx.dp_ranks processes.
std::vector<Proposal> dp_bucket_proposals(ProposeContext& ctx) {
  if (ctx.dp_ranks < 2) return {};
  if (dist::mpiexec_path().empty() || !dist::have_mpi()) {
    say(ctx, "parallelism: data-parallel bucket size skipped: this build has no MPI launcher (mpirun)");
    return {};
  }
  const int procs = std::max(1, omp_get_num_procs());
  const json base = baseline_config(*ctx.st, "parallelism", config_key("parallelism", ctx.sku), *ctx.reg);
  const double cur = base.value("dp_bucket_mb", static_cast<double>(models::TrainConfig{}.bucket_mb));
  // The workload's 0.8 M parameters are 3.2 MB of fp32 gradients: 1 MiB gives 4 buckets
  // overlapped with the backward, 0.25 MiB 13, 0 one all-reduce after it (no overlap); then
  // a quarter and 4x of the current size.
  std::vector<json> moves;
  for (double mb : {1.0, 0.25, 0.0, 4.0, cur / 4, cur * 4})
    if (mb <= 65536 && mb != cur) moves.push_back({{"dp_bucket_mb", mb}});
  const int threads = std::max(1, procs / ctx.dp_ranks);
  // nanoGPT's shakespeare-char CPU shape (the pack's gpt2_train_step case); held out: another
  // width and depth at an odd T the proposer did not measure.
  const json shape = {{"B", 12}, {"T", 64}, {"L", 4}, {"C", 128}, {"NH", 4}, {"V", 65}};
  const json held = {{"B", 4}, {"T", 47}, {"L", 2}, {"C", 192}, {"NH", 3}, {"V", 65}};
  const json work = {{"kind", "dp"},
                     {"affected", {{"ranks", ctx.dp_ranks}, {"shape", shape}, {"threads", threads}}},
                     {"heldout", {{"ranks", ctx.dp_ranks}, {"shape", held}, {"threads", threads}}}};
  char why[160];
  std::snprintf(why, sizeof why, "data-parallel gradient buckets of %g MiB over %d ranks (%d thread%s each); try", cur,
                ctx.dp_ranks, threads, threads == 1 ? "" : "s");
  return from_moves(ctx, "parallelism", moves, work, why);
}

class ParallelismProposer : public Proposer {
 public:
  std::string domain() const override { return "parallelism"; }
  std::vector<Proposal> propose(ProposeContext& ctx) override {
    // Distributed: the bucket-size moves come first, the thread moves get what budget is left.
    std::vector<Proposal> out = dp_bucket_proposals(ctx);
    if (out.size() >= ctx.budget) return out;
    const size_t budget = ctx.budget;
    ctx.budget -= out.size();
    std::vector<Proposal> t = thread_proposals(ctx);
    ctx.budget = budget;
    for (auto& p : t) out.push_back(std::move(p));
    return out;
  }

 private:
  static std::vector<Proposal> thread_proposals(ProposeContext& ctx) {
    const int procs = std::max(1, omp_get_num_procs());
    const json base = baseline_config(*ctx.st, "parallelism", config_key("parallelism", ctx.sku), *ctx.reg);
    const int cur = base.value("threads", procs);
    // Halving and doubling first, then every power of two up to the logical CPUs.
    std::vector<int> order = {cur / 2, cur * 2, procs};
    for (int t = 1; t <= procs; t *= 2) order.push_back(t);
    std::vector<json> moves;
    for (int t : order)
      if (t >= 1 && t <= procs && t != cur) moves.push_back({{"threads", t}});
    json work = {{"affected", json::array()}, {"heldout", json::array()}};
    std::vector<std::string> seen;
    for (const auto& c : ctx.cases) {
      if (!c.skip_reason.empty()) continue;
      work["affected"].push_back(case_json(c));
      const std::string ov = c.op + "/" + c.variant;
      if (std::find(seen.begin(), seen.end(), ov) != seen.end()) continue;
      seen.push_back(ov);
      for (auto& h : heldout_for(*ctx.reg, c.op, c.variant, c.dtype, 1)) work["heldout"].push_back(h);
    }
    if (work["affected"].empty()) return {};
    return from_moves(ctx, "parallelism", moves, work,
                      "OpenMP threads " + std::to_string(cur) + " of " + std::to_string(procs) + " logical CPUs; try");
  }
};

class SchedulerProposer : public Proposer {
 public:
  std::string domain() const override { return "scheduler"; }
  std::vector<Proposal> propose(ProposeContext& ctx) override {
    if (ctx.model_path.empty()) {
      say(ctx, "scheduler: no serving model (stories260k) found under $RTX_DATA: skipped");
      return {};
    }
    const std::vector<json> moves = {{{"max_batch", 4}},       {{"token_budget", 128}, {"prefill_chunk", 128}}, {{"kv_block_tokens", 32}},
                                     {{"prefill_chunk", 64}},  {{"max_batch", 8}},      {{"token_budget", 2048}},
                                     {{"kv_block_tokens", 8}}, {{"max_batch", 64}}};
    // One forward thread: the knobs are about batching, and a lone thread keeps a loaded
    // machine's OpenMP barriers out of the numbers.
    const json work = {{"affected", {{"requests", 8}, {"prompt_tokens", 16}, {"max_tokens", 16}, {"threads", 1}}},
                       {"heldout", {{"requests", 3}, {"prompt_tokens", 48}, {"max_tokens", 8}, {"threads", 1}}},
                       {"model", ctx.model_path}};
    return from_moves(ctx, "scheduler", moves, work, "serve scheduler knob (batched decode of stories260k)");
  }
};

class MemoryProposer : public Proposer {
 public:
  std::string domain() const override { return "memory"; }
  std::vector<Proposal> propose(ProposeContext& ctx) override {
    const std::vector<json> moves = {{{"large_round_bytes", 1 << 20}}, {{"round_bytes", 256}},
                                     {{"small_segment_bytes", 1 << 20}}, {{"large_round_bytes", 512 << 10}},
                                     {{"round_bytes", 2048}}, {{"caching", false}}};
    const json work = {{"affected", {{"steps", 20}}}, {"heldout", {{"steps", 20}, {"seed_offset", 1}}}};
    return from_moves(ctx, "memory", moves, work, "caching allocator knob (GPT small training-step allocation trace)");
  }
};

/// Fused vs unfused attention in a GPT-2 training step. Workload: the pack's gpt2_train_step
/// cpu.model case (from the subset, else from the whole pack, else nanoGPT's shakespeare-char
/// CPU shape); held out: a quarter of the batch at a longer, odd T. One OpenMP thread.
class FusionProposer : public Proposer {
 public:
  std::string domain() const override { return "fusion"; }
  std::vector<Proposal> propose(ProposeContext& ctx) override {
    auto is_step = [](const measure::BenchCase& c) {
      return c.op == "gpt2_train_step" && c.variant == "cpu.model" && c.skip_reason.empty();
    };
    std::string id, from = "the pack subset";
    kernels::Shape shape;
    for (const auto& c : ctx.cases)
      if (id.empty() && is_step(c)) id = c.id, shape = c.shape;
    if (id.empty() && !ctx.pack_path.empty()) {
      try {  // the subset left it out: the pack's own case, at the pack's shape
        measure::ExpandOptions eo;
        eo.filter = "gpt2_train_step";
        for (const auto& c : measure::expand_pack(measure::load_pack(ctx.pack_path), *ctx.reg, eo))
          if (id.empty() && is_step(c)) id = c.id, shape = c.shape, from = ctx.pack_path;
      } catch (const Error& e) {
        say(ctx, "fusion: cannot read " + ctx.pack_path + ": " + e.message());
      }
    }
    if (id.empty()) {
      shape = {{"B", 12}, {"T", 64}, {"L", 4}, {"C", 128}, {"NH", 4}, {"V", 65}};
      id = "gpt2_train_step/shakespeare-char-cpu";
      from = "nanoGPT's shakespeare-char CPU config (no gpt2_train_step case in the pack)";
    }
    kernels::Shape held = shape;
    held["B"] = std::max<int64_t>(1, shape.at("B") / 4);
    int64_t t2 = shape.at("T") + std::max<int64_t>(1, shape.at("T") / 2);  // longer and odd: 64 -> 95
    if (t2 % 2 == 0) --t2;
    if (t2 == shape.at("T")) t2 += 2;
    held["T"] = t2;
    // One thread, as the scheduler domain: the knob is the attention algorithm, and a lone thread
    // keeps a loaded machine's OpenMP barriers (10x swings at 2 threads) out of the numbers.
    const json work = {{"affected", {{"case", id}, {"shape", shape}, {"threads", 1}}},
                       {"heldout", {{"case", "heldout:gpt2_train_step/" + kernels::shape_to_string(held)}, {"shape", held}, {"threads", 1}}}};
    const std::vector<json> moves = {{{"attention", "unfused"}}, {{"attention", "fused"}}};
    return from_moves(ctx, "fusion", moves, work, "attention fused (flash) vs unfused (naive) in a GPT-2 training step of " + from);
  }
};

}  // namespace

std::vector<std::unique_ptr<Proposer>> default_proposers() {
  std::vector<std::unique_ptr<Proposer>> v;
  v.push_back(std::make_unique<TunerProposer>());
  v.push_back(std::make_unique<ParallelismProposer>());
  v.push_back(std::make_unique<SchedulerProposer>());
  v.push_back(std::make_unique<MemoryProposer>());
  v.push_back(std::make_unique<FusionProposer>());
  return v;
}

}  // namespace rtx::evolve
