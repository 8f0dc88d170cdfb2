// Internal to the store module: the connection struct and RTX_SQLITE_CHECK, which turns any
// failing SQLite return code into an rtx::Error carrying the store path and C++ file:line.
#pragma once
#include <sqlite3.h>

#include <memory>
#include <string>
#include <unordered_map>

#include "rtx/store/store.hpp"

namespace rtx::store::detail {

/// One open SQLite connection and its per-connection state.
struct Connection {
  sqlite3* db = nullptr;
  std::string path;
  int busy_timeout_ms = 5000;
  int schema_version = 0;
  bool in_transaction = false;  ///< a Transaction object is open
  std::unordered_map<std::string, std::unique_ptr<Statement>> cache;  ///< by SQL text

  Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();
};

/// Throw the rtx::Error for SQLite result `rc` on `conn` while doing `what` (SQL or call).
/// BUSY/LOCKED, FULL, READONLY, CANTOPEN, IOERR, PERM -> Environment; CORRUPT/NOTADB -> Input
/// ("<path> is not a valid rtx store (...)"); CONSTRAINT -> Input; others -> Internal.
[[noreturn]] void throw_sqlite(const Connection* conn, int rc, const std::string& what, const char* file, int line);

/// True for the result codes that mean success (OK, ROW, DONE).
inline bool sqlite_ok(int rc) { return rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE; }

}  // namespace rtx::store::detail

/// Evaluate an sqlite3_* call; on failure throw via throw_sqlite with this file and line.
#define RTX_SQLITE_CHECK(conn, call, what)                                              \
  do {                                                                                  \
    const int rtx_sqlite_rc_ = (call);                                                  \
    if (!::rtx::store::detail::sqlite_ok(rtx_sqlite_rc_))                               \
      ::rtx::store::detail::throw_sqlite((conn), rtx_sqlite_rc_, (what), __FILE__, __LINE__); \
  } while (0)
