// rtx::evolve pipeline: validate a proposal (interleaved A/B trials in the sandbox, gates
// recorded), the `run` loop (propose -> validate -> approve -> promote under budgets), status,
// submit, and the report (markdown / text / JSON). The tool only binds flags to these.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtx/evolve/canary.hpp"
#include "rtx/evolve/gates.hpp"
#include "rtx/evolve/proposal.hpp"
#include "rtx/evolve/proposers.hpp"
#include "rtx/evolve/sandbox.hpp"
#include "rtx/store/store.hpp"

namespace rtx::evolve {

/// How a proposal is validated.
struct ValidateOptions {
  std::string self_exe = "/proc/self/exe";  ///< the rtx-evolve binary (runs `__trial`)
  size_t rounds = 4;          ///< A/B pairs (A B A B ...), each arm a fresh sandboxed process
  size_t samples = 11;        ///< samples per case per process
  size_t warmup = 1;
  uint64_t seed = 0;
  std::string model_path;     ///< serving model for the scheduler domain
  SandboxOptions sandbox;
  std::map<std::string, PerfRule> rules;  ///< per domain; default_rule() when absent
  /// Serving domain: after every other gate passed, a canary through rtx-serve's canary lane
  /// (evolve/canary.hpp) for `canary_seconds` at `canary_concurrency` clients.
  bool canary = true;
  double canary_seconds = 4;
  int canary_concurrency = 8;
  CanaryRule canary_rule;
  std::ostream* log = nullptr;
};

/// Thrown by validate() when o.sandbox.cancel stopped it (the proposal is "interrupted").
struct ValidationInterrupted : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The outcome of validating one proposal.
struct Validation {
  bool passed = false;
  std::vector<GateResult> gates;
  nlohmann::json summary = nlohmann::json::object();  ///< stored as the envelope's validation
};

/// Validate a stored proposal: status "validating"; safety pre-check (complete, signature
/// verifies); interleaved A/B trials of baseline and candidate in the sandbox (affected and
/// held-out workloads); a borderline performance result re-measured once with as many rounds
/// again; gates recorded in gate_results; status "passed" or "failed". A crash or timeout of a
/// trial is a failed safety gate, never an exception. When o.sandbox.cancel says stop (Ctrl-C),
/// the running trial is killed, the proposal's status becomes "interrupted" (no gate recorded:
/// a partial A/B decides nothing) and ValidationInterrupted is thrown.
Validation validate(store::Store& st, int64_t proposal_id, const KeyPair& key, const ValidateOptions& o,
                    int64_t run_id);

/// One line for a proposal's actions ("threads 2 -> 1, ..."), or its candidate JSON when it has none.
std::string change_text(const Proposal& p);
/// A proposal's gates as report rows: gate, passed, metric, value, threshold, reason, detail.
nlohmann::json gates_json(store::Store& st, int64_t proposal_id);
/// True for a failed performance or held-out gate that reached no verdict (detail.undecided):
/// a performance CI that straddled the threshold after re-measuring, or too few rounds for a
/// 95% CI at all (detail.too_few_rounds, either gate).
bool gate_undecided(const std::string& gate, bool passed, const nlohmann::json& detail);
/// True when gate rows (gates_json's shape) failed only on undecided gates (gate_undecided),
/// i.e. the host's noise or the run's --rounds decided, not the change; false when nothing
/// failed or another gate failed. Such a failure is reported as "undecided" and does not stop
/// a later run proposing it again (failed_before).
bool failed_undecided_only(const nlohmann::json& gates);
/// The word a report shows for a gate row (gates_json's shape: "gate", "passed", "detail"; or
/// the report's, with a boolean "undecided" instead of "detail"): "pass", "undecided" (failed
/// without a verdict, gate_undecided) or "FAIL".
std::string gate_verdict(const nlohmann::json& gate_row);
/// A gate's recorded value with its unit, for reports: "time new/base CI hi 0.880", "1.2e+06 B",
/// "3e-07 rel err", "0 failures", "p99 41.2 ms"; a gate with too few rounds for a CI:
/// "-45.0% estimate, no CI (too few rounds)".
std::string gate_value_text(const nlohmann::json& gate_row);
/// A change 1 - t_c/t_b as a plain speedup t_b/t_c = 1/(1 - improvement): "1.25x faster
/// [1.18, 1.33]", "2.09x slower [1.82, 2.44]" (the interval, from the improvement's 95% CI
/// `ci_lo`, `ci_hi`, in the headline's unit); "" when `improvement` is not a number. The one
/// place rtx-evolve's report, status and run lines format a change's number.
std::string speedup_text(const nlohmann::json& improvement, const nlohmann::json& ci_lo, const nlohmann::json& ci_hi);
/// speedup_text of the last "performance" row of a proposal's gate rows (detail.improvement,
/// detail.ci); "" when there is none.
std::string gates_speedup_text(const nlohmann::json& gates);
/// A proposal as a report row: id, domain, key, change, why, status, gates, deployments
/// (evolve_deployments), and the rollback / approve command that applies to its status.
nlohmann::json proposal_row(store::Store& st, const Proposal& p);

/// `rtx-evolve run`.
struct RunOptions {
  std::string pack = "benchpacks/core.json";
  /// Case-id regex of the subset (default: four small f32 ops, ~1 s of measurement each).
  std::string filter =
      "^(matmul_fwd_small/cpu\\.blocked/K=128,M=256,N=(384|65)|(gelu_fwd_small|softmax_attn_small|layernorm_fwd_small)/.*)/f32$";
  std::vector<std::string> domains;   ///< empty: all five
  size_t budget = 6;                  ///< most proposals validated in this run
  size_t budget_per_domain = 2;
  size_t explore_evals = 4;
  int dp_ranks = 0;                   ///< --dp-ranks: data-parallel ranks for the bucket-size proposals (0: off)
  double time_budget_s = 480;         ///< no new proposal is validated after this many seconds of the run
  bool auto_approve = false;          ///< --auto-approve-if-gates-pass (recorded as "auto-policy")
  std::string actor;                  ///< who approves/promotes ($USER by default)
  std::string key_path;               ///< "" : default_key_path(db)
  ValidateOptions v;
};

/// Run the loop; progress on `err`. Returns the rtx.report.v1 document of this run:
/// {"schema", "run_id", "sku", "proposals": [{"id", "domain", "key", "change", "status",
/// "gates": [...], "promoted", "rollback"}], "summary": {"proposed", "passed", "failed",
/// "promoted", "skipped_known_failures"}, "notes": [...]}. Ctrl-C (o.v.sandbox.cancel true): no
/// new proposal starts, the one validating is killed and marked "interrupted" (the next run
/// proposes it again: only "failed" ones are skipped), the report has "interrupted": true and
/// the run is recorded as "interrupted". Every store write is one transaction.
nlohmann::json run_loop(store::Store& st, const RunOptions& o, std::ostream& err);

/// The proposals (newest first, at most `limit`) with their gates and deployments, as a report
/// document of the same shape as run_loop's.
nlohmann::json status_report(store::Store& st, size_t limit);

/// Render a report document: "md" (markdown for CI logs), "text", "json"; text and md list
/// promoted, waiting, approved-not-promoted, failed and undecided proposals apart. Throws
/// rtx::Error(Usage) for another format.
std::string format_report(const nlohmann::json& report, const std::string& format);

/// Accept an external proposal (an rtx.proposal.v1 document): checked by from_json, its
/// provenance completed, re-keyed to this host's SKU check (a config key must end with this
/// SKU: rtx::Error(Input)), signed with `key`, stored as "new". Returns the new id.
int64_t submit(store::Store& st, const nlohmann::json& doc, const std::string& source, const KeyPair& key,
               const kernels::Registry& reg);

}  // namespace rtx::evolve
