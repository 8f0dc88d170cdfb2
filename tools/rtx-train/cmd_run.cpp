// `rtx-train run`: build the run configuration (preset, then --config FILE, then flags), train,
// show progress (a status line on a TTY, periodic lines otherwise) and print the result.
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "rtx/app/bench.hpp"
#include "rtx/cli/interrupt.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/allocator.hpp"
#include "rtx/dist/comm.hpp"
#include "rtx/evolve/deploy.hpp"
#include "rtx/evolve/trial.hpp"
#include "rtx/io/atomic_file.hpp"
#include "rtx/models/train.hpp"
#include "rtx/store/store.hpp"
#include "rtx/telemetry/hwprofile.hpp"

namespace rtx_train {

namespace {

struct RunArgs {
  std::string model = "gpt2";
  int epochs = 200, hidden = 16, seeds = 1;
  float dropout = 0.5f;
  std::string config_file, preset, data, out, resume, backend = "cpu", matmul = "blocked", engine = "direct";
  int threads = 0, log_interval = 0;
  // Values of flags that override the config; applied only when given.
  int steps = 0, batch = 0, seq_len = 0, grad_accum = 0, warmup = 0, decay = 0, eval_interval = 0, eval_iters = 0,
      ckpt_interval = 0;
  float lr = 0, min_lr = 0, wd = 0, beta1 = 0, beta2 = 0, clip = 0, bucket_mb = 0;
  double dist_timeout = 0;
  bool no_promoted = false;
};

std::string human_tokens(double x) {
  char buf[32];
  if (x >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", x / 1e6);
  else if (x >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fk", x / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", x);
  return buf;
}

}  // namespace

Body add_run(CLI::App& s, const rtx::cli::CommonOptions& common) {
  auto a = std::make_shared<RunArgs>();
  s.add_option("--model", a->model, "gpt2 (default), gcn (node classification on a Planetoid graph, --data DIR/cora) "
                "or mlp (DP-SGD image classifier, --data fashion-mnist)")
      ->check(CLI::IsMember({"gpt2", "gcn", "mlp"}));
  auto dp = std::make_shared<DpRunArgs>();
  s.add_option("--dp-epsilon", dp->epsilon, "mlp: target epsilon of DP-SGD (inf: no noise, clipping kept; default 3)");
  s.add_option("--dp-delta", dp->delta, "mlp: target delta (default 1e-5)");
  s.add_option("--dp-clip", dp->clip, "mlp: per-example gradient L2 bound C (default 1)");
  s.add_option("--dp-accountant", dp->accountant, "mlp: rdp (default) or pld")->check(CLI::IsMember({"rdp", "pld"}));
  s.add_option("--train-examples", dp->train_examples, "mlp: use only the first N training examples (smoke runs; default all)");
  s.add_option("--epochs", a->epochs, "gcn: epochs (default 200)");
  s.add_option("--hidden", a->hidden, "gcn: hidden units (default 16)");
  s.add_option("--dropout", a->dropout, "gcn: dropout on features and hidden layer (default 0.5)");
  s.add_option("--seeds", a->seeds, "gcn: train this many seeds (--seed, --seed+1, ...) and report mean +- std");
  s.add_option("--config", a->config_file, "Run config JSON (keys as in the log's start record; flags override)");
  s.add_option("--preset", a->preset, "Model preset (rtx-train presets); default shakespeare-char");
  s.add_option("--data", a->data, "Dataset directory written by `rtx-train prepare`")->required();
  s.add_option("--out", a->out, "Directory for ckpt.safetensors and log.jsonl (none: no checkpoint, no log)");
  s.add_option("--resume", a->resume, "Continue the run saved in this checkpoint (same config and seed)");
  auto* o_steps = s.add_option("--steps", a->steps, "Optimizer steps (default 5000)");
  auto* o_batch = s.add_option("--batch", a->batch, "Sequences per micro-batch (default 64)");
  auto* o_seq = s.add_option("--seq-len", a->seq_len, "Tokens per sequence (default: block_size)");
  auto* o_acc = s.add_option("--grad-accum", a->grad_accum, "Micro-batches per step (default 1)");
  auto* o_lr = s.add_option("--lr", a->lr, "Peak learning rate (default 1e-3)");
  auto* o_minlr = s.add_option("--min-lr", a->min_lr, "Final learning rate of the cosine decay (default 1e-4)");
  auto* o_warm = s.add_option("--warmup", a->warmup, "Linear warm-up steps (default 100)");
  auto* o_decay = s.add_option("--lr-decay-steps", a->decay, "Step where the cosine decay ends (default: --steps)");
  auto* o_wd = s.add_option("--weight-decay", a->wd, "AdamW decoupled weight decay on 2-D tensors (default 0.1)");
  auto* o_b1 = s.add_option("--beta1", a->beta1, "AdamW beta1 (default 0.9)");
  auto* o_b2 = s.add_option("--beta2", a->beta2, "AdamW beta2 (default 0.99)");
  auto* o_clip = s.add_option("--grad-clip", a->clip, "Clip the global gradient norm to this (0 = off; default 1)");
  auto* o_ei = s.add_option("--eval-interval", a->eval_interval, "Evaluate every N steps (default 250)");
  auto* o_eit = s.add_option("--eval-iters", a->eval_iters, "Batches per split per evaluation (default 200)");
  auto* o_ck = s.add_option("--ckpt-interval", a->ckpt_interval, "Also checkpoint every N steps (default: at evals)");
  auto* o_backend = s.add_option("--backend", a->backend, "cpu or cuda (default: the config's, else cpu)");
  auto* o_engine = s.add_option("--engine", a->engine,
                                "gpt2 on the CPU: direct (the hand-written backend) or graph (the Polygraph IR: "
                                "builder forward, autodiff backward; docs/ir.md) (default: the config's, else direct)")
                       ->check(CLI::IsMember({"direct", "graph"}));
  s.add_option("--matmul", a->matmul, "CPU matmul: blocked (own AVX-512/AVX2 GEMM) or blas (OpenBLAS)")
      ->capture_default_str();
  auto* o_bucket = s.add_option("--bucket-mb", a->bucket_mb,
                                "Data parallel (mpirun/srun): gradient bucket size in MiB, all-reduced while the "
                                "backward runs (default 25, as PyTorch DDP; 0: one all-reduce after the backward)");
  auto* o_dto = s.add_option("--dist-timeout", a->dist_timeout,
                             "Data parallel: seconds a collective may wait for the other ranks before the job "
                             "ends with an error (default $RTX_DIST_TIMEOUT or 600)");
  auto* o_threads = s.add_option("--threads", a->threads, "OpenMP threads (0: the promoted config's, else the runtime's default)");
  s.add_flag("--no-promoted", a->no_promoted,
             "Ignore the configs rtx-evolve promoted for this machine (threads, attention fusion, CUDA allocator)");
  s.add_option("--log-interval", a->log_interval, "Without a TTY, print a line every N steps (default steps/20)");

  return [=, &common, &s]() {
    if (a->model == "gcn") {
      GcnRunArgs g;
      g.data = a->data;
      g.epochs = a->epochs;
      g.hidden = a->hidden;
      g.seeds = a->seeds;
      g.dropout = a->dropout;
      g.lr = o_lr->count() ? a->lr : 0.01f;
      g.weight_decay = o_wd->count() ? a->wd : 5e-4f;
      g.threads = a->threads;
      g.seed = parsed_seed(s, 0);
      return run_gcn(g, common);
    }
    if (a->model == "mlp") {
      DpRunArgs d = *dp;
      d.data = a->data;
      d.out = a->out;
      if (a->epochs != 200) d.epochs = a->epochs;  // 200 is gcn's default
      if (a->hidden != 16) d.hidden = a->hidden;
      if (o_batch->count()) d.batch = a->batch;
      if (o_lr->count()) d.lr = a->lr;
      d.threads = a->threads;
      d.seed = parsed_seed(s, 0);
      return run_dp(d, common);
    }
    rtx::models::TrainConfig c;
    if (!a->preset.empty()) {
      c.model = rtx::models::Gpt2Config::preset(a->preset);
      c.preset = a->preset;
    }
    if (!a->config_file.empty()) {
      const std::string text = rtx::io::read_text_file(a->config_file);
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(text);
      } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e400
        rtx::throw_input(std::string("not valid JSON: ") + e.what(), a->config_file);
      }
      c.apply_json(j, a->config_file);
      if (!a->preset.empty() && (j.contains("model") || j.contains("preset")))
        rtx::throw_usage("--preset and a model in --config both set the model; give one", "--preset");
    }
    if (o_steps->count()) c.steps = a->steps;
    if (o_batch->count()) c.batch = a->batch;
    if (o_seq->count()) c.seq_len = a->seq_len;
    if (o_acc->count()) c.grad_accum = a->grad_accum;
    if (o_lr->count()) c.lr = a->lr;
    if (o_minlr->count()) c.min_lr = a->min_lr;
    if (o_warm->count()) c.warmup_steps = a->warmup;
    if (o_decay->count()) c.lr_decay_steps = a->decay;
    if (o_wd->count()) c.adamw.weight_decay = a->wd;
    if (o_b1->count()) c.adamw.beta1 = a->beta1;
    if (o_b2->count()) c.adamw.beta2 = a->beta2;
    if (o_clip->count()) c.adamw.grad_clip = a->clip;
    if (o_ei->count()) c.eval_interval = a->eval_interval;
    if (o_eit->count()) c.eval_iters = a->eval_iters;
    if (o_ck->count()) c.ckpt_interval = a->ckpt_interval;
    if (o_bucket->count()) c.bucket_mb = a->bucket_mb;
    if (seed_given(s)) c.seed = parsed_seed(s, common.seed);
    if (o_backend->count()) {  // else the config's (default cpu)
      if (a->backend == "cpu")
        c.backend = rtx::models::Backend::Cpu;
      else if (a->backend == "cuda")
        c.backend = rtx::models::Backend::Cuda;
      else
        rtx::throw_usage("--backend must be cpu or cuda (got '" + a->backend + "')", "--backend");
    }
    if (o_engine->count()) c.engine = rtx::models::parse_engine(a->engine);
    if (a->matmul == "blocked")
      c.kernels.matmul.impl = rtx::kernels::MatmulImpl::Blocked;
    else if (a->matmul == "blas")
      c.kernels.matmul.impl = rtx::kernels::MatmulImpl::Blas;
    else
      rtx::throw_usage("--matmul must be blocked or blas (got '" + a->matmul + "')", "--matmul");
    std::string promoted_line;
    if (!a->no_promoted) {
      // What rtx-evolve promoted for this SKU applies under the flags given explicitly; a value
      // that is not valid here is ignored with the reason (the store never stops a run).
      const std::string db = common.db.empty() ? rtx::store::default_db_path() : common.db;
      const auto pc = rtx::evolve::promoted_configs(db, rtx::telemetry::sku_key("cpu"));
      std::map<std::string, std::string> outcome;
      if (const auto* pj = pc.get("parallelism")) {
        std::string why;
        if (o_threads->count()) outcome["parallelism"] = "--threads given";
        else if (const auto t = rtx::evolve::promoted_threads(*pj, 4 * std::max(1, omp_get_num_procs()), &why)) {
          a->threads = *t;
          outcome["parallelism"] = "";
        } else outcome["parallelism"] = why;
        // The data-parallel bucket size (used under mpirun/srun), unless --bucket-mb is given.
        if (pj->contains("dp_bucket_mb") && !o_bucket->count()) {
          const auto& b = (*pj)["dp_bucket_mb"];
          if (b.is_number() && b.get<double>() >= 0 && b.get<double>() <= 65536) c.bucket_mb = b.get<float>();
          else outcome["parallelism"] += std::string(outcome["parallelism"].empty() ? "" : "; ") +
                                         "dp_bucket_mb must be MiB in [0, 65536], not " + b.dump();
        }
      }
      if (const auto* fj = pc.get("fusion")) {  // fused (FlashAttention) or unfused attention
        try {
          c.kernels.attention.algo = rtx::evolve::fusion_attention_fused(*fj, "promoted fusion config")
                                         ? rtx::kernels::AttentionParams::Algo::Flash
                                         : rtx::kernels::AttentionParams::Algo::Naive;
          outcome["fusion"] = "";
        } catch (const rtx::Error& e) {
          outcome["fusion"] = std::string("invalid here: ") + e.what();
        }
      }
      if (const auto* mj = pc.get("memory")) {
        if (c.backend != rtx::models::Backend::Cuda) {
          outcome["memory"] = "the CUDA caching allocator's knobs; this run is on the CPU";
        } else {
          try {
            rtx::cuda_allocator(0).set_config(rtx::evolve::allocator_config_from_json(*mj, "promoted memory config"));
            outcome["memory"] = "";
          } catch (const rtx::Error& e) {
            outcome["memory"] = std::string("not applied: ") + e.what();
          }
        }
      }
      promoted_line = rtx::evolve::describe(pc, outcome);
    }
    const int max_threads = 4 * std::max(1, omp_get_num_procs());
    if (a->threads < 0 || a->threads > max_threads)
      rtx::throw_usage("--threads must be in [0, " + std::to_string(max_threads) + "] (4x the CPUs; got " +
                           std::to_string(a->threads) + ")",
                       "--threads");
    if (a->threads > 0) omp_set_num_threads(a->threads);
    if (a->log_interval < 0) rtx::throw_usage("--log-interval must be >= 0", "--log-interval");
    c.validate();
    rtx::dist::Communicator& world = rtx::dist::world();  // MPI under mpirun/srun, else one process
    if (o_dto->count()) world.set_timeout(a->dist_timeout);
    const bool lead = world.rank() == 0;  // only rank 0 prints (and writes, in train())
    const bool quiet = common.quiet || !lead;

