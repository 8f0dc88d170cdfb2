// Tests of rtx::serve's load generator: SSE parsing at every split point,
// vLLM metric definitions, and end-to-end runs against a scripted loopback server.
#include <httplib.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <tuple>

#include "rtx/app/bench.hpp"
#include "rtx/core/error.hpp"
#include "rtx/serve/loadgen.hpp"
#include "rtx/telemetry/hwprofile.hpp"

using rtx::serve::LoadConfig;
using rtx::serve::RequestResult;
using rtx::serve::RequestStatus;
using rtx::serve::SseEvent;
using rtx::serve::SseParser;
using json = nlohmann::json;

namespace {

// ---------------------------------------------------------------------------------------------
// SSE helpers

std::vector<SseEvent> parse_in_parts(const std::string& s, const std::vector<size_t>& cuts) {
  SseParser p;
  std::vector<SseEvent> out;
  size_t prev = 0;
  for (size_t c : cuts) {
    auto ev = p.feed(std::string_view(s).substr(prev, c - prev));
    out.insert(out.end(), ev.begin(), ev.end());
    prev = c;
  }
  auto ev = p.feed(std::string_view(s).substr(prev));
  out.insert(out.end(), ev.begin(), ev.end());
  return out;
}

void require_same(const std::vector<SseEvent>& got, const std::vector<SseEvent>& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("event " << i);
    CHECK(got[i].event == want[i].event);
    CHECK(got[i].data == want[i].data);
    CHECK(got[i].id == want[i].id);
  }
}

// Every 1-cut and 2-cut split of `s`, and byte by byte, must give `want`.
void check_all_splits(const std::string& s, const std::vector<SseEvent>& want) {
  require_same(parse_in_parts(s, {}), want, "whole");
  for (size_t a = 0; a <= s.size(); ++a) {
    require_same(parse_in_parts(s, {a}), want, "cut at " + std::to_string(a));
    for (size_t b = a; b <= s.size(); ++b) {
      const auto got = parse_in_parts(s, {a, b});
      if (got.size() != want.size()) require_same(got, want, "cuts " + std::to_string(a) + "," + std::to_string(b));
      for (size_t i = 0; i < got.size(); ++i)
        if (got[i].data != want[i].data || got[i].event != want[i].event || got[i].id != want[i].id)
          require_same(got, want, "cuts " + std::to_string(a) + "," + std::to_string(b));
    }
  }
  std::vector<size_t> every;
  for (size_t i = 1; i < s.size(); ++i) every.push_back(i);
  require_same(parse_in_parts(s, every), want, "byte by byte");
}

// ---------------------------------------------------------------------------------------------
// A scripted OpenAI-style streaming server on 127.0.0.1.

struct FakeServer {
  // Script (set before requests arrive).
  int first_delay_ms = 40;      // before the first content chunk
  int gap_ms = 15;              // between content chunks
  bool send_usage = true;       // final chunk with usage
  int usage_tokens_per_chunk = 1;
  bool send_done = true;
  bool malformed = false;       // send one broken JSON event
  // Observations.
  std::atomic<int> hits{0};
  std::mutex mu;
  json last_body;
  std::string last_auth;

  httplib::Server srv;
  int port = 0;
  std::thread th;

