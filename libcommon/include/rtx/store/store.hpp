// rtx::store: the one SQLite store ($RTX_HOME/rtx.db) every rtx tool shares. WAL mode,
// numbered migrations at open, RAII statements/transactions; schema in docs/store.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace rtx::store {

namespace detail {
struct Connection;  // sqlite3 handle + path + busy timeout (src/store/sqlite_check.hpp)
}

/// `$RTX_HOME/rtx.db` when RTX_HOME is set and non-empty, else `./.rtx/rtx.db`.
std::string default_db_path();
/// The store path a tool uses: `db_flag` (the `--db PATH` value) when non-empty, else
/// default_db_path().
std::string resolve_db_path(const std::string& db_flag);

/// How to open a store.
struct StoreOptions {
  /// How long (ms) a write waits for another process's write lock before failing with
  /// rtx::Error(Environment) "store is locked by another process (busy for N ms)".
  int busy_timeout_ms = 5000;
  /// Open an existing store for reading only (SQLITE_OPEN_READONLY): nothing is created,
  /// migrated or switched to WAL, and every write fails with rtx::Error(Environment). A
  /// missing file is rtx::Error(Environment) "no store at <path>"; a store at an older schema
  /// than this build's is rtx::Error(Environment) naming both versions (any rtx command that
  /// writes migrates it). For commands told not to write (`rtx-bench run --no-store`).
  bool read_only = false;
};

/// A prepared SQL statement (RAII; finalized on destruction). Obtain one from
/// Store::prepare(). Parameter indices are 1-based (SQLite's `?1`), column indices 0-based.
/// Every SQLite failure throws rtx::Error: Environment for busy/locked/disk full/read-only,
/// Input for a corrupt store, Internal otherwise; messages carry the store path, the SQL
/// and the C++ file:line of the failing call.
class Statement {
 public:
  Statement(detail::Connection* conn, const std::string& sql);
  ~Statement();
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  /// Bind parameter `index` (1-based). Text and blobs are copied. Returns *this.
  Statement& bind(int index, int64_t value);
  /// Any other integer type (int, size_t, bool, uint64_t, ...) binds as int64_t; unsigned
  /// 64-bit values above INT64_MAX are stored bit-cast (read back with
  /// static_cast<uint64_t>(column_int64())).
  template <class I, std::enable_if_t<std::is_integral<I>::value && !std::is_same<I, int64_t>::value, int> = 0>
  Statement& bind(int index, I value) { return bind(index, static_cast<int64_t>(value)); }
  Statement& bind(int index, double value);
  Statement& bind(int index, const std::string& text);
  Statement& bind(int index, const char* text);  ///< nullptr binds NULL
  Statement& bind(int index, std::nullptr_t);    ///< SQL NULL
  Statement& bind_blob(int index, const void* data, size_t bytes);
  /// Bind by name, including its prefix (":seed", "@seed", "$seed"); throws
  /// rtx::Error(Internal) when the statement has no such parameter.
  template <class T>
  Statement& bind(const std::string& name, const T& value) { return bind(param_index(name), value); }
  Statement& bind_blob(const std::string& name, const void* data, size_t bytes) {
    return bind_blob(param_index(name), data, bytes);
  }
  /// 1-based index of a named parameter (":name"); throws rtx::Error(Internal) if absent.
  int param_index(const std::string& name) const;

  /// Advance: true when a row is available, false when the statement is done.
  bool step();
  /// Step to completion (INSERT/UPDATE/DELETE), then reset() so it can be reused.
  void run();
  /// Rewind for another execution; clears bindings to NULL.
  void reset();

  /// Columns of the current row (0-based). Getters convert like sqlite3_column_*:
  /// NULL reads as 0 / 0.0 / "" / empty blob.
  int column_count() const;
  bool is_null(int col) const;
  int64_t column_int64(int col) const;
  double column_double(int col) const;
  std::string column_text(int col) const;
  std::vector<uint8_t> column_blob(int col) const;
  std::optional<int64_t> column_opt_int64(int col) const;    ///< nullopt for NULL
  std::optional<double> column_opt_double(int col) const;    ///< nullopt for NULL
  std::optional<std::string> column_opt_text(int col) const;  ///< nullopt for NULL

  /// The SQL text this statement was prepared from.
  const std::string& sql() const { return sql_; }

 private:
  detail::Connection* conn_ = nullptr;
  struct sqlite3_stmt* stmt_ = nullptr;
  std::string sql_;
};

class Store;

/// RAII write transaction: `BEGIN IMMEDIATE` at construction (takes the write lock, waiting
/// up to the busy timeout), `commit()` to keep the changes; destroyed uncommitted it rolls
/// back (so an exception leaves the store as it was). One transaction per logical write.
/// Not nestable: opening a second one on the same Store throws rtx::Error(Internal).
class Transaction {
 public:
  explicit Transaction(Store& store);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  /// Commit; throws rtx::Error on failure (then the destructor rolls back).
  void commit();

