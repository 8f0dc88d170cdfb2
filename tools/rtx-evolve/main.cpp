// rtx-evolve: propose, validate (sandboxed A/B), gate, approve, promote and roll back
// improvements. Flags only; the logic is rtx::evolve in libcommon.
#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"rtx-evolve: propose -> sandboxed A/B validation -> gates -> approval -> signed promotion -> rollback",
               "rtx-evolve"};
  rtx::cli::CommonOptions common;
  rtx::cli::add_common_options(app, common);
  rtx::cli::Subcommands subs(app);
  subs.add("run", "Run the loop on a bench pack subset: propose in every domain, validate, report",
           [&](CLI::App& s) { return rtx_evolve::add_run(s, common); });
  subs.add("status", "List proposals with their gates, promotions and rollback commands",
           [&](CLI::App& s) { return rtx_evolve::add_status(s, common); });
  subs.add("history", "A bench case over time: E-divisive change points and the proposals that caused them",
           [&](CLI::App& s) { return rtx_evolve::add_history(s, common); });
  subs.add("export", "Write a proposal's rtx.proposal.v1 envelope", [&](CLI::App& s) { return rtx_evolve::add_export(s, common); });
  subs.add("submit", "Submit an external rtx.proposal.v1 (FILE or -), then validate it like the rest",
           [&](CLI::App& s) { return rtx_evolve::add_submit(s, common); });
  subs.add("validate", "Validate a stored proposal (status new or interrupted) with the sandboxed A/B gates",
           [&](CLI::App& s) { return rtx_evolve::add_validate(s, common); });
  subs.add("approve", "Approve a proposal that passed every gate and promote it (signature verified)",
           [&](CLI::App& s) { return rtx_evolve::add_approve(s, common); });
  subs.add("rollback", "Restore the version a promoted proposal replaced (signature verified)",
           [&](CLI::App& s) { return rtx_evolve::add_rollback(s, common); });
  subs.add("rehearse", "Roll a promotion back and forward again; report the time (goal < 1 s)",
           [&](CLI::App& s) { return rtx_evolve::add_rehearse(s, common); });
  subs.add("kg", "Knowledge graph: query (improved | hurt-determinism | failed) and export (dot, svg, json)",
           [&](CLI::App& s) { return rtx_evolve::add_kg(s, common); });
  subs.add("keygen", "Create the Ed25519 signing key ($RTX_HOME/evolve_ed25519.key, mode 0600)",
           [&](CLI::App& s) { return rtx_evolve::add_keygen(s, common); });
  subs.add("mcp", "Serve external agents over stdio: an MCP (JSON-RPC 2.0) server with the proposal tools",
           [&](CLI::App& s) { return rtx_evolve::add_mcp(s, common); });
  subs.add("report", "One self-contained HTML report (queue, win rate, gate failures, impact, performance over time); --format md|json",
           [&](CLI::App& s) { return rtx_evolve::add_report(s, common); });
  subs.add("__trial", "internal: measure one arm of a validation (run by the sandbox)",
           [&](CLI::App& s) { return rtx_evolve::add_trial(s); });
  app.footer("Exit codes: 0 ok; 1 a gate failed (submit: the proposal failed validation; run --strict: any did);\n"
             "2 usage or input"
             " error (also a tampered envelope); 3 environment missing (no signing key); 4 internal error.");
  return rtx::cli::run_tool(app, argc, argv, common, [&]() { return subs.run(); });
}
