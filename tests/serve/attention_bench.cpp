// attention_bench: the decode step's paged attention alone (rtx/serve/attention.hpp), shaped as
// GPT-2 124M at batch B: per layer, B sequences x 12 heads of size 64 (one query row each, or a
// prompt chunk of --rows) over N cached positions, the sequences' KV blocks scattered through one
// pool (shuffled block ids, as a busy server's are), the calls spread over the OpenMP threads as
// Gpt2Serve::forward does. Reports the best of R passes over the 12 layers and the K + V bytes
// read per second. Not a test.
// Usage: attention_bench [--keys N] [--batch B] [--kv-type f32|f16] [--block T] [--reps R]
//                        [--rows N] [--heads-per-call G]
//   (defaults: 128 keys, batch 32, f32, block 16, 15 reps, 1 row; --rows N > 1: each sequence
//   is a prompt chunk of N query rows, the last N of its keys, causal; the calls are the engine's
//   plan (plan_attention_calls) unless --heads-per-call G: then every row's heads go in calls of
//   G, row by row (G = 1: the one-head walk of paged_attention); threads from OMP_NUM_THREADS;
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
    int n_keys = 128, batch = 32, block = 16, reps = 15, per_call = 0, rows = 1;
    serve::KvType type = serve::KvType::F32;
    const char* usage =
        "usage: attention_bench [--keys N] [--batch B] [--kv-type f32|f16] [--block T] [--reps R] [--rows N]\n"
        "                       [--heads-per-call G]\n";
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--help" || a == "-h") return std::fputs(usage, stdout), 0;
      if (a != "--keys" && a != "--batch" && a != "--block" && a != "--reps" && a != "--kv-type" &&
          a != "--heads-per-call" && a != "--rows")
        throw Error(ErrorCategory::Usage, "unknown flag " + a + "\n" + usage);
      if (i + 1 >= argc) throw Error(ErrorCategory::Usage, a + " wants a value");
      const std::string v = argv[++i];
      if (a == "--keys") n_keys = parse_int(v, a, 1);
      else if (a == "--batch") batch = parse_int(v, a, 1);
      else if (a == "--block") block = parse_int(v, a, 1);
      else if (a == "--reps") reps = parse_int(v, a, 1);
      else if (a == "--heads-per-call") per_call = parse_int(v, a, 1);
      else if (a == "--rows") rows = parse_int(v, a, 1);
      else type = serve::parse_kv_type(v, "--kv-type");
    }
    constexpr int L = 12, H = 12, HS = 64;
    if (rows > n_keys) throw Error(ErrorCategory::Usage, "--rows " + std::to_string(rows) + " is over --keys " + std::to_string(n_keys));
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
    // The calls of one layer: the engine's plan (plan_attention_calls), or, with
    // --heads-per-call G, every row's heads in calls of G, row by row (G = 1: the one-head walk).
    std::vector<serve::AttentionCall> calls;
    size_t per_thread = 0;
    if (per_call == 0) {
      std::vector<serve::SeqBatch> seqs(batch);  // only n and pos matter to the plan
      for (auto& sb : seqs) sb.n = rows, sb.pos = n_keys - rows;
      per_thread = serve::plan_attention_calls(calls, seqs, H, T, n_keys);
    } else {
      const int G = std::min(per_call, H);
      for (int r = 0; r < batch * rows; ++r)
        for (int h = 0; h < H; h += G) calls.push_back({r, 1, h, std::min(G, H - h)});
      per_thread = static_cast<size_t>(G) * n_keys;
    }
    std::vector<float> scratch(T * per_thread), out(static_cast<size_t>(batch) * rows * H * HS);
    std::vector<float> qs(static_cast<size_t>(rows) * H * HS);  // every row's query: q
    for (int r = 0; r < rows; ++r) std::copy(q.begin(), q.end(), qs.begin() + static_cast<size_t>(r) * H * HS);
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int l = 0; l < L; ++l) {
#pragma omp parallel for schedule(dynamic, 1)
        for (size_t u = 0; u < calls.size(); ++u) {
          const serve::AttentionCall& a = calls[u];
          const int s = a.row / rows, keys = n_keys - rows + 1 + a.row % rows;  // causal: row i sees pos + i + 1
          serve::paged_attention_tile(out.data() + (static_cast<size_t>(a.row) * H + a.h0) * HS, H * HS,
                                      qs.data() + (static_cast<size_t>(a.row % rows) * H + a.h0) * HS, H * HS, a.n_rows, keys, kv, l, a.h0,
                                      a.n_heads, 1, ids.data() + static_cast<size_t>(s) * per_seq, 0.125f,
                                      scratch.data() + static_cast<size_t>(omp_get_thread_num()) * per_thread);
        }
      }
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double bytes = 2.0 * batch * L * n_keys * H * HS * serve::kv_type_bytes(type);
    double pairs = 0;  // (query, key) pairs of one step, all heads and layers
    for (int i = 0; i < rows; ++i) pairs += static_cast<double>(batch) * L * H * (n_keys - rows + 1 + i);
    std::printf("attention_bench: batch %d x %d rows, %d keys, block %d, KV %s, %d threads, %s, ISA %s: best %.3f ms "
                "per step, %.1f GB/s of K + V (%.1f MB, read once), %.1f ns per (query, key) pair and head\n",
                batch, rows, n_keys, block, serve::kv_type_name(type), T,
                per_call ? ("row by row, " + std::to_string(std::min(per_call, H)) + " heads per call").c_str()
                         : "engine plan",
                kernels::isa_name(kernels::cpu_isa_active()), best * 1e3, bytes / best / 1e9, bytes / 1e6,
                best / pairs * 1e9);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "attention_bench: %s\n", e.what());
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "attention_bench: not enough memory for the KV pool (--keys x --batch too large)\n");
    return 3;
  }
}
