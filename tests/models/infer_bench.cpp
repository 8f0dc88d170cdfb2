// infer_bench: prefill and decode throughput (tokens/s) of Gpt2Decoder + Sampler on random weights
// for GPT-2 presets. Not a test. Usage: infer_bench [--blas] [--prompt P] [--tokens N] [preset...]
// (default presets: shakespeare-char gpt2; threads from OMP_NUM_THREADS).
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/models/infer.hpp"

using namespace rtx;
using namespace rtx::models;

int main(int argc, char** argv) {
  try {
    int prompt_len = 64, tokens = 64;
    DecoderParams kp;
    std::vector<std::string> presets;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--blas") kp.matmul.impl = kernels::MatmulImpl::Blas;
      else if (a == "--prompt" && i + 1 < argc) prompt_len = std::atoi(argv[++i]);
      else if (a == "--tokens" && i + 1 < argc) tokens = std::atoi(argv[++i]);
      else if (!a.empty() && a[0] == '-') {
        std::fprintf(stderr, "usage: infer_bench [--blas] [--prompt P] [--tokens N] [preset...]\n");
        return 2;
      } else presets.push_back(a);
    }
    if (presets.empty()) presets = {"shakespeare-char", "gpt2"};
    std::printf("%-18s %8s %7s %7s %8s %14s %14s %s\n", "preset", "params", "prompt", "tokens", "threads",
                "prefill tok/s", "decode tok/s", "matmul");
    for (const std::string& name : presets) {
      const Gpt2Config cfg = Gpt2Config::preset(name);
      // Random weights, uniform with std 0.02 (the GPT-2 init scale); LayerNorm weights then 1 would
      // not change the cost, so every tensor is drawn alike.
      size_t np = static_cast<size_t>(cfg.vocab_size + cfg.block_size) * cfg.n_embd + 2 * cfg.n_embd;
      np += static_cast<size_t>(cfg.n_layer) * (12 * cfg.n_embd * cfg.n_embd + 13 * cfg.n_embd);
      std::vector<float> params(np);
#pragma omp parallel for schedule(static)
      for (size_t i = 0; i < np; ++i) params[i] = philox_uniform(1, 0, i, -0.0346f, 0.0346f);
      Gpt2Decoder dec(cfg, params.data(), kp);
      std::vector<int32_t> prompt(std::min(prompt_len, cfg.block_size - tokens));
      Philox rng(2);
      for (auto& t : prompt) t = static_cast<int32_t>(rng.next_u32() % static_cast<uint32_t>(cfg.vocab_size));
      Sampler sampler(SamplerConfig{1.0f, 0, 1.0f, 3});
      generate(dec, prompt, 4, sampler);  // warm-up: page in weights and buffers
      const GenerateResult r = generate(dec, prompt, tokens, sampler);
      std::printf("%-18s %8.1fM %7d %7zu %8d %14.1f %14.2f %s\n", name.c_str(), np / 1e6, r.prompt_tokens,
                  r.tokens.size(), omp_get_max_threads(), r.prompt_tokens / r.prefill_s, r.decode_tokens_per_s(),
                  kp.matmul.impl == kernels::MatmulImpl::Blas ? "blas" : "blocked");
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "infer_bench: %s\n", e.what());
    return e.exit_code();
  }
  return 0;
}
