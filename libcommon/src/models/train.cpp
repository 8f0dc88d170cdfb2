// The GPT-2 training loop (nanoGPT train.py's structure): schedule, micro-batches with gradient
// accumulation, AdamW, periodic evaluation, JSON Lines log, checkpoints, resume.
#include "rtx/models/train.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/dist/buckets.hpp"
#include "rtx/dist/comm.hpp"
#include "rtx/io/artifact.hpp"
#include "rtx/io/dataset.hpp"
#include "rtx/kernels/check.hpp"
#include "rtx/models/checkpoint.hpp"
#include "rtx/telemetry/bus.hpp"

namespace rtx::models {

namespace {

constexpr double kPi = 3.14159265358979323846;

/// Most tokens an evaluation forward takes at once (see estimate_loss).
constexpr int kEvalChunkTokens = 4096;

/// Thrown from the gradient-ready hook when a stop is asked mid-backward (single process, CPU).
struct BackwardStopped : std::exception {
  const char* what() const noexcept override { return "backward stopped (Ctrl-C)"; }
};

/// Seed of the evaluation batch stream: distinct from the training stream's seed.
uint64_t eval_seed(uint64_t seed) { return seed ^ 0x9E3779B97F4A7C15ull; }

double now_s() {
  using clk = std::chrono::steady_clock;
  return std::chrono::duration<double>(clk::now().time_since_epoch()).count();
}

[[noreturn]] void bad_type(const char* key, const char* want, const nlohmann::json& v, const std::string& where) {
  throw_usage(std::string("field '") + key + "' must be " + want + " (got " + v.dump() + ")", where);
}

/// Strictly typed reads: an int field takes a JSON integer within int range (no wrap, no
/// truncation of 3.5, no booleans), a float field any finite JSON number, the seed a
/// non-negative integer, a string field a string.
void get_field(const nlohmann::json& j, const char* key, int& out, const std::string& where) {
  if (!j.contains(key)) return;
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer()) bad_type(key, "an integer", v, where);
  if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(INT32_MAX)
                             : (v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX))
    bad_type(key, "an integer in 32-bit range", v, where);
  out = static_cast<int>(v.get<int64_t>());
}
void get_field(const nlohmann::json& j, const char* key, float& out, const std::string& where) {
  if (!j.contains(key)) return;
  const nlohmann::json& v = j.at(key);
  if (!v.is_number()) bad_type(key, "a number", v, where);
  out = v.get<float>();
  if (!std::isfinite(out)) bad_type(key, "a finite number in float range", v, where);
  // 1e-50 would read as 0 and fail later as "must be positive", hiding why.
  if (out == 0 && v.get<double>() != 0) bad_type(key, "a number float32 can hold (this one underflows to 0)", v, where);
}
void get_field(const nlohmann::json& j, const char* key, uint64_t& out, const std::string& where) {
  if (!j.contains(key)) return;
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_unsigned()) bad_type(key, "a non-negative integer", v, where);
  out = v.get<uint64_t>();
}
void get_field(const nlohmann::json& j, const char* key, std::string& out, const std::string& where) {
  if (!j.contains(key)) return;
  const nlohmann::json& v = j.at(key);
  if (!v.is_string()) bad_type(key, "a string", v, where);
  out = v.get<std::string>();
}

}  // namespace

