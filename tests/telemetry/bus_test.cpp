// Telemetry bus: stamps, topic filtering, unsubscribe, concurrent publishers, JSON Lines sink,
// spans, and the disabled fast path.
#include <atomic>
#include <catch2/catch.hpp>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/telemetry/bus.hpp"
#include "rtx/telemetry/hwprofile.hpp"
#include "test_util.hpp"

namespace tel = rtx::telemetry;

TEST_CASE("subscriber receives stamped events of its topic only", "[cpu]") {
  tel::set_run_seed(1234);
  std::vector<nlohmann::json> got;
  const uint64_t before_unix = tel::unix_now_ns();
  const uint64_t before = tel::now_ns();
  const uint64_t id = tel::subscribe(tel::topic::kernel_launch, [&](const nlohmann::json& e) { got.push_back(e); });
  REQUIRE(tel::enabled());
  tel::publish(tel::topic::kernel_launch, {{"op", "matmul"}, {"grid", {1, 7, 127}}});
  tel::publish(tel::topic::bench_result, {{"op", "other"}});  // different topic: not delivered
  tel::publish(tel::topic::kernel_launch, {{"op", "layernorm"}});
  tel::unsubscribe(id);
  REQUIRE(got.size() == 2);
  const auto& e = got[0];
  CHECK(e["schema"] == tel::kEventsSchema);
  CHECK(e["topic"] == "kernel.launch");
  CHECK(e["fields"]["op"] == "matmul");
  CHECK(e["fields"]["grid"][2] == 127);
  CHECK(e["seed"] == 1234);
  CHECK(e["time_ns"].get<uint64_t>() >= before);
  CHECK(e["time_ns"].get<uint64_t>() <= tel::now_ns());
  CHECK(e["unix_ns"].get<uint64_t>() >= before_unix);
  CHECK(got[1]["time_ns"].get<uint64_t>() >= e["time_ns"].get<uint64_t>());
  CHECK(e["hw"]["rtx_sha"] == tel::hardware_profile().rtx_sha);
  CHECK(e["hw"]["arch"] == tel::identity_json()["arch"]);
  CHECK(e["hw"].contains("driver"));
  CHECK(e["tid"] == tel::thread_id());
  CHECK(got[1]["fields"]["op"] == "layernorm");
  tel::set_run_seed(0);
}

TEST_CASE("wildcard subscription and unsubscribe stops delivery", "[cpu]") {
  int all = 0, spans = 0;
  const uint64_t a = tel::subscribe("*", [&](const nlohmann::json&) { ++all; });
  const uint64_t b = tel::subscribe(tel::topic::span, [&](const nlohmann::json&) { ++spans; });
  CHECK(a != b);
  tel::publish(tel::topic::alloc_frag, {{"free_bytes", 1}});
  tel::publish(tel::topic::span, {{"name", "x"}});
  CHECK(all == 2);
  CHECK(spans == 1);
  tel::unsubscribe(a);
  tel::publish(tel::topic::span, {{"name", "y"}});
  CHECK(all == 2);
  CHECK(spans == 2);
  tel::unsubscribe(b);
  tel::unsubscribe(b);      // twice: ignored
  tel::unsubscribe(99999);  // unknown: ignored
  tel::publish(tel::topic::span, {{"name", "z"}});
  CHECK(spans == 2);
  CHECK_FALSE(tel::enabled());
  CHECK_THROWS_AS(tel::subscribe("x", nullptr), rtx::Error);
}

TEST_CASE("disabled bus does not evaluate RTX_PUBLISH fields", "[cpu]") {
  REQUIRE_FALSE(tel::enabled());
  int built = 0;
  auto fields = [&] {
    ++built;
    return nlohmann::json{{"k", 1}};
  };
  RTX_PUBLISH(tel::topic::compiler_pass, fields());
  CHECK(built == 0);
  const uint64_t id = tel::subscribe("*", [](const nlohmann::json&) {});
  RTX_PUBLISH(tel::topic::compiler_pass, fields());
  CHECK(built == 1);
  tel::unsubscribe(id);
}

TEST_CASE("a throwing subscriber does not break the publisher or others", "[cpu]") {
  int ok = 0;
  const uint64_t a = tel::subscribe("*", [](const nlohmann::json&) { throw std::runtime_error("boom"); });
  const uint64_t b = tel::subscribe("*", [&](const nlohmann::json&) { ++ok; });
  CHECK_NOTHROW(tel::publish(tel::topic::graph_capture, {{"nodes", 3}}));
  CHECK(ok == 1);
  tel::unsubscribe(a);
  tel::unsubscribe(b);
}

