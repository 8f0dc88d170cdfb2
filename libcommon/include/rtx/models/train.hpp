// GPT-2 training run: the run configuration (nanoGPT's train.py knobs), the learning-rate
// schedule, the training loop with evaluation, JSON Lines logging and checkpoints, and resume.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "rtx/models/gpt2.hpp"

namespace rtx::dist {
class Communicator;
}

namespace rtx::models {

/// Everything a run needs besides the data. Defaults are nanoGPT's shakespeare-char config
/// (config/train_shakespeare_char.py over train.py's defaults).
struct TrainConfig {
  Gpt2Config model = Gpt2Config::preset("shakespeare-char");
  std::string preset = "shakespeare-char";  ///< informational ("" when a config file set the model)
  int steps = 5000;            ///< optimizer steps (nanoGPT max_iters)
  int batch = 64;              ///< sequences per micro-batch (B)
  int seq_len = 0;             ///< tokens per sequence (T); 0 = model.block_size
  int grad_accum = 1;          ///< micro-batches per optimizer step (K)
  float lr = 1e-3f;            ///< peak learning rate
  float min_lr = 1e-4f;        ///< floor after cosine decay
  int warmup_steps = 100;      ///< linear warm-up steps
  int lr_decay_steps = 0;      ///< cosine decay ends here; 0 = steps
  AdamWConfig adamw{1e-3f, 0.9f, 0.99f, 1e-8f, 0.1f, 1.0f};  ///< lr field unused (schedule)
  int eval_interval = 250;     ///< evaluate every N steps (and at step 0 and at the end)
  int eval_iters = 200;        ///< batches averaged per split per evaluation
  int ckpt_interval = 0;       ///< also checkpoint every N steps; 0 = at evaluations only
  float bucket_mb = 25.0f;     ///< data-parallel gradient bucket size in MiB (rtx/dist; PyTorch DDP's
                               ///< bucket_cap_mb default); 0 = one
                               ///< all-reduce after the backward (no overlap)
  uint64_t seed = 1337;
  Backend backend = Backend::Cpu;
  Engine engine = Engine::Direct;  ///< direct (hand-written backend) or graph (Polygraph IR); JSON "engine"
  Gpt2KernelParams kernels{};