  FakeServer() {
    srv.set_tcp_nodelay(true);
    srv.new_task_queue = [] { return new httplib::ThreadPool(16); };
    auto handler = [this](const httplib::Request& req, httplib::Response& res) { handle(req, res); };
    srv.Post("/v1/completions", handler);
    srv.Post("/v1/chat/completions", handler);
    port = srv.bind_to_any_port("127.0.0.1");
    REQUIRE(port > 0);
    th = std::thread([this] { srv.listen_after_bind(); });
    for (int i = 0; i < 500 && !srv.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    REQUIRE(srv.is_running());
  }
  ~FakeServer() {
    srv.stop();
    th.join();
  }

  void handle(const httplib::Request& req, httplib::Response& res) {
    ++hits;
    json body = json::parse(req.body);
    const bool chat = req.path == "/v1/chat/completions";
    const std::string prompt =
        chat ? body["messages"][0]["content"].get<std::string>() : body["prompt"].get<std::string>();
    {
      std::lock_guard<std::mutex> lock(mu);
      last_body = body;
      last_auth = req.get_header_value("Authorization");
    }
    if (prompt == "reject") {
      res.status = 429;
      res.set_header("Retry-After", "1");
      res.set_content(R"({"error":{"message":"queue full","type":"rate_limit_error"}})", "application/json");
      return;
    }
    if (prompt == "boom") {
      res.status = 500;
      res.set_content(R"({"error":{"message":"internal failure"}})", "application/json");
      return;
    }
    if (prompt == "latin1") {  // an error body that is not UTF-8
      res.status = 500;
      res.set_content("caf\xe9 failed", "text/plain");
      return;
    }
    if (prompt == "endless") {  // a 200 stream that never ends a line: 8 MiB of 'A'
      res.set_chunked_content_provider("text/event-stream", [](size_t off, httplib::DataSink& sink) {
        if (off >= (size_t{8} << 20)) {
          sink.done();
          return true;
        }
        const std::string a(1 << 16, 'A');
        return sink.write(a.data(), a.size());
      });
      return;
    }
    const int n = body["max_tokens"].get<int>();
    res.set_chunked_content_provider("text/event-stream", [this, n, chat](size_t, httplib::DataSink& sink) {
      auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
      write(": stream opened\n\n");  // a comment: must be ignored
      std::this_thread::sleep_for(std::chrono::milliseconds(first_delay_ms));
      for (int k = 0; k < n; ++k) {
        if (k > 0) std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));
        json chunk = chat ? json{{"choices", {{{"index", 0}, {"delta", {{"content", "t" + std::to_string(k)}}}}}}}
                          : json{{"choices", {{{"index", 0}, {"text", "t" + std::to_string(k)}}}}};
        const std::string ev = "data: " + chunk.dump() + (k % 2 ? "\r\n\r\n" : "\n\n");
        if (k % 3 == 1) {  // one event in two TCP writes
          if (!write(ev.substr(0, ev.size() / 2))) return false;
          if (!write(ev.substr(ev.size() / 2))) return false;
        } else if (!write(ev)) {
          return false;
        }
        if (malformed && k == 0) write("data: {\"choices\": [\n\n");
      }
      if (send_usage) {
        json u = {{"choices", json::array()},
                  {"usage", {{"prompt_tokens", 3}, {"completion_tokens", n * usage_tokens_per_chunk}}}};
        write("data: " + u.dump() + "\n\n");
      }
      if (send_done) write("data: [DONE]\n\n");
      sink.done();
      return true;
    });
  }
};

