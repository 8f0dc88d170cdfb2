// rtx::evolve MCP server (`rtx-evolve mcp`): JSON-RPC 2.0 framing, the MCP 2025-06-18 lifecycle
// and the five tools over the store. The tools call the same rtx::evolve functions the CLI does.
#include "rtx/evolve/mcp.hpp"

#include <algorithm>
#include <cstdint>
#include <istream>
#include <ostream>
#include <streambuf>
#include <string_view>
#include <utility>

#include "rtx/measure/measure.hpp"
#include "rtx/core/build_info.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/printable.hpp"
#include "rtx/evolve/deploy.hpp"
#include "rtx/evolve/kg.hpp"
#include "rtx/evolve/proposers.hpp"
#include "rtx/io/artifact.hpp"
#include "rtx/kernels/registry.hpp"
#include "rtx/telemetry/hwprofile.hpp"
#include "rtx/tune/records.hpp"

namespace rtx::evolve {

using nlohmann::json;

const std::vector<std::string>& mcp_supported_versions() {
  static const std::vector<std::string> v{kMcpProtocolVersion, "2025-03-26", "2024-11-05"};
  return v;
}

bool mcp_has_structured_output(const std::string& version) { return version >= "2025-06-18"; }

bool mcp_accepts_batches(const std::string& version) { return version == "2025-03-26"; }

// ---- argument checking (the JSON Schema subset the tool schemas use) --------------------------

namespace {

std::string type_of(const json& v) { return io::json_type_name(v); }

/// JSON Schema's "type" keyword (io::json_type_matches: an integer is any number with a zero
/// fractional part), plus the tool bodies' own bound: an "integer" must fit int64.
bool has_type(const json& v, const std::string& t) {
  const auto type = io::json_schema_type(t);
  if (!type) throw_internal("unknown JSON Schema type '" + t + "'", "mcp tool schema");
  if (!io::json_type_matches(v, *type)) return false;
  if (*type == io::JsonType::Integer && v.is_number_float()) {
    const double d = v.get<double>();
    return d > -9.2e18 && d < 9.2e18;
  }
  return true;
}

std::string label(const std::string& where) { return where.empty() ? "arguments" : "argument '" + where + "'"; }

}  // namespace

std::string mcp_schema_problem(const json& schema, const json& value, const std::string& where) {
  if (schema.contains("type")) {
    const json& t = schema["type"];
    bool ok = false;
    std::string names;
    for (const json& one : t.is_array() ? t : json::array({t})) {
      ok = ok || has_type(value, one.get<std::string>());
      names += (names.empty() ? "" : " or ") + one.get<std::string>();
    }
    if (!ok) return label(where) + ": expected " + names + ", got " + type_of(value);
    // 18446744073709551615 parses as an unsigned integer: tool bodies read int64.
    if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      return label(where) + ": " + value.dump() + " is outside the signed 64-bit integer range";
  }
  if (schema.contains("enum")) {
    const json& e = schema["enum"];
    if (std::find(e.begin(), e.end(), value) == e.end()) return label(where) + ": " + value.dump() + " is not one of " + e.dump();
  }
  if (value.is_number()) {
    const double x = value.get<double>();
    if (schema.contains("minimum") && x < schema["minimum"].get<double>())
      return label(where) + ": " + value.dump() + " is below the minimum " + schema["minimum"].dump();
    if (schema.contains("maximum") && x > schema["maximum"].get<double>())
      return label(where) + ": " + value.dump() + " is above the maximum " + schema["maximum"].dump();
  }
  if (value.is_object()) {
    for (const json& r : schema.value("required", json::array()))
      if (!value.contains(r.get<std::string>()))
        return "missing required argument '" + (where.empty() ? "" : where + ".") + r.get<std::string>() + "'";
    // JSON Schema 2020-12 "dependentRequired": {"a": ["b"]} -- when a is present, b must be too.
    const json deps = schema.value("dependentRequired", json::object());  // items() must not outlive it
    for (const auto& [k, needs] : deps.items()) {
      if (!value.contains(k)) continue;
      for (const json& r : needs)
        if (!value.contains(r.get<std::string>())) {
          const std::string pre = where.empty() ? "" : where + ".";
          return "argument '" + pre + k + "' requires argument '" + pre + r.get<std::string>() + "' (missing)";
        }
    }
    const json props = schema.value("properties", json::object());
    for (const auto& [k, v] : value.items()) {
      const std::string path = where.empty() ? k : where + "." + k;
      if (props.contains(k)) {
        if (std::string why = mcp_schema_problem(props[k], v, path); !why.empty()) return why;
      } else if (schema.contains("additionalProperties") && schema["additionalProperties"] == false) {
        return "unknown argument '" + path + "' (known: " + [&] {
          std::string s;
          for (const auto& [name, unused] : props.items()) s += (s.empty() ? "" : ", ") + name;
          return s;
        }() + ")";
      }
    }
  }
  if (value.is_array() && schema.contains("items"))
    for (size_t i = 0; i < value.size(); ++i)
      if (std::string why = mcp_schema_problem(schema["items"], value[i], where + "[" + std::to_string(i) + "]"); !why.empty())
        return why;
  if (schema.contains("anyOf")) {
    std::string all;
    for (const json& sub : schema["anyOf"]) {
      const std::string why = mcp_schema_problem(sub, value, where);
      if (why.empty()) return "";
      all += (all.empty() ? "" : ", or ") + why;
    }
    return all;
  }
  return "";
}

// ---- tool definitions -----------------------------------------------------------------------

namespace {

json str_prop(const std::string& d) { return {{"type", "string"}, {"description", d}}; }
json obj_schema(json props, json required) {
  return {{"type", "object"}, {"properties", std::move(props)}, {"required", std::move(required)}, {"additionalProperties", false}};
}
/// Output schemas describe the structuredContent (required fields only; more may be present).
json out_schema(json props, json required) {
  return {{"type", "object"}, {"properties", std::move(props)}, {"required", std::move(required)}};
}

json make_tool_definitions() {
  const json gate_row = {{"type", "object"},
                         {"properties",
                          {{"gate", {{"type", "string"}}},
                           {"passed", {{"type", "boolean"}}},
                           {"metric", {{"type", "string"}}},
                           {"value", {{"type", "number"}}},
                           {"threshold", {{"type", "number"}}},
                           {"reason", {{"type", "string"}}},
                           {"detail", {{"type", "object"}}}}},
                         {"required", {"gate", "passed", "metric", "value", "threshold"}}};
  json tools = json::array();
  tools.push_back(
      {{"name", "list_benchmarks"},
       {"title", "List bench cases"},
       {"description",
        "The cases of an rtx bench pack (rtx.benchpack.v1) expanded over the op registry for the CPU backend: id, op, "
        "variant, shape, dtype, resolved kernel params, and why a case is skipped. Default pack: benchpacks/core.json "
        "(relative to the server's working directory, as `rtx-evolve run --pack`)."},
       {"inputSchema", obj_schema({{"pack", str_prop("Bench pack file (default benchpacks/core.json)")},
                                   {"filter", str_prop("ECMAScript regex searched in each case id (default: all cases)")}},
                                  json::array())},
       {"outputSchema",
        out_schema({{"pack", {{"type", "string"}}},
                    {"name", {{"type", "string"}}},
                    {"runnable", {{"type", "integer"}}},
                    {"skipped", {{"type", "integer"}}},
                    {"cases",
                     {{"type", "array"},
                      {"items",
                       {{"type", "object"},
                        {"properties",
                         {{"id", {{"type", "string"}}},
                          {"op", {{"type", "string"}}},
                          {"variant", {{"type", "string"}}},
                          {"shape", {{"type", "object"}}},
                          {"dtype", {{"type", "string"}}},
                          {"params", {{"type", "object"}}},
                          {"runnable", {{"type", "boolean"}}},
                          {"skip_reason", {{"type", "string"}}}}},
                        {"required", {"id", "op", "variant", "shape", "dtype", "runnable", "skip_reason"}}}}}}},
                   {"pack", "cases", "runnable", "skipped"})}});
  json baseline_in = obj_schema(
      {{"case", str_prop("Bench case id '<case>/<variant>/<shape>/<dtype>' (as list_benchmarks gives): its latest "
                         "recorded bench result and the current kernel profile of its key on this host")},
       {"key", str_prop("Profile key 'op|variant|shape|dtype|backend|sku' or config key '<domain>|<sku>' (domain "
                        "parallelism, scheduler or memory): the configuration in force")},
       {"include_contended",
        {{"type", "boolean"},
         {"default", false},
         {"description", "Only with case: also consider results measured on a busy host (contended); default false "
                         "skips them and counts them in contended_skipped. A key's profile or configuration is not a "
                         "measurement, so include_contended without case is refused (-32602)"}}}},
      json::array());
  baseline_in["anyOf"] = json::array({{{"required", {"case"}}}, {{"required", {"key"}}}});
  baseline_in["dependentRequired"] = {{"include_contended", {"case"}}};
  tools.push_back(
      {{"name", "get_baseline"},
       {"title", "Current baseline"},
       {"description",
        "What a proposal would be judged against: for a key, the current profile or configuration (promoted version, "
        "or the built-in defaults); for a bench case, the latest bench result recorded in the store (median and 95% CI "
        "in seconds, sample count, when, run id, contended) and the current profile of its key. Results measured on a "
        "busy host (host contended) are skipped unless include_contended is true; contended_skipped says how many "
        "newer ones were. Give case, key or both."},
       {"inputSchema", baseline_in},
       {"outputSchema",
        out_schema({{"sku", {{"type", "string"}}},
                    {"key", {{"type", "object"}}},
                    {"case",
                     {{"type", "object"},
                      {"properties",
                       {{"case", {{"type", "string"}}},
                        {"results_recorded", {{"type", "integer"}}},
                        {"contended_recorded", {{"type", "integer"}}},
                        {"contended_skipped", {{"type", "integer"}}},
                        {"include_contended", {{"type", "boolean"}}},
                        {"latest",
                         {{"type", {"object", "null"}},
                          {"properties",
                           {{"median_s", {{"type", {"number", "null"}}}},
                            {"n", {{"type", "integer"}}},
                            {"contended", {{"type", "boolean"}}},
                            {"contention_reason", {{"type", "string"}}}}}}},
                        {"note", {{"type", "string"}}}}},
                      {"required",
                       {"case", "results_recorded", "contended_recorded", "contended_skipped", "include_contended", "latest"}}}}},
                   {"sku"})}});
  tools.push_back(
      {{"name", "submit_proposal"},
       {"title", "Submit a proposal"},
       {"description",
        "Submit an rtx.proposal.v1 document (at least schema, domain, target, key, plan (with workload for config "
        "domains), actions (may be empty) and changeset.candidate; see docs/evolution.md). It is checked, re-based on "
        "what is current on this host, signed with the store's Ed25519 key and stored with status 'new'. With validate: "
        "true it is then validated like `rtx-evolve submit` (sandboxed interleaved A/B trials and gates; takes minutes) "
        "and the status becomes 'passed' or 'failed'. A malformed proposal is an error result naming the field."},
       {"inputSchema",
        obj_schema({{"proposal", {{"type", "object"}, {"description", "The rtx.proposal.v1 document"}}},
                    {"validate",
                     {{"type", "boolean"}, {"default", false}, {"description", "Validate now (minutes); default false: store and sign only"}}},
                    {"rounds",
                     {{"type", "integer"}, {"minimum", 2}, {"maximum", 50}, {"description", "A/B pairs when validating (default: the server's, 4). Fewer than 4 give no 95% CI: the "
                                     "performance and heldout gates then record no CI (too_few_rounds) and cannot pass"}}}},
                   {"proposal"})},
       {"outputSchema", out_schema({{"id", {{"type", "integer"}}},
                                    {"status", {{"type", "string"}}},
                                    {"validated", {{"type", "boolean"}}},
                                    {"gates", {{"type", "array"}, {"items", gate_row}}},
                                    {"validation", {{"type", "object"}}},
                                    {"next", {{"type", "string"}}}},
                                   {"id", "status", "validated"})}});
  tools.push_back(
      {{"name", "proposal_status"},
       {"title", "Proposal status"},
       {"description",
        "A proposal's status (new, validating, passed, failed, approved, promoted, superseded, rolled_back, "
        "interrupted), every gate with its metric, value and threshold, its deployments, and the command to approve "
        "or roll it back, as `rtx-evolve status` shows them."},
       {"inputSchema", obj_schema({{"id", {{"type", "integer"}, {"minimum", 1}, {"description", "Proposal id"}}}}, {"id"})},
       {"outputSchema", out_schema({{"id", {{"type", "integer"}}},
                                    {"domain", {{"type", "string"}}},
                                    {"key", {{"type", "string"}}},
                                    {"status", {{"type", "string"}}},
                                    {"change", {{"type", "string"}}},
                                    {"gates", {{"type", "array"}, {"items", gate_row}}},
                                    {"deployments", {{"type", "array"}}},
                                    {"rollback", {{"type", "string"}}},
                                    {"approve", {{"type", "string"}}}},
                                   {"id", "domain", "key", "status", "gates", "deployments", "rollback", "approve"})}});
  tools.push_back(
      {{"name", "query_knowledge"},
       {"title", "Query the knowledge graph"},
       {"description",
        "Ask the knowledge graph one of three questions, with optional filters: 'improved' (what improved an op on an "
        "SKU: proposals whose performance gate passed, with the improvement CI), 'hurt-determinism' (changes whose "
        "determinism gate failed), 'failed' (what failed which gate and why). Newest first."},
       {"inputSchema",
        obj_schema({{"question", {{"type", "string"}, {"enum", {"improved", "hurt-determinism", "failed"}}, {"description", "The question"}}},
                    {"op", str_prop("Only this op (e.g. matmul_forward)")},
                    {"sku", str_prop("Only this hardware SKU")},
                    {"gate", str_prop("Only this gate (failed: safety, determinism, performance, heldout, memory)")},
                    {"domain", str_prop("Only this domain (tuner, parallelism, scheduler, memory)")},
                    {"limit", {{"type", "integer"}, {"minimum", 1}, {"maximum", 10000}, {"description", "Most rows (default 50)"}}}},
                   {"question"})},
       {"outputSchema", out_schema({{"question", {{"type", "string"}}},
                                    {"filters", {{"type", "object"}}},
                                    {"rows", {{"type", "array"}, {"items", {{"type", "object"}}}}}},
                                   {"question", "rows"})}});
  return tools;
}

// ---- JSON-RPC framing ---------------------------------------------------------------------------

/// A protocol-level failure: becomes a JSON-RPC error object.
struct RpcError {
  int code;
  std::string message;
};

json rpc_error(const json& id, int code, const std::string& message) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}};
}

