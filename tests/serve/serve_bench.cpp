// serve_bench: greedy decode throughput (tokens/s) of any serving model (GGUF gpt2/llama, rtx
// checkpoint) over a paged KV cache, 1 sequence and B sequences batched (one forward per step
// for all), without HTTP. Not a test.
// Usage: serve_bench [--model FILE | --random-gpt2 PRESET] [--tokens N] [--prompt-tokens P] [--block T] [--kv-type f32|f16]
//                    [--f32-activations] [--dequantize] [--device D] [batch...]
// Exit: 0 ok, 2 bad flag or input, 3 no CUDA device or not enough memory, 4 internal error.
// --prompt-tokens P: a prompt of P tokens ("Once upon a time" repeated) instead of that phrase
// once, so batch 1's prefill figure compares with llama-bench's ppP.
// --random-gpt2 gpt2|gpt2-tiny|...: a GPT-2 of that preset's shapes with random weights (N(0, 0.02),
// Philox) and a 62-character tokenizer, so a GPU machine without the data folder can measure.
// (defaults: $RTX_DATA/stories260k/tinyllamas-stories-260k-f32.gguf, 128 tokens, block 16,
// batches 1 8 32; threads from OMP_NUM_THREADS).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "rtx/core/device.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/io/tokenizer.hpp"
#include "rtx/models/gpt2.hpp"
#include "rtx/serve/gpt2_serve.hpp"
#include "rtx/serve/model.hpp"
#include "bench_args.hpp"

using namespace rtx;
using Clock = std::chrono::steady_clock;

using bench_args::parse_int;

