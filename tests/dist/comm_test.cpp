// Single-process tests of rtx/dist: bus-bandwidth factors, the single communicator and its
// telemetry, bucket planning, the bucketer's overlap with a fake two-rank group, timeouts, and
// the GPT-2 backward's gradient-ready hook.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <thread>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/dist/bench_ops.hpp"
#include "rtx/dist/buckets.hpp"
#include "rtx/dist/comm.hpp"
#include "rtx/models/gpt2.hpp"
#include "rtx/telemetry/bus.hpp"

using namespace rtx;
using namespace rtx::dist;

namespace {

/// A pretend group of 2 ranks in one process: "all-reduce" doubles the values (x + x, what two
/// equal ranks would give), records the order of calls and can be told to time out.
class FakePair final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  const char* backend() const override { return "single"; }  // thread-capable
  std::vector<size_t> offsets;   // data - base of each all-reduce, in call order
  float* base = nullptr;
  std::atomic<int> calls{0};
  bool hang = false;
  std::atomic<bool> gate{true};  // all-reduces wait while false

 protected:
  void do_allreduce_sum(void* data, size_t n, int dtype_bytes) override {
    while (!gate.load()) std::this_thread::yield();
    if (hang) timed_out("allreduce", n * static_cast<size_t>(dtype_bytes));
    if (dtype_bytes == 4) {
      float* p = static_cast<float*>(data);
      for (size_t i = 0; i < n; ++i) p[i] += p[i];
      std::lock_guard<std::mutex> lk(mu_);
      offsets.push_back(static_cast<size_t>(p - base));
    } else {
      double* p = static_cast<double*>(data);
      for (size_t i = 0; i < n; ++i) p[i] += p[i];
    }
    ++calls;
  }
  void do_broadcast(void*, size_t, int) override {}
  void do_allgather(const void* send, void* recv, size_t bytes) override {
    std::memcpy(recv, send, bytes);
    std::memcpy(static_cast<char*>(recv) + bytes, send, bytes);
  }
  void do_barrier() override {}

 private:
  std::mutex mu_;
};

}  // namespace

TEST_CASE("busbw factors follow nccl-tests", "[cpu]") {
  CHECK(busbw_factor("allreduce", 1) == 0.0);
  CHECK(busbw_factor("allreduce", 2) == Approx(1.0));
  CHECK(busbw_factor("allreduce", 8) == Approx(1.75));
  CHECK(busbw_factor("allgather", 4) == Approx(0.75));
  CHECK(busbw_factor("reducescatter", 2) == Approx(0.5));
  CHECK(busbw_factor("broadcast", 16) == 1.0);
  CHECK(busbw_factor("barrier", 4) == 0.0);
}

TEST_CASE("single communicator: collectives, telemetry, bad input", "[cpu]") {
  SingleComm c;
  CHECK(c.rank() == 0);
  CHECK(c.size() == 1);
  std::vector<nlohmann::json> events;
  std::mutex mu;
  const uint64_t id = telemetry::subscribe(telemetry::topic::dist_collective, [&](const nlohmann::json& e) {
    std::lock_guard<std::mutex> lk(mu);
    events.push_back(e);
  });
  std::vector<float> x = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 1e-20f, 5.0f};
  const std::vector<float> x0 = x;
  c.allreduce_sum(x.data(), x.size());
  CHECK(x == x0);
  double d[2] = {0.25, 4.0};
  c.allreduce_sum(d, 2);
  CHECK(d[1] == 4.0);
  int32_t v = 42, out = 0;
  c.allgather(&v, &out, sizeof v);
  CHECK(out == 42);
  c.broadcast(&v, sizeof v, 0);
  c.barrier();
  telemetry::unsubscribe(id);
  REQUIRE(events.size() == 5);
  const nlohmann::json& f = events[0]["fields"];
  CHECK(f["op"] == "allreduce");
  CHECK(f["bytes"] == 7 * 4);
  CHECK(f["ranks"] == 1);
  CHECK(f["backend"] == "single");
  CHECK(f["busbw"].get<double>() == 0.0);  // one rank: nothing crosses a bus
  CHECK(f["algbw"].get<double>() >= 0.0);
  CHECK(events[1]["fields"]["bytes"] == 16);
  CHECK(events[2]["fields"]["op"] == "allgather");

  CHECK_THROWS_AS(c.broadcast(&v, sizeof v, 1), Error);   // no rank 1
  CHECK_THROWS_AS(c.allreduce_sum(static_cast<float*>(nullptr), 3), Error);
  CHECK_THROWS_AS(c.set_timeout(0), Error);
  CHECK_THROWS_AS(c.set_timeout(-1), Error);
  c.set_timeout(2.5);
  CHECK(c.timeout_s() == 2.5);
  require_same(c, "run config", "{\"lr\":1}");  // one rank: nothing to disagree with
  CHECK(thread_capable(c));
}