std::string mib_text(size_t bytes) {
  return bytes % (size_t{1} << 20) == 0 ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes) + " bytes";
}

json too_long_error(size_t max_bytes) {
  return rpc_error(nullptr, kInvalidRequest,
                   "invalid request: message longer than " + mib_text(max_bytes) + "; it was skipped, send one message per line");
}

/// How deeply arrays and objects nest in `text` (brackets inside strings do not count), counted
/// up to `limit` + 1 at most: the parser's DOM of a 5 M-deep "[[[[" line would take ~400 MB.
size_t nesting_depth(const std::string& text, size_t limit) {
  size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) break;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

enum class LineRead { kLine, kTooLong, kEnd };

/// Read one line ('\n' dropped) of at most `max` bytes into `line`. A longer line is read on to
/// its end without being kept (kTooLong); kEnd at end of input with nothing read.
LineRead read_bounded_line(std::istream& in, std::string& line, size_t max) {
  line.clear();
  std::streambuf* sb = in.rdbuf();
  if (!sb) return LineRead::kEnd;
  using traits = std::char_traits<char>;
  bool any = false, too_long = false;
  for (;;) {
    const traits::int_type c = sb->sbumpc();
    if (traits::eq_int_type(c, traits::eof())) {
      in.setstate(std::ios::eofbit);
      if (!any) return LineRead::kEnd;
      break;
    }
    any = true;
    if (c == '\n') break;
    if (too_long) continue;
    if (line.size() >= max) {
      too_long = true;
      std::string().swap(line);
      continue;
    }
    line.push_back(traits::to_char_type(c));
  }
  return too_long ? LineRead::kTooLong : LineRead::kLine;
}