TEST_CASE("concurrent publishers lose nothing", "[cpu]") {
  constexpr int kThreads = 7, kPer = 1000;
  std::mutex mu;
  std::set<std::pair<int, int>> seen;
  std::atomic<int> count{0};
  const uint64_t id = tel::subscribe(tel::topic::dist_collective, [&](const nlohmann::json& e) {
    ++count;
    std::lock_guard<std::mutex> lk(mu);
    seen.insert({e["fields"]["t"].get<int>(), e["fields"]["i"].get<int>()});
  });
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([t] {
      for (int i = 0; i < kPer; ++i) tel::publish(tel::topic::dist_collective, {{"t", t}, {"i", i}});
    });
  for (auto& t : ts) t.join();
  tel::unsubscribe(id);
  CHECK(count.load() == kThreads * kPer);
  CHECK(seen.size() == static_cast<size_t>(kThreads * kPer));
}

TEST_CASE("JSON Lines sink writes one valid object per line, concurrently", "[cpu]") {
  const std::string path = rtx::test::temp_dir() + "/events.jsonl";
  {
    std::ofstream pre(path);
    pre << "{\"pre\":true}\n";  // append mode keeps what was there
  }
  tel::open_event_file(path);
  CHECK(tel::event_file() == path);
  CHECK(tel::enabled());
  constexpr int kThreads = 3, kPer = 200;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([t] {
      for (int i = 0; i < kPer; ++i)
        tel::publish(tel::topic::serve_scheduler, {{"t", t}, {"i", i}, {"text", "quote \" and \n newline"}});
    });
  for (auto& t : ts) t.join();
  { tel::ScopedSpan s("unit_span", {{"B", 1}, {"T", 7}}); }
  tel::close_event_file();
  CHECK_FALSE(tel::enabled());
  tel::publish(tel::topic::serve_scheduler, {{"after", "close"}});  // not written

  std::ifstream f(path);
  std::string line;
  int n = 0, spans = 0;
  std::getline(f, line);
  CHECK(line == "{\"pre\":true}");
  while (std::getline(f, line)) {
    ++n;
    nlohmann::json e;
    REQUIRE_NOTHROW(e = nlohmann::json::parse(line));
    REQUIRE(e.is_object());
    for (const char* k : {"schema", "topic", "time_ns", "unix_ns", "seed", "hw", "fields", "tid", "pid"})
      CHECK(e.contains(k));
    for (const char* k : {"arch", "driver", "rtx_sha"}) CHECK(e["hw"].contains(k));
    if (e["topic"] == "span") {
      ++spans;
      CHECK(e["fields"]["name"] == "unit_span");
      CHECK(e["fields"]["end_ns"].get<uint64_t>() >= e["fields"]["begin_ns"].get<uint64_t>());
      CHECK(e["fields"]["dur_ns"].get<uint64_t>() ==
            e["fields"]["end_ns"].get<uint64_t>() - e["fields"]["begin_ns"].get<uint64_t>());
      CHECK(e["fields"]["args"]["T"] == 7);
    } else {
      CHECK(e["fields"]["text"] == "quote \" and \n newline");
    }
  }
  CHECK(n == kThreads * kPer + 1);
  CHECK(spans == 1);
}

TEST_CASE("event file errors and RTX_EVENTS", "[cpu]") {
  CHECK_THROWS_AS(tel::open_event_file("/nonexistent-dir-rtx/ev.jsonl"), rtx::Error);
  try {
    tel::open_event_file("/nonexistent-dir-rtx/ev.jsonl");
  } catch (const rtx::Error& e) {
    CHECK(e.category() == rtx::ErrorCategory::Environment);
    CHECK(e.where() == "/nonexistent-dir-rtx/ev.jsonl");
  }
  CHECK_FALSE(tel::enabled());
  const std::string path = rtx::test::temp_dir() + "/env.jsonl";
  setenv("RTX_EVENTS", path.c_str(), 1);
  tel::init_from_options("", 77);
  unsetenv("RTX_EVENTS");
  CHECK(tel::run_seed() == 77);
  CHECK(tel::event_file() == path);
  tel::publish(tel::topic::occ_profile, {{"occupancy", 0.5}});
  tel::close_event_file();
  std::ifstream f(path);
  std::string line;
  REQUIRE(std::getline(f, line));
  const auto e = nlohmann::json::parse(line);
  CHECK(e["seed"] == 77);
  CHECK(e["fields"]["occupancy"] == 0.5);
  CHECK_FALSE(std::getline(f, line));
  tel::set_run_seed(0);
}

TEST_CASE("span records nothing when the bus is disabled", "[cpu]") {
  REQUIRE_FALSE(tel::enabled());
  { tel::ScopedSpan s("quiet"); }
  int n = 0;
  const uint64_t id = tel::subscribe(tel::topic::span, [&](const nlohmann::json& e) {
    ++n;
    CHECK(e["fields"]["name"] == "loud");
    CHECK(e["fields"]["args"].is_null());
  });
  { tel::ScopedSpan s("loud"); }
  tel::unsubscribe(id);
  CHECK(n == 1);
}
