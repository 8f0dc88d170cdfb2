// attention_bench: the decode step's paged attention alone (rtx/serve/attention.hpp), shaped as
// GPT-2 124M at batch B: per layer, B sequences x 12 heads of size 64 (one query row each) over
// N cached positions, the sequences' KV blocks scattered through one pool (shuffled block ids,
// as a busy server's are), the (sequence, head) units spread over the OpenMP threads as
// Gpt2Serve::forward does. Reports the best of R passes over the 12 layers and the K + V bytes
// read per second. Not a test.
// Usage: attention_bench [--keys N] [--batch B] [--kv-type f32|f16] [--block T] [--reps R]
//   (defaults: 128 keys, batch 32, f32, block 16, 15 reps; threads from OMP_NUM_THREADS;
//   RTX_ISA=avx2 picks the AVX2 kernel on an AVX-512 CPU; the line printed names the ISA).
//   Exit: 0 ok, 2 bad flag, 3 the pool does not fit in memory.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <new>
#include <string>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/kernels/cpu_features.hpp"
#include "rtx/serve/attention.hpp"
#include "rtx/serve/model.hpp"
#include "bench_args.hpp"

using namespace rtx;

using bench_args::parse_int;

int main(int argc_in, char** argv_in) {
  try {
    rtx::bench_args::SplitArgs split(argc_in, argv_in);  // --flag=value as --flag value
    const int argc = split.argc();
    char** argv = split.argv();
    int n_keys = 128, batch = 32, block = 16, reps = 15;
    serve::KvType type = serve::KvType::F32;
    const char* usage = "usage: attention_bench [--keys N] [--batch B] [--kv-type f32|f16] [--block T] [--reps R]\n";
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--help" || a == "-h") return std::fputs(usage, stdout), 0;
      if (a != "--keys" && a != "--batch" && a != "--block" && a != "--reps" && a != "--kv-type")
        throw Error(ErrorCategory::Usage, "unknown flag " + a + "\n" + usage);
      if (i + 1 >= argc) throw Error(ErrorCategory::Usage, a + " wants a value");
      const std::string v = argv[++i];
      if (a == "--keys") n_keys = parse_int(v, a, 1);
      else if (a == "--batch") batch = parse_int(v, a, 1);
      else if (a == "--block") block = parse_int(v, a, 1);
      else if (a == "--reps") reps = parse_int(v, a, 1);
      else type = serve::parse_kv_type(v, "--kv-type");
    }
    constexpr int L = 12, H = 12, HS = 64;
    const int per_seq = (n_keys + block - 1) / block;
    if (static_cast<int64_t>(batch) * per_seq > 1 << 30)
      throw Error(ErrorCategory::Usage, "--batch x blocks per sequence (--keys / --block) is over 2^30 KV blocks");
    serve::KvCache kv(L, H, HS, block, batch * per_seq, true, type);
    std::vector<int32_t> ids(static_cast<size_t>(batch) * per_seq);
    for (auto& b : ids) b = kv.alloc();
    Philox rng(7);
    for (size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng.next_u32() % i]);  // Fisher-Yates
    std::vector<float> row(static_cast<size_t>(H) * HS), q(row.size());
    for (auto& x : q) x = 2.f * rng.next_float() - 1.f;
    for (int s = 0; s < batch; ++s)
      for (int l = 0; l < L; ++l)
        for (int p = 0; p < n_keys; ++p) {
          for (auto& x : row) x = 2.f * rng.next_float() - 1.f;
          serve::kv_store(kv, l, ids.data() + static_cast<size_t>(s) * per_seq, p, row.data(), row.data());
        }
    const int T = omp_get_max_threads();
    std::vector<float> scratch(static_cast<size_t>(T) * n_keys), out(static_cast<size_t>(batch) * H * HS);
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int l = 0; l < L; ++l) {
#pragma omp parallel for schedule(dynamic, 1)
        for (long u = 0; u < static_cast<long>(batch) * H; ++u) {
          const int s = static_cast<int>(u / H), h = static_cast<int>(u % H);
          serve::paged_attention(out.data() + static_cast<size_t>(u) * HS, q.data() + static_cast<size_t>(h) * HS,
                                 n_keys, kv, l, h, ids.data() + static_cast<size_t>(s) * per_seq, 0.125f,
                                 scratch.data() + static_cast<size_t>(omp_get_thread_num()) * n_keys);
        }
      }
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double bytes = 2.0 * batch * L * n_keys * H * HS * serve::kv_type_bytes(type);
    std::printf("attention_bench: batch %d, %d keys, block %d, KV %s, %d threads, ISA %s: best %.3f ms per step, "
                "%.1f GB/s (K + V read, %.1f MB)\n",
                batch, n_keys, block, serve::kv_type_name(type), T, kernels::isa_name(kernels::cpu_isa_active()),
                best * 1e3, bytes / best / 1e9, bytes / 1e6);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "attention_bench: %s\n", e.what());
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "attention_bench: not enough memory for the KV pool (--keys x --batch too large)\n");
    return 3;
  }
}
