// rtx.proposal.v1 envelopes: JSON, content hash, Ed25519 signatures, and gate rows (the
// proposals rows themselves: proposal_store.cpp).
#include "rtx/evolve/proposal.hpp"

#include <sodium.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "evolve/pipeline.hpp"
#include "rtx/core/error.hpp"
#include "rtx/io/atomic_file.hpp"

namespace rtx::evolve {

using nlohmann::json;

namespace {

void init_sodium() {
  if (sodium_init() < 0) throw_env("libsodium failed to initialise (sodium_init)", "libsodium");
}

std::string to_hex(const unsigned char* p, size_t n) {
  std::string s(n * 2 + 1, '\0');
  sodium_bin2hex(s.data(), s.size(), p, n);
  s.pop_back();
  return s;
}

std::vector<unsigned char> from_hex(const std::string& hex, size_t want, const std::string& where) {
  std::vector<unsigned char> out(want);
  size_t len = 0;
  if (hex.size() != want * 2 ||
      sodium_hex2bin(out.data(), out.size(), hex.c_str(), hex.size(), nullptr, &len, nullptr) != 0 || len != want)
    throw_input("expected " + std::to_string(want * 2) + " hex digits", where);
  return out;
}

const json& field(const json& j, const char* name, const std::string& source) {
  if (!j.contains(name)) throw_input("missing field '" + std::string(name) + "'", source + ": field '" + name + "'");
  return j.at(name);
}

}  // namespace

namespace detail {

/// A JSON column of a stored row. A row edited outside rtx (invalid UTF-8, truncated JSON) is
/// bad input naming the row, not an internal parse_error.
json parse_stored(const std::string& text, const std::string& row, const std::string& db) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number past double
    throw_input(row + " in " + db + ": stored JSON is unreadable (" + e.what() + ")", db,
                "the row was changed outside rtx; restore the store from a backup or fix the row with sqlite3");
  }
}


}  // namespace detail

using detail::parse_stored;

const std::vector<std::string>& known_domains() {
  static const std::vector<std::string> d = {"tuner", "parallelism", "scheduler", "memory", "fusion"};
  return d;
}

std::string target_of(const std::string& domain) {
  if (domain == "tuner") return "profile";
  for (const auto& d : known_domains())
    if (d == domain) return "config";
  throw_input("unknown domain '" + domain + "'", "domain", "one of tuner, parallelism, scheduler, memory, fusion");
}

json to_json(const Proposal& p) {
  json j = json::object();
  j["schema"] = kProposalSchema;
  j["id"] = p.id;
  j["domain"] = p.domain;
  j["target"] = p.target;
  j["key"] = p.key;
  j["plan"] = p.plan;
  j["actions"] = p.actions;
  j["changeset"] = p.changeset;
  j["validation"] = p.validation;
  j["rollback"] = p.rollback;
  j["provenance"] = p.provenance;
  j["fingerprint"] = p.fingerprint;
  j["status"] = p.status;
  j["signature"] = p.signature;
  return j;
}

