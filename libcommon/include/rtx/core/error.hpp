// rtx::Error: the one exception type of libcommon. Library code throws, never exits;
// each tool's main catches it once and maps its category to an exit code (docs/architecture.md, "Errors and exit codes").
#pragma once
#include <stdexcept>
#include <string>

namespace rtx {

/// What kind of failure an Error is. Exit codes (docs/architecture.md):
/// Usage/Input -> 2, Environment -> 3, Internal -> 4. (Exit 1 — "the checked thing
/// failed" — is an expected outcome returned as a value, never an Error.)
enum class ErrorCategory { Usage, Input, Environment, Internal };

/// Exit code for a category: Usage 2, Input 2, Environment 3, Internal 4.
int exit_code(ErrorCategory c) noexcept;
/// Lower-case name of a category ("usage", "input", "environment", "internal").
const char* category_name(ErrorCategory c) noexcept;

/// The exception libcommon throws. `what()` is the full message; `where` names the file,
/// field, line or argument at fault (may be empty); `hint` says what to do (may be empty).
class Error : public std::runtime_error {
 public:
  Error(ErrorCategory category, std::string message, std::string where = {}, std::string hint = {});
  ErrorCategory category() const noexcept { return category_; }
  const std::string& message() const noexcept { return message_; }
  const std::string& where() const noexcept { return where_; }
  const std::string& hint() const noexcept { return hint_; }
  int exit_code() const noexcept { return rtx::exit_code(category_); }

 private:
  ErrorCategory category_;
  std::string message_, where_, hint_;
};

/// Shorthands: throw an Error of each category.
[[noreturn]] void throw_usage(std::string message, std::string where = {}, std::string hint = {});
[[noreturn]] void throw_input(std::string message, std::string where = {}, std::string hint = {});
[[noreturn]] void throw_env(std::string message, std::string where = {}, std::string hint = {});
[[noreturn]] void throw_internal(std::string message, std::string where = {}, std::string hint = {});

}  // namespace rtx

/// Internal invariant check: throws rtx::Error(Internal) naming file and line when false.
#define RTX_CHECK(cond, msg)                                                                   \
  do {                                                                                         \
    if (!(cond))                                                                               \
      ::rtx::throw_internal(std::string("check failed: ") + #cond + ": " + (msg),              \
                            std::string(__FILE__) + ":" + std::to_string(__LINE__));           \
  } while (0)
