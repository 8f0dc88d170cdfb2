// `rtx-train sample` (KV-cache generation from a checkpoint) and `rtx-train export` (GGUF).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "rtx/core/error.hpp"
#include "rtx/io/tokenizer.hpp"
#include "rtx/models/checkpoint.hpp"
#include "rtx/models/export.hpp"
#include "rtx/models/infer.hpp"
#include "rtx/serve/generate.hpp"
#include "rtx/serve/gpt2_serve.hpp"

namespace rtx_train {

namespace {

/// Write to stdout, flushed; a failed write (disk full, closed stdout) is an Environment error.
void put_out(const std::string& s) {
  if ((!s.empty() && std::fwrite(s.data(), 1, s.size(), stdout) != s.size()) || std::fflush(stdout) != 0)
    rtx::throw_env("writing the generated text to stdout failed", "stdout");
}

struct SampleArgs {
  std::string ckpt, prompt = "\n";
  int max_tokens = 256;
  float temperature = 0.8f, top_p = 1.0f;
  int top_k = 200;
  float frequency_penalty = 0.0f, presence_penalty = 0.0f, repetition_penalty = 1.0f;
};

std::unique_ptr<rtx::io::Tokenizer> checkpoint_tokenizer(const rtx::models::Checkpoint& ck, const std::string& path) {
  if (ck.tokenizer.is_null())
    rtx::throw_input("the checkpoint carries no tokenizer (__metadata__.tokenizer)", path);
  return rtx::io::tokenizer_from_json(ck.tokenizer, path + ": __metadata__.tokenizer");
}

}  // namespace

Body add_sample(CLI::App& s, const rtx::cli::CommonOptions& common) {
  auto a = std::make_shared<SampleArgs>();
  s.add_option("--ckpt", a->ckpt, "Checkpoint (ckpt.safetensors written by rtx-train run)")->required();
  s.add_option("--prompt", a->prompt, "Prompt text (default: a newline)");
  s.add_option("--max-tokens", a->max_tokens, "Tokens to generate")->capture_default_str();
  s.add_option("--temperature", a->temperature, "Softmax temperature; 0 = greedy")->capture_default_str();
  s.add_option("--top-k", a->top_k, "Keep the k most likely tokens; 0 = all")->capture_default_str();
  s.add_option("--top-p", a->top_p, "Nucleus sampling mass in (0, 1]; 1 = off")->capture_default_str();
  s.add_option("--frequency-penalty", a->frequency_penalty,
               "OpenAI's: a token sampled c times loses c x this from its logit, in [-2, 2]")
      ->capture_default_str();
  s.add_option("--presence-penalty", a->presence_penalty,
               "OpenAI's: a token sampled at least once loses this from its logit, in [-2, 2]")
      ->capture_default_str();
  s.add_option("--repetition-penalty", a->repetition_penalty,
               "CTRL's: logits of prompt and sampled tokens divided by this (x > 0) or multiplied, in (0, 10]; 1 = off")
      ->capture_default_str();
  return [a, &common, &s]() {
    if (a->max_tokens < 0) rtx::throw_usage("--max-tokens must be >= 0", "--max-tokens");
    const rtx::models::Checkpoint ck = rtx::models::load_checkpoint(a->ckpt, false);
    const auto tok = checkpoint_tokenizer(ck, a->ckpt);
    std::vector<int32_t> prompt = tok->encode(a->prompt);
    if (prompt.empty()) {
      if (tok->eot_id() < 0) rtx::throw_usage("--prompt is empty and the tokenizer has no end-of-text token", "--prompt");
      prompt.push_back(tok->eot_id());
    }
    if (static_cast<int>(prompt.size()) > ck.model.block_size)
      rtx::throw_usage("the prompt is " + std::to_string(prompt.size()) + " tokens; the model's context is " +
                           std::to_string(ck.model.block_size),
                       "--prompt");
    rtx::models::SamplerConfig sc;
    sc.temperature = a->temperature;
    sc.top_k = a->top_k;
    sc.top_p = a->top_p;
    sc.vocab_limit = tok->vocab_size();  // a model wider than its tokenizer: never emit padding ids
    sc.seed = seed_given(s) ? parsed_seed(s, common.seed) : 1337;
    sc.frequency_penalty = a->frequency_penalty;
    sc.presence_penalty = a->presence_penalty;
    sc.repetition_penalty = a->repetition_penalty;
    rtx::models::Sampler sampler(sc);
    sampler.begin_sequence(prompt);  // the penalties count from here, across context windows
    // The serving engine's model: the same forward (packed weights, paged attention) as
    // rtx-serve, so a prompt and seed sample the same text here as from the server.
    auto model = rtx::serve::make_gpt2_model(ck.model, ck.params, rtx::io::tokenizer_from_json(ck.tokenizer, a->ckpt),
                                             rtx::serve::ModelInfo{});
    rtx::serve::SequenceRunner dec(*model);
    const bool stream = !common.json;
    if (stream) put_out(a->prompt);
    auto on_token = [&](int32_t id) {
      if (stream) put_out(tok->token_bytes(id));
      return true;
    };
    // Generate; when the context fills up, keep its last half as the new prompt and go on
    // (nanoGPT crops to the last block_size tokens; with a KV cache and learned positions we
    // re-prefill a half window so the cost stays amortised).
    rtx::models::GenerateResult r;
    r.prompt_tokens = static_cast<int>(prompt.size());
    std::vector<int32_t> window = prompt;
    int remaining = a->max_tokens;
    for (;;) {
      const rtx::models::GenerateResult part =
          rtx::models::generate(dec, window, remaining, sampler, tok->eot_id(), on_token);
      r.tokens.insert(r.tokens.end(), part.tokens.begin(), part.tokens.end());
      r.stop = part.stop;
      r.decode_steps += part.decode_steps;
      r.decode_s += part.decode_s;
      if (r.prefill_s == 0) r.prefill_s = part.prefill_s;
      else r.decode_s += part.prefill_s;  // re-prefills of the window count as decode time
      remaining -= static_cast<int>(part.tokens.size());
      if (part.stop != rtx::models::StopReason::ContextFull || remaining <= 0) break;
      window.insert(window.end(), part.tokens.begin(), part.tokens.end());
      const size_t keep = static_cast<size_t>(std::max(1, ck.model.block_size / 2));
      window.erase(window.begin(), window.end() - static_cast<std::ptrdiff_t>(std::min(keep, window.size())));
    }
    const std::string text = tok->decode(r.tokens);
    if (common.json) {
      std::cout << nlohmann::json{{"prompt", a->prompt},
                                  {"completion", text},
                                  {"prompt_tokens", r.prompt_tokens},
                                  {"completion_tokens", r.tokens.size()},
                                  {"stop", rtx::models::stop_reason_name(r.stop)},
                                  {"prefill_s", r.prefill_s},
                                  {"decode_tokens_per_s", r.decode_tokens_per_s()},
                                  {"seed", sc.seed}}
                       .dump(2)
                << "\n";
    } else {
      put_out("\n");
      if (!common.quiet)
        std::fprintf(stderr, "%zu tokens (%s), prefill %.1f ms, decode %.1f tokens/s\n", r.tokens.size(),
                     rtx::models::stop_reason_name(r.stop), r.prefill_s * 1e3, r.decode_tokens_per_s());
    }
    return 0;
  };
}

Body add_export(CLI::App& s, const rtx::cli::CommonOptions& common) {
  auto ckpt = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto format = std::make_shared<std::string>("gguf");
  s.add_option("--ckpt", *ckpt, "Checkpoint to export")->required();
  s.add_option("--format", *format, "Output format (gguf)")->capture_default_str();
  s.add_option("-o,--output", *out, "Output file")->required();
  return [=, &common]() {
    if (*format != "gguf") rtx::throw_usage("--format must be gguf (got '" + *format + "')", "--format");
    std::error_code ec;
    if (std::filesystem::exists(*out, ec) && std::filesystem::equivalent(*ckpt, *out, ec))
      rtx::throw_usage("-o names the checkpoint itself; exporting would overwrite it", *out,
                       "give another output file, e.g. model.gguf");
    const rtx::models::Checkpoint ck = rtx::models::load_checkpoint(*ckpt, false);
    const auto tok = checkpoint_tokenizer(ck, *ckpt);
    rtx::models::export_gpt2_gguf(ck.model, ck.params.data(), ck.params.size(), *tok, *out);
    if (common.json)
      std::cout << nlohmann::json{{"output", *out}, {"format", "gguf"}, {"architecture", "gpt2"},
                                  {"params", ck.params.size()}, {"step", ck.step}}
                       .dump(2)
                << "\n";
    else if (!common.quiet)
      std::fprintf(stderr, "wrote %s (GGUF v3, architecture gpt2, %zu parameters, step %d)\n", out->c_str(),
                   ck.params.size(), ck.step);
    return 0;
  };
}

}  // namespace rtx_train