/// MCP request ids are strings or integers (never null).
bool valid_id(const json& id) { return id.is_string() || id.is_number_integer(); }

// ---- tool bodies --------------------------------------------------------------------------------

/// An argument the schema checked as "integer" (which admits 3.0).
int64_t as_int(const json& v) { return v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(v.get<double>()); }
json opt_json(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

/// The configuration in force for a profile or config key on this store.
json key_baseline(store::Store& st, const std::string& key) {
  const size_t bars = static_cast<size_t>(std::count(key.begin(), key.end(), '|'));
  std::string domain;
  if (bars == 5) {
    tune::TuneKey::parse(key);  // names the malformed field
    domain = "tuner";
  } else if (bars == 1) {
    domain = key.substr(0, key.find('|'));
    const auto& doms = known_domains();
    if (domain == "tuner" || std::find(doms.begin(), doms.end(), domain) == doms.end())
      throw_input("unknown config domain '" + domain + "' in key '" + key + "'", "arguments.key",
                  "a config key is '<domain>|<sku>' with domain parallelism, scheduler or memory");
  } else {
    throw_input("'" + key + "' is neither a profile key nor a config key", "arguments.key",
                "expected 'op|variant|shape|dtype|backend|sku' or '<domain>|<sku>'");
  }
  const auto cur = domain == "tuner" ? current_profile(st, key) : current_config(st, key);
  const json config = baseline_config(st, domain, key, measure::registry());
  return {{"key", key},
          {"domain", domain},
          {"target", target_of(domain)},
          {"version", cur ? json(cur->version) : json(nullptr)},
          {"source", cur ? (domain == "tuner" ? "promoted profile version " : "promoted config version ") + std::to_string(cur->version)
                         : std::string(domain == "tuner" ? "the variant's default params (no profile current)" : "built-in defaults (no config promoted)")},
          {"config", config}};
}

/// Rows that measured what runs here: rtx-bench results and validations' baseline arms, not the
/// candidate arms rtx-evolve records (params_json.rtx_evolve.arm, rtx/evolve/history.hpp).
/// A row whose params_json is not JSON (changed outside rtx) is not a candidate: json_extract
/// on it would fail the whole query with raw SQL; get_baseline then reports it as a tool error.
constexpr const char* kNotCandidate =
    "(CASE WHEN json_valid(b.params_json) THEN COALESCE(json_extract(b.params_json, '$.rtx_evolve.arm'), '') "
    "ELSE '' END) <> 'candidate'";

/// The latest bench_results row of a case id, and the profile in force for its key here. Rows
/// measured on a busy host (bench_results.contended) are skipped unless `include_contended`;
/// `contended_skipped` counts the skipped rows newer than the one returned.
json case_baseline(store::Store& st, const std::string& case_id, bool include_contended) {
  json out = {{"case", case_id}};
  auto& n = st.prepare(std::string("SELECT COUNT(*), COALESCE(SUM(b.contended), 0) FROM bench_results b "
                                   "WHERE b.case_name = ?1 AND ") + kNotCandidate);
  n.bind(1, case_id);
  n.step();
  out["results_recorded"] = n.column_int64(0);
  out["contended_recorded"] = n.column_int64(1);
  n.reset();
  out["include_contended"] = include_contended;
  auto& q = st.prepare(
      "SELECT b.run_id, b.op, b.variant, b.backend, b.shape, b.dtype, b.params_json, b.median_s, b.ci_lo_s, b.ci_hi_s, "
      "b.p10_s, b.p90_s, b.n, b.noisy, b.gflops, b.gbps, b.created_at, r.tool, r.hw_sku, r.git_sha, b.contended, "
      "b.contention_reason FROM bench_results b JOIN runs r ON r.id = b.run_id WHERE b.case_name = ?1 AND " +
      std::string(kNotCandidate) + " ORDER BY b.created_at DESC, b.id DESC");
  q.bind(1, case_id);
  int64_t skipped = 0;
  std::string skipped_reason;  // the newest skipped row's reason
  bool found = false;
  while (q.step()) {
    if (include_contended || q.column_int64(20) == 0) {
      found = true;
      break;
    }
    if (skipped++ == 0) skipped_reason = q.column_text(21);
  }
  out["contended_skipped"] = skipped;
  const std::string skipped_note =
      skipped == 0 ? std::string()
                   : "skipped " + std::to_string(skipped) + (found ? " newer" : "") + " busy-host result" + (skipped == 1 ? "" : "s") +
                         " (measured while the host was contended" +
                         (skipped_reason.empty() ? std::string() : ", e.g. " + skipped_reason) +
                         "; include_contended: true returns them)";
  if (!found) {
    q.reset();
    out["latest"] = nullptr;
    out["note"] = skipped > 0 ? "no bench result of case '" + case_id + "' in " + st.path() +
                                    " was measured on a quiet host: " + skipped_note +
                                    "; re-measure with rtx-bench run on an idle host"
                              : "no bench result recorded for case '" + case_id + "' in " + st.path() +
                                    "; record one with rtx-bench run (case ids as list_benchmarks gives them)";
    return out;
  }
  if (skipped > 0) out["note"] = skipped_note;
  const std::string op = q.column_text(1), variant = q.column_text(2), backend = q.column_text(3), shape = q.column_text(4),
                    dtype = q.column_text(5);
  json params = json::parse(q.column_text(6), nullptr, false);
  if (params.is_discarded()) {
    q.reset();
    throw_input("bench result of case '" + case_id + "' in " + st.path() + ": stored params_json is unreadable", st.path(),
                "the row was changed outside rtx");
  }
  std::string source = q.column_text(17);
  if (params.is_object() && params.contains("rtx_evolve")) {
    source = "evolve:" + params["rtx_evolve"].value("arm", std::string("baseline"));
    out["evolve"] = params["rtx_evolve"];
    params.erase("rtx_evolve");
  }
  out["latest"] = {{"run_id", q.column_int64(0)},
                   {"source", source},
                   {"when", q.column_text(16)},
                   {"sku", q.column_text(18)},
                   {"git_sha", q.column_text(19)},
                   {"op", op},
                   {"variant", variant},
                   {"backend", backend},
                   {"shape", shape},
                   {"dtype", dtype},
                   {"params", params},
                   {"median_s", opt_json(q.column_opt_double(7))},
                   {"ci95_s", {opt_json(q.column_opt_double(8)), opt_json(q.column_opt_double(9))}},
                   {"p10_s", opt_json(q.column_opt_double(10))},
                   {"p90_s", opt_json(q.column_opt_double(11))},
                   {"n", q.column_int64(12)},
                   {"noisy", q.column_int64(13) != 0},
                   {"contended", q.column_int64(20) != 0},
                   {"contention_reason", q.column_text(21)},
                   {"gflops", opt_json(q.column_opt_double(14))},
                   {"gbps", opt_json(q.column_opt_double(15))}};
  q.reset();
  const std::string key = op + "|" + variant + "|" + shape + "|" + dtype + "|" + backend + "|" + telemetry::sku_key(backend);
  try {
    out["profile"] = key_baseline(st, key);
  } catch (const Error& e) {
    if (e.category() == ErrorCategory::Internal) throw;
    out["profile"] = nullptr;  // e.g. the op or variant is no longer registered
    const std::string prev = out.value("note", std::string());
    out["note"] = (prev.empty() ? "" : prev + "; ") + "no current profile for " + key + ": " + e.message();
  }
  return out;
}

/// One diagnostics line on `log` (none when null): "rtx-evolve mcp: " and `text` with every
/// byte outside printable ASCII as \xHH (rtx::printable, Escape::NonAscii), since it holds
/// what a client sent (methods, ids, names, parser messages quoting raw bytes): control bytes,
/// a newline or invalid UTF-8 from a client never reach the operator's terminal as they are.
void log_line(std::ostream* log, std::string_view text) {
  if (log) *log << "rtx-evolve mcp: " << printable(text, Escape::NonAscii) << "\n";
}

/// A streambuf that passes line ends and writes every other byte through rtx::printable, for
/// the validation log of submit_proposal {validate: true} (it may quote the agent's proposal).
class PrintableLogBuf : public std::streambuf {
 public:
  explicit PrintableLogBuf(std::ostream& to) : to_(to) {}

 protected:
  int overflow(int c) override {
    if (c == traits_type::eof()) return traits_type::not_eof(c);
    const char ch = traits_type::to_char_type(c);
    if (ch == '\n')
      to_.put(ch);
    else
      to_ << printable(std::string_view(&ch, 1), Escape::NonAscii);
    return to_ ? c : traits_type::eof();
  }
  int sync() override {
    to_.flush();
    return to_ ? 0 : -1;
  }

 private:
  std::ostream& to_;
};

}  // namespace

