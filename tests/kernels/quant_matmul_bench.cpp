// quant_matmul_bench: times matmul_forward_packed on quantized weights (ggml's Q8_0, Q4_K, Q5_K,
// Q6_K blocks, random bits with finite scales) and prints GMAC/s, with 8-bit activations (the
// serving default) or f32 activations. A benchmark, not a test (not registered with ctest).
// Usage: quant_matmul_bench [--type q4_k|q5_k|q6_k|q8_0] [--f32-activations] [--reps N]
//                           [--shapes MxNxK,...]
// (defaults: q4_k, 8-bit activations, 20 reps, GPT-2 124M's decode shapes at batch 32:
// 32x2304x768 (QKV), 32x3072x768 (MLP up), 32x768x3072 (MLP down), 32x50257x768 (LM head).)
// Threads from OMP_NUM_THREADS. MAC/s = M*N*K / median wall seconds of one call.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <omp.h>

#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/kernels/cpu_features.hpp"
#include "rtx/kernels/matmul.hpp"

using namespace rtx;
using namespace rtx::kernels;

namespace {
struct MNK {
  int M, N, K;
};

std::vector<MNK> parse_shapes(const std::string& s) {
  std::vector<MNK> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    MNK sh{};
    char x1 = 0, x2 = 0;
    std::stringstream is(item);
    if (!(is >> sh.M >> x1 >> sh.N >> x2 >> sh.K) || x1 != 'x' || x2 != 'x' || sh.M < 1 || sh.N < 1 || sh.K < 1)
      throw_usage("bad shape \"" + item + "\" (want MxNxK)", "--shapes");
    out.push_back(sh);
  }
  return out;
}

/// N*K/QK random blocks of ggml type `type` whose f16 scales are 2^-9 (finite, so no NaN).
std::vector<uint8_t> random_blocks(uint32_t type, int N, int K, uint64_t seed) {
  const int qk = type == 8 ? 32 : 256;
  const int bytes = type == 8 ? 34 : type == 12 ? 144 : type == 13 ? 176 : 210;
  std::vector<uint8_t> b(static_cast<size_t>(N) * (K / qk) * bytes);
  Philox rng(seed, 0);
  for (auto& v : b) v = static_cast<uint8_t>(rng.next_u32());
  const uint8_t half[2] = {0x00, 0x18};  // f16 2^-9
  for (size_t i = 0; i < b.size() / bytes; ++i) {
    uint8_t* p = b.data() + i * bytes;
    if (type == 14) std::memcpy(p + 208, half, 2);
    else {
      std::memcpy(p, half, 2);
      if (type != 8) std::memcpy(p + 2, half, 2);
    }
  }
  return b;
}
}  // namespace

int main(int argc, char** argv) {
  try {
    std::string type_name = "q4_k";
    bool a8 = true;
    int reps = 20;
    std::vector<MNK> shapes = {{32, 2304, 768}, {32, 3072, 768}, {32, 768, 3072}, {32, 50257, 768}};
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--type" && i + 1 < argc) type_name = argv[++i];
      else if (a == "--f32-activations") a8 = false;
      else if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
      else if (a == "--shapes" && i + 1 < argc) shapes = parse_shapes(argv[++i]);
      else {
        std::fprintf(stderr, "usage: quant_matmul_bench [--type q4_k|q5_k|q6_k|q8_0] [--f32-activations] [--reps N] [--shapes MxNxK,...]\n");
        return 2;
      }
    }
    const uint32_t type = type_name == "q8_0" ? 8 : type_name == "q4_k" ? 12 : type_name == "q5_k" ? 13 : type_name == "q6_k" ? 14 : 0;
    if (type == 0) throw_usage("unknown type \"" + type_name + "\"", "--type", "q4_k, q5_k, q6_k or q8_0");
    std::printf("%s, %s activations, ISA %s, %d threads\n", type_name.c_str(), a8 ? "8-bit" : "f32",
                isa_name(cpu_isa_active()), omp_get_max_threads());
    for (const MNK& s : shapes) {
      if (s.K % (type == 8 ? 32 : 256)) throw_usage("K = " + std::to_string(s.K) + " is not a multiple of the block size", "--shapes");
      const auto blocks = random_blocks(type, s.N, s.K, 1234 + s.N);
      const PackedMatmulWeight w = type == 8 ? PackedMatmulWeight::q8_0(blocks.data(), s.N, s.K, a8)
                                             : PackedMatmulWeight::kquant(type, blocks.data(), s.N, s.K, a8);
      std::vector<float> x(static_cast<size_t>(s.M) * s.K), out(static_cast<size_t>(s.M) * s.N);
      Philox rng(7, 1);
      for (float& v : x) v = rng.next_normal();
      // Warm-up of at least 3 calls and 0.3 s: a fresh OpenMP team can share one core until the
      // kernel's load balancer moves a thread (~0.1-0.3 s on the dev VM without OMP_PROC_BIND).
      const auto w0 = std::chrono::steady_clock::now();
      for (int r = 0; r < 3 || std::chrono::steady_clock::now() - w0 < std::chrono::milliseconds(300); ++r)
        matmul_forward_packed(out.data(), x.data(), w, nullptr, s.M);
      std::vector<double> t(reps);
      for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        matmul_forward_packed(out.data(), x.data(), w, nullptr, s.M);
        t[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
      std::sort(t.begin(), t.end());
      const double med = t[reps / 2];
      std::printf("%6d x %6d x %5d  %-28s  %9.3f ms  %7.1f GMAC/s\n", s.M, s.N, s.K, w.format(), med * 1e3,
                  static_cast<double>(s.M) * s.N * s.K / med / 1e9);
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "quant_matmul_bench: %s\n", e.what());
    return e.exit_code();
  }
}
