// Every telemetry topic has a producer that a representative run reaches: engine spans and
// kernel.launch records of a GPT-2 training step (nested op -> layer -> forward/backward),
// alloc.frag from the caching allocator, serve.scheduler from a serving run, dist.collective
// from a communicator; the core event hook (KernelRun, MuteEvents) and the bus's file-only
// line format. occ_profile needs a GPU (CUDA tests); bench.result is checked end to end by
// trace_cli_test (rtx-trace record of rtx-bench).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "models/gpt2_ref.hpp"
#include "rtx/core/allocator.hpp"
#include "rtx/core/events.hpp"
#include "rtx/dist/comm.hpp"
#include "rtx/models/gpt2.hpp"
#include "rtx/serve/gpt2_serve.hpp"
#include "rtx/serve/scheduler.hpp"
#include "rtx/telemetry/bus.hpp"
#include "serve/serve_test_util.hpp"
#include "test_util.hpp"

using namespace rtx;
using json = nlohmann::json;

namespace {

/// Subscribes to every topic for its lifetime and keeps the events.
struct Recorder {
  std::mutex mu;
  std::vector<json> events;
  uint64_t id;
  Recorder() {
    id = telemetry::subscribe("*", [this](const json& e) {
      std::lock_guard<std::mutex> lk(mu);
      events.push_back(e);
    });
  }
  ~Recorder() { telemetry::unsubscribe(id); }
  std::vector<json> topic(const std::string& t) {
    std::lock_guard<std::mutex> lk(mu);
    std::vector<json> out;
    for (const json& e : events)
      if (e["topic"] == t) out.push_back(e);
    return out;
  }
};

int count_named(const std::vector<json>& evs, const std::string& name) {
  return static_cast<int>(std::count_if(evs.begin(), evs.end(), [&](const json& e) { return e["fields"]["name"] == name; }));
}

/// The innermost span (by begin/end on the same thread) that encloses [b, e], or null.
const json* enclosing(const std::vector<json>& spans, const json& ev) {
  const json* best = nullptr;
  const uint64_t b = ev["fields"]["begin_ns"], e = ev["fields"]["end_ns"];
  for (const json& s : spans) {
    if (s["tid"] != ev["tid"] || &s == &ev) continue;
    const uint64_t sb = s["fields"]["begin_ns"], se = s["fields"]["end_ns"];
    if (sb <= b && e <= se && (!best || se - sb < uint64_t((*best)["fields"]["end_ns"]) - uint64_t((*best)["fields"]["begin_ns"])))
      best = &s;
  }
  return best;
}

}  // namespace

TEST_CASE("KernelRun emits kernel.launch only while a sink is installed and the thread is not muted", "[cpu]") {
  static std::vector<std::pair<std::string, json>> got;
  got.clear();
  REQUIRE_FALSE(core::events_enabled());  // no telemetry listener in this test yet
  { core::KernelRun r("op_a", "cpu", {{"N", 5}}); }
  CHECK(got.empty());
  core::set_event_sink([](const char* topic, json&& f) { got.emplace_back(topic, std::move(f)); });
  {
    core::KernelRun r("op_b", "cpu.avx2", {{"M", 3}, {"N", 4}}, "bf16");
  }
  {
    const core::MuteEvents mute;
    CHECK_FALSE(core::events_enabled());
    core::KernelRun r("op_muted", "cpu", {{"N", 1}});
  }
  core::set_event_sink(nullptr);
  REQUIRE(got.size() == 1);
  CHECK(got[0].first == "kernel.launch");
  const json& f = got[0].second;
  CHECK(f["name"] == "op_b");
  CHECK(f["variant"] == "cpu.avx2");
  CHECK(f["dtype"] == "bf16");
  CHECK(f["dims"] == json{{"M", 3}, {"N", 4}});
  CHECK(uint64_t(f["end_ns"]) >= uint64_t(f["begin_ns"]));
  CHECK(uint64_t(f["dur_ns"]) == uint64_t(f["end_ns"]) - uint64_t(f["begin_ns"]));
}

TEST_CASE("the bus installs core's sink while it has listeners", "[cpu]") {
  CHECK_FALSE(core::events_enabled());
  {
    Recorder rec;
    CHECK(core::events_enabled());
    { core::KernelRun r("probe", "cpu", {{"N", 7}}); }
    const auto k = rec.topic(telemetry::topic::kernel_launch);
    REQUIRE(k.size() == 1);
    CHECK(k[0]["fields"]["dims"]["N"] == 7);
    CHECK(k[0]["schema"] == telemetry::kEventsSchema);
  }
  CHECK_FALSE(core::events_enabled());
}