const json& McpServer::tool_definitions() {
  static const json defs = make_tool_definitions();
  return defs;
}

// ---- the server -------------------------------------------------------------------------------

McpServer::McpServer(store::Store& st, McpOptions o) : st_(st), o_(std::move(o)) {}

const KeyPair& McpServer::key() {
  if (!key_) key_ = load_key(o_.key_path.empty() ? default_key_path(st_.path()) : o_.key_path);
  return *key_;
}

size_t McpServer::serve(std::istream& in, std::ostream& out) {
  size_t replies = 0;
  std::string line;
  for (;;) {
    const LineRead got = read_bounded_line(in, line, o_.max_message_bytes);
    if (got == LineRead::kEnd) break;
    std::optional<json> r;
    if (got == LineRead::kTooLong) {
      log_line(o_.log, "skipped a message longer than " + mib_text(o_.max_message_bytes));
      r = too_long_error(o_.max_message_bytes);
    } else {
      r = handle_line(line);
    }
    if (!r) continue;
    // Replace invalid UTF-8 (from the store or a message) rather than throw: stdout stays protocol.
    out << r->dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
    out.flush();
    if (!out) throw_env("stdout closed: cannot write the reply", "<stdout>", "the client stopped reading; nothing more is served");
    ++replies;
  }
  log_line(o_.log, "end of input, " + std::to_string(replies) + " replies");
  return replies;
}

