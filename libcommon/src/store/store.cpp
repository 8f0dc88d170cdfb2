// rtx::store::Store: open (mkdir -p, version check, pragmas, migrations, sanity probe) and the
// typed helpers for runs, artifacts and doctor reports.
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <vector>

#include "migrations.hpp"
#include "rtx/core/error.hpp"
#include "sqlite_check.hpp"

namespace fs = std::filesystem;

namespace rtx::store {

using detail::Connection;

std::string default_db_path() {
  const char* home = std::getenv("RTX_HOME");
  if (home && *home) {
    std::string h = home;
    if (h.back() != '/') h += '/';
    return h + "rtx.db";
  }
  return "./.rtx/rtx.db";
}

std::string resolve_db_path(const std::string& db_flag) { return db_flag.empty() ? default_db_path() : db_flag; }

namespace {

bool is_memory(const std::string& path) { return path == ":memory:"; }

// Run one statement returning a single integer (a PRAGMA); throws via the check macro.
int64_t query_int(Connection* c, const std::string& sql) {
  Statement st(c, sql);
  return st.step() ? st.column_int64(0) : 0;
}

void exec_sql(Connection* c, const std::string& sql) {
  RTX_SQLITE_CHECK(c, sqlite3_exec(c->db, sql.c_str(), nullptr, nullptr, nullptr), sql.substr(0, 60));
}

void make_parent_dir(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  if (fs::is_directory(parent, ec)) return;
  fs::create_directories(parent, ec);
  if (ec || !fs::is_directory(parent))
    throw Error(ErrorCategory::Environment,
                "cannot create the store directory: " + (ec ? ec.message() : std::string("not a directory")),
                parent.string(), "set RTX_HOME or pass --db to a writable location");
}

// SQLite treats a file shorter than one page as an empty database and would overwrite it,
// so check the 100-byte header ourselves: magic string, page size, whole pages.
// (An empty file is a new store; in WAL mode its pages may still be in the -wal file.)
/// `path` as the path part of an SQLite URI filename (https://sqlite.org/uri.html): '%', '?'
/// and '#' and bytes outside printable ASCII percent-encoded.
std::string uri_path(const std::string& path) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (const char ch : path) {
    const unsigned char u = static_cast<unsigned char>(ch);
    if (u <= 0x20 || u >= 0x7f || ch == '%' || ch == '?' || ch == '#') {
      out += '%';
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

void check_header(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec || size == 0) return;  // missing or unreadable: sqlite3_open reports it
  std::ifstream f(path, std::ios::binary);
  unsigned char h[100] = {};
  if (!f.read(reinterpret_cast<char*>(h), sizeof h)) {
    if (!f.is_open()) return;
  }
  const auto fail = [&](const std::string& why) {
    throw Error(ErrorCategory::Input, path + " is not a valid rtx store (" + why + "): move it aside or pass --db");
  };
  if (size < sizeof h || std::memcmp(h, "SQLite format 3", 16) != 0) fail("file is not a database");
  uint32_t page = (uint32_t(h[16]) << 8) | h[17];
  if (page == 1) page = 65536;
  if (page < 512 || page > 65536 || (page & (page - 1)) != 0) fail("file is not a database");
  if (size % page != 0)
    fail("file is truncated: " + std::to_string(size) + " bytes, not a whole number of " + std::to_string(page) +
         "-byte pages");
}

void check_not_foreign(Connection* c, int64_t version) {
  if (version < 0)
    throw Error(ErrorCategory::Input, c->path + " is not a valid rtx store (an SQLite database with user_version " +
                                          std::to_string(version) + ", which rtx never writes): move it aside or pass --db");
  if (version != 0) return;
  const int64_t n = query_int(c, "SELECT count(*) FROM sqlite_master");
  if (n > 0)
    throw Error(ErrorCategory::Input, c->path + " is not a valid rtx store (an SQLite database of another program: " +
                                          std::to_string(n) + " schema objects, user_version 0): move it aside or pass --db");
}

void probe_schema(Connection* c, int64_t claimed);

// All pending migrations and the structural probe run in ONE transaction (SQLite DDL is
// transactional): a store whose tables do not match its user_version (a migration's SQL fails,
// or the result lacks a table or column) is refused as not a valid rtx store and rolled back,
// so nothing is committed and the file stays as it was. Every refusal names the version the
// file claims (its user_version as read under the lock), never the one a migration reached.
void migrate_and_probe(Connection* c) {
  const auto& all = detail::migrations();
  if (c->schema_version >= all.back().version) {
    probe_schema(c, c->schema_version);
    return;
  }
  const int opened_at = c->schema_version;
  RTX_SQLITE_CHECK(c, sqlite3_exec(c->db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), "BEGIN IMMEDIATE (migration)");
  try {
    // Another process may have migrated while we waited for the lock: re-read.
    const int64_t now = query_int(c, "PRAGMA user_version");
    if (now == 0) check_not_foreign(c, now);
    c->schema_version = static_cast<int>(now);
    for (const auto& m : all) {
      if (m.version <= c->schema_version) continue;
      const int rc = sqlite3_exec(c->db, m.sql, nullptr, nullptr, nullptr);
      if ((rc & 0xff) == SQLITE_ERROR)
        throw Error(ErrorCategory::Input, c->path + " is not a valid rtx store (schema version " +
                                              std::to_string(now) + " but migration " +
                                              std::to_string(m.version) + " fails on its tables: " +
                                              sqlite3_errmsg(c->db) + "): move it aside or pass --db");
      RTX_SQLITE_CHECK(c, rc, "migration " + std::to_string(m.version));
      exec_sql(c, "PRAGMA user_version = " + std::to_string(m.version));
      c->schema_version = m.version;
    }
    probe_schema(c, now);
    exec_sql(c, "COMMIT");
  } catch (...) {
    if (!sqlite3_get_autocommit(c->db)) sqlite3_exec(c->db, "ROLLBACK", nullptr, nullptr, nullptr);
    c->schema_version = opened_at;
    throw;
  }
}

// The columns every expected table has at the latest schema version: this build's migrations
// applied once (per process) to an empty in-memory database, so a later ALTER TABLE ... ADD
// COLUMN is required of every store without a list to keep in step with migrations.cpp.
const std::map<std::string, std::vector<std::string>>& reference_columns() {
  static const std::map<std::string, std::vector<std::string>> cols = [] {
    std::map<std::string, std::vector<std::string>> m;
    sqlite3* db = nullptr;
    auto fail = [&](const std::string& what) {
      const std::string msg = what + ": " + (db ? sqlite3_errmsg(db) : "out of memory");
      sqlite3_close(db);
      throw Error(ErrorCategory::Internal, "cannot build the reference schema (" + msg + ")", "rtx::store migrations");
    };
    if (sqlite3_open(":memory:", &db) != SQLITE_OK) fail("open :memory:");
    for (const auto& mig : detail::migrations())
      if (sqlite3_exec(db, mig.sql, nullptr, nullptr, nullptr) != SQLITE_OK) fail("migration " + std::to_string(mig.version));
    for (const auto& t : detail::expected_tables()) {
      sqlite3_stmt* st = nullptr;
      if (sqlite3_prepare_v2(db, ("PRAGMA table_info(\"" + t + "\")").c_str(), -1, &st, nullptr) != SQLITE_OK)
        fail("table_info " + t);
      auto& names = m[t];
      while (sqlite3_step(st) == SQLITE_ROW) names.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(st, 1)));
      sqlite3_finalize(st);
      if (names.empty()) fail("table " + t + " is not created by the migrations");
    }
    sqlite3_close(db);
    return m;
  }();
  return cols;
}

// Cheap structural probe: every expected table exists with every column the migrations give
// it, and its root page reads. Catches truncated or damaged files, and a user_version that
// claims a schema the tables do not have, without a full integrity check. `claimed` is the
// user_version the file had when opened (before any migration of this open), which the
// refusal names.
void probe_schema(Connection* c, int64_t claimed) {
  std::set<std::string> have;
  {
    Statement st(c, "SELECT name FROM sqlite_master WHERE type = 'table'");
    while (st.step()) have.insert(st.column_text(0));
  }
  const auto invalid = [&](const std::string& why) {
    return Error(ErrorCategory::Input, c->path + " is not a valid rtx store (schema version " +
                                           std::to_string(claimed) + " but " + why +
                                           "): move it aside or pass --db");
  };
  const auto& reference = reference_columns();
  for (const auto& t : detail::expected_tables()) {
    if (!have.count(t)) throw invalid("table '" + t + "' is missing");
    std::set<std::string> cols;
    {
      Statement st(c, "PRAGMA table_info(\"" + t + "\")");
      while (st.step()) cols.insert(st.column_text(1));
    }
    std::string missing;
    size_t n_missing = 0;
    for (const auto& col : reference.at(t))
      if (!cols.count(col)) missing += std::string(n_missing++ ? ", " : "") + "'" + col + "'";
    if (n_missing > 0)
      throw invalid("table '" + t + "' lacks column" + (n_missing == 1 ? " " : "s ") + missing);
    Statement st(c, "SELECT 1 FROM \"" + t + "\" LIMIT 1");
    st.step();
  }
}

}  // namespace