LoadConfig base_config(int port) {
  LoadConfig c;
  c.host = "127.0.0.1";
  c.port = port;
  c.prompts = {"a", "b", "c"};
  c.max_tokens = 5;
  c.num_requests = 6;
  c.concurrency = 2;
  c.timeout_s = 20;
  return c;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

TEST_CASE("SSE parser: events, comments, multi-line data, ids, at every split point", "[cpu]") {
  const std::string s =
      "data: {\"a\":1}\n\n"
      ": a comment\n"
      "data: line1\ndata: line2\n\n"
      "event: ping\ndata: x\nid: 7\n\n"
      "data\n\n"
      "data:  two spaces\n\n";
  check_all_splits(s, {{"", "{\"a\":1}", ""},
                       {"", "line1\nline2", ""},
                       {"ping", "x", "7"},
                       {"", "", "7"},
                       {"", " two spaces", "7"}});
}

TEST_CASE("SSE parser: CRLF, lone CR, BOM, empty events, unterminated tail", "[cpu]") {
  check_all_splits("data: a\r\n\r\ndata: b\r\rdata:c\r\n\r\n", {{"", "a", ""}, {"", "b", ""}, {"", "c", ""}});
  // A leading BOM is dropped; a BOM later in the stream is data.
  check_all_splits("\xEF\xBB\xBF" "data: hi\n\n", {{"", "hi", ""}});
  check_all_splits("\xEF" "data: x\n\n", {});  // "\xEF" + "data" is an unknown field name
  // An event with no data is not dispatched, and its type does not leak into the next one.
  check_all_splits("event: x\n\nretry: 10\nfoo: bar\ndata: y\n\n", {{"", "y", ""}});
  // OpenAI-style stream.
  check_all_splits("data: {\"choices\":[{\"text\":\"Hi\"}]}\n\ndata: [DONE]\n\n",
                   {{"", "{\"choices\":[{\"text\":\"Hi\"}]}", ""}, {"", "[DONE]", ""}});
  SseParser p;
  CHECK(p.feed("data: z\n").empty());  // no blank line yet: not dispatched
  CHECK(p.feed("data: partial").empty());
  // The unterminated line plus the data of the event being built ("z\n").
  CHECK(p.pending_bytes() == std::string("data: partial").size() + 2);
  auto ev = p.feed("\n\n");
  REQUIRE(ev.size() == 1);
  CHECK(ev[0].data == "z\npartial");
}

TEST_CASE("summarize follows vLLM's definitions of TTFT, TPOT, ITL and throughput", "[cpu]") {
  std::vector<RequestResult> rs(4);
  rs[0].status = RequestStatus::Ok;
  rs[0].ttft_s = 0.100;
  rs[0].e2e_s = 0.500;
  rs[0].itl_s = {0.1, 0.1, 0.2};
  rs[0].output_tokens = 5;  // TPOT = 0.4 / 4 = 0.1
  rs[0].prompt_tokens = 10;
  rs[1].status = RequestStatus::Ok;
  rs[1].ttft_s = 0.300;
  rs[1].e2e_s = 0.300;
  rs[1].output_tokens = 1;  // no TPOT sample
  rs[1].prompt_tokens = 4;
  rs[2].status = RequestStatus::RateLimited;
  rs[2].output_tokens = 99;  // failed requests count for nothing
  rs[3].status = RequestStatus::Transport;
  const auto s = rtx::serve::summarize(rs, 2.0);
  CHECK(s.num_requests == 4);
  CHECK(s.completed == 2);
  CHECK(s.failed == 2);
  CHECK(s.rate_limited == 1);
  CHECK(s.total_output_tokens == 6);
  CHECK(s.total_input_tokens == 14);
  CHECK(s.request_throughput == Approx(1.0));
  CHECK(s.output_throughput == Approx(3.0));
  CHECK(s.total_token_throughput == Approx(10.0));
  CHECK(s.ttft.count == 2);
  CHECK(s.ttft.mean_ms == Approx(200.0));
  CHECK(s.ttft.std_ms == Approx(100.0));  // population std, as numpy
  CHECK(s.ttft.p99_ms == Approx(100.0 + 200.0 * 0.99));
  CHECK(s.tpot.count == 1);
  CHECK(s.tpot.mean_ms == Approx(100.0));
  CHECK(s.itl.count == 3);
  CHECK(s.itl.mean_ms == Approx(400.0 / 3));
  CHECK(s.itl.median_ms == Approx(100.0));
  CHECK(s.e2el.mean_ms == Approx(400.0));
  const auto st = rtx::serve::latency_stats({1, 2, 3, 4});
  CHECK(st.std_ms == Approx(1118.033988749895));  // np.std([1,2,3,4]) * 1000
  CHECK(rtx::serve::latency_stats({}).count == 0);
  CHECK_THROWS_AS(rtx::serve::summarize(rs, 0.0), rtx::Error);
}

TEST_CASE("Poisson arrivals: mean gap 1/rate, deterministic per seed", "[cpu]") {
  const auto a = rtx::serve::poisson_arrivals(20000, 50.0, 3);
  REQUIRE(a.size() == 20000);
  CHECK(a[0] == 0.0);
  for (size_t i = 1; i < a.size(); ++i) REQUIRE(a[i] >= a[i - 1]);
  CHECK(a.back() / 19999.0 == Approx(0.02).epsilon(0.03));
  CHECK(rtx::serve::poisson_arrivals(100, 50.0, 3) == std::vector<double>(a.begin(), a.begin() + 100));
  CHECK(rtx::serve::poisson_arrivals(100, 50.0, 4) != std::vector<double>(a.begin(), a.begin() + 100));
  CHECK(rtx::serve::poisson_arrivals(5, 0.0, 3) == std::vector<double>(5, 0.0));
}

TEST_CASE("request body and configuration checks", "[cpu]") {
  LoadConfig c = base_config(8080);
  c.model = "m";
  c.seed = 11;
  json b = rtx::serve::build_request_body(c, "hello");
  CHECK(b["prompt"] == "hello");
  CHECK(b["model"] == "m");
  CHECK(b["max_tokens"] == 5);
  CHECK(b["stream"] == true);
  CHECK(b["stream_options"]["include_usage"] == true);
  CHECK(b["ignore_eos"] == true);
  CHECK(b["seed"] == 11);
  c.endpoint = "/v1/chat/completions";
  c.ignore_eos = false;
  b = rtx::serve::build_request_body(c, "hi");
  CHECK(b["messages"][0]["content"] == "hi");
  CHECK(!b.contains("prompt"));
  CHECK(!b.contains("ignore_eos"));
  // extra_body is merged last: new fields are added, built-in ones overridden.
  c.extra_body = {{"cache_prompt", false}, {"max_tokens", 9}};
  b = rtx::serve::build_request_body(c, "hi");
  CHECK(b["cache_prompt"] == false);
  CHECK(b["max_tokens"] == 9);

  auto bad = [](auto mutate) {
    LoadConfig x = base_config(8080);
    mutate(x);
    return x;
  };
  CHECK_NOTHROW(rtx::serve::validate(base_config(8080)));
  CHECK_THROWS_AS(rtx::serve::validate(bad([](LoadConfig& x) { x.concurrency = 0; })), rtx::Error);
  CHECK_THROWS_AS(rtx::serve::validate(bad([](LoadConfig& x) { x.port = 70000; })), rtx::Error);
  CHECK_THROWS_AS(rtx::serve::validate(bad([](LoadConfig& x) { x.prompts.clear(); })), rtx::Error);
  CHECK_THROWS_AS(rtx::serve::validate(bad([](LoadConfig& x) { x.extra_body = json::array({1}); })), rtx::Error);
  // validate refuses the fields build_request_body sets (its merge would override them).
  for (const char* own : {"stream", "stream_options", "prompt", "messages", "model", "max_tokens", "temperature",
                          "ignore_eos", "seed"}) {
    INFO(own);
    CHECK_THROWS_WITH(rtx::serve::validate(bad([&](LoadConfig& x) { x.extra_body = {{own, 1}}; })),
                      Catch::Contains(std::string("\"") + own + "\" cannot be given in extra_body"));
  }
  CHECK_NOTHROW(rtx::serve::validate(bad([](LoadConfig& x) { x.extra_body = {{"cache_prompt", false}}; })));
  CHECK_THROWS_AS(rtx::serve::validate(bad([](LoadConfig& x) { x.max_tokens = 0; })), rtx::Error);
  CHECK_THROWS_AS(rtx::serve::validate(bad([](LoadConfig& x) { x.num_requests = 0; })), rtx::Error);
  CHECK_THROWS_AS(rtx::serve::validate(bad([](LoadConfig& x) { x.endpoint = "v1"; })), rtx::Error);
  CHECK_THROWS_AS(rtx::serve::validate(bad([](LoadConfig& x) { x.timeout_s = 0; })), rtx::Error);
  CHECK_THROWS_AS(rtx::serve::validate(bad([](LoadConfig& x) { x.request_rate = -1; })), rtx::Error);
  // where() names the field (rtx-serve bench maps it to its flag); every field is checked before
  // a run without an end, so a bad max_tokens is not hidden behind it.
  const auto where_of = [](const LoadConfig& x) {
    try {
      rtx::serve::validate(x);
    } catch (const rtx::Error& e) {
      CHECK(e.category() == rtx::ErrorCategory::Usage);
      return e.where();
    }
    return std::string("(no error)");
  };
  const std::string at = rtx::serve::kLoadConfigWhere;
  CHECK(where_of(bad([](LoadConfig& x) { x.max_tokens = -3, x.num_requests = 0; })) == at + ".max_tokens");
  CHECK(where_of(bad([](LoadConfig& x) { x.timeout_s = -1, x.num_requests = 0; })) == at + ".timeout_s");
  CHECK(where_of(bad([](LoadConfig& x) { x.temperature = -1; })) == at + ".temperature");
  CHECK(where_of(bad([](LoadConfig& x) { x.num_requests = 0; })) == at);
  try {
    rtx::serve::run_load(bad([](LoadConfig& x) { x.concurrency = -3; }));
    FAIL("expected an error");
  } catch (const rtx::Error& e) {
    CHECK(e.category() == rtx::ErrorCategory::Usage);
    CHECK(std::string(e.what()).find("concurrency") != std::string::npos);
  }
}

TEST_CASE("end to end: known chunks, delays, usage and 429s", "[cpu]") {
  FakeServer srv;
  srv.usage_tokens_per_chunk = 2;  // usage must win over the chunk count
  LoadConfig c = base_config(srv.port);
  c.prompts = {"a", "b", "reject", "c"};
  c.num_requests = 12;
  c.concurrency = 3;
  c.api_key = "sekret";
  const auto rep = rtx::serve::run_load(c);
  const auto& s = rep.summary;
  CHECK(srv.hits == 12);
  CHECK(s.num_requests == 12);
  CHECK(s.completed == 9);
  CHECK(s.rate_limited == 3);
  CHECK(s.failed == 3);
  CHECK(s.total_output_tokens == 9 * 5 * 2);
  CHECK(s.total_input_tokens == 9 * 3);
  {
    std::lock_guard<std::mutex> lock(srv.mu);
    CHECK(srv.last_auth == "Bearer sekret");
    CHECK(srv.last_body["stream"] == true);
    CHECK(srv.last_body["stream_options"]["include_usage"] == true);
    CHECK(srv.last_body["ignore_eos"] == true);
  }
  REQUIRE(rep.requests.size() == 12);
  for (const auto& r : rep.requests) {
    INFO("request " << r.index << ": " << r.error);
    if (r.index % 4 == 2) {
      CHECK(r.status == RequestStatus::RateLimited);
      CHECK(r.http_status == 429);
      CHECK(r.error.find("queue full") != std::string::npos);
      continue;
    }
    REQUIRE(r.status == RequestStatus::Ok);
    CHECK(r.http_status == 200);
    CHECK(r.output_tokens == 10);
    CHECK(r.usage_reported);
    CHECK(r.output_chars == 10);  // "t0".."t4"
    // TTFT: the server waits 40 ms before the first chunk.
    CHECK(r.ttft_s >= 0.035);
    CHECK(r.ttft_s < 0.040 + 0.5);
    REQUIRE(r.itl_s.size() == 4);
    double sum = 0;
    for (double g : r.itl_s) sum += g;
    // Four gaps of 15 ms each. Each gap alone can look short when a late-scheduled client
    // reads two chunks close together, but the last chunk cannot arrive before the server
    // slept 40 + 4 x 15 ms.
    CHECK(sum > 0);
    CHECK(r.ttft_s + sum >= 0.095);
    CHECK(sum < 0.060 + 0.5);
    CHECK(r.e2e_s == Approx(r.ttft_s + sum).margin(1e-9));
  }
  CHECK(s.itl.count == 9 * 4);
  CHECK(s.itl.median_ms >= 10.0);
  CHECK(s.itl.median_ms < 15.0 + 100.0);
  // TPOT per request = (e2e - ttft) / (10 - 1) = (sum of its 4 gaps) / 9, so mean TPOT = mean ITL * 4/9.
  CHECK(s.tpot.count == 9);
  CHECK(s.tpot.mean_ms == Approx(s.itl.mean_ms * 4.0 / 9.0).epsilon(1e-9));
  CHECK(s.duration_s > 0.1);
  CHECK(s.output_throughput == Approx(90.0 / s.duration_s));

  const json doc = rtx::serve::to_json(rep, true);
  CHECK(doc["schema"] == "rtx.serve_bench.v1");
  CHECK(doc["completed"] == 9);
  CHECK(doc["total_output_tokens"] == 90);
  CHECK(doc["p99_ttft_ms"].get<double>() == Approx(s.ttft.p99_ms));
  CHECK(doc.contains("median_tpot_ms"));
  CHECK(doc.contains("p95_itl_ms"));
  CHECK(doc["errors"]["rate_limited"] == 3);
  // The failures grouped, with the first request of each and what the server said.
  REQUIRE(doc["failures"].size() == 1);
  CHECK(doc["failures"][0] == json({{"count", 3}, {"status", "rate_limited"}, {"http_status", 429},
                                    {"error", "HTTP 429: queue full"}, {"first_request", 2}}));
  CHECK(doc["requests"].size() == 12);
  CHECK(doc.contains("hardware"));
  const std::string table = rtx::serve::format_table(rep);
  CHECK(table.find("Median TTFT (ms):") != std::string::npos);
  CHECK(table.find("Output token throughput (tokens/s):") != std::string::npos);
  CHECK_THAT(table, Catch::Contains("- Failures -") &&
                        Catch::Contains("\n3 x rate_limited (first: request 2): HTTP 429: queue full\n") &&
                        !Catch::Contains("requests failed"));
}

TEST_CASE("failure groups: by status and message, most frequent first, at most max", "[cpu]") {
  const auto fail = [](int64_t index, RequestStatus st, const std::string& error) {
    RequestResult r;
    r.index = index;
    r.status = st;
    r.http_status = st == RequestStatus::HttpError ? 400 : 0;
    r.error = error;
    return r;
  };
  std::vector<RequestResult> rs = {fail(0, RequestStatus::Transport, "timeout"),
                                   fail(1, RequestStatus::HttpError, "HTTP 400: too long"),
                                   fail(2, RequestStatus::HttpError, "HTTP 400: too long"),
                                   fail(3, RequestStatus::Protocol, "no [DONE]"),
                                   fail(4, RequestStatus::Ok, ""),
                                   fail(5, RequestStatus::Protocol, "timeout")};
  const auto g = rtx::serve::failure_groups(rs);
  REQUIRE(g.size() == 3);
  CHECK((g[0].error == "HTTP 400: too long" && g[0].count == 2 && g[0].first_index == 1 && g[0].http_status == 400));
  CHECK((g[1].status == RequestStatus::Transport && g[1].count == 1 && g[1].first_index == 0));
  CHECK((g[2].status == RequestStatus::Protocol && g[2].error == "no [DONE]"));  // a 4th group ("timeout", protocol) left off
  CHECK(rtx::serve::failure_groups(rs, 1).size() == 1);
  CHECK(rtx::serve::failure_groups({fail(0, RequestStatus::Ok, "")}).empty());
}

TEST_CASE("end to end: chat endpoint, no usage, server closing each connection", "[cpu]") {
  FakeServer srv;
  srv.send_usage = false;
  srv.srv.set_keep_alive_max_count(1);  // the server closes every connection after one answer
  srv.first_delay_ms = 5;
  srv.gap_ms = 2;
  LoadConfig c = base_config(srv.port);
  c.endpoint = "/v1/chat/completions";
  c.max_tokens = 7;
  c.num_requests = 5;
  c.concurrency = 1;
  const auto rep = rtx::serve::run_load(c);
  CHECK(rep.summary.completed == 5);
  CHECK(rep.summary.total_output_tokens == 35);
  CHECK(rep.summary.total_input_tokens == 0);
  for (const auto& r : rep.requests) {
    CHECK_FALSE(r.usage_reported);
    CHECK(r.itl_s.size() == 6);
  }
  std::lock_guard<std::mutex> lock(srv.mu);
  CHECK(srv.last_body["messages"][0]["role"] == "user");
}

TEST_CASE("end to end: HTTP errors, protocol errors, transport errors, timeouts", "[cpu]") {
  {
    FakeServer srv;
    LoadConfig c = base_config(srv.port);
    c.prompts = {"boom"};
    c.num_requests = 2;
    const auto rep = rtx::serve::run_load(c);
    CHECK(rep.summary.completed == 0);
    CHECK(rep.summary.failed == 2);
    CHECK(rep.summary.rate_limited == 0);
    CHECK(rep.requests[0].status == RequestStatus::HttpError);
    CHECK(rep.requests[0].http_status == 500);
    CHECK(rep.requests[0].error == "HTTP 500: internal failure");  // the error object's message
    CHECK(rep.summary.ttft.count == 0);
    // Every request failed: the summary says so next to the counts, with the reason.
    const std::string table = rtx::serve::format_table(rep);
    const size_t failures = table.find("- Failures -"), ttft = table.find("Time to First Token");
    REQUIRE(failures != std::string::npos);
    CHECK(failures < ttft);
    CHECK_THAT(table.substr(failures, ttft - failures),
               Catch::Contains("\nAll 2 requests failed: the latency figures below are empty.\n"
                               "2 x http_error (first: request 0): HTTP 500: internal failure\n"));
    const json doc = rtx::serve::to_json(rep);
    CHECK(doc["errors"] == json({{"http_error", 2}}));  // unchanged: counts per status
    CHECK(doc["failures"] == json::array({{{"count", 2}, {"status", "http_error"}, {"http_status", 500},
                                           {"error", "HTTP 500: internal failure"}, {"first_request", 0}}}));
  }
  {
    // An error body that is not UTF-8 is quoted with U+FFFD, so the artifact can still be written.
    FakeServer srv;
    LoadConfig c = base_config(srv.port);
    c.prompts = {"latin1"};
    c.num_requests = 1;
    const auto rep = rtx::serve::run_load(c);
    CHECK(rep.requests[0].error == "HTTP 500: caf\xEF\xBF\xBD failed");
    CHECK_NOTHROW(rtx::serve::to_json(rep, true).dump());
  }
  {
    FakeServer srv;
    srv.malformed = true;
    srv.first_delay_ms = 1;
    srv.gap_ms = 1;
    LoadConfig c = base_config(srv.port);
    c.num_requests = 1;
    const auto rep = rtx::serve::run_load(c);
    CHECK(rep.requests[0].status == RequestStatus::Protocol);
    CHECK(rep.requests[0].error.find("malformed JSON") != std::string::npos);
  }
  {
    FakeServer srv;
    srv.send_done = false;
    srv.first_delay_ms = 1;
    srv.gap_ms = 1;
    LoadConfig c = base_config(srv.port);
    c.num_requests = 1;
    const auto rep = rtx::serve::run_load(c);
    CHECK(rep.requests[0].status == RequestStatus::Protocol);
    CHECK(rep.requests[0].error.find("[DONE]") != std::string::npos);
  }
  {
    FakeServer srv;
    srv.first_delay_ms = 1000;
    LoadConfig c = base_config(srv.port);
    c.num_requests = 1;
    c.timeout_s = 0.25;
    const auto t0 = std::chrono::steady_clock::now();
    const auto rep = rtx::serve::run_load(c);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(rep.requests[0].status == RequestStatus::Transport);
    CHECK(took < 0.9);
  }
  {
    // Nothing listens on the port of a server that was stopped.
    int port = 0;
    {
      FakeServer srv;
      port = srv.port;
    }
    LoadConfig c = base_config(port);
    c.num_requests = 3;
    c.timeout_s = 2;
    // One clear error before any load (exit 3 in the CLI), not a report of refused requests.
    try {
      rtx::serve::run_load(c);
      FAIL("expected an environment error");
    } catch (const rtx::Error& e) {
      CHECK(e.category() == rtx::ErrorCategory::Environment);
      CHECK_THAT(std::string(e.what()), Catch::Contains("no server answers at 127.0.0.1:" + std::to_string(port)));
    }
  }
}

TEST_CASE("end to end: a stream that never ends a line fails that request, bounded", "[cpu]") {
  FakeServer srv;
  LoadConfig c = base_config(srv.port);
  c.prompts = {"endless", "a"};
  c.num_requests = 2;
  c.concurrency = 1;
  const auto rep = rtx::serve::run_load(c);
  REQUIRE(rep.requests.size() == 2);
  CHECK(rep.requests[0].status == RequestStatus::Protocol);
  CHECK_THAT(rep.requests[0].error, Catch::Contains("SSE event longer than 1048576 bytes"));
  CHECK(rep.requests[1].status == RequestStatus::Ok);  // the next request is unaffected
  // Time spans that would overflow a steady_clock deadline are refused up front.
  LoadConfig big = base_config(srv.port);
  big.timeout_s = 1e10;
  CHECK_THROWS_WITH(rtx::serve::run_load(big), Catch::Contains("more than a week"));
  big = base_config(srv.port);
  big.duration_s = 1e10;
  CHECK_THROWS_WITH(rtx::serve::run_load(big), Catch::Contains("more than 30 days"));
}

TEST_CASE("end to end: a server that goes away mid-run stops the run early, with the reason", "[cpu]") {
  auto srv = std::make_unique<FakeServer>();
  srv->first_delay_ms = 1;
  srv->gap_ms = 1;
  LoadConfig c = base_config(srv->port);
  c.num_requests = 0;
  c.duration_s = 20;  // without the abort, 20 s of refused connections as fast as they fail
  c.concurrency = 3;
  c.timeout_s = 2;
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    srv.reset();
  });
  const auto t0 = std::chrono::steady_clock::now();
  const auto rep = rtx::serve::run_load(c);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  killer.join();
  CHECK(took < 5);
  CHECK(rep.summary.completed > 0);  // the first 300 ms were served
  CHECK_THAT(rep.aborted, Catch::Contains("the server went away") && Catch::Contains("could not connect"));
  size_t refused = 0;
  for (const auto& r : rep.requests) refused += r.connect_failed;
  CHECK(refused >= static_cast<size_t>(std::max(rtx::serve::kAbortAfterConnectFailures, 2 * c.concurrency)));
  CHECK(refused < 40);  // stopped soon after the threshold, no busy loop
  const json doc = rtx::serve::to_json(rep);
  CHECK(doc["aborted"].get<std::string>() == rep.aborted);
}