void TrainConfig::validate() const {
  model.validate();
  auto bad = [](const std::string& field, const std::string& why) {
    throw_usage(field + " " + why, "run config");
  };
  if (steps < 1) bad("steps", "must be >= 1 (got " + std::to_string(steps) + ")");
  if (batch < 1) bad("batch", "must be >= 1 (got " + std::to_string(batch) + ")");
  if (grad_accum < 1) bad("grad_accum", "must be >= 1 (got " + std::to_string(grad_accum) + ")");
  if (seq_len < 0 || seq_len > model.block_size)
    bad("seq_len", "must be in [1, block_size=" + std::to_string(model.block_size) + "] or 0 (got " +
                       std::to_string(seq_len) + ")");
  if (!(lr > 0) || !std::isfinite(lr)) bad("lr", "must be a positive number");
  if (!(min_lr >= 0) || min_lr > lr) bad("min_lr", "must be in [0, lr]");
  if (warmup_steps < 0) bad("warmup_steps", "must be >= 0");
  if (lr_decay_steps < 0) bad("lr_decay_steps", "must be >= 0");
  if (!(adamw.beta1 >= 0 && adamw.beta1 < 1)) bad("beta1", "must be in [0, 1)");
  if (!(adamw.beta2 >= 0 && adamw.beta2 < 1)) bad("beta2", "must be in [0, 1)");
  if (!(adamw.eps > 0)) bad("eps", "must be > 0");
  if (!(adamw.weight_decay >= 0) || !std::isfinite(adamw.weight_decay)) bad("weight_decay", "must be >= 0");
  if (!(adamw.grad_clip >= 0) || !std::isfinite(adamw.grad_clip)) bad("grad_clip", "must be >= 0 (0 = off)");
  if (eval_interval < 1) bad("eval_interval", "must be >= 1");
  if (eval_iters < 0) bad("eval_iters", "must be >= 0 (0 = no evaluation)");
  if (ckpt_interval < 0) bad("ckpt_interval", "must be >= 0");
  if (!(bucket_mb >= 0) || !std::isfinite(bucket_mb) || bucket_mb > 65536)
    bad("bucket_mb", "must be in [0, 65536] MiB (0 = one all-reduce after the backward)");
}

nlohmann::json TrainConfig::to_json() const {
  return {{"model", model.to_json()},
          {"preset", preset},
          {"steps", steps},
          {"batch", batch},
          {"seq_len", T()},
          {"grad_accum", grad_accum},
          {"lr", io::json_float(lr)},
          {"min_lr", io::json_float(min_lr)},
          {"warmup_steps", warmup_steps},
          {"lr_decay_steps", lr_decay_steps > 0 ? lr_decay_steps : steps},
          {"beta1", io::json_float(adamw.beta1)},
          {"beta2", io::json_float(adamw.beta2)},
          {"eps", io::json_float(adamw.eps)},
          {"weight_decay", io::json_float(adamw.weight_decay)},
          {"grad_clip", io::json_float(adamw.grad_clip)},
          {"eval_interval", eval_interval},
          {"eval_iters", eval_iters},
          {"ckpt_interval", ckpt_interval},
          {"bucket_mb", io::json_float(bucket_mb)},
          {"seed", seed},
          {"backend", backend == Backend::Cuda ? "cuda" : "cpu"},
          {"engine", engine_name(engine)}};
}

void TrainConfig::apply_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw_usage("run config must be a JSON object", where);
  static const char* known[] = {"model", "preset", "steps", "batch", "seq_len", "grad_accum", "lr", "min_lr",
                                "warmup_steps", "lr_decay_steps", "beta1", "beta2", "eps", "weight_decay",
                                "grad_clip", "eval_interval", "eval_iters", "ckpt_interval", "bucket_mb", "seed",
                                "backend", "engine", "schema"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (!ok)
      throw_usage("unknown key '" + it.key() + "' in run config", where,
                  "known keys: model, preset, steps, batch, seq_len, grad_accum, lr, min_lr, warmup_steps, "
                  "lr_decay_steps, beta1, beta2, eps, weight_decay, grad_clip, eval_interval, eval_iters, "
                  "ckpt_interval, bucket_mb, seed, backend, engine");
  }
  if (j.contains("preset") && j.contains("model") && j.at("preset").is_string() && !j.at("preset").get<std::string>().empty() &&
      !(Gpt2Config::preset(j.at("preset").get<std::string>()) == Gpt2Config::from_json(j.at("model"), where + ": model")))
    throw_usage("\"preset\" and \"model\" describe different models; give one of them", where);
  if (j.contains("preset")) {
    get_field(j, "preset", preset, where);
    if (!preset.empty()) model = Gpt2Config::preset(preset);
  }
  if (j.contains("model")) {
    model = Gpt2Config::from_json(j.at("model"), where + ": model");
    if (!j.contains("preset")) preset.clear();
  }
  get_field(j, "steps", steps, where);
  get_field(j, "batch", batch, where);
  get_field(j, "seq_len", seq_len, where);
  get_field(j, "grad_accum", grad_accum, where);
  get_field(j, "lr", lr, where);
  get_field(j, "min_lr", min_lr, where);
  get_field(j, "warmup_steps", warmup_steps, where);
  get_field(j, "lr_decay_steps", lr_decay_steps, where);
  get_field(j, "beta1", adamw.beta1, where);
  get_field(j, "beta2", adamw.beta2, where);
  get_field(j, "eps", adamw.eps, where);
  get_field(j, "weight_decay", adamw.weight_decay, where);
  get_field(j, "grad_clip", adamw.grad_clip, where);
  get_field(j, "eval_interval", eval_interval, where);
  get_field(j, "eval_iters", eval_iters, where);
  get_field(j, "ckpt_interval", ckpt_interval, where);
  get_field(j, "bucket_mb", bucket_mb, where);
  get_field(j, "seed", seed, where);
  if (j.contains("engine")) {
    std::string e;
    get_field(j, "engine", e, where);
    if (e != "direct" && e != "graph") throw_usage("engine must be \"direct\" or \"graph\" (got \"" + e + "\")", where);
    engine = parse_engine(e);
  }
  if (j.contains("backend")) {
    std::string b;
    get_field(j, "backend", b, where);
    if (b == "cpu")
      backend = Backend::Cpu;
    else if (b == "cuda")
      backend = Backend::Cuda;
    else
      throw_usage("backend must be \"cpu\" or \"cuda\" (got \"" + b + "\")", where);
  }
}