int main(int argc_in, char** argv_in) {
  try {
    // --flag=value as --flag value
    rtx::bench_args::SplitArgs split(argc_in, argv_in, {"--int8-activations", "--f32-activations", "--dequantize"});
    const int argc = split.argc();
    char** argv = split.argv();
    const char* data = std::getenv("RTX_DATA");
    std::string path = std::string(data && *data ? data : "../shared/data") + "/stories260k/tinyllamas-stories-260k-f32.gguf";
    int tokens = 128, block = 16, prompt_tokens = 0;
    std::string random_preset;
    bool have_model = false, have_random = false;
    serve::LoadOptions lo;
    serve::KvType kv_type = serve::KvType::F32;
    std::vector<int> batches;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--model" && i + 1 < argc) path = argv[++i], have_model = true;
      else if (a == "--random-gpt2" && i + 1 < argc) random_preset = argv[++i], have_random = true;
      else if (a == "--tokens" && i + 1 < argc) tokens = parse_int(argv[++i], "--tokens", 2);
      else if (a == "--block" && i + 1 < argc) block = parse_int(argv[++i], "--block", 1);
      else if (a == "--prompt-tokens" && i + 1 < argc) prompt_tokens = parse_int(argv[++i], "--prompt-tokens", 1);
      else if (a == "--int8-activations") lo.int8_activations = true;  // the default
      else if (a == "--f32-activations") lo.int8_activations = false;
      else if (a == "--dequantize") lo.keep_quantized = false;
      else if (a == "--kv-type" && i + 1 < argc) kv_type = serve::parse_kv_type(argv[++i], "--kv-type");
      else if (a == "--device" && i + 1 < argc) lo.cuda_device = serve::parse_device(argv[++i]);
      else if (!a.empty() && a[0] != '-') batches.push_back(parse_int(a, "batch", 1));
      else {
        const char* usage =
            "usage: serve_bench [--model FILE | --random-gpt2 PRESET] [--tokens N] [--prompt-tokens P] [--block T] "
            "[--kv-type f32|f16] [--f32-activations] [--dequantize] [--device cpu|cuda[:N]] [batch...]\n"
            "  (default model: $RTX_DATA/stories260k/tinyllamas-stories-260k-f32.gguf; RTX_DATA defaults to ../shared/data)\n";
        if (a == "--help" || a == "-h") return std::fputs(usage, stdout), 0;
        const bool takes_value = a == "--model" || a == "--random-gpt2" || a == "--tokens" || a == "--block" ||
                                 a == "--prompt-tokens" || a == "--kv-type" || a == "--device";
        std::fprintf(stderr, "serve_bench: %s %s\n%s", a.c_str(), takes_value ? "wants a value" : "is not a flag or a batch size >= 1", usage);
        return 2;
      }
    }
    if (have_model && have_random) throw_usage("--model and --random-gpt2 exclude each other", "--random-gpt2");
    if (have_random && random_preset.empty())
      throw_usage("--random-gpt2 needs a preset name", "--random-gpt2", "e.g. --random-gpt2 gpt2");
    if (lo.cuda_device >= 0 && cuda_device_count() == 0)  // before building a 124M model for nothing
      throw Error(ErrorCategory::Environment, "no usable CUDA device (" + cuda_unavailable_reason() + ")", "--device",
                  "run on a machine with an NVIDIA GPU, or measure the CPU with --device cpu");
    if (batches.empty()) batches = {1, 8, 32};
    std::unique_ptr<serve::Model> m;
    if (random_preset.empty()) {
      m = serve::load_model(path, lo);
    } else {
      const models::Gpt2Config cfg = models::Gpt2Config::preset(random_preset);
      std::vector<float> params(models::gpt2_num_params(cfg));
      Philox rng(1234, 0);
      for (float& x : params) x = 0.02f * rng.next_normal();
      // Letters, space and punctuation (62 symbols): fits every preset's vocabulary (>= 65).
      const std::string chars = " abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.,;:!?'-\n";
      serve::ModelInfo base;
      base.name = "random-" + random_preset;
      m = serve::make_gpt2_model(cfg, std::move(params), io::make_char_tokenizer_from_text(chars), base, lo);
    }
    const auto& info = m->info();
    const int V = info.vocab;
    std::vector<int32_t> prompt;
    if (info.bos >= 0) prompt.push_back(info.bos);
    const std::vector<int32_t> phrase = m->tokenizer().encode("Once upon a time");
    for (int32_t t : phrase) prompt.push_back(t);
    if (prompt_tokens > 0) {
      if (prompt_tokens >= info.context)
        throw_input(std::to_string(prompt_tokens) + " leaves no room in the context of " +
                        std::to_string(info.context),
                    "--prompt-tokens");
      for (size_t i = 0; static_cast<int>(prompt.size()) < prompt_tokens; ++i) prompt.push_back(phrase[i % phrase.size()]);
      prompt.resize(prompt_tokens);
    }
    const int P = static_cast<int>(prompt.size());
    tokens = std::min(tokens, info.context - P);
    if (tokens < 2)
      throw_input("the model's context of " + std::to_string(info.context) + " leaves no room to decode after the " +
                      std::to_string(P) + "-token prompt",
                  "--tokens");
    std::printf("model %s (%s, %d layers, vocab %d) on %s, %d threads, prompt %d tokens, decode %d tokens, block %d, KV %s\n",
                info.name.c_str(), info.arch.c_str(), info.n_layer, V, info.device.c_str(), omp_get_max_threads(), P, tokens, block,
                serve::kv_type_name(kv_type));
    for (int B : batches) {
      const int per_seq = (P + tokens + block - 1) / block;
      serve::KvCache kv(info.n_layer, info.n_kv_head, info.head_dim, block, B * per_seq, info.device == "cpu", kv_type);
      std::vector<std::vector<int32_t>> toks(B, prompt), tables(B);
      for (int s = 0; s < B; ++s)
        for (int k = 0; k < per_seq; ++k) tables[s].push_back(kv.alloc());
      std::vector<float> logits(static_cast<size_t>(B) * V);
      auto run = [&](int pos, int n) {
        std::vector<serve::SeqBatch> batch(B);
        for (int s = 0; s < B; ++s) {
          batch[s].tokens = toks[s].data() + pos;
          batch[s].n = n;
          batch[s].pos = pos;
          batch[s].blocks = tables[s].data();
          batch[s].n_blocks = per_seq;
          batch[s].want_logits = true;
        }
        m->forward(batch, kv, logits.data());
        for (int s = 0; s < B; ++s) {
          const float* l = logits.data() + static_cast<size_t>(s) * V;
          toks[s].push_back(static_cast<int32_t>(std::max_element(l, l + V) - l));
        }
      };
      const auto t0 = Clock::now();
      run(0, P);
      const auto t1 = Clock::now();
      for (int i = 1; i < tokens; ++i) run(P + i - 1, 1);
      const auto t2 = Clock::now();
      const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
      const double decode_s = std::chrono::duration<double>(t2 - t1).count();
      std::printf("batch %2d: prefill %8.0f tokens/s (%.3f ms), decode %9.0f tokens/s (%.1f us/step)\n", B,
                  B * P / prefill_s, prefill_s * 1e3, B * (tokens - 1) / decode_s, decode_s * 1e6 / (tokens - 1));
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "serve_bench: %s\n", e.what());
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "serve_bench: not enough memory for the model and a KV pool of these batch sizes and "
                         "--tokens (try fewer or smaller batches)\n");
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "serve_bench: internal error: %s\n", e.what());
    return 4;
  }
}