Proposal from_json(const json& j, const std::string& source) {
  if (!j.is_object()) throw_input("a proposal must be a JSON object", source);
  const json& schema = field(j, "schema", source);
  if (!schema.is_string() || schema.get<std::string>() != kProposalSchema)
    throw_input("unsupported schema " + schema.dump() + " (this rtx reads " + kProposalSchema + ")",
                source + ": field 'schema'");
  auto str = [&](const char* name, bool required) -> std::string {
    if (!j.contains(name)) {
      if (required) field(j, name, source);
      return "";
    }
    if (!j[name].is_string()) throw_input("expected a string", source + ": field '" + name + "'");
    return j[name].get<std::string>();
  };
  auto obj = [&](const char* name, bool required) -> json {
    if (!j.contains(name)) {
      if (required) field(j, name, source);
      return json::object();
    }
    if (!j[name].is_object()) throw_input("expected an object", source + ": field '" + name + "'");
    return j[name];
  };
  Proposal p;
  if (j.contains("id")) {
    if (!j["id"].is_number_integer()) throw_input("expected an integer", source + ": field 'id'");
    p.id = j["id"].get<int64_t>();
  }
  p.domain = str("domain", true);
  try {
    p.target = target_of(p.domain);
  } catch (const Error& e) {
    throw_input(e.message(), source + ": field 'domain'", e.hint());
  }
  const std::string target = str("target", false);
  if (!target.empty() && target != p.target)
    throw_input("target '" + target + "' does not match domain '" + p.domain + "' (expected '" + p.target + "')",
                source + ": field 'target'");
  p.key = str("key", true);
  if (p.key.empty()) throw_input("empty key", source + ": field 'key'");
  p.plan = obj("plan", true);
  // Readers take plan.why as text (reports, the knowledge graph, the loop's log): refuse any
  // other type here rather than let one of them throw a JSON type error later.
  if (p.plan.contains("why") && !p.plan["why"].is_string())
    throw_input("expected a string", source + ": field 'plan.why'", "describe the change in words");
  if (!field(j, "actions", source).is_array()) throw_input("expected an array", source + ": field 'actions'");
  p.actions = j["actions"];
  p.changeset = obj("changeset", true);
  if (!p.changeset.contains("candidate") || !p.changeset["candidate"].is_object())
    throw_input("changeset needs an object 'candidate'", source + ": field 'changeset.candidate'");
  p.validation = obj("validation", false);
  p.rollback = obj("rollback", false);
  p.provenance = obj("provenance", false);
  p.fingerprint = str("fingerprint", false);
  const std::string status = str("status", false);
  if (!status.empty()) p.status = status;
  p.signature = obj("signature", false);
  return p;
}

std::vector<std::string> missing_fields(const Proposal& p) {
  std::vector<std::string> m;
  if (!p.plan.contains("why") || !p.plan["why"].is_string() || p.plan["why"].get<std::string>().empty())
    m.push_back("plan.why");
  if (!p.actions.is_array() || p.actions.empty()) m.push_back("actions");
  if (!p.changeset.contains("candidate")) m.push_back("changeset.candidate");
  if (!p.rollback.contains("command")) m.push_back("rollback.command");
  for (const char* f : {"git_sha", "sku", "code_sha256", "data_sha256", "env_sha256", "seeds"})
    if (!p.provenance.contains(f)) m.push_back(std::string("provenance.") + f);
  if (p.fingerprint.empty()) m.push_back("fingerprint");
  return m;
}

std::string file_sha256(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw_input("cannot read file to hash it", path);
  Sha256 st;
  std::vector<char> buf(1 << 16);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize n = f.gcount();
    if (n > 0) st.update(buf.data(), static_cast<size_t>(n));
  }
  if (f.bad()) throw_input("read error while hashing", path);
  return st.hex();
}

std::string content_bytes(const Proposal& p) {
  json j = to_json(p);
  for (const char* f : {"id", "status", "validation", "signature"}) j.erase(f);
  return j.dump();  // nlohmann::json objects keep keys sorted: canonical
}

std::string content_sha256(const Proposal& p) { return sha256_hex(content_bytes(p)); }

std::string make_fingerprint(const std::string& domain, const std::string& key, const json& candidate) {
  return sha256_hex(domain + "|" + key + "|" + candidate.dump());
}

// ---- keys and signatures ---------------------------------------------------------------------

std::string KeyPair::public_hex() const { return to_hex(public_key.data(), public_key.size()); }

std::string default_key_path(const std::string& db_path) {
  const size_t slash = db_path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : db_path.substr(0, slash));
  return dir + "/evolve_ed25519.key";
}

KeyPair generate_key(const std::string& path, bool overwrite) {
  init_sodium();
  struct stat sb {};
  if (!overwrite && ::stat(path.c_str(), &sb) == 0)
    throw_usage("key file already exists", path, "pass --force to replace it (proposals signed with it then fail verification)");
  KeyPair k;
  k.public_key.resize(crypto_sign_PUBLICKEYBYTES);
  k.secret_key.resize(crypto_sign_SECRETKEYBYTES);
  crypto_sign_keypair(k.public_key.data(), k.secret_key.data());
  const std::string text = to_hex(k.secret_key.data(), k.secret_key.size()) + "\n";
  {
    io::AtomicFileWriter w(path);
    w.write(text);
    w.commit();
  }
  if (::chmod(path.c_str(), 0600) != 0) throw_env("cannot set mode 0600 on the key file", path);
  return k;
}

