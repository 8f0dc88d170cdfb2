// fusion_bench: the GPT-2 MLP block (ln_2 -> c_fc + bias -> GELU -> c_proj + bias -> residual,
// then the next block's ln_1 on the residual stream) through ir::Executor, unfused vs fused
// (fuse_matmul_bias + fuse_elementwise), runs alternating in one process. Not a test.
// Usage: fusion_bench [B*T=768] [C=128] [runs=200] [fwd|train=fwd]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <omp.h>

#include "rtx/core/error.hpp"
#include "rtx/ir/autodiff.hpp"
#include "rtx/ir/exec.hpp"
#include "rtx/ir/passes.hpp"

using namespace rtx::ir;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  try {
    const int64_t BT = argc > 1 ? std::atoll(argv[1]) : 768, C = argc > 2 ? std::atoll(argv[2]) : 128;
    const int runs = argc > 3 ? std::atoi(argv[3]) : 200;
    const bool train = argc > 4 && std::string(argv[4]) == "train";
    Graph g("mlp_block");
    V x = g.input("x", {BT, C});
    std::vector<int> params;
    auto P = [&](const char* n, Shape s) {
      V v = g.param(n, s);
      params.push_back(v.id);
      return v;
    };
    V ln2w = P("ln2.w", {C}), ln2b = P("ln2.b", {C}), fcw = P("fc.w", {4 * C, C}), fcb = P("fc.b", {4 * C}), pw = P("proj.w", {C, 4 * C}),
      pb = P("proj.b", {C}), ln1w = P("ln1.w", {C}), ln1b = P("ln1.b", {C});
    V h = g.layernorm(x, ln2w, ln2b);
    V r = x + g.linear(g.gelu(g.linear(h, fcw, fcb)), pw, pb);
    V y = g.layernorm(r, ln1w, ln1b);
    g.mark_output(y);
    g.mark_output(r);
    if (train) {
      V loss = g.sum(g.reshape(y * y, {BT * C}), 0);
      params.push_back(x.id);
      for (int gr : backward(g, loss.id, params).grads) g.mark_output(gr);
    }
    Graph f = g;
    const auto recs = run_passes(f, nlohmann::json{{"schema", "rtx.passes.v1"},
                                                   {"passes", nlohmann::json::array({nlohmann::json{{"name", "fuse_matmul_bias"}},
                                                                                     nlohmann::json{{"name", "fuse_elementwise"}},
                                                                                     nlohmann::json{{"name", "dce"}}})}});
    ExecOptions o;
    o.telemetry = false;
    Executor eu(g, {}, o), ef(f, {}, o);
    for (Executor* e : {&eu, &ef})
      for (int v : e->graph().inputs()) {
        float* d = e->data(v);
        const int64_t n = e->plan().bytes[static_cast<size_t>(v)] / 4;
        for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>((i * 7919 % 1000) - 500) * 1e-3f;
      }
    std::vector<double> tu, tf;
    for (int i = 0; i < runs + 5; ++i)
      for (int k = 0; k < 2; ++k) {
        Executor& e = (i + k) % 2 ? ef : eu;  // alternate which goes first
        const auto t0 = Clock::now();
        e.run();
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (i >= 5) (&e == &ef ? tf : tu).push_back(ms);
      }
    auto med = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const int out_r = 1;  // r is output 1 in both graphs
    const bool same = std::memcmp(eu.data(g.outputs()[out_r]), ef.data(f.outputs()[out_r]), static_cast<size_t>(BT * C) * 4) == 0;
    std::printf("fusion_bench mlp block %s BT=%lld C=%lld threads=%d: unfused %.3f ms (%zu nodes, arena %lld B), fused %.3f ms (%zu nodes, "
                "arena %lld B): %.3fx faster (min %.3f vs %.3f ms); %s; residual output bitwise %s\n",
                train ? "forward+backward" : "forward", static_cast<long long>(BT), static_cast<long long>(C), omp_get_max_threads(), med(tu),
                g.nodes().size(), static_cast<long long>(eu.plan().arena_bytes), med(tf), f.nodes().size(),
                static_cast<long long>(ef.plan().arena_bytes), med(tu) / med(tf), *std::min_element(tu.begin(), tu.end()),
                *std::min_element(tf.begin(), tf.end()), recs[1].details["groups"].dump().c_str(),
                same ? "equal" : "different");
    return 0;
  } catch (const rtx::Error& e) {
    std::fprintf(stderr, "fusion_bench: %s\n", e.what());
    return e.exit_code();
  }
}
