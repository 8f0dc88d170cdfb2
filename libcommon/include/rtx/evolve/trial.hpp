// rtx::evolve trials: what a sandboxed child measures for one arm (baseline or candidate) of a
// proposal: kernel cases under explicit params and a thread count, a serving run of a model
// through serve::Scheduler, an allocation trace through CachingAllocator, or GPT-2 training
// steps with attention fused (flash) or unfused (naive). The parent builds
// the spec (rtx.evolve.trial_spec.v1), the child (`rtx-evolve __trial`) prints the result.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "rtx/measure/measure.hpp"
#include "rtx/core/allocator.hpp"
#include "rtx/serve/scheduler.hpp"

namespace rtx::evolve {

inline constexpr const char* kTrialSpecSchema = "rtx.evolve.trial_spec.v1";
inline constexpr const char* kTrialResultSchema = "rtx.evolve.trial.v1";

/// Run one trial in this process. Spec fields: "schema", "kind" ("kernels" | "serve" |
/// "alloc" | "fusion" | "dp"), "seed", "samples" (>= 1), "warmup" (>= 0), and per kind:
///  kernels: "threads" (0 default), "cases": [{"id", "op", "variant", "shape" {..}, "dtype",
///           "params" {..}, "baseline_params" {..} (optional)}], "baseline_threads" (0: the
///           process default) -- samples are taken round-robin across cases (one each per
///           pass); a case with baseline_params also runs once under them on the same seeded
///           inputs and reports "parity" {"available", "rel_diff", "max_rel_diff", "tolerance",
///           "ok", "worst_output", "worst_index"} (output_parity, parity_tolerance);
///  serve:   "model" (path), "config" (SchedulerConfig JSON), "requests", "prompt_tokens",
///           "max_tokens", "threads" -- one sample = one batch of requests, s per output token;
///  alloc:   "config" (AllocatorConfig JSON, sizes in bytes), "steps" per sample -- a seeded
///           trace shaped like a small GPT training step (activations kept through forward,
///           freed in reverse with short-lived gradient temporaries); s per step;
///  fusion:  "config" and "reference_config" (fusion configs, below), "shape" {"B","T","L","C",
///           "NH","V"}, "threads" (0 default), "case" (id) -- one sample = one GPT-2 training
///           step (zero_grad, forward, backward, AdamW) on a seeded batch; the first step's loss
///           and gradients are compared with the reference config's (||a-b||_2/||b||_2 per
///           parameter tensor and the loss, output_parity, fp32 bound 1e-6: "max_rel_err",
///           "ok"); the
///           checksum hashes that loss and every gradient bit.
///  dp:      "ranks" (2..64), "threads" per rank, "config" and "reference_config"
///           (parallelism configs: "dp_bucket_mb", MiB, default rtx-train's 25), "shape" {"B",
///           "T","L","C","NH","V"}, "case" (id), "self_exe" (default this program) -- mpirun
///           (this build's MPIEXEC) starts `ranks` copies of self_exe `__trial` ("dp_rank" parts) in a fresh folder under $TMPDIR with a
///           seeded synthetic 65-character corpus; each runs models::train: 2 steps under the
///           reference bucket size and 2 under the arm's (the weights compared with
///           output_parity, fp32 bound 1e-6: "max_rel_err", "ok"), then warmup + samples
///           timed steps (one sample = one data-parallel step, s); "comm_s" and
///           "exposed_comm_s" are the all-reduce seconds and those not hidden by the backward.
///           rtx::Error(Environment) when the build has no MPI launcher or mpirun fails
///           (its stderr's tail in the message);
/// Result: {"schema", "cases": [{"id", "samples" (s), "checksum" (hex), "max_rel_err",
/// "tolerance", "ok", "detail"}], "peak_rss_bytes", and for alloc "peak_reserved_bytes",
/// "peak_allocated_bytes", "frag_pct"}, and "host" for the timed kinds: the host-contention
/// evidence of the part's measuring window judged by rtx-bench's per-window rule
/// (measure::contention_evidence: PSI cpu stall > 10%, measuring-thread CPU share < 80%,
/// > 100 involuntary switches/s; a window under 0.05 s is not judged, judged_on "none"), written
/// as rtx-bench writes a case's "host" object (measure::to_json). The window is the timed
/// loop for kernels (when shorter than 0.05 s, the verdict of the part's whole run, judged_on
/// "run", measure::inherit_run_contention) and the part's whole run for serve, alloc, fusion
/// and dp; the CPU-share rule
/// applies to kernels, alloc and fusion (serve and dp wait on workers and ranks by design);
/// canary and dp_rank parts carry none. `sampler` reads the signals (default
/// measure::sample_host; tests inject readings). Throws rtx::Error(Input) for a malformed spec.
nlohmann::json run_trial(const nlohmann::json& spec, const std::function<measure::HostSample()>& sampler = nullptr);

/// The host evidence of one part of a trial result (`part["host"]`), validated; nullopt when the
/// part has none (a canary part, or a child of a build before host evidence). Throws
/// rtx::Error(Input) naming `source` and the field (`<pointer>/host/<field>`) for a wrong type or
/// range (measure::host_evidence_from_json's checks), a missing window_s, merged-round fields
/// (a trial window is one process), or a contended window without a reason or not judged.
std::optional<measure::HostEvidence> trial_host_evidence(const nlohmann::json& part, const std::string& source,
                                                            const std::string& pointer);

/// AllocatorConfig <-> JSON ({"caching", "round_bytes", "small_limit", "small_segment_bytes",
/// "large_round_bytes", "pool_limit_bytes"}); from_json: missing keys keep defaults, unknown
/// keys or wrong types are rtx::Error(Input) naming `where` and the key.
nlohmann::json allocator_config_json(const AllocatorConfig& c);
AllocatorConfig allocator_config_from_json(const nlohmann::json& j, const std::string& where);

/// The fusion domain's configuration: {"attention": "fused" | "unfused"} -- fused runs
/// FlashAttention (Dao et al. 2022: tiled, online softmax, scores never stored), unfused the
/// naive three-pass attention (each head's (T,T) scores, softmax, then x V). Returns true for
/// fused. A missing "attention" keeps the default (fused); another value, an unknown knob or a
/// non-object is rtx::Error(Input) naming `where` and the knob.
bool fusion_attention_fused(const nlohmann::json& config, const std::string& where);
/// The built-in fusion configuration: {"attention": "fused"}.
nlohmann::json fusion_default_config();

}  // namespace rtx::evolve
