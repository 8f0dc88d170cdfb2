// Internal to libcommon/src/evolve (the pipeline's files: validate.cpp, run.cpp, status.cpp):
// the few helpers more than one of them uses. Not a public header.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace rtx::evolve::detail {

/// printf of one number with format `f` ("%.3g"), for gate values and report lines.
std::string fmt(const char* f, double x);
/// The summary of report rows (proposal_row's shape): proposed, passed, failed, undecided,
/// promoted counts by status.
nlohmann::json summarize(const nlohmann::json& rows);

}  // namespace rtx::evolve::detail