TEST_CASE("bucket plans tile the buffer from the end", "[cpu]") {
  for (size_t n : {size_t{1}, size_t{7}, size_t{127}, size_t{1000003}}) {
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{4}, size_t{28}, size_t{4096}, size_t{1} << 20}) {
      const std::vector<Bucket> b = plan_buckets(n, bytes);
      REQUIRE(!b.empty());
      size_t end = n, total = 0;
      for (const Bucket& k : b) {
        CHECK(k.offset + k.count == end);  // contiguous, highest offsets first
        CHECK(k.count >= 1);
        if (bytes >= 4) CHECK(k.count <= bytes / 4);
        end = k.offset;
        total += k.count;
      }
      CHECK(end == 0);
      CHECK(total == n);
      if (bytes == 0) CHECK(b.size() == 1);
      if (bytes >= 4) CHECK(b.size() == (n + bytes / 4 - 1) / (bytes / 4));
    }
  }
  CHECK(plan_buckets(0, 64).empty());
}

TEST_CASE("bucketer: all-reduces a bucket as soon as its gradients are ready", "[cpu]") {
  const size_t n = 127;
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = static_cast<float>(i) * 0.5f - 3.0f;
  const std::vector<float> g0 = g;
  FakePair comm;
  comm.base = g.data();
  GradBucketer bk(comm, g.data(), n, 40 * sizeof(float));  // buckets [87,127) [47,87) [7,47) [0,7)
  REQUIRE(bk.buckets().size() == 4);
  REQUIRE(bk.overlapping());
  bk.mark_ready(0, n);  // not armed: ignored
  CHECK(comm.calls == 0);
  bk.begin();
  bk.mark_ready(100, 27);   // part of the last bucket: nothing yet
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(comm.calls == 0);
  bk.mark_ready(87, 13);    // bucket [87,127) complete: reduced without waiting for finish()
  for (int i = 0; i < 2000 && comm.calls == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(comm.calls == 1);
  bk.mark_ready(7, 80);     // buckets [47,87) and [7,47)
  bk.finish();              // [0,7) launched here
  CHECK(comm.calls == 4);
  REQUIRE(comm.offsets.size() == 4);
  CHECK(comm.offsets == std::vector<size_t>{87, 47, 7, 0});
  for (size_t i = 0; i < n; ++i) REQUIRE(g[i] == 2 * g0[i]);  // each float reduced exactly once
  const BucketStats st = bk.stats();
  CHECK(st.allreduces == 4);
  CHECK(st.bytes == n * sizeof(float));
  CHECK(st.hidden_share() >= 0.0);
  CHECK(st.hidden_share() <= 1.0);
  CHECK_THROWS_AS(bk.mark_ready(120, 8), Error);  // past the end
  CHECK_THROWS_AS(bk.finish(), Error);            // not armed
  bk.begin();
  CHECK_THROWS_AS(bk.begin(), Error);
  bk.finish();
  CHECK(comm.calls == 8);
}

TEST_CASE("bucketer: a timed-out all-reduce surfaces in finish() and breaks the group", "[cpu]") {
  std::vector<float> g(64, 1.0f);
  FakePair comm;
  comm.base = g.data();
  comm.set_timeout(1.5);
  comm.hang = true;
  GradBucketer bk(comm, g.data(), g.size(), 16 * sizeof(float));
  bk.begin();
  bk.mark_ready(0, 64);
  try {
    bk.finish();
    FAIL("finish() did not throw");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::Environment);
    const std::string m = e.message();
    CHECK(m.find("did not complete within 1.5 s") != std::string::npos);
    CHECK(m.find("another rank died or hangs") != std::string::npos);
    CHECK(m.find("64 B") != std::string::npos);
  }
  CHECK(comm.broken());
  float x = 1;
  CHECK_THROWS_AS(comm.allreduce_sum(&x, 1), Error);  // a broken group refuses further work
}