TEST_CASE("end to end: duration-bounded run and paced arrivals", "[cpu]") {
  FakeServer srv;
  srv.first_delay_ms = 10;
  srv.gap_ms = 5;
  LoadConfig c = base_config(srv.port);
  c.num_requests = 0;
  c.duration_s = 0.3;
  c.concurrency = 2;
  auto rep = rtx::serve::run_load(c);
  CHECK(rep.summary.num_requests >= 2);
  CHECK(rep.summary.completed == rep.summary.num_requests);
  for (const auto& r : rep.requests) CHECK(r.start_s < 0.3);
  CHECK(rep.summary.duration_s >= 0.3 - 0.05);

  // request_rate: requests start no earlier than their Poisson arrival times.
  c.duration_s = 0;
  c.num_requests = 6;
  c.concurrency = 6;
  c.request_rate = 40;
  c.seed = 5;
  rep = rtx::serve::run_load(c);
  const auto arrivals = rtx::serve::poisson_arrivals(6, 40, 5);
  REQUIRE(rep.requests.size() == 6);
  CHECK(rep.summary.completed == 6);
  for (const auto& r : rep.requests) CHECK(r.start_s >= arrivals[static_cast<size_t>(r.index)] - 1e-3);
}

TEST_CASE("end to end: an interrupt stops new requests, lets the ones in flight finish, and says so", "[cpu]") {
  FakeServer srv;
  srv.first_delay_ms = 5;
  srv.gap_ms = 5;
  // Runs `c` with its interrupt set after `after_ms` (a Ctrl-C); returns the report and the
  // run's wall time.
  const auto interrupted_run = [](LoadConfig c, int after_ms) {
    std::atomic<bool> stop{false};
    c.interrupt = &stop;
    std::thread ctrl_c([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(after_ms));
      stop.store(true);
    });
    const auto t0 = std::chrono::steady_clock::now();
    auto rep = rtx::serve::run_load(c);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ctrl_c.join();
    return std::make_pair(rep, took);
  };
  LoadConfig c = base_config(srv.port);
  c.num_requests = 0;
  c.duration_s = 20;  // only the interrupt ends this run early
  c.concurrency = 3;
  const auto [rep, took] = interrupted_run(c, 300);
  CHECK(took < 5);
  CHECK(rep.summary.completed > 0);
  CHECK(rep.summary.failed == 0);  // the requests in flight were finished, not cut
  for (const auto& r : rep.requests) CHECK(r.status == RequestStatus::Ok);
  CHECK_THAT(rep.aborted, Catch::Contains("interrupted"));
  // Paced arrivals far apart: the wait for the next one is cut short too.
  LoadConfig slow = base_config(srv.port);
  slow.num_requests = 5;
  slow.request_rate = 0.05;  // mean gap 20 s
  slow.seed = 3;
  const auto [rep2, took2] = interrupted_run(slow, 200);
  CHECK(took2 < 5);
  CHECK_THAT(rep2.aborted, Catch::Contains("interrupted"));
}

