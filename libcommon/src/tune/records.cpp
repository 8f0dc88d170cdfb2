// Tuning records: trials (resume, replay), versioned profiles, rtx.profile.v1 export/import.
#include "rtx/tune/records.hpp"

#include <cmath>
#include <ctime>
#include <map>
#include <set>

#include "rtx/core/build_info.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/time.hpp"
#include "rtx/io/artifact.hpp"
#include "rtx/stats/stats.hpp"
#include "rtx/telemetry/hwprofile.hpp"

namespace rtx::tune {

using nlohmann::json;

// ---- keys -----------------------------------------------------------------------------------

std::string TuneKey::str() const {
  return op + "|" + variant + "|" + kernels::shape_to_string(shape) + "|" + dtype_name(dtype) + "|" +
         kernels::backend_name(backend) + "|" + sku;
}

TuneKey TuneKey::parse(const std::string& text) {
  std::vector<std::string> f;
  size_t start = 0;
  for (;;) {
    const size_t bar = text.find('|', start);
    f.push_back(text.substr(start, bar == std::string::npos ? std::string::npos : bar - start));
    if (bar == std::string::npos) break;
    start = bar + 1;
  }
  const char* hint = "expected op|variant|shape|dtype|backend|sku";
  if (f.size() != 6) throw_input("malformed profile key '" + text + "'", "key", hint);
  for (const auto& x : f)
    if (x.empty()) throw_input("malformed profile key '" + text + "': empty field", "key", hint);
  TuneKey k;
  k.op = f[0];
  k.variant = f[1];
  k.shape = kernels::parse_shape(f[2]);
  k.dtype = parse_dtype(f[3]);
  k.backend = kernels::parse_backend(f[4]);
  k.sku = f[5];
  return k;
}

std::string config_json(const Params& p) { return json(p).dump(); }

// ---- trials ---------------------------------------------------------------------------------
namespace {

Evaluation::Status parse_status(const std::string& s) {
  if (s == "ok") return Evaluation::Status::Ok;
  if (s == "fail") return Evaluation::Status::Fail;
  return Evaluation::Status::Skip;
}

/// One tuning_trials row, validated (a hand-edited or corrupt store must not steer a replay or
/// a resume): config_json an object of integers, samples_json an array of finite positive
/// numbers, and an ok row a finite positive median. Error(Input) naming the store and row id.
TrialRecord read_trial(store::Statement& q, const std::string& db) {
  const int64_t id = q.column_int64(6);
  const std::string where = db + ": tuning_trials row " + std::to_string(id);
  auto bad = [&](const std::string& what) -> TrialRecord {
    throw_input("corrupt tuning trial: " + what, where, "delete the row (or the key's rows) and re-run rtx-tune run");
  };
  TrialRecord r;
  const json cfg = json::parse(q.column_text(0), nullptr, false);
  if (!cfg.is_object()) return bad("config_json is not a JSON object");
  for (const auto& [k, v] : cfg.items()) {
    if (!v.is_number_integer()) return bad("config_json." + k + " is not an integer");
    r.config[k] = v.get<int64_t>();
  }
  r.eval.status = parse_status(q.column_text(1));
  r.eval.reason = q.column_text(2);
  const json samples = json::parse(q.column_text(3), nullptr, false);
  if (!samples.is_array()) return bad("samples_json is not a JSON array");
  for (const auto& x : samples) {
    if (!x.is_number() || !(x.get<double>() > 0) || !std::isfinite(x.get<double>()))
      return bad("samples_json holds " + x.dump() + " (need finite seconds > 0)");
    r.eval.samples.push_back(x.get<double>());
  }
  r.eval.median = q.column_double(4);
  if (r.eval.status == Evaluation::Status::Ok && (!(r.eval.median > 0) || !std::isfinite(r.eval.median)))
    return bad("an ok trial with median_s " + std::to_string(r.eval.median) + " (need finite seconds > 0)");
  r.run_id = q.column_int64(5);
  r.eval.reused = true;
  r.eval.aborted = r.eval.reason.rfind("aborted early", 0) == 0;
  r.eval.contended = q.column_int64(7) != 0;
  r.eval.contention_reason = q.column_text(8);
  return r;
}

constexpr const char* kTrialColumns =
    "config_json, status, reason, samples_json, median_s, run_id, id, contended, contention_reason";
constexpr const char* kKeyWhere = "op = ?1 AND variant = ?2 AND shape = ?3 AND dtype = ?4 AND backend = ?5 AND sku = ?6";

void bind_key(store::Statement& q, const TuneKey& k) {
  q.bind(1, k.op)
      .bind(2, k.variant)
      .bind(3, json(k.shape).dump())
      .bind(4, dtype_name(k.dtype))
      .bind(5, kernels::backend_name(k.backend))
      .bind(6, k.sku);
}

}  // namespace

std::optional<TrialRecord> TrialStore::find(const Params& p) {
  auto& q = st_.prepare(std::string("SELECT ") + kTrialColumns + " FROM tuning_trials WHERE " + kKeyWhere +
                        " AND config_json = ?7");
  bind_key(q, key_);
  q.bind(7, config_json(p));
  std::optional<TrialRecord> r;
  try {
    if (q.step()) r = read_trial(q, st_.path());
  } catch (...) {
    q.reset();
    throw;
  }
  q.reset();
  return r;
}

void TrialStore::put(const Params& p, const Evaluation& e, int64_t run_id) {
  store::Transaction tx(st_);
  auto& q = st_.prepare(
      "INSERT INTO tuning_trials (op, variant, shape, dtype, backend, sku, config_json, status, reason, samples_json, "
      "median_s, run_id, contended, contention_reason) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
      "?14) "
      "ON CONFLICT (op, variant, shape, dtype, backend, sku, config_json) DO UPDATE SET status = excluded.status, "
      "reason = excluded.reason, samples_json = excluded.samples_json, median_s = excluded.median_s, "
      "run_id = excluded.run_id, contended = excluded.contended, contention_reason = excluded.contention_reason, "
      "created_at = strftime('%Y-%m-%dT%H:%M:%fZ','now')");
  bind_key(q, key_);
  q.bind(7, config_json(p)).bind(8, status_name(e.status));
  if (e.reason.empty()) q.bind(9, nullptr);
  else q.bind(9, e.reason);
  q.bind(10, json(e.samples).dump());
  if (e.status == Evaluation::Status::Ok) q.bind(11, e.median);
  else q.bind(11, nullptr);
  if (run_id > 0) q.bind(12, run_id);
  else q.bind(12, nullptr);
  const bool contended = e.status == Evaluation::Status::Ok && e.contended;
  q.bind(13, static_cast<int64_t>(contended)).bind(14, contended ? e.contention_reason : std::string());
  q.run();
  tx.commit();
}

std::vector<TrialRecord> TrialStore::all() {
  auto& q = st_.prepare(std::string("SELECT ") + kTrialColumns + " FROM tuning_trials WHERE " + kKeyWhere + " ORDER BY id");
  bind_key(q, key_);
  std::vector<TrialRecord> v;
  std::map<std::string, int64_t> seen;  // normalized config -> row id
  try {
    while (q.step()) {
      v.push_back(read_trial(q, st_.path()));
      const auto [it, fresh] = seen.emplace(config_json(v.back().config), q.column_int64(6));
      if (!fresh)
        throw_input("corrupt tuning trials: rows " + std::to_string(it->second) + " and " +
                        std::to_string(q.column_int64(6)) + " hold the same configuration " + it->first,
                    st_.path() + ": tuning_trials", "delete one of them");
    }
  } catch (...) {
    q.reset();
    throw;
  }
  q.reset();
  return v;
}

Evaluation RecordingObjective::evaluate(const Params& p, const EvalBudget& b) {
  if (auto r = trials_.find(p)) {
    const Evaluation& e = r->eval;
    // A timing taken on a busy host is not reused: measure it again (the host may be quiet now).
    const bool busy = e.status == Evaluation::Status::Ok && e.contended && !reuse_contended_;
    const bool enough =
        e.status != Evaluation::Status::Ok || (!busy && !e.aborted && e.samples.size() >= b.min_samples);
    // An aborted record is final too unless this evaluation would not abort it (a better
    // threshold now): re-measure only then.
    const bool aborted_final = !busy && e.aborted && b.abort_above > 0 && e.median > b.abort_above;
    if (enough || aborted_final) {
      Evaluation out = e;
      out.reused = true;
      return out;
    }
  }
  Evaluation e = inner_.evaluate(p, b);
  trials_.put(p, e, run_id_);
  return e;
}

void RecordingObjective::skipped(const Params& p, const std::string& reason) {
  if (trials_.find(p)) return;
  Evaluation e;
  e.status = Evaluation::Status::Skip;
  e.reason = reason;
  trials_.put(p, e, run_id_);
}

ReplayObjective::ReplayObjective(std::vector<TrialRecord> records) : records_(std::move(records)) {
  for (size_t i = 0; i < records_.size(); ++i) by_config_[config_json(records_[i].config)] = i;
}

Evaluation ReplayObjective::evaluate(const Params& p, const EvalBudget& b) {
  ++lookups_;
  auto it = by_config_.find(config_json(p));
  Evaluation e;
  e.reused = true;
  if (it == by_config_.end()) {
    e.status = Evaluation::Status::Skip;
    e.reason = "replay: no recorded trial";
    e.counts = false;
    return e;
  }
  const Evaluation& r = records_[it->second].eval;
  e.status = r.status;
  e.reason = r.reason;
  if (r.status != Evaluation::Status::Ok) return e;
  e.contended = r.contended;
  e.contention_reason = r.contention_reason;
  if (r.samples.empty()) {  // recorded without samples (imported/aborted rows): use the median
    e.median = r.median;
    e.aborted = r.aborted;
    return e;
  }
  const size_t n = std::min(r.samples.size(), std::max<size_t>(1, b.max_samples));
  e.samples.assign(r.samples.begin(), r.samples.begin() + static_cast<std::ptrdiff_t>(n));
  const size_t k = std::max<size_t>(1, b.abort_after);
  if (b.abort_above > 0 && e.samples.size() > k) {
    std::vector<double> first(e.samples.begin(), e.samples.begin() + static_cast<std::ptrdiff_t>(k));
    if (stats::median(first) > b.abort_above) {
      e.samples = first;
      e.aborted = true;
      e.reason = "aborted early (replay)";
    }
  }
  e.aborted = e.aborted || r.aborted;
  e.median = stats::median(e.samples);
  return e;
}

// ---- profiles -------------------------------------------------------------------------------

json measured_under(const std::string& sku) {
  const auto& hw = telemetry::hardware_profile();
  return {{"rtx_sha", rtx::git_sha()},
          {"rtx_version", rtx::version()},
          {"compiler", rtx::compiler_id()},
          {"cuda_compiler", rtx::cuda_compiler_version()},
          {"driver", hw.nvml_driver},
          {"cuda_runtime", hw.runtime_version},
          {"sku", sku},
          {"hw_digest", telemetry::digest()}};
}

namespace {

ProfileEntry read_entry(store::Statement& q) {
  ProfileEntry e;
  e.key = q.column_text(0);
  e.version = q.column_int64(1);
  e.params = json::parse(q.column_text(2)).get<Params>();
  e.measured_under = json::parse(q.column_text(3));
  e.run_id = q.column_int64(4);
  e.created_at = q.column_text(5);
  return e;
}

/// Insert a new version of `key` and make it current, inside the caller's transaction.
/// Returns the version (or the current one when identical).
int64_t put_version(store::Store& st, const std::string& key, const Params& params, const json& under, int64_t run_id) {
  auto& cur = st.prepare(
      "SELECT p.params_json, p.measured_under_json, p.version FROM profile_current c JOIN profiles p "
      "ON p.key = c.key AND p.version = c.version WHERE c.key = ?1");
  cur.bind(1, key);
  if (cur.step()) {
    // "result" (the measured times) is not part of the identity: re-tuning to the same params
    // under the same build and host keeps the version.
    json was = json::parse(cur.column_text(1)), now = under;
    if (was.is_object()) was.erase("result");
    if (now.is_object()) now.erase("result");
    const bool same = json::parse(cur.column_text(0)) == json(params) && was == now;
    const int64_t v = cur.column_int64(2);
    cur.reset();
    if (same) return v;
  } else {
    cur.reset();
  }
  auto& mx = st.prepare("SELECT COALESCE(MAX(version), 0) FROM profiles WHERE key = ?1");
  mx.bind(1, key);
  mx.step();
  const int64_t version = mx.column_int64(0) + 1;
  mx.reset();
  auto& ins = st.prepare(
      "INSERT INTO profiles (key, version, params_json, measured_under_json, run_id) VALUES (?1, ?2, ?3, ?4, ?5)");
  ins.bind(1, key).bind(2, version).bind(3, config_json(params)).bind(4, under.dump());
  if (run_id > 0) ins.bind(5, run_id);
  else ins.bind(5, nullptr);
  ins.run();
  auto& up = st.prepare(
      "INSERT INTO profile_current (key, version) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET "
      "version = excluded.version, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ','now')");
  up.bind(1, key).bind(2, version);
  up.run();
  return version;
}

constexpr const char* kEntryColumns = "p.key, p.version, p.params_json, p.measured_under_json, p.run_id, p.created_at";

}  // namespace

int64_t save_profile(store::Store& st, const std::string& key, const Params& params, const json& under, int64_t run_id) {
  TuneKey::parse(key);  // refuse a malformed key before writing
  store::Transaction tx(st);
  const int64_t v = put_version(st, key, params, under, run_id);
  tx.commit();
  return v;
}

std::vector<ProfileEntry> current_profiles(store::Store& st) {
  auto& q = st.prepare(std::string("SELECT ") + kEntryColumns +
                       " FROM profile_current c JOIN profiles p ON p.key = c.key AND p.version = c.version ORDER BY p.key");
  std::vector<ProfileEntry> v;
  while (q.step()) v.push_back(read_entry(q));
  q.reset();
  return v;
}

std::vector<ProfileEntry> profile_versions(store::Store& st, const std::string& key) {
  auto& q = st.prepare(std::string("SELECT ") + kEntryColumns + " FROM profiles p WHERE p.key = ?1 ORDER BY p.version");
  q.bind(1, key);
  std::vector<ProfileEntry> v;
  while (q.step()) v.push_back(read_entry(q));
  q.reset();
  return v;
}

std::string stale_reason(const ProfileEntry& e, const TuneKey& key) {
  const json now = measured_under(key.sku);
  const json& m = e.measured_under;
  auto text = [](const json& j, const char* f) { return j.contains(f) && j[f].is_string() ? j[f].get<std::string>() : ""; };
  auto major = [](const std::string& v) { return v.substr(0, v.find('.')); };
  if (major(text(m, "rtx_version")) != major(text(now, "rtx_version")))
    return "measured with rtx " + text(m, "rtx_version") + ", this is rtx " + text(now, "rtx_version") + " (major differs)";
  if (text(m, "compiler") != text(now, "compiler"))
    return "measured with compiler '" + text(m, "compiler") + "', this build uses '" + text(now, "compiler") + "'";
  if (key.backend == kernels::Backend::CUDA && text(m, "driver") != text(now, "driver"))
    return "measured under driver '" + text(m, "driver") + "', this host has '" + text(now, "driver") + "'";
  return "";
}

// ---- export / import ------------------------------------------------------------------------
namespace {

std::string host_sku(kernels::Backend b) {
  try {
    return telemetry::sku_key(kernels::backend_name(b));
  } catch (const Error&) {
    return "";  // e.g. CUDA without a GPU: no SKU matches
  }
}

}  // namespace

json export_profiles(store::Store& st) {
  json doc = {{"schema", kProfileSchema},
              {"created_at", utc_now(TimeStampPrecision::Seconds)},
              {"rtx_sha", rtx::git_sha()},
              {"hardware", telemetry::to_json(telemetry::hardware_profile())},
              {"identity", telemetry::identity_json()},
              {"entries", json::array()}};
  for (const ProfileEntry& e : current_profiles(st)) {
    const TuneKey k = TuneKey::parse(e.key);
    doc["entries"].push_back({{"key", e.key},
                              {"op", k.op},
                              {"variant", k.variant},
                              {"shape", k.shape},
                              {"dtype", dtype_name(k.dtype)},
                              {"backend", kernels::backend_name(k.backend)},
                              {"sku", k.sku},
                              {"version", e.version},
                              {"params", e.params},
                              {"measured_under", e.measured_under}});
  }
  return doc;
}

ImportResult import_profiles(store::Store& st, const json& doc, const std::string& source, bool force) {
  io::check_artifact_schema(doc, source, "profile", {1});
  io::validate(doc, source,
               {{"/entries", io::JsonType::Array},
                {"/entries/*/key", io::JsonType::String},
                {"/entries/*/params", io::JsonType::Object},
                {"/entries/*/measured_under", io::JsonType::Object, false}});
  struct Item {
    std::string key;
    Params params;
    json under;
  };
  std::vector<Item> items;
  std::set<std::string> foreign, seen;
  ImportResult r;
  const auto& entries = doc["entries"];
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string where = "/entries/" + std::to_string(i);
    const json& e = entries[i];
    Item it;
    it.key = e["key"].get<std::string>();
    TuneKey k;
    try {
      k = TuneKey::parse(it.key);
    } catch (const Error& err) {
      throw_input(source + ": field '" + where + "/key': " + err.message(), where + "/key", err.hint());
    }
    if (!seen.insert(it.key).second) throw_input(source + ": field '" + where + "/key': duplicate key '" + it.key + "'", where + "/key");
    for (const auto& [name, v] : e["params"].items())
      if (!v.is_number_integer())
        throw_input(source + ": field '" + where + "/params/" + name + "': expected integer, got " + io::json_type_name(v),
                    where + "/params/" + name);
    it.params = e["params"].get<Params>();
    it.under = e.contains("measured_under") ? e["measured_under"] : json::object();
    if (k.sku != host_sku(k.backend)) foreign.insert(k.sku);
    items.push_back(std::move(it));
  }
  r.foreign_skus.assign(foreign.begin(), foreign.end());
  if (!foreign.empty() && !force) {
    std::string list;
    for (const auto& s : foreign) list += (list.empty() ? "" : ", ") + s;
    throw_input(source + ": profile is for another SKU (" + list + "); this host is '" + host_sku(kernels::Backend::CPU) +
                    "'" + (host_sku(kernels::Backend::CUDA).empty() ? "" : " / '" + host_sku(kernels::Backend::CUDA) + "'"),
                source, "pass --force to import it anyway (its parameters may be wrong for this machine)");
  }
  store::Transaction tx(st);
  for (const Item& it : items) {
    const auto before = profile_versions(st, it.key);
    const int64_t v = put_version(st, it.key, it.params, it.under, 0);
    if (!before.empty() && before.back().version >= v) ++r.unchanged;
    else ++r.imported;
  }
  tx.commit();
  return r;
}

}  // namespace rtx::tune
