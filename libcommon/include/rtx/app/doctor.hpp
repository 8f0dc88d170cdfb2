// rtx-doctor logic: is this machine fit to measure? Host, store and GPU checks (PASS/WARN/FAIL
// with a fix hint each) plus short performance probes (STREAM triad, SGEMM, GPU copy, bf16 GEMM)
// against theoretical or datasheet peaks. The tool's main only binds flags and calls run().
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace rtx::store {
class Store;
}

namespace rtx::app::doctor {

/// Schema tag of the doctor report.
inline constexpr const char* kSchema = "rtx.doctor.v1";

/// Outcome of one check. Fail makes the tool exit 1; Warn is informative.
enum class Status { Pass, Warn, Fail };
/// "PASS", "WARN", "FAIL".
const char* status_name(Status s) noexcept;

/// One check line: `name` is dotted ("host.openmp", "gpu0.ecc"); `group` "Host", "Store", "GPU"
/// or "Probes"; `value` a number or string (null when none) in `unit` ("B", "B/s", "FLOP/s",
/// "threads", "" ...); `hint` is the one-line fix (may be empty on PASS).
struct Check {
  std::string group, name;
  Status status = Status::Pass;
  std::string detail, hint;
  nlohmann::json value = nullptr;
  std::string unit;
};

/// What run() does.
struct DoctorOptions {
  bool quick = false;               ///< skip the performance probes
  std::string db;                   ///< store path (--db); empty: $RTX_HOME/rtx.db
  bool save = true;                 ///< store the report (put_doctor_report) for rtx-bench
  uint64_t seed = 0;                ///< recorded in the run row
  std::vector<std::string> args;    ///< command line, recorded in the run row
  bool progress = false;            ///< print "probing ..." lines on stderr
  // Probe sizes (defaults per the issue; tests shrink them).
  uint64_t stream_bytes_per_array = 0;  ///< 0: max(4 x L3, 64 MiB) capped at 1 GiB and at 1/8 of RAM
  int stream_repeats = 5;               ///< best of N triad passes
  int gemm_n = 2048;                    ///< SGEMM M=N=K
  int gemm_repeats = 3;                 ///< best of N (after one warm-up)
  double probe_budget_s = 3.0;          ///< per host probe: stop repeating once this much time is spent
};

/// The report: hardware profile, checks, probe results. to_json() is the rtx.doctor.v1 document:
///   {"schema", "rtx_version", "rtx_sha", "created_at" (UTC ISO-8601), "quick", "hardware" (profile),
///    "checks": [{"group","name","status","detail","hint","value","unit"}],
///    "summary": {"pass","warn","fail"}, "probes": {...}, "exit_code"}.
struct DoctorReport {
  nlohmann::json hardware;
  std::vector<Check> checks;
  nlohmann::json probes = nlohmann::json::object();
  std::string created_at;
  bool quick = false;
  /// 1 when any check failed, else 0.
  int exit_code() const;
  int count(Status s) const;
  nlohmann::json to_json() const;
  /// flutter-doctor style text: one "[PASS] name  detail" line per check, hints under WARN/FAIL,
  /// ANSI colour when `color`.
  std::string render_text(bool color) const;
};

/// Run the checks (and the probes unless opts.quick), store the report when opts.save.
/// Throws rtx::Error from the store: Environment (exit 3) when the store cannot be created or
/// written (unwritable RTX_HOME), Input (exit 2) when rtx.db is not a valid store. Every other
/// problem (no GPU, no driver, missing library) is a WARN or FAIL check, never an exception.
DoctorReport run(const DoctorOptions& opts);

/// Measured peaks from a doctor report, for rtx-bench's roofline fractions. 0 = not measured.
struct MeasuredPeaks {
  double cpu_stream_bytes_per_s = 0;   ///< STREAM triad, B/s (24 B per element)
  double cpu_sgemm_flops = 0;          ///< cblas_sgemm, FLOP/s
  double cpu_peak_fp32_flops = 0;      ///< theoretical (hwprofile.hpp formula)
  double gpu_copy_bytes_per_s = 0;     ///< device 0 D2D copy, read+write B/s
  double gpu_bf16_flops = 0;           ///< device 0 cublasGemmEx bf16 -> fp32 accumulate, FLOP/s
  double gpu_datasheet_bf16_flops = 0; ///< vendor datasheet dense bf16, FLOP/s (0 unknown GPU)
  double gpu_datasheet_bytes_per_s = 0;///< vendor datasheet HBM/GDDR bandwidth, B/s
  std::string hw_digest;               ///< hardware digest (telemetry::digest) when measured
  std::string hw_key;                  ///< CPU SKU key + "|" + each GPU's SKU key: the machine identity
  std::string measured_at;             ///< report created_at
};

/// Peaks recorded in a doctor report JSON (rtx.doctor.v1); nullopt when it holds none (a --quick
/// report with nothing carried over). Throws rtx::Error(Input) when `report` is not rtx.doctor.v1.
std::optional<MeasuredPeaks> measured_peaks_from_report(const nlohmann::json& report);
/// Peaks of the latest stored doctor report, only when it was measured on this machine (same
/// hw_key: CPU and GPU SKU keys, so a rebuild of rtx keeps them); nullopt otherwise, with the
/// reason in `*why` when given (no report stored; the latest ran with --quick and had no peaks to
/// carry over; it was measured on another machine), each ending in what to run. Store errors
/// propagate as rtx::Error.
std::optional<MeasuredPeaks> latest_measured_peaks(rtx::store::Store& store, std::string* why = nullptr);

/// Vendor datasheet peaks of a GPU model, matched by name ("H100 SXM", "H100 PCIe", "H200",
/// "A100", "L40S", "RTX 4090"): dense bf16 tensor FLOP/s (fp32 accumulate) and memory B/s.
struct GpuDatasheet {
  std::string model;
  double bf16_flops = 0, mem_bytes_per_s = 0;
};
/// nullopt for a GPU not in the table.
std::optional<GpuDatasheet> gpu_datasheet(const std::string& gpu_name, uint64_t memory_bytes = 0);

/// STREAM triad a[i] = b[i] + s*c[i] on float64 arrays of `n` elements with OpenMP (first touch
/// in parallel), best of `repeats`; returns B/s counting 24 B per element (McCalpin's STREAM
/// convention: no write-allocate traffic). Stops repeating early once the timed passes have
/// taken `budget_s` seconds (0: no limit; at least one pass always runs). Throws
/// rtx::Error(Environment) if allocation fails, rtx::Error(Usage) for n == 0 or repeats < 1.
/// Also checks the result (max |a - (b + s c)| == 0).
double stream_triad_bytes_per_s(uint64_t n, int repeats, double budget_s = 0);
/// cblas_sgemm C = A B with M=N=K=`n` (row-major), best of `repeats` after a warm-up;
/// returns FLOP/s counting 2 n^3; stops repeating early after `budget_s` seconds (0: no limit).
/// Spot-checks one element against float64. Throws rtx::Error(Usage) for n < 1 or repeats < 1.
double sgemm_flops(int n, int repeats, double budget_s = 0);

}  // namespace rtx::app::doctor