TEST_CASE("a GPT-2 training step publishes a span tree kernel -> attn/mlp -> layer.N -> forward/backward", "[cpu]") {
  const int L = 2, C = 16, NH = 2, V = 37, B = 2, T = 8;
  const models::Gpt2Config cfg = rtx::test::make_cfg(V, C, NH, L, T);
  models::Gpt2 m(cfg, B, T);
  m.init_weights(5);
  std::vector<int32_t> ids(B * T), tg(B * T);
  for (int i = 0; i < B * T; ++i) ids[i] = (i * 7) % V, tg[i] = (i * 11 + 3) % V;
  Recorder rec;
  m.zero_grad();
  m.forward(ids.data(), tg.data(), B, T);
  m.backward();
  m.step(1, 1e-3f, models::AdamWConfig{});
  const auto spans = rec.topic(telemetry::topic::span);
  const auto kernels = rec.topic(telemetry::topic::kernel_launch);
  // Spans: forward, backward, adamw once; each layer once in forward and once in backward.
  CHECK(count_named(spans, "forward") == 1);
  CHECK(count_named(spans, "backward") == 1);
  CHECK(count_named(spans, "adamw") == 1);
  for (int l = 0; l < L; ++l) CHECK(count_named(spans, "layer." + std::to_string(l)) == 2);
  CHECK(count_named(spans, "attn") == 2 * L);
  CHECK(count_named(spans, "mlp") == 2 * L);
  // Kernels: 4 matmuls per layer + the tied lm_head in forward, the same count in backward.
  CHECK(count_named(kernels, "matmul_forward") == 4 * L + 1);
  CHECK(count_named(kernels, "matmul_backward") == 4 * L + 1);
  CHECK(count_named(kernels, "attention_forward") == L);
  CHECK(count_named(kernels, "attention_backward") == L);
  CHECK(count_named(kernels, "layernorm_forward") == 2 * L + 1);
  CHECK(count_named(kernels, "encoder_forward") == 1);
  CHECK(count_named(kernels, "crossentropy_forward") == 1);
  CHECK(count_named(kernels, "adamw_update") >= 1);
  // The first forward matmul is layer 0's qkv projection: (B*T, 3C, C).
  const auto first_mm = std::find_if(kernels.begin(), kernels.end(), [](const json& e) { return e["fields"]["name"] == "matmul_forward"; });
  REQUIRE(first_mm != kernels.end());
  CHECK((*first_mm)["fields"]["dims"] == json{{"M", B * T}, {"N", 3 * C}, {"K", C}});
  CHECK((*first_mm)["fields"]["dtype"] == "f32");
  // Nesting: every matmul lies inside attn/mlp/lm_head, which lie in a layer or the step's
  // forward/backward; each layer.N span carries args.layer = N.
  for (const json& k : kernels) {
    if (k["fields"]["name"] != "matmul_forward") continue;
    const json* p = enclosing(spans, k);
    REQUIRE(p);
    const std::string pn = (*p)["fields"]["name"];
    CHECK((pn == "attn" || pn == "mlp" || pn == "lm_head"));
    if (pn == "lm_head") continue;
    const json* layer = enclosing(spans, *p);
    REQUIRE(layer);
    const std::string ln = (*layer)["fields"]["name"];
    REQUIRE(ln.rfind("layer.", 0) == 0);
    CHECK((*layer)["fields"]["args"]["layer"] == std::stoi(ln.substr(6)));
    const json* top = enclosing(spans, *layer);
    REQUIRE(top);
    CHECK((*top)["fields"]["name"] == "forward");
  }
}

TEST_CASE("the caching allocator reports fragmentation when a burst grows the pool and on empty_cache", "[cpu]") {
  CachingAllocator a(host_backing());
  Recorder rec;
  // Three 600,000-byte blocks: rounded to 512 B (600,064), carved from 2 MiB small segments;
  // the fourth does not fit the first segment's rest (2,097,152 - 3 * 600,064 = 296,960).
  std::vector<void*> p;
  for (int i = 0; i < 4; ++i) p.push_back(a.allocate(600000));
  auto frag = rec.topic(telemetry::topic::alloc_frag);
  REQUIRE(frag.size() == 2);  // segment 1 (first block), segment 2 (fourth block)
  const json& f0 = frag[0]["fields"];
  CHECK(f0["reason"] == "segment");
  CHECK(f0["allocator"] == "host");
  CHECK(f0["reserved_bytes"] == 2097152);
  CHECK(f0["allocated_bytes"] == 600064);
  CHECK(double(f0["fragmentation_pct"]) == Approx(100.0 * (2097152 - 600064) / 2097152).epsilon(1e-12));
  const json& f1 = frag[1]["fields"];
  CHECK(f1["reserved_bytes"] == 2 * 2097152);
  CHECK(f1["allocated_bytes"] == 4 * 600064);
  CHECK(f1["segments"] == 2);
  CHECK(f1["largest_free_block"] == 2097152 - 600064);  // the second segment's rest
  for (void* q : p) a.deallocate(q);
  a.empty_cache();
  frag = rec.topic(telemetry::topic::alloc_frag);
  REQUIRE(frag.size() == 3);
  CHECK(frag[2]["fields"]["reason"] == "empty_cache");
  CHECK(frag[2]["fields"]["reserved_bytes"] == 0);
  CHECK(frag[2]["fields"]["fragmentation_pct"] == 0.0);
}