std::optional<json> McpServer::handle_line(const std::string& raw) {
  std::string line = raw;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.find_first_not_of(" \t") == std::string::npos) return std::nullopt;
  if (line.size() > o_.max_message_bytes) return too_long_error(o_.max_message_bytes);
  if (nesting_depth(line, o_.max_depth) > o_.max_depth)
    return rpc_error(nullptr, kParseError,
                     "parse error: arrays/objects nested deeper than " + std::to_string(o_.max_depth) + " levels");
  json msg;
  try {
    msg = json::parse(line);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number past double
    log_line(o_.log, std::string("parse error: ") + e.what());
    return rpc_error(nullptr, kParseError, std::string("parse error: ") + e.what());
  }
  return handle(msg);
}

std::optional<json> McpServer::handle(const json& msg) {
  if (msg.is_array()) {
    // 2025-03-26 says servers MUST accept batches (and that `initialize` is never in one);
    // 2024-11-05 does not have them and 2025-06-18 removed them.
    if (!initialized_ || !mcp_accepts_batches(protocol_version_))
      return rpc_error(nullptr, kInvalidRequest,
                       "JSON-RPC batches are not supported" +
                           std::string(initialized_ ? " in MCP " + protocol_version_ : " before 'initialize'") +
                           " (only 2025-03-26 has them); send one message per line");
    if (msg.empty()) return rpc_error(nullptr, kInvalidRequest, "invalid request: an empty batch");
    // Replies can be ~100x the request ([1,1,...] is 2 bytes an element, each answered by a
    // ~120-byte error): a bound keeps a 16 MiB line from becoming a 1 GB reply.
    if (msg.size() > kMcpMaxBatch)
      return rpc_error(nullptr, kInvalidRequest,
                       "invalid request: a batch of " + std::to_string(msg.size()) + " messages; at most " +
                           std::to_string(kMcpMaxBatch) + " per batch");
    json replies = json::array();
    for (const json& m : msg) {
      if (m.is_array()) {
        replies.push_back(rpc_error(nullptr, kInvalidRequest, "invalid request: a batch inside a batch"));
        continue;
      }
      if (m.is_object() && m.value("method", json()) == "initialize" && m.contains("id")) {
        replies.push_back(rpc_error(m.contains("id") && valid_id(m["id"]) ? m["id"] : json(nullptr), kInvalidRequest,
                                    "invalid request: 'initialize' must not be part of a JSON-RPC batch"));
        continue;
      }
      if (std::optional<json> r = handle(m)) replies.push_back(std::move(*r));
    }
    // A batch of notifications only gets no reply at all (JSON-RPC 2.0, section 6).
    if (replies.empty()) return std::nullopt;
    return replies;
  }
  if (!msg.is_object()) return rpc_error(nullptr, kInvalidRequest, "invalid request: expected a JSON-RPC 2.0 object, got " + std::string(msg.type_name()));
  const bool has_id = msg.contains("id");
  const json id = has_id && valid_id(msg["id"]) ? msg["id"] : json(nullptr);
  if (msg.value("jsonrpc", json()) != "2.0") return rpc_error(id, kInvalidRequest, "invalid request: field 'jsonrpc' must be \"2.0\"");
  if (!msg.contains("method")) {
    if (has_id && (msg.contains("result") || msg.contains("error"))) {
      // A response: this server sends no requests, so there is nothing it answers.
      log_line(o_.log, "ignoring a response to id " + msg["id"].dump(-1, ' ', false, json::error_handler_t::replace) +
                           " (this server sends no requests)");
      return std::nullopt;
    }
    return rpc_error(id, kInvalidRequest, "invalid request: missing field 'method'");
  }
  if (!msg["method"].is_string()) return rpc_error(id, kInvalidRequest, "invalid request: field 'method' must be a string");
  if (has_id && !valid_id(msg["id"]))
    return rpc_error(nullptr, kInvalidRequest, "invalid request: field 'id' must be a string or an integer, got " + msg["id"].dump());
  const std::string method = msg["method"];
  const json params = msg.contains("params") ? msg["params"] : json::object();
  if (!params.is_object() && !params.is_array())
    return has_id ? std::optional<json>(rpc_error(id, kInvalidRequest, "invalid request: field 'params' must be an object"))
                  : std::nullopt;

  if (!has_id) {
    // Notifications never get a reply, not even an error.
    if (method == "notifications/initialized") {
      if (!initialized_) log_line(o_.log, "'notifications/initialized' before 'initialize' ignored");
    } else if (method != "notifications/cancelled") {
      log_line(o_.log, "ignoring notification '" + method + "'");
    }
    return std::nullopt;
  }
  try {
    if (!initialized_ && method != "initialize" && method != "ping")
      throw RpcError{kInvalidRequest, "server not initialized: send 'initialize' first (got '" + method + "')"};
    return json{{"jsonrpc", "2.0"}, {"id", id}, {"result", dispatch(method, params)}};
  } catch (const RpcError& e) {
    return rpc_error(id, e.code, e.message);
  } catch (const Error& e) {
    log_line(o_.log, method + ": " + e.what());
    return rpc_error(id, e.category() == ErrorCategory::Internal ? kInternalError : kInvalidParams, e.what());
  } catch (const std::exception& e) {
    log_line(o_.log, method + ": internal error: " + e.what());
    return rpc_error(id, kInternalError, std::string("internal error: ") + e.what());
  }
}