    const bool tty = rtx::cli::stderr_is_tty() && !quiet;
    const int log_every = a->log_interval > 0 ? a->log_interval : std::max(1, c.steps / 20);
    rtx::models::TrainCallbacks cb;
    if (!quiet) {
      std::fprintf(stderr, "rtx-train: %s, %d layers, %d heads, %d channels, vocab %d; batch %d x %d x %d, %d steps, %s%s\n",
                   c.preset.empty() ? "custom model" : c.preset.c_str(), c.model.n_layer, c.model.n_head,
                   c.model.n_embd, c.model.vocab_size, c.batch, c.T(), c.grad_accum, c.steps, a->backend.c_str(),
                   c.engine == rtx::models::Engine::Graph ? ", graph engine" : "");
      if (!promoted_line.empty()) std::fprintf(stderr, "rtx-train: %s\n", promoted_line.c_str());
      if (const std::string w = c.schedule_warning(); !w.empty())
        std::fprintf(stderr, "rtx-train: warning: %s\n", w.c_str());
      if (world.size() > 1)
        std::fprintf(stderr, "rtx-train: data parallel over %d %s ranks: global batch %d, buckets of %g MiB\n",
                     world.size(), world.backend(), c.batch * world.size(), static_cast<double>(c.bucket_mb));
      cb.on_warning = [](const std::string& w) { std::fprintf(stderr, "rtx-train: warning: %s\n", w.c_str()); };
      cb.on_step = [=](const rtx::models::StepRecord& r) {
        if (tty) {
          std::fprintf(stderr, "\rstep %d/%d  loss %.4f  lr %.2e  norm %.3f  %.1f ms  %s tok/s   ", r.step, c.steps,
                       r.loss, r.lr, r.grad_norm, r.ms, human_tokens(r.tokens_per_s).c_str());
          std::fflush(stderr);
        } else if (r.step % log_every == 0 || r.step == 1) {
          std::fprintf(stderr, "step %d/%d  loss %.4f  lr %.2e  norm %.3f  %.1f ms  %s tok/s\n", r.step, c.steps,
                       r.loss, r.lr, r.grad_norm, r.ms, human_tokens(r.tokens_per_s).c_str());
        }
      };
      cb.on_eval = [=](const rtx::models::EvalRecord& e) {
        std::fprintf(stderr, "%seval at step %d: train loss %.4f, val loss %.4f (%.1f s)\n", tty ? "\r\033[K" : "",
                     e.step, e.train_loss, e.val_loss, e.ms / 1e3);
      };
    }
    // Ctrl-C / SIGTERM: stop before the next micro-batch or evaluation batch, checkpoint the
    // last finished step, exit 130; a second signal exits at once (the previous checkpoint
    // stays whole: it is replaced by rename only).
    if (tty)
      cb.on_eval_progress = [](int step, int done, int total) {
        std::fprintf(stderr, "\r\033[Keval at step %d: %d/%d batches", step, done, total);
        std::fflush(stderr);
      };
    cb.should_stop = [] { return rtx::cli::InterruptGuard::requested(); };
    // Evidence that other work competed with the run (rtx-bench's rules, docs/tools/rtx-bench.md
    // "Host contention"): the tok/s of a contended run says little about this build.
    namespace bench = rtx::app::bench;
    const bench::HostSample host_before = bench::sample_host();
    rtx::models::TrainResult r;
    {  // the handlers live while train() runs; the default ones are back for the output
      const rtx::cli::InterruptGuard interrupt(
          quiet ? "" : std::string(tty ? "\r\033[K" : "") +
                           "rtx-train: interrupted: stopping before the next batch and saving the last finished step "
                           "(Ctrl-C again quits at once)\n");
      r = rtx::models::train(c, a->data, a->out, a->resume, cb, &world);
    }
    // Judged as rtx-bench judges a CUDA case: on PSI stall and preemptions, not on the main
    // thread's CPU share, since a training run blocks by design (checkpoint writes and fsync,
    // data reads), which would read as lost CPU on an idle host. The share is still recorded.
    bench::HostEvidence host =
        bench::contention_evidence(host_before, bench::sample_host(), omp_get_max_threads(), bench::Backend::CUDA);
    if (!host.judged_on.empty()) host.judged_on = "run";  // the window is the whole run, not a bench case
    const bool evaluated = r.evals_done > 0;  // else no loss was estimated: null, not 0
    if (r.interrupted && !quiet) {
      std::string what;
      if (!r.checkpoint.empty())
        what = "; checkpoint of step " + std::to_string(r.steps_done) + " written: " + r.checkpoint;
      else if (a->out.empty())
        what = " after " + std::to_string(r.steps_done) + " steps; no --out, no checkpoint written";
      else if (!a->resume.empty())
        what = ": no step finished after the resumed step " + std::to_string(r.steps_done) +
               "; no checkpoint written (" + a->resume + " is unchanged)";
      else
        what = ": no step finished; no checkpoint written";
      std::fprintf(stderr, "%srtx-train: interrupted during %s%s\n", tty ? "\r\033[K" : "",
                   r.interrupted_in.c_str(), what.c_str());
    }
    if (common.json && lead) {
      std::cout << nlohmann::json{{"steps", r.steps_done},
                                  {"interrupted", r.interrupted},
                                  {"interrupted_during", r.interrupted ? nlohmann::json(r.interrupted_in) : nlohmann::json()},
                                  {"final_train_loss", evaluated ? nlohmann::json(r.final_train_loss) : nlohmann::json()},
                                  {"final_val_loss", evaluated ? nlohmann::json(r.final_val_loss) : nlohmann::json()},
                                  {"best_val_loss", evaluated ? nlohmann::json(r.best_val_loss) : nlohmann::json()},
                                  {"wall_s", r.wall_s},
                                  {"tokens_per_s", r.mean_tokens_per_s},
                                  {"tokens_per_s_cold", r.tokens_per_s_cold},
                                  {"checkpoint", r.checkpoint},
                                  {"ranks", r.ranks},
                                  {"comm_s", r.comm_s},
                                  {"exposed_comm_s", r.exposed_comm_s},
                                  {"host", bench::to_json(host)},
                                  {"config", c.to_json()}}
                       .dump(2)
                << "\n";
    }
    // The human summary goes to stderr with or without --json (stdout carries the JSON).
    if (!quiet && !r.interrupted) {
      std::string losses = "no evaluation (--eval-iters 0)";
      if (evaluated) {
        char buf[96];
        std::snprintf(buf, sizeof buf, "val loss %.4f (best %.4f)", r.final_val_loss, r.best_val_loss);
        losses = buf;
      }
      std::fprintf(stderr, "%sdone: %d step%s in %.1f s, %s tok/s%s, %s%s%s\n", tty ? "\r\033[K" : "", r.steps_done,
                   r.steps_done == 1 ? "" : "s",
                   r.wall_s, human_tokens(r.mean_tokens_per_s).c_str(),
                   r.tokens_per_s_cold ? " (first step only, cold)" : "", losses.c_str(),
                   r.checkpoint.empty() ? "" : ", checkpoint ", r.checkpoint.c_str());
    }
    if (!quiet && host.contended) {
      std::fprintf(stderr, "rtx-train: warning: other work competed with this run (%s): its tok/s is not comparable\n",
                   host.reason.c_str());
      // libgomp's default wait policy spins between parallel regions, which costs the most when
      // another process wants the same CPUs: two runs at once on 2 vCPUs went 15.3k -> 4.0k
      // tok/s each by default, 8.2k each with OMP_WAIT_POLICY=passive (docs/perf-history.md).
      const char* wp = std::getenv("OMP_WAIT_POLICY");
      if (c.backend == rtx::models::Backend::Cpu && !(wp && *wp) && !std::getenv("GOMP_SPINCOUNT"))
        std::fprintf(stderr,
                     "rtx-train: hint: OpenMP threads spin-wait by default and lose most when other work shares the "
                     "CPUs; on a shared machine run with OMP_WAIT_POLICY=passive or fewer --threads\n");
    }
    return r.interrupted ? rtx::cli::kInterruptedExit : 0;
  };
}

}  // namespace rtx_train