std::string vocab_warning(const Gpt2Config& model, int dataset_vocab) {
  if (dataset_vocab <= 0 || model.vocab_size / kVocabWarnRatio < dataset_vocab) return "";
  const double ratio = static_cast<double>(model.vocab_size) / dataset_vocab;
  char times[32];
  std::snprintf(times, sizeof times, ratio >= 10 ? "%.0fx" : "%.1fx", ratio);
  std::string fits;
  for (const std::string& name : Gpt2Config::preset_names()) {
    const int v = Gpt2Config::preset(name).vocab_size;
    if (v >= dataset_vocab && v / kVocabWarnRatio < dataset_vocab) fits += (fits.empty() ? "" : " or ") + name;
  }
  const std::string ids = std::to_string(dataset_vocab);
  return "the model's vocab_size " + std::to_string(model.vocab_size) + " is " + times + " the dataset's " + ids +
         " token ids: most of the output head is for ids the data never holds (compute and memory for nothing); " +
         (fits.empty() ? std::string("use") : "use a preset sized for this dataset (--preset " + fits + ") or") +
         " a --config whose \"model\" has \"vocab_size\": " + ids;
}

std::string TrainConfig::schedule_warning() const {
  char buf[256];
  if (lr_decay_steps > 0 && lr_decay_steps < warmup_steps && lr_decay_steps < steps) {
    std::snprintf(buf, sizeof buf,
                  "lr_decay_steps %d ends before warmup_steps %d: the rate climbs to %.3g at step %d, then drops "
                  "to min_lr %.3g with no cosine decay",
                  lr_decay_steps, warmup_steps, static_cast<double>(lr_at(*this, std::min(warmup_steps, steps) - 1)),
                  std::min(warmup_steps, steps), static_cast<double>(min_lr));
    return buf;
  }
  if (warmup_steps >= steps) {
    std::snprintf(buf, sizeof buf,
                  "warmup_steps %d >= steps %d: the learning rate is still warming up at the last step "
                  "(%.3g, not the peak lr %.3g); pass --warmup below --steps",
                  warmup_steps, steps, static_cast<double>(lr_at(*this, steps - 1)), static_cast<double>(lr));
    return buf;
  }
  return "";
}

float lr_at(const TrainConfig& c, int step) {
  const int decay_end = c.lr_decay_steps > 0 ? c.lr_decay_steps : c.steps;
  if (step < c.warmup_steps)
    return static_cast<float>(static_cast<double>(c.lr) * (step + 1.0) / (c.warmup_steps + 1.0));  // no int overflow
  if (step > decay_end) return c.min_lr;
  if (decay_end == c.warmup_steps) return c.min_lr;
  const double r = static_cast<double>(step - c.warmup_steps) / (decay_end - c.warmup_steps);
  const double coeff = 0.5 * (1.0 + std::cos(kPi * r));
  return static_cast<float>(c.min_lr + coeff * (static_cast<double>(c.lr) - c.min_lr));
}