json McpServer::dispatch(const std::string& method, const json& params) {
  if (method == "ping") return json::object();
  if (method == "initialize") {
    if (initialized_) throw RpcError{kInvalidRequest, "already initialized: 'initialize' is sent once per session"};
    if (!params.is_object() || !params.contains("protocolVersion") || !params["protocolVersion"].is_string())
      throw RpcError{kInvalidParams, "initialize needs params.protocolVersion (a string, e.g. \"" + std::string(kMcpProtocolVersion) + "\")"};
    const std::string asked = params["protocolVersion"];
    const auto& sup = mcp_supported_versions();
    protocol_version_ = std::find(sup.begin(), sup.end(), asked) != sup.end() ? asked : kMcpProtocolVersion;
    initialized_ = true;
    if (o_.log) {
      const json ci = params.value("clientInfo", json::object());
      const bool named = ci.is_object() && ci.contains("name") && ci["name"].is_string();
      log_line(o_.log, "initialized by " + (named ? ci["name"].get<std::string>() : std::string("?")) + " (asked " +
                           asked + ", speaking " + protocol_version_ + ")");
    }
    json server_info = {{"name", "rtx-evolve"}, {"title", "rtx-evolve proposals and knowledge"}, {"version", rtx::version()}};
    if (!mcp_has_structured_output(protocol_version_)) server_info.erase("title");  // Implementation.title is 2025-06-18's
    return {{"protocolVersion", protocol_version_},
            {"capabilities", {{"tools", {{"listChanged", false}}}}},
            {"serverInfo", server_info},
            {"instructions",
             "rtx-evolve: propose performance changes for this host. list_benchmarks and get_baseline show what runs now; "
             "submit_proposal stores a signed rtx.proposal.v1 (validate: true runs the sandboxed A/B gates, minutes); "
             "proposal_status shows gates and the approve/rollback commands (a person approves with `rtx-evolve approve "
             "ID`); query_knowledge asks what improved, hurt determinism or failed before."}};
  }
  if (method == "tools/list") {
    if (mcp_has_structured_output(protocol_version_)) return {{"tools", tool_definitions()}};
    // Before 2025-06-18 a Tool has no title and no outputSchema.
    json tools = tool_definitions();
    for (json& t : tools) {
      t.erase("title");
      t.erase("outputSchema");
    }
    return {{"tools", tools}};
  }
  if (method == "tools/call") return call_tool(params);
  throw RpcError{kMethodNotFound, "method not found: '" + method + "' (this server has initialize, ping, tools/list, tools/call)"};
}

