// Fuzz target: `rtx-evolve mcp`'s JSON-RPC 2.0 server (rtx::evolve::McpServer::serve) on any
// stdin bytes, over an in-memory store. Every reply must be one line of JSON-RPC 2.0 (a result or
// an error with a standard code) and there are never more replies than input lines.
#include <memory>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_util.hpp"
#include "rtx/core/error.hpp"
#include "rtx/evolve/mcp.hpp"
#include "rtx/evolve/proposal.hpp"
#include "rtx/store/store.hpp"

namespace {

/// A signing key in a temp dir, made once per process, so submit_proposal reaches the store.
const std::string& key_path() {
  static const std::string path = [] {
    char tmpl[] = "/tmp/rtx-fuzz-mcp-XXXXXX";
    RTX_FUZZ_CHECK(::mkdtemp(tmpl) != nullptr, "mkdtemp failed");
    const std::string p = std::string(tmpl) + "/evolve_ed25519.key";
    rtx::evolve::generate_key(p, /*overwrite=*/true);
    return p;
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A fresh in-memory store every 64 inputs, so accepted proposals do not pile up.
  static std::unique_ptr<rtx::store::Store> st;
  static int uses = 0;
  if (!st || ++uses % 64 == 0) st = std::make_unique<rtx::store::Store>(":memory:");
  rtx::evolve::McpOptions o;
  o.key_path = key_path();
  o.default_pack = rtx::fuzz::env_or("RTX_SOURCE_DIR", ".") + "/benchpacks/smoke.json";
  o.validate.self_exe = "/bin/false";  // validate: true must never start this binary as a trial
  o.validate.rounds = 2;
  o.validate.sandbox.timeout_s = 5;
  rtx::evolve::McpServer server(*st, o);
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::istringstream in(input);
  std::ostringstream out;
  const size_t replies = server.serve(in, out);

  size_t lines_in = 1;
  for (char c : input) lines_in += c == '\n';
  RTX_FUZZ_CHECK(replies <= lines_in, "more replies than input lines");
  std::istringstream rd(out.str());
  std::string line;
  size_t seen = 0;
  while (std::getline(rd, line)) {
    ++seen;
    const nlohmann::json r = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    RTX_FUZZ_CHECK(!r.is_discarded() && r.is_object(), "reply is not a JSON object: " + line.substr(0, 200));
    RTX_FUZZ_CHECK(r.value("jsonrpc", "") == "2.0", "reply without jsonrpc 2.0");
    RTX_FUZZ_CHECK(r.contains("result") != r.contains("error"), "reply needs exactly one of result/error");
    if (r.contains("error")) {
      const int code = r["error"].value("code", 0);
      RTX_FUZZ_CHECK(code == rtx::evolve::kParseError || code == rtx::evolve::kInvalidRequest ||
                         code == rtx::evolve::kMethodNotFound || code == rtx::evolve::kInvalidParams ||
                         code == rtx::evolve::kInternalError,
                     "unknown error code " + std::to_string(code));
      RTX_FUZZ_CHECK(code != rtx::evolve::kInternalError, "internal error on input: " + line.substr(0, 300));
    }
  }
  RTX_FUZZ_CHECK(seen == replies, "reply count differs from lines written");
  return 0;
}
