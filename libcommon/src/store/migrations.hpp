// Internal to the store module: the numbered schema migrations (docs/store.md describes them).
#pragma once
#include <string>
#include <vector>

namespace rtx::store::detail {

/// One schema step: applied in one transaction, then PRAGMA user_version = version.
struct Migration {
  int version;      ///< 1, 2, ... contiguous
  const char* name; ///< short description
  const char* sql;  ///< DDL, may hold several statements
};

/// All migrations this build knows, in order (version i at index i-1).
const std::vector<Migration>& migrations();
/// Tables the latest schema must contain (checked at open).
const std::vector<std::string>& expected_tables();

}  // namespace rtx::store::detail