TEST_CASE("each serving scheduler iteration publishes batch, tokens, queue and KV use", "[cpu]") {
  const auto c = rtx::test::make_cfg(41, 16, 2, 1, 32);
  serve::LoadOptions o;
  auto m = serve::make_gpt2_model(c, rtx::test::random_params(c, 3), rtx::test::char_tok(c.vocab_size),
                                  serve::ModelInfo{}, o);
  Recorder rec;
  {
    serve::SchedulerConfig sc;
    sc.prefill_chunk = 4;
    serve::Scheduler s(*m, sc);
    serve::GenRequest r;
    r.prompt = {1, 2, 3, 4, 5, 6};
    r.max_tokens = 3;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    rtx::test::Collector col;
    REQUIRE(s.submit(r, col.fn()));
    CHECK(col.wait() == serve::Finish::Length);
    REQUIRE(col.tokens.size() == 3);
  }
  const auto it = rec.topic(telemetry::topic::serve_scheduler);
  // Prompt of 6 in chunks of 4: steps of 4 and 2 prefill tokens, then 2 decode steps (the
  // first generated token comes from the last prefill chunk's logits; 3 tokens need 2 more).
  REQUIRE(it.size() == 4);
  std::vector<int> prefill, decode;
  for (const json& e : it) {
    const json& f = e["fields"];
    prefill.push_back(f["prefill_tokens"]);
    decode.push_back(f["decode_tokens"]);
    CHECK(f["tokens"] == int(f["prefill_tokens"]) + int(f["decode_tokens"]));
    CHECK(f["seqs"] == 1);
    CHECK(int(f["kv_blocks_used"]) >= 1);
    CHECK(int(f["kv_blocks_used"]) <= int(f["kv_blocks_total"]));
    CHECK(double(f["step_ms"]) >= 0);
  }
  CHECK(prefill == std::vector<int>{4, 2, 0, 0});
  CHECK(decode == std::vector<int>{0, 0, 1, 1});
  CHECK(it[0]["fields"]["step"] == 1);
  CHECK(it[3]["fields"]["step"] == 4);
}

TEST_CASE("a collective publishes dist.collective", "[cpu]") {
  dist::SingleComm comm;
  Recorder rec;
  std::vector<float> x(10, 1.0f);
  comm.allreduce_sum(x.data(), x.size());
  const auto d = rec.topic(telemetry::topic::dist_collective);
  REQUIRE(d.size() == 1);
  CHECK(d[0]["fields"]["op"] == "allreduce");
  CHECK(d[0]["fields"]["bytes"] == 40);
  CHECK(d[0]["fields"]["ranks"] == 1);
}

TEST_CASE("the file-only path writes the same canonical line as a dumped event", "[cpu]") {
  const std::string path = rtx::test::temp_dir() + "/events_fileonly.jsonl";
  telemetry::open_event_file(path);
  { core::KernelRun r("file_op", "cpu", {{"N", 3}}); }
  telemetry::publish("custom.topic \"quoted\"", {{"x", 1.5}, {"s", "a\nb"}});
  telemetry::close_event_file();
  std::ifstream in(path);
  std::string line;
  std::vector<json> evs;
  while (std::getline(in, line)) {
    const json e = json::parse(line);
    CHECK(e.dump() == line);  // sorted keys, no spaces: what json::dump wrote before
    evs.push_back(e);
  }
  REQUIRE(evs.size() == 2);
  CHECK(evs[0]["topic"] == "kernel.launch");
  CHECK(evs[0]["fields"]["name"] == "file_op");
  CHECK(evs[1]["topic"] == "custom.topic \"quoted\"");
  CHECK(evs[1]["fields"]["s"] == "a\nb");
  for (const char* k : {"schema", "time_ns", "unix_ns", "seed", "hw", "pid", "tid"}) CHECK(evs[1].contains(k));
}