int Store::latest_schema_version() { return detail::migrations().back().version; }

Store::Store(const std::string& path, const StoreOptions& options) {
  if (path.empty()) throw_usage("empty store path", "--db", "pass --db PATH or set RTX_HOME");
  auto c = std::make_unique<Connection>();
  c->path = path;
  c->busy_timeout_ms = options.busy_timeout_ms;
  if (options.read_only && !is_memory(path)) {
    std::error_code ec;
    if (!fs::exists(path, ec))
      throw Error(ErrorCategory::Environment, "no store at " + path + (ec ? " (" + ec.message() + ")" : ""), path,
                  "run rtx-bench run or rtx-evolve run first, or pass --db");
  }
  if (!is_memory(path)) {
    if (!options.read_only) make_parent_dir(path);
    check_header(path);
  }

  int flags = options.read_only ? SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX
                                : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  std::string name = path;
  std::error_code wal_ec;
  if (options.read_only && !is_memory(path) && !fs::exists(path + "-wal", wal_ec)) {
    // No -wal file: no connection is open (the last close checkpointed everything into the
    // main file), so it is opened immutable (SQLite URI parameter `immutable=1`): a plain
    // read-only open of a WAL store would create -wal and -shm beside it (with the file's
    // mode: a 0444 -shm then breaks later writers) and fails in a read-only directory. With
    // a -wal present a writer may be live, and the normal read-only open sees its pages.
    name = "file:" + uri_path(path) + "?immutable=1";
    flags |= SQLITE_OPEN_URI;
  }
  const int rc = sqlite3_open_v2(name.c_str(), &c->db, flags, nullptr);
  if (rc != SQLITE_OK) {
    if (!c->db) throw Error(ErrorCategory::Environment, "cannot open store: out of memory", path);
    RTX_SQLITE_CHECK(c.get(), rc, "open");
  }
  sqlite3_extended_result_codes(c->db, 1);
  RTX_SQLITE_CHECK(c.get(), sqlite3_busy_timeout(c->db, options.busy_timeout_ms), "busy_timeout");

  // Read the version before changing anything, so a newer or foreign store stays untouched.
  const int64_t version = query_int(c.get(), "PRAGMA user_version");
  const int latest = latest_schema_version();
  if (version > latest)
    throw Error(ErrorCategory::Environment, "store schema version " + std::to_string(version) +
                                                " is newer than this rtx supports (" + std::to_string(latest) +
                                                "); upgrade rtx or use another --db",
                path);
  check_not_foreign(c.get(), version);
  c->schema_version = static_cast<int>(version);
  if (options.read_only) {
    if (version < latest)
      throw Error(ErrorCategory::Environment, "store schema version " + std::to_string(version) +
                                                  " is older than this rtx's (" + std::to_string(latest) +
                                                  ") and a read-only open does not migrate it",
                  path, "run any rtx command that writes the store (e.g. rtx-doctor --quick) once");
    probe_schema(c.get(), version);
    conn_ = std::move(c);
    return;
  }

  exec_sql(c.get(), "PRAGMA foreign_keys = ON");
  // Migrations and the probe first, in the file's own journal mode: a refused store is rolled
  // back and left byte for byte as it was. journal_mode=WAL persists in the file's header, so
  // it is switched only once the store is accepted (outside any transaction, as SQLite needs).
  migrate_and_probe(c.get());
  if (!is_memory(path)) {
    Statement st(c.get(), "PRAGMA journal_mode = WAL");
    const std::string mode = st.step() ? st.column_text(0) : std::string();
    st.reset();
    if (mode != "wal")
      throw Error(ErrorCategory::Environment, "cannot switch the store to WAL mode (got '" + mode + "')", path,
                  "the file system may not support shared memory; use --db on a local disk");
  }
  exec_sql(c.get(), "PRAGMA synchronous = NORMAL");
  conn_ = std::move(c);
}