json McpServer::call_tool(const json& params) {
  if (!params.is_object() || !params.contains("name") || !params["name"].is_string())
    throw RpcError{kInvalidParams, "tools/call needs params.name (a string)"};
  const std::string name = params["name"];
  const json& defs = tool_definitions();
  const auto def = std::find_if(defs.begin(), defs.end(), [&](const json& d) { return d["name"] == name; });
  if (def == defs.end()) throw RpcError{kInvalidParams, "unknown tool '" + name + "' (see tools/list)"};
  const json args = params.contains("arguments") ? params["arguments"] : json::object();
  if (!args.is_object()) throw RpcError{kInvalidParams, "tools/call " + name + ": 'arguments' must be an object"};
  if (std::string why = mcp_schema_problem((*def)["inputSchema"], args); !why.empty())
    throw RpcError{kInvalidParams, "tools/call " + name + ": " + why};
  try {
    const json structured = run_tool(name, args);
    json content = json::array({{{"type", "text"}, {"text", structured.dump(-1, ' ', false, json::error_handler_t::replace)}}});
    if (name == "proposal_status") {
      // The same lines `rtx-evolve status` prints for this proposal.
      const std::string s = structured["status"];
      const bool failed = s == "failed", promoted = s == "promoted";
      const bool passed = s == "passed" || s == "approved" || promoted || s == "superseded" || s == "rolled_back";
      const json summary = {{"proposed", 1}, {"passed", passed ? 1 : 0}, {"failed", failed ? 1 : 0}, {"promoted", promoted ? 1 : 0}};
      content.push_back({{"type", "text"},
                         {"text", format_report({{"proposals", json::array({structured})}, {"summary", summary}, {"notes", json::array()}}, "text")}});
    }
    if (!mcp_has_structured_output(protocol_version_)) return {{"content", content}, {"isError", false}};
    return {{"content", content}, {"structuredContent", structured}, {"isError", false}};
  } catch (const Error& e) {
    if (e.category() == ErrorCategory::Internal) throw;
    // A tool execution error: a result the agent can read and act on, not a protocol error.
    log_line(o_.log, name + ": " + e.what());
    return {{"content", json::array({{{"type", "text"}, {"text", std::string(e.what())}}})}, {"isError", true}};
  }
}

