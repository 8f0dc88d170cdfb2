// rtx-serve: OpenAI-compatible serving with continuous batching (`run`), and its load
// generator (`bench`). Flags only; the engine, scheduler and server live in libcommon/serve.
#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"rtx-serve: OpenAI-compatible serving of GPT-2 and Llama models with continuous batching",
               "rtx-serve"};
  rtx::cli::CommonOptions common;
  rtx::cli::add_common_options(app, common);
  rtx::cli::Subcommands subs(app);
  subs.add("run", "Serve a model over HTTP (POST /v1/completions, /v1/chat/completions; GET /v1/models, /health, /metrics)",
           [&](CLI::App& s) { return rtx_serve::add_run(s, common); });
  subs.add("bench", "Load-test an OpenAI-compatible server: TTFT, TPOT, ITL percentiles and tokens/s",
           [&](CLI::App& s) { return rtx_serve::add_bench(s, common); });
  app.footer("Exit codes: 0 ok (run: after a graceful shutdown on SIGTERM/SIGINT); 2 usage or input error\n"
             "(bad flag, unreadable model); 3 environment (port in use, an address not on this machine); 4 internal error.");
  return rtx::cli::run_tool(app, argc, argv, common, [&]() { return subs.run(); });
}
