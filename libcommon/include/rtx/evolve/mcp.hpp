// rtx::evolve MCP server: `rtx-evolve mcp`, a Model Context Protocol server (revision
// 2025-06-18) over JSON-RPC 2.0, one message per line, for external agents. Not a transport
// library: stdio only, requests handled one at a time, no batches (MCP 2025-06-18 removed them).
#pragma once
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtx/evolve/loop.hpp"
#include "rtx/store/store.hpp"

namespace rtx::evolve {

/// The MCP revision this server implements (https://modelcontextprotocol.io/specification/2025-06-18).
inline constexpr const char* kMcpProtocolVersion = "2025-06-18";
/// Revisions `initialize` accepts and echoes: 2025-06-18, 2025-03-26 and 2024-11-05 (the ones
/// clients of the MCP SDKs still send); any other requested revision is answered with
/// kMcpProtocolVersion (the client then decides whether to go on, per the lifecycle spec).
/// The session then follows the agreed revision: see mcp_has_structured_output and
/// mcp_accepts_batches.
const std::vector<std::string>& mcp_supported_versions();
/// Whether revision `version` (YYYY-MM-DD) has 2025-06-18's additions this server uses: Tool
/// `title` and `outputSchema`, tools/call `structuredContent`, Implementation `title`. Older
/// sessions get the same tools without them (the JSON stays in the text content).
bool mcp_has_structured_output(const std::string& version);
/// Whether revision `version` has JSON-RPC batches (an array of requests and notifications
/// on one line, answered by one array): only 2025-03-26, which says servers MUST accept them.
bool mcp_accepts_batches(const std::string& version);
/// Most messages in one batch; a longer batch is answered by one kInvalidRequest error.
inline constexpr size_t kMcpMaxBatch = 1000;

/// JSON-RPC 2.0 error codes (https://www.jsonrpc.org/specification#error_object).
enum McpErrorCode : int {
  kParseError = -32700,      ///< the line is not JSON (or not UTF-8)
  kInvalidRequest = -32600,  ///< not a request object, a batch array, or a request before `initialize`
  kMethodNotFound = -32601,
  kInvalidParams = -32602,   ///< unknown tool, missing or wrongly typed argument
  kInternalError = -32603,   ///< an rtx::Error(Internal) or an unexpected exception in the server
};

/// How the server works on the store.
struct McpOptions {
  /// Signing key of submit_proposal; "" = default_key_path(store path) (as `rtx-evolve submit`).
  std::string key_path;
  /// Pack of list_benchmarks when the call names none; a relative path is resolved against the
  /// working directory, as `rtx-evolve run --pack` resolves it.
  std::string default_pack = "benchpacks/core.json";
  /// How submit_proposal {validate: true} validates (as `rtx-evolve submit`): self_exe must be
  /// the rtx-evolve binary, which runs the sandboxed `__trial` arms.
  ValidateOptions validate;
  /// Diagnostics (one line per event; never protocol messages). nullptr: silent.
  std::ostream* log = nullptr;
  /// Longest message (one line, bytes) read; a longer one is answered kInvalidRequest and
  /// skipped to its end without being kept in memory.
  size_t max_message_bytes = size_t{16} << 20;
  /// Deepest nesting of arrays and objects in a message; deeper is kParseError (before parsing).
  size_t max_depth = 512;
};

/// An MCP server over one store. Tools (docs/evolution.md "MCP server"): list_benchmarks,
/// get_baseline, submit_proposal, proposal_status, query_knowledge, each calling the rtx::evolve
/// function that the matching CLI subcommand calls. Protocol errors are JSON-RPC errors (codes
/// above); a tool that fails (an rtx::Error of category Usage, Input or Environment: no such
/// proposal, malformed proposal, missing key) is a result with isError: true and the message.
/// Lifecycle: requests other than `initialize` and `ping` before `initialize` are refused
/// (kInvalidRequest); notifications never get a reply; JSON-RPC responses sent to the server
/// are ignored (it sends no requests).
class McpServer {
 public:
  /// The store must outlive the server; it is the one store the server reads and writes.
  McpServer(store::Store& st, McpOptions o);

  /// Serve `in` until EOF: each line (a trailing '\r' dropped; blank lines skipped) is one
  /// message; each reply is written to `out` as one line of compact UTF-8 JSON and flushed.
  /// A line longer than max_message_bytes is answered kInvalidRequest ("message longer than
  /// 16 MiB") and skipped. Returns the number of replies written. Never throws for bad input;
  /// a reply that cannot be written (stdout closed) is rtx::Error(Environment) "stdout closed".
  size_t serve(std::istream& in, std::ostream& out);

  /// Handle one line of input: the reply, or nullopt when none is due (a notification, a
  /// response, a blank line). A line over max_message_bytes is kInvalidRequest, one nested
  /// deeper than max_depth kParseError.
  std::optional<nlohmann::json> handle_line(const std::string& line);
  /// Handle one parsed message: an object, or an array (a batch: answered by an array of the
  /// replies in a 2025-03-26 session, nullopt when all were notifications; refused otherwise).
  std::optional<nlohmann::json> handle(const nlohmann::json& msg);

  /// True once `initialize` was answered.
  bool initialized() const { return initialized_; }
  /// The protocol version agreed at `initialize` ("" before).
  const std::string& protocol_version() const { return protocol_version_; }

  /// The tool definitions of tools/list: name, title, description, inputSchema and
  /// outputSchema (JSON Schema objects; additionalProperties false on inputs).
  static const nlohmann::json& tool_definitions();

 private:
  nlohmann::json dispatch(const std::string& method, const nlohmann::json& params);
  nlohmann::json call_tool(const nlohmann::json& params);
  nlohmann::json run_tool(const std::string& name, const nlohmann::json& args);
  const KeyPair& key();

  store::Store& st_;
  McpOptions o_;
  bool initialized_ = false;
  std::string protocol_version_;
  std::optional<KeyPair> key_;
};

/// Why `args` does not satisfy `schema` ("" when it does). Supports the subset the tool
/// schemas use: type (object, string, integer, number, boolean, array), properties, required,
/// additionalProperties false, enum, minimum, maximum, anyOf; an "integer" must fit int64.
/// Names the argument at fault
/// ("argument 'id': expected integer, got string").
std::string mcp_schema_problem(const nlohmann::json& schema, const nlohmann::json& value, const std::string& where = "");

}  // namespace rtx::evolve