KeyPair load_key(const std::string& path) {
  init_sodium();
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0)
    throw_env("no signing key", path, "run `rtx-evolve keygen` (or pass --key FILE)");
  if (sb.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(sb.st_mode & 0777));
    throw_env(std::string("signing key is readable or writable by group/others (mode ") + mode + "); refusing to use it",
              path, "chmod 600 " + path);
  }
  std::ifstream f(path);
  std::string hex;
  f >> hex;
  KeyPair k;
  k.secret_key = from_hex(hex, crypto_sign_SECRETKEYBYTES, path);
  k.public_key.resize(crypto_sign_PUBLICKEYBYTES);
  crypto_sign_ed25519_sk_to_pk(k.public_key.data(), k.secret_key.data());
  return k;
}

void sign(Proposal& p, const KeyPair& k) {
  init_sodium();
  const std::string h = content_sha256(p);
  unsigned char sig[crypto_sign_BYTES];
  crypto_sign_detached(sig, nullptr, reinterpret_cast<const unsigned char*>(h.data()), h.size(), k.secret_key.data());
  p.signature = {{"alg", "ed25519"}, {"public_key", k.public_hex()}, {"sig", to_hex(sig, sizeof sig)}, {"content_sha256", h}};
}

std::string verify(const Proposal& p, const KeyPair& k) {
  init_sodium();
  if (!p.signature.is_object() || !p.signature.contains("sig")) return "envelope is not signed";
  if (p.signature.value("alg", "") != "ed25519") return "signature algorithm is not ed25519";
  if (p.signature.value("public_key", "") != k.public_hex())
    return "signed by another key (" + p.signature.value("public_key", std::string("?")).substr(0, 16) + "...), not this store's";
  const std::string h = content_sha256(p);
  if (p.signature.value("content_sha256", "") != h)
    return "content hash differs from the signed hash: the envelope was modified after signing";
  std::vector<unsigned char> sig;
  try {
    sig = from_hex(p.signature.value("sig", ""), crypto_sign_BYTES, "signature.sig");
  } catch (const Error&) {
    return "malformed signature";
  }
  if (crypto_sign_verify_detached(sig.data(), reinterpret_cast<const unsigned char*>(h.data()), h.size(),
                                  k.public_key.data()) != 0)
    return "Ed25519 signature does not verify";
  return "";
}

// ---- gate rows --------------------------------------------------------------------------------

void record_gates(store::Store& st, int64_t proposal_id, int64_t run_id, const std::vector<GateResult>& g) {
  store::Transaction tx(st);
  insert_gates(st, proposal_id, run_id, g);
  tx.commit();
}

void insert_gates(store::Store& st, int64_t proposal_id, int64_t run_id, const std::vector<GateResult>& g) {
  auto& q = st.prepare(
      "INSERT INTO gate_results (proposal_id, run_id, gate, passed, metric, value, threshold, detail_json) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
  for (const GateResult& r : g) {
    q.bind(1, proposal_id);
    if (run_id) q.bind(2, run_id); else q.bind(2, nullptr);
    q.bind(3, r.gate);
    q.bind(4, r.passed ? 1 : 0);
    q.bind(5, r.metric);
    q.bind(6, r.value);
    q.bind(7, r.threshold);
    q.bind(8, r.detail.dump());
    q.run();
  }
}

std::vector<GateResult> gate_results(store::Store& st, int64_t proposal_id) {
  auto& q = st.prepare(
      "SELECT gate, passed, metric, value, threshold, detail_json FROM gate_results WHERE proposal_id = ?1 ORDER BY id");
  q.bind(1, proposal_id);
  std::vector<GateResult> v;
  while (q.step()) {
    GateResult r;
    r.gate = q.column_text(0);
    r.passed = q.column_int64(1) != 0;
    r.metric = q.column_text(2);
    r.value = q.column_double(3);
    r.threshold = q.column_double(4);
    try {
      r.detail = parse_stored(q.column_text(5), "gate '" + r.gate + "' of proposal " + std::to_string(proposal_id), st.path());
    } catch (const Error&) {
      q.reset();
      throw;
    }
    v.push_back(std::move(r));
  }
  q.reset();
  return v;
}

}  // namespace rtx::evolve