  /// T actually used: seq_len or model.block_size.
  int T() const { return seq_len > 0 ? seq_len : model.block_size; }
  /// Throws Error(Usage) naming the field for a value out of range (steps < 1, batch < 1,
  /// seq_len > block_size, lr <= 0, min_lr > lr, betas outside [0,1), ...).
  void validate() const;
  /// A learning-rate schedule that is legal but probably not meant, as one sentence, or "":
  /// warm-up not over before the last step (the peak lr is never reached; the default
  /// warmup 100 with --steps 10), or the cosine decay ending before the warm-up does (the
  /// rate falls from the warm-up ramp straight to min_lr). Values from lr_at().
  std::string schedule_warning() const;
  /// The run configuration as JSON (all fields; the model under "model").
  nlohmann::json to_json() const;
  /// Overlay the keys present in `j` onto *this (unknown keys -> Error(Usage) naming the key and
  /// `where`). Accepts the shape to_json() writes; "preset": NAME sets the model from a preset.
  void apply_json(const nlohmann::json& j, const std::string& where);
};

/// A model vocabulary far larger than the dataset's, as one sentence, or "": vocab_size at
/// least kVocabWarnRatio times the dataset's token ids (its tokenizer's vocab_size; every id in
/// the data is below it, checked when the dataset opens), as gpt2-tiny's 50257 on a char-level
/// dataset's 65. The output head's rows (and the embedding's) for ids the data never holds only
/// learn to be unlikely: compute and memory spent for nothing. Names the presets whose
/// vocab_size covers the dataset within that ratio, and the --config model field.
/// A padded vocabulary (nanoGPT's 50304 for 50257, 128 for 65) stays below the ratio.
inline constexpr int kVocabWarnRatio = 4;
std::string vocab_warning(const Gpt2Config& model, int dataset_vocab);

/// nanoGPT's get_lr: step < warmup: lr (step+1)/(warmup+1); step > decay_end: min_lr; otherwise
/// cosine from lr to min_lr: min_lr + 0.5 (1 + cos(pi r)) (lr - min_lr), r = (step-warmup)/(decay_end-warmup).
/// `step` is 0-based.
float lr_at(const TrainConfig& c, int step);

/// One line of the training log.
struct StepRecord {
  int step = 0;                ///< optimizer steps completed, this one included (1-based)
  double loss = 0;             ///< mean training loss over the K micro-batches
  double lr = 0;
  double grad_norm = 0;        ///< before clipping
  double ms = 0;               ///< wall time of the step
  double tokens_per_s = 0;     ///< B*T*K / step time
  size_t memory_bytes = 0;     ///< Gpt2::memory().total()
};
/// One evaluation: mean loss over eval_iters batches of each split.
struct EvalRecord {
  int step = 0;
  double train_loss = 0, val_loss = 0;
  double ms = 0;
};

/// Observer of a run (all optional).
struct TrainCallbacks {
  std::function<void(const StepRecord&)> on_step;
  std::function<void(const EvalRecord&)> on_eval;
  std::function<void(const std::string& path, int step)> on_checkpoint;
  /// Polled before every micro-batch, between its forward and backward, after each layer of
  /// a single-process CPU backward, and before every evaluation forward (at most 4096 tokens:
  /// larger evaluation batches are split by rows) (Ctrl-C): true stops the run there. The unfinished step's gradients or the unfinished evaluation are dropped, and the
  /// state of the last finished optimizer step is checkpointed (when out_dir is set and a step
  /// finished in this run). Data parallel: the ranks agree on its answer (any rank's true).
  std::function<bool()> should_stop;
  /// Rank 0, after each evaluation batch: `done` of `total` batches (both splits: 2 x
  /// eval_iters) of the evaluation at `step`; for a progress display.
  std::function<void(int step, int done, int total)> on_eval_progress;
  /// A legal but probably unmeant setup of the run and its data (vocab_warning()), called on
  /// rank 0 before the first step, once per warning.
  std::function<void(const std::string&)> on_warning;
};

/// What a finished run reports.
struct TrainResult {
  int steps_done = 0;            ///< optimizer steps the model holds (the resumed ones included)
  int evals_done = 0;            ///< evaluations finished in this run (the final_*_loss are theirs)
  double final_train_loss = 0, final_val_loss = 0, best_val_loss = 0;
  double wall_s = 0;
  /// Tokens per second over the steps after the first (warm), all ranks' tokens; a run that
  /// trained one step reports that step's rate (tokens_per_s_cold), 0 only when none ran.
  double mean_tokens_per_s = 0;
  bool tokens_per_s_cold = false;  ///< mean_tokens_per_s is the first (cold) step's: no warm step ran
  int ranks = 1;                 ///< data-parallel ranks that trained
  double comm_s = 0;             ///< data-parallel: seconds inside gradient all-reduces
  /// Seconds the steps waited for all-reduces after their backward: mostly comm_s not hidden by
  /// the backward, plus any time the communication thread was not scheduled (so under CPU
  /// oversubscription it can exceed comm_s).
  double exposed_comm_s = 0;
  uint64_t params_fnv = 0;       ///< FNV-1a 64 of the final parameters (equal on every rank; checked)
  std::string checkpoint;        ///< path of the last checkpoint written ("" if none)
  /// Stopped by should_stop. The checkpoint (when out_dir is set) is that of steps_done, written
  /// unless no step finished in this run (checkpoint "" then).
  bool interrupted = false;
  std::string interrupted_in;    ///< what was cut short: "the evaluation at step 3", "step 7 (micro-batch 2 of 4)"
};

/// Train on the dataset at `data_dir` (rtx::io::Dataset). When `out_dir` is non-empty, writes
/// `out_dir`/ckpt.safetensors at each evaluation and every ckpt_interval steps (atomically) and
/// appends the log to `out_dir`/log.jsonl. `resume_from` (a checkpoint path, or "") continues a
/// run: model, optimizer moments, step and RNG state are restored and the remaining steps are
/// bit-for-bit those of an uninterrupted run (CPU). Stale checkpoint temp files in `out_dir` (from a
/// killed process) are removed at start. Throws Error(Input) on a dataset whose vocab exceeds the
/// model's (a token id the model has no row for), and warns (cb.on_warning) on one far smaller
/// (vocab_warning()), a checkpoint whose model config, seed or tokenizer differs from the run's, and
/// Error(Usage) when the checkpoint is already at or past cfg.steps.
///
/// Data parallel (rtx/dist): `comm` (nullptr: dist::world(), which is the MPI world under
/// mpirun/srun and a single process otherwise) with N ranks trains with a global batch of
/// N x batch sequences per micro-batch: rank r takes rows [r B, (r+1) B) of the batch a single
/// process with batch N B would draw, so N ranks with batch B train exactly as one with N B
/// (up to float summation order). Gradients are averaged by all-reducing buckets of bucket_mb
/// MiB, overlapped with the backward pass (CPU). Ranks check at start that config and data
/// agree (Error(Input) naming the difference); rank 0 alone writes the log and checkpoints
/// and reads `resume_from`, whose state it broadcasts; all ranks return the same result.
/// A collective that outlasts the communicator's timeout throws Error(Environment).
/// With the CUDA backend, gradients are all-reduced with NCCL (a communicator over `comm`).
TrainResult train(const TrainConfig& cfg, const std::string& data_dir, const std::string& out_dir,
                  const std::string& resume_from, const TrainCallbacks& cb = {}, dist::Communicator* comm = nullptr);

}  // namespace rtx::models