TEST_CASE("a bench run is judged busy by the suite's PSI rule over its window", "[cpu]") {
  using rtx::serve::judge_run_contention;
  // The same rule and minimum window as rtx-bench's whole-run verdict.
  STATIC_REQUIRE(rtx::serve::kMinJudgedRunS == rtx::app::bench::kMinJudgedWindow);
  STATIC_REQUIRE(rtx::telemetry::kBusyPsiStallShare == rtx::app::bench::kMaxPsiStallShare);
  auto c = judge_run_contention(true, 1.44, 3.2);  // 45% stall
  CHECK(c.judged);
  CHECK(c.contended);
  CHECK(c.psi_share == Approx(0.45));
  CHECK(c.reason == "PSI cpu stall 45.0% of the window's 3.20 s (> 10%; no /proc/stat to tell other processes from ours)");
  // At the threshold is not above it; just past it is.
  c = judge_run_contention(true, 0.1, 1.0);
  CHECK(c.judged);
  CHECK_FALSE(c.contended);
  CHECK(c.reason.empty());
  CHECK(judge_run_contention(true, 0.1001, 1.0).contended);
  CHECK(judge_run_contention(true, 0.0, 2.0).psi_share == 0);
  // The share is clamped to [0, 1] (PSI is read a few us after the clock).
  c = judge_run_contention(true, 2.5, 2.0);
  CHECK(c.psi_share == 1.0);
  CHECK(c.reason == "PSI cpu stall 100.0% of the window's 2.00 s (> 10%; no /proc/stat to tell other processes from ours)");
  CHECK(judge_run_contention(true, -1.0, 2.0).psi_share == 0);
  // Too short to judge: the share is recorded, no verdict.
  c = judge_run_contention(true, 0.04, 0.049);
  CHECK_FALSE(c.judged);
  CHECK_FALSE(c.contended);
  CHECK(c.psi_share == Approx(0.04 / 0.049));
  CHECK(judge_run_contention(true, 0.05, 0.05).judged);
  // Without PSI, or without a window: not judged (the load average is not used: it trails the
  // load by a minute, and the bench's clients raise it themselves).
  for (const auto& [psi, stall, wall] : {std::tuple{false, 1.0, 2.0}, std::tuple{true, 1.0, 0.0},
                                         std::tuple{true, 1.0, -1.0}, std::tuple{true, 1.0, std::nan("")}}) {
    INFO(psi << " " << stall << " " << wall);
    c = judge_run_contention(psi, stall, wall);
    CHECK_FALSE(c.judged);
    CHECK_FALSE(c.contended);
    CHECK(c.psi_share == 0);
    CHECK(c.reason.empty());
  }
}
