// The measuring engine (rtx::measure, below tune and evolve): bench packs (rtx.benchpack.v1),
// their expansion over the op registry, and the runner's option rules.
#pragma once
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>
#include <utility>

#include <nlohmann/json.hpp>

#include "rtx/core/error.hpp"
#include "rtx/kernels/registry.hpp"
#include "rtx/stats/compare.hpp"
#include "rtx/stats/stats.hpp"
#include "rtx/telemetry/hwprofile.hpp"


namespace rtx::measure {

using kernels::Backend;
using kernels::Params;
using kernels::Shape;

inline constexpr const char* kPackSchema = "rtx.benchpack.v1";
inline constexpr const char* kBenchSchema = "rtx.bench.v1";

// ---- bench packs -------------------------------------------------------------------------

/// One case as written in a pack, with the pack's defaults applied. Shapes stay as JSON
/// (objects, "M=..,N=.." or "AxBxC" strings) until expansion knows the op's dims.
struct PackCase {
  std::string name;                   ///< unique within the pack
  std::string op;                     ///< registry op name
  std::string variant = "default";    ///< "default" (first variant of the backend), "all", or a name
  std::vector<nlohmann::json> shapes; ///< each an object or a string (sweeps already expanded)
  std::vector<DType> dtypes{DType::F32};
  Params params;                      ///< overrides of the variant's resolved parameters
  std::vector<Backend> backends;      ///< backends this case is for; empty = any
};

/// Runner settings a pack may set in its "defaults" block (CLI flags override them);
/// parse_pack checks them with runner_option_problem, the rule the CLI flags follow.
struct PackRunDefaults {
  std::optional<double> max_time, max_rel_ci;
  std::optional<size_t> min_samples, max_samples, warmup;
  std::optional<size_t> rounds;  ///< processes per run (`run --rounds`), [1, 200]
};

/// A parsed pack.
struct Pack {
  std::string source;       ///< file it came from (for messages)
  std::string name, description;
  PackRunDefaults run;
  std::vector<PackCase> cases;
};

/// Parse a pack document. Throws rtx::Error(Input) naming `source`, the case and the field
/// ("smoke.json: case 'mm': field 'shapes[1]': dimension \"K\" is -3, must be >= 0"), for a
/// wrong schema, unknown fields, a wrong type at any field, bad dtypes/backends, negative
/// dims or integers outside int64, bad sweeps, 'dtype' with 'dtypes' (or 'shape' with
/// 'shapes'), empty names, names with control characters (< 0x20, 0x7f) or '/', duplicate
/// case names (naming both), runner defaults out of range. Format: docs/bench_packs.md.
Pack parse_pack(const nlohmann::json& doc, const std::string& source);
/// Largest pack file load_pack reads (a pack is a few KiB of JSON).
inline constexpr uint64_t kMaxPackBytes = uint64_t{64} << 20;
/// Read and parse a pack file ("-" = stdin); errors as parse_pack, plus rtx::Error(Input)
/// naming the path for an empty path, a missing, unreadable (any read error) or invalid JSON
/// file, a file that is not a regular file (/dev/zero, a FIFO: refused without reading) and
/// input larger than kMaxPackBytes (64 MiB).
Pack load_pack(const std::string& path);

/// One runnable (or skipped) benchmark: a pack case at one variant, shape and dtype.
struct BenchCase {
  std::string id;           ///< "<case>/<variant>/<shape>/<dtype>", unique; compare keys on it
  std::string name, op, variant;
  Backend backend = Backend::CPU;
  Shape shape;
  DType dtype = DType::F32;
  Params params;            ///< resolved (tuned profile or defaults) with pack overrides
  std::string skip_reason;  ///< "" when runnable; else why it is not run (recorded)
};

/// The registry of everything benchable, built once on first use: the kernels
/// (kernels::registry()), the model-level macro ops (models::register_model_ops: today
/// "gpt2_train_step", a whole GPT-2 training step) and the distributed ones
/// (dist::register_dist_ops: allreduce over the world communicator, benchpacks/dist.json).
/// What rtx-bench, rtx-tune and rtx-evolve expand packs against.
const kernels::Registry& registry();

/// How a pack is expanded.
struct ExpandOptions {
  Backend backend = Backend::CPU;
  std::string filter;       ///< ECMAScript regex searched in each case id; "" keeps all
  bool strict = false;      ///< unknown ops and bad shapes are errors instead of skips
  /// Working-set limit in bytes for kernels::shape_problem; nullopt: host_memory_bytes()/4.
  std::optional<double> max_bytes;
  /// Tuned parameters of the cases (a profile's tune::param_lookup); empty: the variants' defaults.
  kernels::ParamLookup lookup;
};

/// Longest --filter pattern accepted (std::regex recursion would overflow the stack on
/// a pattern of thousands of nested groups).
inline constexpr size_t kMaxFilterLength = 1000;

/// Expand every pack case over variants x shapes x dtypes for one backend. Invalid
/// (op, variant, shape, dtype, params) combinations become skipped cases carrying the
/// reason (kernels::shape_problem's text against o.max_bytes, validate()'s text, missing
/// backend variant, unsupported dtype, unregistered op). With o.strict an unregistered op
/// or a bad shape is instead an rtx::Error(Input) naming pack, case and field. Always
/// rtx::Error(Input) for an unknown variant of a registered op on the selected backend or
/// an unparseable shape string; rtx::Error(Usage) for a bad or over-long filter regex.
std::vector<BenchCase> expand_pack(const Pack& pack, const kernels::Registry& reg, const ExpandOptions& o);

// ---- runner --------------------------------------------------------------------------------

/// Why `value` is out of range for runner option `key` ("" when it is fine). Keys and
/// ranges (the CLI flags and the pack's "defaults" share them): warmup integer in [0, 1e6];
/// min_samples integer in [1, 1e7]; max_samples integer in [1, 1e9]; max_time finite in
/// (0, 86400] s; max_rel_ci finite in (0, 1]; rounds integer in [1, 200]; threads integer in [0, 4 x logical CPUs].
/// Throws rtx::Error(Internal) for an unknown key.
std::string runner_option_problem(const std::string& key, double value);

/// Parse a --seed value: a decimal integer in [0, 2^64-1] (no sign, no exponent).
/// Throws rtx::Error(Usage) naming --seed otherwise.
uint64_t parse_seed(const std::string& text);

}  // namespace rtx::measure