TEST_CASE("GPT-2 CPU backward reports every gradient range once, last layers first", "[cpu]") {
  models::Gpt2Config cfg;
  cfg.n_layer = 3;
  cfg.n_head = 2;
  cfg.n_embd = 8;
  cfg.block_size = 7;
  cfg.vocab_size = 11;
  models::Gpt2 m(cfg, 2, 7);
  m.init_weights(5);
  std::vector<int32_t> ids(14), tgt(14);
  Philox rng(3, 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>(rng.next_u32() % 11);
    tgt[i] = static_cast<int32_t>(rng.next_u32() % 11);
  }
  std::vector<std::pair<size_t, size_t>> ranges;
  std::vector<float> snapshot_at_ready(m.num_params(), 0.0f);
  float* g = m.grad_data();
  REQUIRE(m.set_grad_ready_hook([&](size_t off, size_t n) {
    ranges.emplace_back(off, n);
    std::copy(g + off, g + off + n, snapshot_at_ready.begin() + static_cast<std::ptrdiff_t>(off));
  }));
  m.zero_grad();
  m.forward(ids.data(), tgt.data(), 2, 7);
  m.backward(1.0f);
  const auto& lay = m.layout();
  REQUIRE(ranges.size() == 1 + 3 + 1);
  CHECK(ranges.front() == std::make_pair(lay[2 + 36].offset, lay[2 + 36].numel + lay[3 + 36].numel));  // ln_f
  for (int l = 2; l >= 0; --l) {
    const auto& r = ranges[static_cast<size_t>(1 + (2 - l))];
    CHECK(r.first == lay[2 + 12 * static_cast<size_t>(l)].offset);
    CHECK(r.first + r.second == lay[13 + 12 * static_cast<size_t>(l)].offset + lay[13 + 12 * static_cast<size_t>(l)].numel);
  }
  CHECK(ranges.back() == std::make_pair(size_t{0}, lay[0].numel + lay[1].numel));
  // Together they tile the buffer, and each range was final when reported.
  size_t total = 0;
  for (const auto& r : ranges) total += r.second;
  CHECK(total == m.num_params());
  std::vector<float> final_grads(m.num_params());
  m.get_grads(final_grads.data());
  CHECK(snapshot_at_ready == final_grads);
  CHECK(std::equal(final_grads.begin(), final_grads.end(), g));  // grad_data is the live buffer
  m.set_grad_ready_hook({});
  ranges.clear();
  m.backward(1.0f);
  CHECK(ranges.empty());
}

TEST_CASE("allreduce bench op: registered, checked, timed on one rank", "[cpu]") {
  kernels::Registry reg;
  register_dist_ops(reg);
  const kernels::OpDef& op = reg.op("allreduce_world");
  const kernels::Variant& v = reg.variant("allreduce_world", "cpu.mpi");
  CHECK(v.validate({{"BYTES", 6}}, {}) != "");
  CHECK(v.validate({{"BYTES", 8}}, {}) == "");
  for (const auto& s : op.test_shapes) {
    auto inst = v.make(s, DType::F32, {}, 1);
    const kernels::CheckResult r = inst->check();
    CHECK(r.ok);
    CHECK(inst->timed_run() >= 0.0);
    CHECK(inst->footprint_bytes() == static_cast<size_t>(s.at("BYTES")));
  }
  CHECK(op.work({{"BYTES", 1024}}, DType::F32).bytes == 1024.0);  // one rank: algbw basis
  CHECK_THROWS_AS(v.make({{"BYTES", 6}}, DType::F32, {}, 1), Error);
}
