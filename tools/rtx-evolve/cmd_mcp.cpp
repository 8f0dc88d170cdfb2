// rtx-evolve mcp: an MCP server (JSON-RPC 2.0, one message per line) on stdin/stdout for external
// agents; flags only, the server is rtx::evolve::McpServer. Logs go to stderr, never stdout.
#include <csignal>
#include <iostream>

#include "commands.hpp"
#include "rtx/evolve/mcp.hpp"

namespace rtx_evolve {

Body add_mcp(CLI::App& app, const rtx::cli::CommonOptions& common) {
  auto o = std::make_shared<rtx::evolve::McpOptions>();
  app.add_option("--key", o->key_path, "Signing key of submit_proposal (default: evolve_ed25519.key next to the store)");
  app.add_option("--pack", o->default_pack, "Bench pack list_benchmarks uses when the call names none")->capture_default_str();
  app.add_option("--rounds", o->validate.rounds, "A/B pairs of submit_proposal {validate: true}")
      ->capture_default_str()->check(CLI::Range(2, 50));
  app.add_option("--timeout", o->validate.sandbox.timeout_s, "Wall-clock limit of one sandboxed trial, s")
      ->capture_default_str()->check(CLI::Range(1.0, 3600.0));
  app.add_option("--model", o->validate.model_path, "Serving model for scheduler-domain validation");
  app.footer(
      "Speaks MCP 2025-06-18 (or 2025-03-26, 2024-11-05 when the client asks) over stdio: one JSON-RPC 2.0 message\n"
      "per line on stdin, replies on stdout, logs on stderr; JSON-RPC batches (except in 2025-03-26) and messages over\n"
      "16 MiB are refused (-32600). Ends with exit 0 at end of input, exit 3 when\n"
      "stdout is closed. Tools: list_benchmarks, get_baseline, submit_proposal, proposal_status, query_knowledge\n"
      "(docs/evolution.md, \"MCP server\").");
  return [&common, o]() {
    rtx::store::Store st(rtx::store::resolve_db_path(common.db));
    o->validate.seed = common.seed;
    o->log = common.quiet ? nullptr : &std::cerr;
    o->validate.log = o->log;
    // A client that closes its end must not kill the server silently: a failed write is
    // reported (serve throws Environment "stdout closed", exit 3) instead of SIGPIPE.
    std::signal(SIGPIPE, SIG_IGN);
    rtx::evolve::McpServer server(st, *o);
    if (o->log) *o->log << "rtx-evolve mcp: serving " << st.path() << " on stdio (MCP " << rtx::evolve::kMcpProtocolVersion << ")\n";
    server.serve(std::cin, std::cout);
    return 0;
  };
}

}  // namespace rtx_evolve