namespace {

/// Mean loss over `iters` batches of one split; batches drawn from the eval stream at `step`.
/// Data parallel: each batch has N x batch rows (ids/tgt hold them all), this rank evaluates
/// its B rows and the per-rank sums are averaged over the ranks. `stop` is asked before each
/// batch (all ranks agree on its answer): true abandons the estimate (nullopt; a partial mean
/// is no loss estimate). `progress(i)` is told each finished batch (may be null).
std::optional<double> estimate_loss(Gpt2& model, const io::Dataset& ds, bool val, const TrainConfig& c, int step,
                                    std::vector<int32_t>& ids, std::vector<int32_t>& tgt, dist::Communicator& comm,
                                    const std::function<bool()>& stop, const std::function<void(int)>& progress) {
  double sum = 0;
  const int T = c.T(), N = comm.size();
  const size_t mine = static_cast<size_t>(comm.rank()) * c.batch * T;
  // A batch is run in forwards of at most kEvalChunkTokens tokens (whole rows), each asked to
  // stop before it: the preset's 64 x 256 batch is 4 forwards, so Ctrl-C waits for a quarter
  // of one. The batch mean is the row-weighted mean of the chunk means (the loss is a mean
  // over tokens); a batch of one chunk is computed exactly as one forward.
  const int rows = std::clamp(kEvalChunkTokens / T, 1, c.batch);
  for (int i = 0; i < c.eval_iters; ++i) {
    if (stop()) return std::nullopt;
    const uint64_t subseq = (static_cast<uint64_t>(step) * 2 + (val ? 1 : 0)) * static_cast<uint64_t>(c.eval_iters) + i;
    ds.sample_batch(val, N * c.batch, T, eval_seed(c.seed), subseq, ids.data(), tgt.data());
    if (rows == c.batch) {
      sum += model.forward(ids.data() + mine, tgt.data() + mine, c.batch, T);
    } else {
      double batch_sum = 0;
      for (int r0 = 0; r0 < c.batch; r0 += rows) {
        if (r0 > 0 && stop()) return std::nullopt;
        const int n = std::min(rows, c.batch - r0);
        const size_t off = mine + static_cast<size_t>(r0) * T;
        batch_sum += static_cast<double>(model.forward(ids.data() + off, tgt.data() + off, n, T)) * n;
      }
      sum += batch_sum / c.batch;
    }
    if (progress) progress(i + 1);
  }
  if (N > 1) {
    comm.allreduce_sum(&sum, 1);
    sum /= N;
  }
  return c.eval_iters > 0 ? sum / c.eval_iters : std::numeric_limits<double>::quiet_NaN();
}

/// Run `fn` where `active`, then agree across ranks: when it threw on any rank, every rank
/// throws (the failing rank its own error, the others one naming `what`), so no rank is left
/// waiting in a collective the failed one will never join.
template <class F>
void on_all_or_none(dist::Communicator& comm, bool active, const std::string& what, F&& fn) {
  std::exception_ptr err;
  if (active) {
    try {
      fn();
    } catch (...) {
      err = std::current_exception();
    }
  }
  if (comm.size() > 1) {
    double failed = err ? 1 : 0;
    comm.allreduce_sum(&failed, 1);
    if (!err && failed > 0)
      throw_env(what + " failed on another rank (this is rank " + std::to_string(comm.rank()) + " of " +
                    std::to_string(comm.size()) + ")",
                "dist", "see the error printed by the failing rank (rank 0 for checkpoints and output)");
  }
  if (err) std::rethrow_exception(err);
}

/// meta.json without the source path (ranks may see the same data under different paths).
std::string data_identity(const io::Dataset& ds) {
  nlohmann::json m = ds.meta();
  if (m.contains("source") && m["source"].is_object()) m["source"].erase("path");
  return m.dump();
}

/// Appends JSON lines to a file, flushed per line (a crash loses at most the line being written).
class JsonlLog {
 public:
  explicit JsonlLog(const std::string& path) : path_(path) {
    if (path.empty()) return;
    f_ = std::fopen(path.c_str(), "a");
    if (!f_) throw_env("cannot open the training log for appending", path);
  }
  ~JsonlLog() {
    if (f_) std::fclose(f_);
  }
  JsonlLog(const JsonlLog&) = delete;
  JsonlLog& operator=(const JsonlLog&) = delete;
  void write(const nlohmann::json& j) {
    if (!f_) return;
    const std::string s = j.dump() + "\n";
    if (std::fwrite(s.data(), 1, s.size(), f_) != s.size() || std::fflush(f_) != 0)
      throw_env("write to the training log failed (disk full?)", path_);
  }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

}  // namespace

TrainResult train(const TrainConfig& cfg, const std::string& data_dir, const std::string& out_dir,
                  const std::string& resume_from, const TrainCallbacks& cb, dist::Communicator* comm_in) {
  cfg.validate();
  dist::Communicator& comm = comm_in ? *comm_in : dist::world();
  const int N = comm.size(), rank = comm.rank();
  const bool lead = rank == 0;
  dist::require_same(comm, "run config", cfg.to_json().dump());
  std::unique_ptr<io::Dataset> ds_owner;
  on_all_or_none(comm, true, "opening the dataset", [&] { ds_owner = std::make_unique<io::Dataset>(data_dir); });
  const io::Dataset& ds = *ds_owner;
  dist::require_same(comm, "dataset (meta.json)", data_identity(ds));
  if (ds.vocab_size() > cfg.model.vocab_size)
    throw_input("the dataset's vocabulary (" + std::to_string(ds.vocab_size()) +
                    " tokens) is larger than the model's vocab_size (" + std::to_string(cfg.model.vocab_size) + ")",
                data_dir + "/meta.json", "use a model config whose vocab_size covers the tokenizer");
  if (lead && cb.on_warning)
    if (const std::string w = vocab_warning(cfg.model, ds.vocab_size()); !w.empty()) cb.on_warning(w);
  const int B = cfg.batch, T = cfg.T(), K = cfg.grad_accum;
  if (ds.tokens(false) < T + 1 || (cfg.eval_iters > 0 && ds.tokens(true) < T + 1))
    throw_input("a split has fewer than seq_len+1 = " + std::to_string(T + 1) + " tokens", data_dir,
                "use a smaller --seq-len or more data");

  Gpt2 model(cfg.model, B, T, cfg.backend, cfg.kernels, cfg.engine);
  int start_step = 0;
  double best_val = std::numeric_limits<double>::infinity();
  // Rank 0 reads the checkpoint (or initialises); its state is broadcast so all ranks start equal.
  on_all_or_none(comm, lead, "loading the checkpoint " + resume_from, [&] {
    if (!resume_from.empty()) {
      Checkpoint ck = load_checkpoint(resume_from, true);
      if (!(ck.model == cfg.model))
        throw_input("the checkpoint's model config " + ck.model.to_json().dump() + " differs from the run's " +
                        cfg.model.to_json().dump(),
                    resume_from);
      if (ck.m.empty()) throw_input("the checkpoint has no optimizer state; cannot resume", resume_from);
      if (ck.seed != cfg.seed)
        throw_input("the checkpoint was written by a run with seed " + std::to_string(ck.seed) + ", not " +
                        std::to_string(cfg.seed),
                    resume_from, "pass --seed " + std::to_string(ck.seed) + " to continue that run");
      if (ck.tokenizer.is_null() || ck.tokenizer != ds.tokenizer().to_json())
        throw_input(std::string("the checkpoint's tokenizer ") + (ck.tokenizer.is_null() ? "is missing" : "differs from") +
                        " the dataset's (" + data_dir + "/meta.json): token ids would mean different text",
                    resume_from, "resume on the dataset the run was started with");
      if (ck.step >= cfg.steps)
        throw_usage("the checkpoint is at step " + std::to_string(ck.step) + ", not before --steps " +
                        std::to_string(cfg.steps) + ": nothing to train",
                    resume_from, "raise --steps to continue training");
      model.set_params(ck.params.data());
      model.set_moments(ck.m.data(), ck.v.data());
      start_step = ck.step;
      if (ck.best_val_loss > 0) best_val = ck.best_val_loss;
    } else {
      model.init_weights(cfg.seed);
    }
  });
  if (N > 1) {
    double hdr[2] = {static_cast<double>(start_step), best_val};
    comm.broadcast(hdr, sizeof hdr, 0);
    start_step = static_cast<int>(hdr[0]);
    best_val = hdr[1];
    std::vector<float> p(model.num_params()), m, v;
    if (lead) model.get_params(p.data());
    comm.broadcast(p.data(), p.size() * sizeof(float), 0);
    model.set_params(p.data());
    if (!resume_from.empty()) {
      m.resize(p.size());
      v.resize(p.size());
      if (lead) model.get_moments(m.data(), v.data());
      comm.broadcast(m.data(), m.size() * sizeof(float), 0);
      comm.broadcast(v.data(), v.size() * sizeof(float), 0);
      model.set_moments(m.data(), v.data());
    } else {
      model.init_weights(cfg.seed);  // zero moments and gradients, then rank 0's weights
      model.set_params(p.data());
    }
  }
  // Gradient all-reduce: the host communicator on CPU, NCCL over it on CUDA.
  std::unique_ptr<dist::Communicator> nccl;
  if (N > 1 && cfg.backend == Backend::Cuda) nccl = dist::make_nccl(comm);
  dist::Communicator& grad_comm = nccl ? *nccl : comm;
  if (nccl) nccl->set_timeout(comm.timeout_s());
  std::unique_ptr<dist::GradBucketer> buckets;
  if (N > 1) {
    // The whole gradient buffer: on CUDA it holds every tensor on a 256-byte boundary, so it is
    // longer than num_params() floats when a tensor's size is not a multiple of 64 floats (the
    // last tensors would be left un-reduced, and the ranks would drift apart).
    const size_t grad_floats = model.memory().grads / sizeof(float);
    buckets = std::make_unique<dist::GradBucketer>(grad_comm, model.grad_data(), grad_floats,
                                                   static_cast<size_t>(static_cast<double>(cfg.bucket_mb) * 1048576.0));
    dist::GradBucketer* bk = buckets.get();
    model.set_grad_ready_hook([bk](size_t off, size_t n) { bk->mark_ready(off, n); });
  }
  // Single process: the CPU backward reports each layer's gradients as final (the hook data
  // parallelism uses for its buckets); a stop asked then abandons the backward after that layer
  // (an exception out of backward(): only gradients, which are dropped, were written). Ctrl-C
  // waits for at most one layer of the backward, not the rest of it. CUDA reports no progress.
  if (N == 1 && cb.should_stop)
    model.set_grad_ready_hook([&cb](size_t, size_t) {
      if (cb.should_stop()) throw BackwardStopped();
    });
  struct HookGuard {
    Gpt2& m;
    ~HookGuard() { m.set_grad_ready_hook({}); }
  } hook_guard{model};

  std::string ckpt_path, log_path;
  on_all_or_none(comm, lead, "preparing the output directory " + out_dir, [&] {
    if (!out_dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(out_dir, ec);
      if (ec) throw_env("cannot create the output directory: " + ec.message(), out_dir);
      ckpt_path = (std::filesystem::path(out_dir) / "ckpt.safetensors").string();
      // Temp files of an earlier process killed while writing its checkpoint (the atomic writer
      // names them .ckpt.safetensors.tmp.XXXXXX beside the target): the run owns --out, remove them.
      for (const auto& e : std::filesystem::directory_iterator(out_dir, ec))
        if (e.path().filename().string().rfind(".ckpt.safetensors.tmp.", 0) == 0) std::filesystem::remove(e.path(), ec);
      log_path = (std::filesystem::path(out_dir) / "log.jsonl").string();
    }
  });
  if (!lead) ckpt_path.clear(), log_path.clear();  // rank 0 alone writes
  std::unique_ptr<JsonlLog> log_owner;
  on_all_or_none(comm, lead, "opening the training log", [&] { log_owner = std::make_unique<JsonlLog>(log_path); });
  if (!log_owner) log_owner = std::make_unique<JsonlLog>("");
  JsonlLog& log = *log_owner;
  if (start_step == 0)
    log.write({{"event", "start"}, {"config", cfg.to_json()}, {"num_params", model.num_params()}, {"ranks", N}});
  else
    log.write({{"event", "resume"}, {"step", start_step}, {"from", resume_from}, {"config", cfg.to_json()}, {"ranks", N}});

  TrainResult res;
  res.ranks = N;
  // Data parallel: every rank draws the global batch of N x B rows and keeps rows [rank B, (rank+1) B).
  std::vector<int32_t> ids(static_cast<size_t>(N) * B * T), tgt(ids.size());
  const size_t mine = static_cast<size_t>(rank) * B * T;
  std::vector<float> host_params, host_m, host_v;
  const nlohmann::json tok_json = ds.tokenizer().to_json();

  // Ctrl-C (cb.should_stop), asked before every micro-batch, between its forward and backward,
  // and before every evaluation forward: the work since the last finished optimizer step is
  // dropped, never half-applied. Ranks agree on each answer (one 8-byte all-reduce), so none is
  // left waiting in a collective; when no rank has a should_stop (agreed once here), nothing is
  // asked and no collective is added.
  bool any_stopper = static_cast<bool>(cb.should_stop);
  if (N > 1) {
    double f = any_stopper ? 1 : 0;
    comm.allreduce_sum(&f, 1);
    any_stopper = f > 0;
  }
  const std::function<bool()> stop = [&] {
    if (!any_stopper) return false;
    bool s = cb.should_stop && cb.should_stop();
    if (N > 1) {
      double f = s ? 1 : 0;
      comm.allreduce_sum(&f, 1);
      s = f > 0;
    }
    return s;
  };
  int saved_step = -1;  // step of the checkpoint this run last wrote
  auto save = [&](int steps_done) {
    if (ckpt_path.empty() || saved_step == steps_done) return;
    telemetry::ScopedSpan span("checkpoint", telemetry::enabled() ? nlohmann::json{{"step", steps_done}} : nlohmann::json());
    Checkpoint ck;
    ck.model = cfg.model;
    ck.run_config = cfg.to_json();
    ck.tokenizer = tok_json;
    ck.step = steps_done;
    ck.seed = cfg.seed;
    ck.best_val_loss = std::isfinite(best_val) ? best_val : 0;
    ck.params.resize(model.num_params());
    ck.m.resize(model.num_params());
    ck.v.resize(model.num_params());
    model.get_params(ck.params.data());
    model.get_moments(ck.m.data(), ck.v.data());
    save_checkpoint(ckpt_path, ck);
    saved_step = steps_done;
    res.checkpoint = ckpt_path;
    if (cb.on_checkpoint) cb.on_checkpoint(ckpt_path, steps_done);
  };
  // Returns false when interrupted (nothing recorded: the partial losses are dropped).
  auto evaluate = [&](int step) {
    if (cfg.eval_iters <= 0) return true;
    telemetry::ScopedSpan span("eval", telemetry::enabled() ? nlohmann::json{{"step", step}, {"iters", cfg.eval_iters}} : nlohmann::json());
    const double t0 = now_s();
    EvalRecord e;
    e.step = step;
    // Progress in batches of both splits: train's 1..iters, then val's iters+1..2 iters.
    int base = 0;
    std::function<void(int)> progress;
    if (lead && cb.on_eval_progress)
      progress = [&](int i) { cb.on_eval_progress(step, base + i, 2 * cfg.eval_iters); };
    const std::optional<double> tl = estimate_loss(model, ds, false, cfg, step, ids, tgt, comm, stop, progress);
    if (!tl) return false;
    base = cfg.eval_iters;
    const std::optional<double> vl = estimate_loss(model, ds, true, cfg, step, ids, tgt, comm, stop, progress);
    if (!vl) return false;
    e.train_loss = *tl;
    e.val_loss = *vl;
    e.ms = (now_s() - t0) * 1e3;
    res.final_train_loss = e.train_loss;
    res.final_val_loss = e.val_loss;
    ++res.evals_done;
    if (e.val_loss < best_val) best_val = e.val_loss;
    log.write({{"event", "eval"}, {"step", e.step}, {"train_loss", e.train_loss}, {"val_loss", e.val_loss}, {"ms", e.ms}});
    if (cb.on_eval) cb.on_eval(e);
    return true;
  };
  auto interrupt = [&](const std::string& where) {
    res.interrupted = true;
    res.interrupted_in = where;
  };

  const double t_run = now_s();
  double warm_tokens = 0, warm_s = 0, first_tokens = 0, first_s = 0;
  int done = start_step;  // optimizer steps whose update the model holds
  for (int step = start_step; step < cfg.steps; ++step) {
    if ((step % cfg.eval_interval == 0 && step != start_step) || step == 0) {
      if (!evaluate(step)) {
        interrupt("the evaluation at step " + std::to_string(step));
        break;
      }
      if (step != 0) save(step);
    }
    telemetry::ScopedSpan span("train.step");
    const double t0 = now_s();
    const float lr = lr_at(cfg, step);
    model.zero_grad();
    double loss_sum = 0;
    for (int k = 0; k < K; ++k) {
      const auto where = [&] {
        return "step " + std::to_string(step + 1) + " (micro-batch " + std::to_string(k + 1) + " of " +
               std::to_string(K) + ")";
      };
      if (stop()) {
        interrupt(where());
        break;
      }
      {
        telemetry::ScopedSpan data_span("data");
        ds.sample_batch(false, N * B, T, cfg.seed, static_cast<uint64_t>(step) * K + k, ids.data(), tgt.data());
      }
      loss_sum += model.forward(ids.data() + mine, tgt.data() + mine, B, T);
      if (stop()) {  // the forward is a third of a micro-batch: do not start the backward
        interrupt(where());
        break;
      }
      if (buckets && k == K - 1) buckets->begin();  // the last micro-batch's backward all-reduces
      try {
        model.backward(1.0f / (static_cast<float>(K) * static_cast<float>(N)));  // the mean over ranks
      } catch (const BackwardStopped&) {
        interrupt(where());
        break;
      }
    }
    if (res.interrupted) break;  // the gradients of this step are dropped; the model holds step `done`
    if (N > 1) {
      buckets->finish();
      comm.allreduce_sum(&loss_sum, 1);  // the global mean loss
      loss_sum /= N;
    }
    const double gnorm = model.step(step + 1, lr, cfg.adamw);
    done = step + 1;
    const double dt = now_s() - t0;
    StepRecord r;
    r.step = step + 1;
    r.loss = loss_sum / K;
    r.lr = lr;
    r.grad_norm = gnorm;
    r.ms = dt * 1e3;
    r.tokens_per_s = static_cast<double>(B) * T * K * N / dt;
    r.memory_bytes = model.memory().total();
    if (!std::isfinite(r.loss))
      throw_input("training diverged: loss is " + std::to_string(r.loss) + " at step " + std::to_string(step),
                  "step " + std::to_string(step), "lower --lr or enable --grad-clip");
    if (step > start_step) {
      warm_tokens += static_cast<double>(B) * T * K * N;
      warm_s += dt;
    } else {
      first_tokens = static_cast<double>(B) * T * K * N;
      first_s = dt;
    }
    nlohmann::json rec = {{"event", "step"},
                          {"step", r.step},
                          {"loss", r.loss},
                          {"lr", r.lr},
                          {"grad_norm", r.grad_norm},
                          {"ms", r.ms},
                          {"tokens_per_s", r.tokens_per_s},
                          {"memory_bytes", r.memory_bytes}};
    if (buckets) {
      const dist::BucketStats st = buckets->stats();
      rec["ranks"] = N;
      rec["comm_ms"] = (st.comm_s - res.comm_s) * 1e3;
      rec["exposed_comm_ms"] = (st.exposed_s - res.exposed_comm_s) * 1e3;
      res.comm_s = st.comm_s;
      res.exposed_comm_s = st.exposed_s;
    }
    log.write(rec);
    if (cb.on_step) cb.on_step(r);
    if (cfg.ckpt_interval > 0 && (step + 1) % cfg.ckpt_interval == 0 && (step + 1) % cfg.eval_interval != 0 &&
        step + 1 < cfg.steps)
      save(step + 1);
  }
  res.steps_done = done;
  if (!res.interrupted) {
    // Every step ran: the final state is saved even when its evaluation is cut short.
    if (!evaluate(cfg.steps)) interrupt("the final evaluation (step " + std::to_string(cfg.steps) + ")");
    save(cfg.steps);
  } else if (done > start_step) {
    save(done);  // the last finished step (a no-op when its checkpoint is already written)
  }
  {
    std::vector<float> fin(model.num_params());
    model.get_params(fin.data());
    res.params_fnv = kernels::fnv1a64(fin.data(), fin.size() * sizeof(float));
    // Replicas must not drift apart (an all-reduce giving ranks different sums would do that).
    dist::require_same(comm, "final weights (FNV-1a of the parameters)", std::to_string(res.params_fnv));
  }
  res.wall_s = now_s() - t_run;
  res.best_val_loss = std::isfinite(best_val) ? best_val : 0;
  // A run of one step has no warm step: it reports that (cold) step rather than 0.
  res.tokens_per_s_cold = warm_s <= 0 && first_s > 0;
  res.mean_tokens_per_s = warm_s > 0 ? warm_tokens / warm_s : (first_s > 0 ? first_tokens / first_s : 0);
  nlohmann::json last = {{"event", res.interrupted ? "interrupted" : "end"}, {"steps", res.steps_done}, {"wall_s", res.wall_s},
                         {"val_loss", res.evals_done ? nlohmann::json(res.final_val_loss) : nlohmann::json()},
                         {"tokens_per_s", res.mean_tokens_per_s}};
  if (res.interrupted) last["during"] = res.interrupted_in;
  log.write(last);
  return res;
}

}  // namespace rtx::models