json McpServer::run_tool(const std::string& name, const json& args) {
  if (name == "list_benchmarks") {
    const std::string path = args.value("pack", o_.default_pack);
    const measure::Pack pack = measure::load_pack(path);
    measure::ExpandOptions eo;
    eo.filter = args.value("filter", std::string());
    json cases = json::array();
    size_t runnable = 0;
    for (const auto& c : measure::expand_pack(pack, measure::registry(), eo)) {
      runnable += c.skip_reason.empty();
      cases.push_back({{"id", c.id},
                       {"name", c.name},
                       {"op", c.op},
                       {"variant", c.variant},
                       {"backend", kernels::backend_name(c.backend)},
                       {"shape", json(c.shape)},
                       {"dtype", dtype_name(c.dtype)},
                       {"params", json(c.params)},
                       {"runnable", c.skip_reason.empty()},
                       {"skip_reason", c.skip_reason}});
    }
    const size_t total = cases.size();
    return {{"pack", path}, {"name", pack.name}, {"description", pack.description}, {"cases", std::move(cases)},
            {"runnable", runnable}, {"skipped", total - runnable}};
  }
  if (name == "get_baseline") {
    json out = {{"sku", telemetry::sku_key("cpu")}, {"db", st_.path()}};
    if (args.contains("key")) out["key"] = key_baseline(st_, args["key"].get<std::string>());
    if (args.contains("case"))
      out["case"] = case_baseline(st_, args["case"].get<std::string>(), args.value("include_contended", false));
    return out;
  }
  if (name == "submit_proposal") {
    const int64_t id = submit(st_, args["proposal"], "mcp submit_proposal", key(), measure::registry());
    json out = {{"id", id}, {"status", "new"}, {"validated", false}};
    log_line(o_.log, "stored proposal " + std::to_string(id));
    if (args.value("validate", false)) {
      ValidateOptions v = o_.validate;
      if (args.contains("rounds")) v.rounds = static_cast<size_t>(as_int(args["rounds"]));
      // The validation log goes to the server's log escaped as its own lines are (a caller's
      // own ValidateOptions::log is used as given).
      std::optional<PrintableLogBuf> escaped_buf;
      std::optional<std::ostream> escaped;
      if (!v.log && o_.log) {
        escaped_buf.emplace(*o_.log);
        escaped.emplace(&*escaped_buf);
        v.log = &*escaped;
      }
      const Validation val = validate(st_, id, key(), v, 0);
      if (escaped) escaped->flush();
      out["status"] = val.passed ? "passed" : "failed";
      out["validated"] = true;
      out["validation"] = val.summary;
      out["gates"] = gates_json(st_, id);
      out["next"] = val.passed ? "a person approves and promotes it with: rtx-evolve approve " + std::to_string(id)
                               : std::string("it failed a gate (see gates); its fingerprint is not proposed again on this SKU");
    } else {
      out["next"] = "stored and signed, not validated (validation takes minutes); submit with validate: true to validate";
    }
    return out;
  }
  if (name == "proposal_status") {
    const Proposal p = load_proposal(st_, as_int(args["id"]));
    json row = proposal_row(st_, p);
    row["target"] = p.target;
    row["rollback_plan"] = p.rollback;
    return row;
  }
  if (name == "query_knowledge") {
    KgQuery q;
    q.question = args["question"];
    q.op = args.value("op", std::string());
    q.sku = args.value("sku", std::string());
    q.gate = args.value("gate", std::string());
    q.domain = args.value("domain", std::string());
    if (args.contains("limit")) q.limit = static_cast<size_t>(as_int(args["limit"]));
    return kg_query(st_, q);
  }
  throw_internal("tool '" + name + "' is listed but has no body", "McpServer::run_tool");
}

}  // namespace rtx::evolve
