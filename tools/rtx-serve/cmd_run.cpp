// `rtx-serve run`: the flags, bound into rtx::app::serve::RunCommand; the start-up policy
// (profiles, promoted configs, model loading, the server) is libcommon's app/serve.
#include <csignal>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "rtx/app/serve.hpp"
#include "rtx/serve/scheduler.hpp"

namespace rtx_serve {

namespace {

volatile std::sig_atomic_t g_signal = 0;
extern "C" void on_signal(int sig) { g_signal = sig; }

/// The command and the CLI11 options whose presence the policy needs (given or not).
struct RunArgs {
  rtx::app::serve::RunCommand cmd;
  bool int8_activations = false;  // the default; the flag is accepted for scripts that name it
  /// Scheduler flags by SchedulerConfig JSON key.
  std::vector<std::pair<std::string, CLI::Option*>> sched_flags;
  CLI::Option* threads_flag = nullptr;
  CLI::Option* api_key_flag = nullptr;
  CLI::Option *host_flag = nullptr, *served_name_flag = nullptr, *chat_template_flag = nullptr,
              *canary_profile_flag = nullptr;
};

/// A Flag of the command from its CLI11 option: its name and whether it was given.
void bind_flag(rtx::app::serve::Flag& f, const CLI::Option* opt) {
  f.name = opt->get_name();
  f.given = opt->count() > 0;
}

}  // namespace

Body add_run(CLI::App& s, const rtx::cli::CommonOptions& common) {
  auto a = std::make_shared<RunArgs>();
  auto& c = a->cmd;
  s.add_option("-m,--model", c.model, "GGUF (gpt2 or llama; f32, f16, bf16, Q8_0, Q4/Q5, K-quants) or rtx checkpoint (.safetensors)")->required();
  a->host_flag = (
      s.add_option("--host", c.host, "Address to bind (loopback by default; 0.0.0.0 exposes it)")->capture_default_str());
  s.add_option("--port", c.port, "TCP port (0 = any free port, printed at start)")->capture_default_str();
  a->threads_flag = s.add_option("-t,--threads", c.threads, "Threads for the forward pass (0 = OpenMP default)")->capture_default_str();
  a->api_key_flag =
      s.add_option("--api-key", c.api_key, "Require 'Authorization: Bearer KEY' on every route but /health (or RTX_API_KEY)");
  a->served_name_flag = (
      s.add_option("--model-name,--alias", c.served_name,
                   "Model id in /v1/models and requests (default: the GGUF's general.name, else the file name without "
                   "extension; --alias is llama-server's name for it)"));
  a->chat_template_flag = (
      s.add_option("--chat-template", c.chat_template, "chatml | llama2 | plain (default) | a JSON template file"));
  const auto sched_opt = [&](const char* flag, auto& member, const char* key, const char* help) {
    a->sched_flags.emplace_back(key, s.add_option(flag, member, help)->capture_default_str());
  };
  sched_opt("--max-batch", c.sched.max_batch, "max_batch",
            "Most sequences decoding at once");
  sched_opt("--token-budget", c.sched.token_budget, "token_budget",
            "Most tokens (prompt + decode) per forward step");
  sched_opt("--prefill-chunk", c.sched.prefill_chunk, "prefill_chunk",
            "Most prompt tokens of one sequence per step (chunked prefill; capped at --token-budget unless given)");
  sched_opt("--batch-window-ms", c.sched.batch_window_ms, "batch_window_ms",
            "When idle, wait this long for more requests to batch");
  sched_opt("--kv-block-tokens", c.sched.kv_block_tokens, "kv_block_tokens",
            "Positions per KV cache block");
  sched_opt("--kv-blocks", c.sched.kv_blocks, "kv_blocks",
            "KV cache blocks in the pool (0 = max-batch full contexts)");
  a->sched_flags.emplace_back(
      "kv_type", s.add_option_function<std::string>(
                      "--kv-type", [a](const std::string& v) { a->cmd.sched.kv_type = rtx::serve::parse_kv_type(v, "--kv-type"); },
                      "KV cache element type: f32 (default; bitwise equal to rtx-train sample) or f16 (half the memory "
                      "and attention reads; keys and values rounded to binary16; CPU only)")
                     ->check(CLI::IsMember({"f32", "f16"}))
                     ->type_name("TYPE"));
  sched_opt("--max-queue", c.sched.max_queue, "max_queue",
            "Waiting requests beyond which new ones get 429");
  sched_opt("--request-timeout", c.sched.request_timeout_s, "request_timeout_s",
            "Seconds before a request ends with a timeout");
  sched_opt("--interactive-target-ms", c.sched.interactive_target_ms, "interactive_target_ms",
            "TTFT target of the interactive lane");
  sched_opt("--batch-target-ms", c.sched.batch_target_ms, "batch_target_ms",
            "TTFT target of the batch lane");
  sched_opt("--tpot-target-ms", c.sched.tpot_target_ms, "tpot_target_ms",
            "TPOT target of the interactive lane: cut each step's prompt chunks so its predicted time stays within "
            "it while such a sequence decodes (0 = off; the token budget alone)");
  a->sched_flags.emplace_back(
      "prefix_cache", s.add_flag("--prefix-cache,!--no-prefix-cache", c.sched.prefix_cache,
                                 "Reuse cached KV blocks of prompts that start like earlier sequences (default on)"));
  s.add_option("--max-body-bytes", c.max_body, "Larger request bodies get 413")->capture_default_str();
  s.add_option("--max-header-bytes", c.max_header_bytes, "Larger request line + headers get 431 (at most 128 lines)")
      ->capture_default_str();
  s.add_option("--header-timeout", c.header_timeout_s, "Seconds a request's line and headers may take to arrive (then 408)")
      ->capture_default_str();
  s.add_option("--receive-timeout", c.receive_timeout_s, "Seconds a whole request (headers + body) may take to arrive (then 408)")
      ->capture_default_str();
  a->canary_profile_flag = (
      s.add_option("--canary-profile", c.canary_profile,
                   "Engine configuration JSON for the canary ({\"scheduler\":{...},\"threads\":N,\"matmul\":{...}})"));
  s.add_option("--canary-fraction", c.canary_fraction, "Share of requests routed to the canary engine, [0, 1]")
      ->capture_default_str();
  s.add_option("--shutdown-deadline", c.shutdown_deadline_s, "Seconds in-flight requests get after SIGTERM")
      ->capture_default_str();
  s.add_option("--device", c.device,
               "cpu, or cuda[:N]: run the model on CUDA device N (GPT-2 and Llama; f32, quantized files dequantized)")
      ->capture_default_str();
  s.add_flag("--log-requests", c.log_requests,
             "One line per answered request on stderr: UTC time, client, method, path, status, ms, engine");
  s.add_flag("--dequantize", c.dequantize,
             "Dequantize Q8_0 and K-quant matrices of a GGUF to f32 at load instead of running the quantized kernels");
  auto* i8 = s.add_flag("--int8-activations", a->int8_activations,
                        "K-quant and Q8_0 matrices: quantize activations to 8 bits per 32 values and take integer dot "
                        "products, as llama.cpp (the default; needs AVX2, else W8A32)");
  s.add_flag("--f32-activations", c.f32_activations,
             "K-quant and Q8_0 matrices: f32 activations against the exact dequantized weights (slower decode; docs/perf-history.md)")
      ->excludes(i8);
  s.add_flag("--no-profile", c.no_profile,
             "Do not load tuned profiles (rtx-tune: matmul parameters, scheduler knobs and threads) nor what rtx-evolve promoted");
  return [a, &common]() {
    rtx::app::serve::RunCommand& c = a->cmd;
    bind_flag(c.threads_flag, a->threads_flag);
    bind_flag(c.api_key_flag, a->api_key_flag);
    bind_flag(c.host_flag, a->host_flag);
    bind_flag(c.served_name_flag, a->served_name_flag);
    bind_flag(c.chat_template_flag, a->chat_template_flag);
    bind_flag(c.canary_profile_flag, a->canary_profile_flag);
    c.sched_flags.clear();
    for (const auto& [key, opt] : a->sched_flags) {
      c.sched_flags.push_back({key, {}});
      bind_flag(c.sched_flags.back().flag, opt);
    }
    c.db = common.db;
    c.json = common.json;
    c.quiet = common.quiet;
    rtx::app::serve::RunHooks hooks;
    hooks.on_listening = [] {
      std::signal(SIGTERM, on_signal);
      std::signal(SIGINT, on_signal);
      std::signal(SIGPIPE, SIG_IGN);
    };
    hooks.should_stop = [] { return g_signal != 0; };
    return rtx::app::serve::run_run(c, std::cout, std::cerr, hooks);
  };
}

}  // namespace rtx_serve