Store::~Store() = default;
Store::Store(Store&&) noexcept = default;
Store& Store::operator=(Store&&) noexcept = default;

static Connection* live(const std::unique_ptr<Connection>& c) {
  RTX_CHECK(c != nullptr, "use of a moved-from rtx::store::Store");
  return c.get();
}

const std::string& Store::path() const { return live(conn_)->path; }
int Store::schema_version() const { return live(conn_)->schema_version; }

Statement& Store::prepare(const std::string& sql) {
  Connection* c = live(conn_);
  auto it = c->cache.find(sql);
  if (it == c->cache.end()) it = c->cache.emplace(sql, std::make_unique<Statement>(c, sql)).first;
  it->second->reset();
  return *it->second;
}

void Store::exec(const std::string& sql) { exec_sql(live(conn_), sql); }
int64_t Store::last_insert_rowid() const { return sqlite3_last_insert_rowid(live(conn_)->db); }
int Store::changes() const { return sqlite3_changes(live(conn_)->db); }

std::vector<std::string> Store::integrity_check() {
  Connection* c = live(conn_);
  std::vector<std::string> out;
  try {
    Statement st(c, "PRAGMA integrity_check");
    while (st.step()) out.push_back(st.column_text(0));
  } catch (const Error& e) {
    out.push_back(e.what());
  }
  return out;
}

