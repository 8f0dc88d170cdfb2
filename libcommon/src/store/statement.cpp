// rtx::store::Statement and Transaction: RAII wrappers over sqlite3_stmt and BEGIN IMMEDIATE.
#include <cstring>

#include "rtx/core/error.hpp"
#include "sqlite_check.hpp"

namespace rtx::store {

using detail::Connection;

Statement::Statement(Connection* conn, const std::string& sql) : conn_(conn), sql_(sql) {
  RTX_CHECK(conn_ && conn_->db, "statement on a closed or moved-from store");
  RTX_SQLITE_CHECK(conn_, sqlite3_prepare_v2(conn_->db, sql.c_str(), static_cast<int>(sql.size()), &stmt_, nullptr),
                   "prepare: " + sql);
  RTX_CHECK(stmt_ != nullptr, "empty SQL statement: '" + sql + "'");
}

Statement::~Statement() {
  if (stmt_) sqlite3_finalize(stmt_);
}

Statement::Statement(Statement&& o) noexcept : conn_(o.conn_), stmt_(o.stmt_), sql_(std::move(o.sql_)) {
  o.stmt_ = nullptr;
  o.conn_ = nullptr;
}

Statement& Statement::operator=(Statement&& o) noexcept {
  if (this != &o) {
    if (stmt_) sqlite3_finalize(stmt_);
    conn_ = o.conn_;
    stmt_ = o.stmt_;
    sql_ = std::move(o.sql_);
    o.stmt_ = nullptr;
    o.conn_ = nullptr;
  }
  return *this;
}

Statement& Statement::bind(int index, int64_t value) {
  RTX_SQLITE_CHECK(conn_, sqlite3_bind_int64(stmt_, index, value), "bind ?" + std::to_string(index) + ": " + sql_);
  return *this;
}

Statement& Statement::bind(int index, double value) {
  RTX_SQLITE_CHECK(conn_, sqlite3_bind_double(stmt_, index, value), "bind ?" + std::to_string(index) + ": " + sql_);
  return *this;
}

Statement& Statement::bind(int index, const std::string& text) {
  RTX_SQLITE_CHECK(conn_,
                   sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8),
                   "bind ?" + std::to_string(index) + ": " + sql_);
  return *this;
}

Statement& Statement::bind(int index, const char* text) {
  if (!text) return bind(index, nullptr);
  return bind(index, std::string(text));
}

Statement& Statement::bind(int index, std::nullptr_t) {
  RTX_SQLITE_CHECK(conn_, sqlite3_bind_null(stmt_, index), "bind ?" + std::to_string(index) + ": " + sql_);
  return *this;
}

Statement& Statement::bind_blob(int index, const void* data, size_t bytes) {
  // A zero-length blob must still bind as a blob, not NULL: use zeroblob for that case.
  const int rc = bytes == 0 ? sqlite3_bind_zeroblob(stmt_, index, 0)
                            : sqlite3_bind_blob64(stmt_, index, data, bytes, SQLITE_TRANSIENT);
  RTX_SQLITE_CHECK(conn_, rc, "bind ?" + std::to_string(index) + ": " + sql_);
  return *this;
}

int Statement::param_index(const std::string& name) const {
  const int i = sqlite3_bind_parameter_index(stmt_, name.c_str());
  if (i == 0)
    throw_internal("no SQL parameter named '" + name + "' in: " + sql_, conn_ ? conn_->path : std::string());
  return i;
}

bool Statement::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  // The error detail is on the connection; prepare() resets the statement before reuse.
  detail::throw_sqlite(conn_, rc, "step: " + sql_, __FILE__, __LINE__);
}

void Statement::run() {
  while (step()) {
  }
  reset();
}

void Statement::reset() {
  sqlite3_reset(stmt_);  // returns the last step's error, already reported by step()
  sqlite3_clear_bindings(stmt_);
}

int Statement::column_count() const { return sqlite3_column_count(stmt_); }
bool Statement::is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
int64_t Statement::column_int64(int col) const { return sqlite3_column_int64(stmt_, col); }
double Statement::column_double(int col) const { return sqlite3_column_double(stmt_, col); }

std::string Statement::column_text(int col) const {
  const unsigned char* p = sqlite3_column_text(stmt_, col);
  const int n = sqlite3_column_bytes(stmt_, col);
  return p ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(n)) : std::string();
}

std::vector<uint8_t> Statement::column_blob(int col) const {
  const auto* p = static_cast<const uint8_t*>(sqlite3_column_blob(stmt_, col));
  const int n = sqlite3_column_bytes(stmt_, col);
  return p ? std::vector<uint8_t>(p, p + n) : std::vector<uint8_t>();
}

std::optional<int64_t> Statement::column_opt_int64(int col) const {
  if (is_null(col)) return std::nullopt;
  return column_int64(col);
}
std::optional<double> Statement::column_opt_double(int col) const {
  if (is_null(col)) return std::nullopt;
  return column_double(col);
}
std::optional<std::string> Statement::column_opt_text(int col) const {
  if (is_null(col)) return std::nullopt;
  return column_text(col);
}

// ---- Transaction ------------------------------------------------------------------------

Transaction::Transaction(Store& store) : conn_(store.connection()) {
  RTX_CHECK(conn_ && conn_->db, "transaction on a closed or moved-from store");
  if (conn_->in_transaction)
    throw_internal("nested rtx::store::Transaction (one transaction per logical write)", conn_->path);
  RTX_SQLITE_CHECK(conn_, sqlite3_exec(conn_->db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), "BEGIN IMMEDIATE");
  conn_->in_transaction = true;
}

void Transaction::commit() {
  RTX_CHECK(!done_, "transaction already committed");
  RTX_SQLITE_CHECK(conn_, sqlite3_exec(conn_->db, "COMMIT", nullptr, nullptr, nullptr), "COMMIT");
  done_ = true;
  conn_->in_transaction = false;
}

Transaction::~Transaction() {
  if (done_) return;
  // A failed statement may already have rolled back (autocommit on again): then nothing to do.
  if (!sqlite3_get_autocommit(conn_->db)) sqlite3_exec(conn_->db, "ROLLBACK", nullptr, nullptr, nullptr);
  conn_->in_transaction = false;
}

}  // namespace rtx::store
