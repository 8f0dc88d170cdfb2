// Tests of rtx-serve's device selection that run on every machine: --device parsing, a CUDA
// model refused without a usable device (or CUDA build), a CPU model refusing a KV cache without
// host storage, and rtx-serve run's exit codes for a bad --device and for llama on CUDA.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "models/gpt2_ref.hpp"
#include "rtx/core/error.hpp"
#include "rtx/io/tokenizer.hpp"
#include "rtx/serve/gpt2_serve.hpp"
#include "rtx/serve/model.hpp"
#include "serve/serve_test_util.hpp"
#include "test_util.hpp"

using namespace rtx;
using namespace rtx::serve;
using rtx::test::make_cfg;
using rtx::test::random_params;
using rtx::test::char_tok;

namespace {

std::unique_ptr<Model> model_on(const models::Gpt2Config& c, uint64_t seed, int device) {
  LoadOptions o;
  o.cuda_device = device;
  return make_gpt2_model(c, random_params(c, seed), char_tok(c.vocab_size), ModelInfo{}, o);
}

}  // namespace

TEST_CASE("serve device: --device values parse, bad ones are usage errors", "[cpu][serve]") {
  CHECK(parse_device("cpu") == -1);
  CHECK(parse_device("cuda") == 0);
  CHECK(parse_device("cuda:3") == 3);
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:x", "CUDA", "cuda:99999999", ""}) {
    INFO(bad);
    try {
      parse_device(bad);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.category() == ErrorCategory::Usage);
      CHECK(e.where() == "--device");
    }
  }
}

TEST_CASE("serve device: a CUDA model without a usable device is an environment error", "[cpu][serve]") {
  const auto c = make_cfg(67, 24, 3, 2, 16);
  // Without a GPU (or a CUDA build) device 0 is refused; with one, a device index past the last.
  const int device = rtx::test::have_gpu() ? 4096 : 0;
  try {
    model_on(c, 1, device);
    FAIL("a CUDA model was made for device " << device);
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::Environment);
  }
  // A head size the CUDA attention cannot take is an input error, checked before the device.
  try {
    model_on(make_cfg(67, 264, 1, 1, 8), 1, 0);
    FAIL("a CUDA model with a head size of 264 was made");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::Input);
    CHECK(std::string(e.what()).find("head size 264") != std::string::npos);
  }
  // A CPU model refuses a cache without host storage rather than writing through null.
  LoadOptions o;
  auto cpu = make_gpt2_model(c, random_params(c, 1), char_tok(c.vocab_size), ModelInfo{}, o);
  KvCache kv(c.n_layer, c.n_head, c.n_embd / c.n_head, 4, 4, false);
  CHECK_FALSE(kv.host_storage());
  const int32_t tok = 1, block = kv.alloc();
  std::vector<float> lg(c.vocab_size);
  CHECK_THROWS_AS(cpu->forward({SeqBatch{&tok, 1, 0, &block, 1, true}}, kv, lg.data()), Error);
}

TEST_CASE("rtx-serve run --device: a bad value is a usage error; CUDA without a device is an environment error",
          "[cpu][serve]") {
  const std::string model = test::data_dir() + "/stories260k/tinyllamas-stories-260k-f32.gguf";
  const std::string serve = "timeout 30 " + test::tool_path("rtx-serve") + " run --port 0 --no-profile -m " + model;
  const auto bad = test::run(serve + " --device gpu0");
  INFO(bad.out << bad.err);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("--device: \"gpu0\" is not a device") != std::string::npos);
  if (test::have_gpu()) return;  // the rest is about machines without one
  const auto llama = test::run(serve + " --device cuda");
  INFO(llama.out << llama.err);
  CHECK(llama.exit_code == 3);
  CHECK(llama.err.find("--device: ") != std::string::npos);
  CHECK(llama.err.find("--device cpu") != std::string::npos);  // the hint
}

TEST_CASE("rtx-serve run: --token-budget below the default prefill chunk caps it; both given and contradicting is an error",
          "[cpu][serve]") {
  const std::string model = test::data_dir() + "/stories260k/tinyllamas-stories-260k-f32.gguf";
  const std::string serve = test::tool_path("rtx-serve") + " run --port 0 --no-profile -m " + model;
  // Starts and serves until timeout's SIGTERM (timeout then exits 124), then stops gracefully.
  const auto ok = test::run("timeout -s TERM 3 " + serve + " --token-budget 64");
  INFO(ok.out << ok.err);
  CHECK(ok.exit_code == 124);
  CHECK(ok.err.find("on http://127.0.0.1:") != std::string::npos);
  CHECK(ok.err.find("rtx-serve: stopped") != std::string::npos);
  CHECK(ok.err.find("error") == std::string::npos);
  const auto bad = test::run("timeout 30 " + serve + " --token-budget 64 --prefill-chunk 128");
  INFO(bad.out << bad.err);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("prefill_chunk") != std::string::npos);
}

TEST_CASE("rtx-serve run --kv-type: f16 starts with half the KV bytes; an unknown type is a usage error", "[cpu][serve]") {
  const std::string model = test::data_dir() + "/stories260k/tinyllamas-stories-260k-f32.gguf";
  const std::string serve = test::tool_path("rtx-serve") + " run --port 0 --no-profile -m " + model + " --kv-blocks 64";
  const auto f32 = test::run("timeout -s TERM 3 " + serve);
  const auto f16 = test::run("timeout -s TERM 3 " + serve + " --kv-type f16");
  INFO(f32.err << f16.err);
  CHECK(f16.exit_code == 124);  // served until timeout's SIGTERM
  // stories260k: 5 layers, 4 KV heads of 8; 64 blocks of 16 positions: 64*16*5*2*32 elements.
  CHECK(f32.err.find("KV 64 blocks x 16 tokens f32 (1.2 MiB)") != std::string::npos);
  CHECK(f16.err.find("KV 64 blocks x 16 tokens f16 (0.6 MiB)") != std::string::npos);
  const auto bad = test::run("timeout 30 " + serve + " --kv-type q8_0");
  INFO(bad.out << bad.err);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("--kv-type") != std::string::npos);
}
