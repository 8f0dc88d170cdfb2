// Maps SQLite result codes to rtx::Error categories and messages (see sqlite_check.hpp).
#include "sqlite_check.hpp"

#include <cstring>

#include "rtx/core/error.hpp"

namespace rtx::store::detail {

Connection::~Connection() {
  cache.clear();  // finalize statements before closing
  if (db) sqlite3_close_v2(db);
}

static std::string base_name(const char* file) {
  const char* slash = std::strrchr(file, '/');
  return slash ? slash + 1 : file;
}

void throw_sqlite(const Connection* conn, int rc, const std::string& what, const char* file, int line) {
  const std::string path = conn ? conn->path : std::string("<store>");
  std::string errmsg = (conn && conn->db) ? sqlite3_errmsg(conn->db) : sqlite3_errstr(rc);
  const int sys_errno = (conn && conn->db) ? sqlite3_system_errno(conn->db) : 0;
  const std::string at = " [" + what + " at " + base_name(file) + ":" + std::to_string(line) + "]";
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      throw Error(ErrorCategory::Environment,
                  "store is locked by another process (busy for " +
                      std::to_string(conn ? conn->busy_timeout_ms : 0) + " ms)" + at,
                  path, "wait for the other rtx process to finish, or use another --db");
    case SQLITE_FULL:
      throw Error(ErrorCategory::Environment, "disk full" + at, path, "free disk space or use another --db");
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_IOERR:
    case SQLITE_AUTH: {
      std::string msg = errmsg;
      if (sys_errno != 0) msg += std::string(": ") + std::strerror(sys_errno);
      throw Error(ErrorCategory::Environment, msg + at, path,
                  "check that the file and its directory are writable, or use another --db");
    }
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      throw Error(ErrorCategory::Input,
                  path + " is not a valid rtx store (" + errmsg + "): move it aside or pass --db" + at);
    case SQLITE_CONSTRAINT:
      throw Error(ErrorCategory::Input, "store constraint violated: " + errmsg + at, path);
    default:
      throw Error(ErrorCategory::Internal, "SQLite error " + std::to_string(rc) + ": " + errmsg + at, path);
  }
}

}  // namespace rtx::store::detail