// ---- typed helpers -------------------------------------------------------------------------

static void bind_run_id(Statement& st, int index, int64_t run_id) {
  if (run_id == 0)
    st.bind(index, nullptr);
  else
    st.bind(index, run_id);
}

int64_t Store::begin_run(const std::string& tool, const std::string& args_json, uint64_t seed,
                         const std::string& git_sha, const std::string& hw_sku, const std::string& hw_json) {
  Transaction tx(*this);
  Statement& st = prepare(
      "INSERT INTO runs (tool, args_json, seed, git_sha, hw_sku, hw_json) VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  st.bind(1, tool).bind(2, args_json).bind(3, static_cast<int64_t>(seed)).bind(4, git_sha).bind(5, hw_sku).bind(6, hw_json);
  st.run();
  const int64_t id = last_insert_rowid();
  tx.commit();
  return id;
}

void Store::finish_run(int64_t run_id, const std::string& status) {
  Transaction tx(*this);
  Statement& st = prepare(
      "UPDATE runs SET status = ?1, finished_at = strftime('%Y-%m-%dT%H:%M:%fZ','now') WHERE id = ?2");
  st.bind(1, status).bind(2, run_id);
  st.run();
  if (changes() != 1) throw_input("no run with id " + std::to_string(run_id), path(), "finish_run needs an id from begin_run");
  tx.commit();
}

std::optional<RunRecord> Store::get_run(int64_t run_id) {
  Statement& st = prepare(
      "SELECT id, tool, args_json, seed, started_at, finished_at, status, git_sha, hw_sku, hw_json FROM runs WHERE id = ?1");
  st.bind(1, run_id);
  if (!st.step()) {
    st.reset();
    return std::nullopt;
  }
  RunRecord r;
  r.id = st.column_int64(0);
  r.tool = st.column_text(1);
  r.args_json = st.column_text(2);
  r.seed = static_cast<uint64_t>(st.column_int64(3));
  r.started_at = st.column_text(4);
  r.finished_at = st.column_opt_text(5);
  r.status = st.column_text(6);
  r.git_sha = st.column_text(7);
  r.hw_sku = st.column_text(8);
  r.hw_json = st.column_text(9);
  st.reset();
  return r;
}

int64_t Store::put_artifact(int64_t run_id, const std::string& kind, const std::string& schema,
                            const std::string& json_text) {
  Transaction tx(*this);
  Statement& st = prepare("INSERT INTO artifacts (run_id, kind, schema, json) VALUES (?1, ?2, ?3, ?4)");
  bind_run_id(st, 1, run_id);
  st.bind(2, kind).bind(3, schema).bind(4, json_text);
  st.run();
  const int64_t id = last_insert_rowid();
  tx.commit();
  return id;
}

static std::optional<std::string> first_text(Statement& st) {
  std::optional<std::string> out;
  if (st.step()) out = st.column_text(0);
  st.reset();  // release the read transaction
  return out;
}

std::optional<std::string> Store::latest_artifact(const std::string& kind) {
  Statement& st = prepare("SELECT json FROM artifacts WHERE kind = ?1 ORDER BY id DESC LIMIT 1");
  st.bind(1, kind);
  return first_text(st);
}

int64_t Store::put_doctor_report(int64_t run_id, const std::string& json_text) {
  Transaction tx(*this);
  Statement& st = prepare("INSERT INTO doctor_reports (run_id, json) VALUES (?1, ?2)");
  bind_run_id(st, 1, run_id);
  st.bind(2, json_text);
  st.run();
  const int64_t id = last_insert_rowid();
  tx.commit();
  return id;
}

std::optional<std::string> Store::latest_doctor_report() {
  return first_text(prepare("SELECT json FROM doctor_reports ORDER BY id DESC LIMIT 1"));
}

}  // namespace rtx::store
