// Error categories map to the exit codes of docs/architecture.md; messages carry where and hint.
#include <catch2/catch.hpp>

#include "rtx/core/error.hpp"

using namespace rtx;

TEST_CASE("error categories map to the exit codes of docs/architecture.md", "[cpu]") {
  CHECK(exit_code(ErrorCategory::Usage) == 2);
  CHECK(exit_code(ErrorCategory::Input) == 2);
  CHECK(exit_code(ErrorCategory::Environment) == 3);
  CHECK(exit_code(ErrorCategory::Internal) == 4);
}

TEST_CASE("error message names where and what to do", "[cpu]") {
  try {
    throw_input("bad value", "pack.json: cases[2].shape", "use MxNxK");
    FAIL("no throw");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::Input);
    CHECK(std::string(e.what()) == "pack.json: cases[2].shape: bad value (use MxNxK)");
    CHECK(e.where() == "pack.json: cases[2].shape");
  }
  CHECK_THROWS_AS(throw_env("no gpu"), Error);
  try {
    RTX_CHECK(1 + 1 == 3, "math");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::Internal);
    CHECK(std::string(e.what()).find("error_test.cpp") != std::string::npos);
  }
}
