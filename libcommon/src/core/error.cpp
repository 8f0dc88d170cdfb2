// rtx::Error implementation and category -> exit-code mapping.
#include "rtx/core/error.hpp"

namespace rtx {

int exit_code(ErrorCategory c) noexcept {
  switch (c) {
    case ErrorCategory::Usage: return 2;
    case ErrorCategory::Input: return 2;
    case ErrorCategory::Environment: return 3;
    case ErrorCategory::Internal: return 4;
  }
  return 4;
}

const char* category_name(ErrorCategory c) noexcept {
  switch (c) {
    case ErrorCategory::Usage: return "usage";
    case ErrorCategory::Input: return "input";
    case ErrorCategory::Environment: return "environment";
    case ErrorCategory::Internal: return "internal";
  }
  return "internal";
}

static std::string compose(const std::string& m, const std::string& where, const std::string& hint) {
  std::string s = where.empty() ? m : where + ": " + m;
  if (!hint.empty()) s += " (" + hint + ")";
  return s;
}

Error::Error(ErrorCategory category, std::string message, std::string where, std::string hint)
    : std::runtime_error(compose(message, where, hint)),
      category_(category), message_(std::move(message)), where_(std::move(where)), hint_(std::move(hint)) {}

void throw_usage(std::string m, std::string w, std::string h) { throw Error(ErrorCategory::Usage, std::move(m), std::move(w), std::move(h)); }
void throw_input(std::string m, std::string w, std::string h) { throw Error(ErrorCategory::Input, std::move(m), std::move(w), std::move(h)); }
void throw_env(std::string m, std::string w, std::string h) { throw Error(ErrorCategory::Environment, std::move(m), std::move(w), std::move(h)); }
void throw_internal(std::string m, std::string w, std::string h) { throw Error(ErrorCategory::Internal, std::move(m), std::move(w), std::move(h)); }

}  // namespace rtx
