// Internal to libcommon/src/evolve: the few helpers more than one of its files uses (the
// pipeline's validate.cpp, run.cpp, status.cpp; the store rows). Not a public header.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace rtx::evolve::detail {

/// printf of one number with format `f` ("%.3g"), for gate values and report lines.
std::string fmt(const char* f, double x);
/// The summary of report rows (proposal_row's shape): proposed, passed, failed, undecided,
/// promoted counts by status.
nlohmann::json summarize(const nlohmann::json& rows);
/// A JSON column of a stored row. A row edited outside rtx (invalid UTF-8, truncated JSON) is
/// bad input (Error(Input)) naming the row and the store `db`, not an internal parse_error.
nlohmann::json parse_stored(const std::string& text, const std::string& row, const std::string& db);

}  // namespace rtx::evolve::detail