 private:
  detail::Connection* conn_;
  bool done_ = false;
};

/// A run row (table `runs`): one invocation of an rtx tool.
struct RunRecord {
  int64_t id = 0;
  std::string tool;             ///< "rtx-bench"
  std::string args_json;        ///< the command line as a JSON array of strings
  uint64_t seed = 0;            ///< --seed
  std::string started_at;       ///< UTC ISO-8601, "2025-01-31T12:00:00.123Z"
  std::optional<std::string> finished_at;  ///< nullopt while running
  std::string status;           ///< "running" until finish_run()
  std::string git_sha;          ///< rtx build's git sha
  std::string hw_sku;           ///< hardware SKU key, e.g. "NVIDIA H100 80GB HBM3" or CPU model
  std::string hw_json;          ///< hardware profile JSON
};

/// The rtx store: one SQLite connection. Opening creates the parent directory (mkdir -p),
/// sets WAL, foreign_keys=ON, synchronous=NORMAL and the busy timeout, then applies the
/// numbered migrations this build knows (each in one transaction; PRAGMA user_version holds
/// the schema version). ":memory:" opens a private in-memory store (for tests).
/// Non-copyable, movable; a moved-from Store may only be destroyed or assigned to. One
/// thread at a time per Store (open one Store per thread for parallel access).
class Store {
 public:
  /// Open (creating if needed) the store at `path`. Throws rtx::Error:
  ///  - Environment: parent directory cannot be created / file cannot be opened or written
  ///    (names the path and errno text); store written by a newer rtx ("<path>: store schema
  ///    version N is newer than this rtx supports (M); upgrade rtx or use another --db"; the
  ///    file is left unmodified); store locked past the busy timeout.
  ///  - Input: not an SQLite database, corrupt, or an SQLite file of another program
  ///    ("<path> is not a valid rtx store (file is not a database): move it aside or pass --db").
  explicit Store(const std::string& path, const StoreOptions& options = {});
  ~Store();
  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  /// The path this store was opened from.
  const std::string& path() const;
  /// Schema version of the open store (PRAGMA user_version) after migrations.
  int schema_version() const;
  /// Highest schema version this build of rtx knows.
  static int latest_schema_version();

  /// A prepared statement for `sql`, cached by SQL text; it is reset (bindings cleared)
  /// before being returned. The reference stays valid for the Store's lifetime. Do not
  /// use the same SQL text re-entrantly (e.g. inside a loop stepping it).
  Statement& prepare(const std::string& sql);
  /// Execute one or more SQL statements without results (DDL, PRAGMA).
  void exec(const std::string& sql);
  /// Rowid of the last successful INSERT on this connection.
  int64_t last_insert_rowid() const;
  /// Rows changed by the last INSERT/UPDATE/DELETE.
  int changes() const;

  /// PRAGMA integrity_check: {"ok"} for a healthy store, else one line per problem
  /// (a store too damaged to check yields one line with SQLite's error). For rtx-doctor.
  std::vector<std::string> integrity_check();

  // ---- typed helpers (each one transaction) -------------------------------------------
  /// Insert a `runs` row with status "running" and started_at = now; returns its id.
  /// `args_json` and `hw_json` must be valid JSON (else rtx::Error(Input)); `seed` is
  /// stored bit-cast to SQLite's signed 64-bit integer and read back unchanged.
  int64_t begin_run(const std::string& tool, const std::string& args_json, uint64_t seed,
                    const std::string& git_sha, const std::string& hw_sku, const std::string& hw_json);
  /// Set status ("ok", "fail", "error", "interrupted", ...) and finished_at = now.
  /// Throws rtx::Error(Input) when no run has this id.
  void finish_run(int64_t run_id, const std::string& status);
  /// The run with this id, or nullopt.
  std::optional<RunRecord> get_run(int64_t run_id);

  /// Store an artifact document (`json_text` must be valid JSON; `schema` e.g. "rtx.bench.v1",
  /// `kind` e.g. "bench"). `run_id` 0 means "no run" (NULL); otherwise it must exist
  /// (foreign key; else rtx::Error(Input)). Returns the artifact id.
  int64_t put_artifact(int64_t run_id, const std::string& kind, const std::string& schema,
                       const std::string& json_text);
  /// JSON text of the most recently stored artifact of `kind`, or nullopt.
  std::optional<std::string> latest_artifact(const std::string& kind);

  /// Store a doctor report (rtx.doctor.v1 JSON text); `run_id` 0 means none. Returns its id.
  int64_t put_doctor_report(int64_t run_id, const std::string& json_text);
  /// JSON text of the most recent doctor report, or nullopt.
  std::optional<std::string> latest_doctor_report();

  /// Low-level access for the statement/transaction classes.
  detail::Connection* connection() const { return conn_.get(); }

 private:
  std::unique_ptr<detail::Connection> conn_;
};

}  // namespace rtx::store
