// End-to-end tests of rtx-serve's HTTP server over loopback, on the real stories260k Llama
// model: the documented greedy sample, batch invariance against 16 concurrent requests and
// against rtx-train's generation path, seeds, stop strings, SSE framing read by a real client,
// bad input, API keys, admission control (429), disconnects, a 64-client load test, shutdown.
#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <future>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtx/serve/generate.hpp"
#include "rtx/serve/loadgen.hpp"
#include "rtx/serve/model.hpp"
#include "rtx/serve/scheduler.hpp"
#include "rtx/serve/server.hpp"
#include "test_util.hpp"

using namespace rtx;
using namespace rtx::serve;
using json = nlohmann::json;

namespace {

const char* kSample =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw "
    "a big, red ball. She wanted to play with it, but it was too high";

std::string model_path() { return test::data_dir() + "/stories260k/tinyllamas-stories-260k-f32.gguf"; }

Model& shared_model() {
  static std::unique_ptr<Model> m = load_model(model_path());
  return *m;
}

/// A server on a free loopback port, running in a thread for the test's lifetime.
/// The lines of `f` from its start (newlines kept); closes it.
std::vector<std::string> read_lines_and_close(std::FILE* f) {
  std::rewind(f);
  std::vector<std::string> lines;
  char buf[1024];
  while (std::fgets(buf, sizeof buf, f)) lines.emplace_back(buf);
  std::fclose(f);
  return lines;
}

struct Running {
  explicit Running(SchedulerConfig sc = {}, ServerConfig cfg = {}) : sched(shared_model(), sc) {
    cfg.port = 0;
    server = std::make_unique<Server>(Engine{&shared_model(), &sched, "main"}, Engine{}, cfg);
    port = server->bind();
    thread = std::thread([this] { server->run(); });
  }
  ~Running() {
    server->stop();
    thread.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    return c;
  }
  /// POST a JSON body; returns (status, parsed body or null).
  std::pair<int, json> post(const std::string& path, const std::string& body, const std::string& key = {}) const {
    auto c = client();
    httplib::Headers h;
    if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
    auto r = c.Post(path.c_str(), h, body, "application/json");
    if (!r) return {0, nullptr};
    return {r->status, json::parse(r->body, nullptr, false)};
  }
  /// A metric's value from /metrics (first line starting with `series`).
  double metric(const std::string& series) const {
    auto c = client();
    auto r = c.Get("/metrics");
    REQUIRE(r);
    std::istringstream in(r->body);
    std::string line;
    while (std::getline(in, line))
      if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
    FAIL("metric " << series << " not found");
    return -1;
  }
  SchedulerStats stats() const { return sched.stats(); }
  Scheduler sched;
  std::unique_ptr<Server> server;
  int port = 0;
  std::thread thread;
};

std::string name() { return shared_model().info().name; }

json completion(const std::string& prompt, int max_tokens, double temperature = 0, json extra = json::object()) {
  json j = {{"model", name()}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", temperature}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  return j;
}

/// Streams a request and returns the SSE events' data fields, parsed by the load generator's
/// WHATWG parser; `stop_after` > 0 disconnects after that many events.
std::vector<std::string> stream(const Running& s, const std::string& path, const json& body, int stop_after = 0) {
  auto c = s.client();
  SseParser parser;
  std::vector<std::string> data;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers = {{"Content-Type", "application/json"}};
  req.body = body.dump();
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    for (auto& ev : parser.feed(std::string_view(d, n))) data.push_back(ev.data);
    return stop_after <= 0 || static_cast<int>(data.size()) < stop_after;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  c.send(req, res, err);
  return data;
}

/// Text of a streamed completion: concatenated choices[0].text; checks the framing on the way.
std::string streamed_text(const std::vector<std::string>& events, std::string* finish = nullptr) {
  REQUIRE(!events.empty());
  REQUIRE(events.back() == "[DONE]");
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json j = json::parse(events[i]);
    REQUIRE(j["object"] == "text_completion");
    const json& ch = j["choices"][0];
    text += ch["text"].get<std::string>();
    if (!ch["finish_reason"].is_null() && finish) *finish = ch["finish_reason"].get<std::string>();
  }
  return text;
}

}  // namespace

TEST_CASE("serve: greedy stories260k continues with the documented sample; rtx-train's path agrees", "[cpu][serve]") {
  Running s;
  const auto [st, j] = s.post("/v1/completions", completion("Once upon a time", 40).dump());
  REQUIRE(st == 200);
  const std::string text = j["choices"][0]["text"];
  INFO(text);
  REQUIRE(std::string(kSample).rfind("Once upon a time" + text, 0) == 0);
  CHECK(text.size() > 60);
  CHECK(j["choices"][0]["finish_reason"] == "length");
  CHECK(j["usage"]["completion_tokens"] == 40);
  CHECK(j["usage"]["prompt_tokens"] == j["usage"]["completion_tokens"].get<int>() - 35);  // BOS + 4 tokens
  // The generation path of rtx-train sample (SequenceRunner + models::generate): the same text.
  // Its own model instance: the server's scheduler thread owns the shared one (forward() is
  // one thread at a time), and the socket between them is no synchronization TSan can see.
  const std::unique_ptr<Model> own = load_model(model_path());
  SequenceRunner runner(*own);
  models::SamplerConfig sc;
  sc.temperature = 0;
  models::Sampler greedy(sc);
  std::vector<int32_t> prompt{own->info().bos};
  const auto ids = own->tokenizer().encode("Once upon a time");
  prompt.insert(prompt.end(), ids.begin(), ids.end());
  const auto r = models::generate(runner, prompt, 40, greedy, -1);
  CHECK(own->tokenizer().decode(r.tokens) == text);
}

TEST_CASE("serve: output is bit-for-bit the same alone and among 16 concurrent requests", "[cpu][serve]") {
  SchedulerConfig sc;
  sc.max_batch = 17;
  sc.token_budget = 64;
  sc.prefill_chunk = 7;  // long prompts are split across steps
  Running s(sc);
  const json probe = completion("Once upon a time, there was a dog", 48, 0.8, {{"seed", 7}, {"logprobs", 3}});
  const auto [st0, alone] = s.post("/v1/completions", probe.dump());
  REQUIRE(st0 == 200);
  std::vector<std::future<std::pair<int, json>>> others;
  std::vector<std::string> prompts = {"The cat", "Tom and Sue went to the park to play with a big red ball", "Lily",
                                      "One day, a little bird"};
  for (int i = 0; i < 16; ++i) {
    const json b = completion(prompts[i % 4] + std::string(i % 3, '!'), 10 + 7 * i, i % 2 ? 1.0 : 0, {{"seed", i}});
    others.push_back(std::async(std::launch::async, [&s, b] { return s.post("/v1/completions", b.dump()); }));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto [st1, mixed] = s.post("/v1/completions", probe.dump());
  int ok = 0;
  for (auto& f : others) ok += f.get().first == 200;
  REQUIRE(st1 == 200);
  CHECK(ok == 16);
  CHECK(alone["choices"][0]["text"] == mixed["choices"][0]["text"]);
  // Logprobs are computed from the logits: equal bits give equal numbers.
  CHECK(alone["choices"][0]["logprobs"] == mixed["choices"][0]["logprobs"]);
  CHECK(s.stats().requests_finished == 18);
  // The second probe reused the first one's KV blocks (prefix cache): all its prompt positions
  // but the last, which is computed for its logits. The same bits nonetheless (above).
  const int P = alone["usage"]["prompt_tokens"];
  CHECK(alone["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);
  CHECK(mixed["usage"]["prompt_tokens_details"]["cached_tokens"] == P - 1);
  CHECK(s.metric("rtx_prefix_cache_hits_total{engine=\"main\"}") >= P - 1);
  CHECK(s.metric("rtx_prefix_cache_queries_total{engine=\"main\"}") > s.metric("rtx_prefix_cache_hits_total{engine=\"main\"}"));
  CHECK(s.metric("rtx_kv_cache_blocks_cached{engine=\"main\"}") > 0);
  CHECK(s.metric("rtx_kv_cache_blocks_used{engine=\"main\"}") == 0);
  // "cache_prompt": false (llama.cpp's field) opts a request out of the reuse: same bits again.
  json uncached = probe;
  uncached["cache_prompt"] = false;
  const auto [st2, cold] = s.post("/v1/completions", uncached.dump());
  REQUIRE(st2 == 200);
  CHECK(cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);
  CHECK(cold["choices"][0]["logprobs"] == alone["choices"][0]["logprobs"]);
}

TEST_CASE("serve: a seed gives the same sampled text; another seed other text", "[cpu][serve]") {
  Running s;
  const auto a = s.post("/v1/completions", completion("Once upon a time", 30, 1.0, {{"seed", 42}}).dump()).second;
  const auto b = s.post("/v1/completions", completion("Once upon a time", 30, 1.0, {{"seed", 42}}).dump()).second;
  const auto c = s.post("/v1/completions", completion("Once upon a time", 30, 1.0, {{"seed", 43}}).dump()).second;
  CHECK(a["choices"][0]["text"] == b["choices"][0]["text"]);
  CHECK(a["choices"][0]["text"] != c["choices"][0]["text"]);
}

TEST_CASE("serve: penalties and logit_bias reach the sampler, alone or among other requests", "[cpu][serve]") {
  SchedulerConfig sc;
  sc.max_batch = 8;
  Running s(sc);
  const std::unique_ptr<Model> own = load_model(model_path());
  const io::Tokenizer& tok = own->tokenizer();
  std::vector<int32_t> prompt{own->info().bos};
  const auto ids = tok.encode("Once upon a time");
  prompt.insert(prompt.end(), ids.begin(), ids.end());
  // The reference: models::generate over rtx-train sample's path with the same settings.
  const auto generated = [&](const models::SamplerConfig& c) {
    SequenceRunner runner(*own);
    models::Sampler sampler(c);
    sampler.begin_sequence(prompt);
    return models::generate(runner, prompt, 40, sampler, -1).tokens;
  };
  const auto reference = [&](const models::SamplerConfig& c) { return tok.decode(generated(c)); };
  models::SamplerConfig greedy;
  greedy.temperature = 0;
  const std::vector<int32_t> plain_tokens = generated(greedy);
  const std::string plain = tok.decode(plain_tokens);
  struct Case {
    json fields;
    models::SamplerConfig cfg;
  };
  std::vector<Case> cases;
  {
    models::SamplerConfig c = greedy;
    c.frequency_penalty = 1.5f;
    c.presence_penalty = 0.5f;
    cases.push_back({{{"frequency_penalty", 1.5}, {"presence_penalty", 0.5}}, c});
    c = greedy;
    c.repetition_penalty = 1.8f;
    cases.push_back({{{"repetition_penalty", 1.8}}, c});
    // Ban the plain continuation's first token.
    const int32_t first = plain_tokens.front();
    c = greedy;
    c.logit_bias = {{first, -100.f}};
    cases.push_back({{{"logit_bias", {{std::to_string(first), -100}}}}, c});
    c = models::SamplerConfig{};  // sampled, seeded: the penalties with a random draw
    c.temperature = 0.9f;
    c.seed = 5;
    c.frequency_penalty = 0.8f;
    c.logit_bias = {{first, 3.f}};
    cases.push_back({{{"temperature", 0.9}, {"seed", 5}, {"frequency_penalty", 0.8}, {"logit_bias", {{std::to_string(first), 3}}}}, c});
  }
  // Concurrent neighbours with other settings must not change a request's tokens.
  std::vector<std::future<std::pair<int, json>>> others;
  for (int i = 0; i < 6; ++i) {
    const json b = completion("Lily" + std::string(i, '!'), 30, 0, {{"presence_penalty", 0.25 * i}});
    others.push_back(std::async(std::launch::async, [&s, b] { return s.post("/v1/completions", b.dump()); }));
  }
  for (const Case& c : cases) {
    INFO(c.fields.dump());
    json body = completion("Once upon a time", 40);
    for (const auto& [k, v] : c.fields.items()) body[k] = v;
    const auto [st, j] = s.post("/v1/completions", body.dump());
    REQUIRE(st == 200);
    const std::string text = j["choices"][0]["text"];
    INFO(text);
    CHECK(text == reference(c.cfg));
    CHECK(text != plain);  // the field was not ignored
  }
  for (auto& f : others) CHECK(f.get().first == 200);
  CHECK(s.stats().kv_blocks_used == 0);
}

TEST_CASE("serve: stop strings cut exactly, streamed or not, across token boundaries", "[cpu][serve]") {
  Running s;
  // "girl" is three tokens (" g", "ir", "l") in this vocabulary; "named L" spans two words.
  for (const std::string stop : {"girl", "named L", "e", ", there"}) {
    const json body = completion("Once upon a time", 40, 0, {{"stop", json::array({"zzz", stop})}});
    const auto [st, j] = s.post("/v1/completions", body.dump());
    REQUIRE(st == 200);
    const std::string full = std::string(kSample).substr(16);
    const std::string want = full.substr(0, full.find(stop));
    CHECK(j["choices"][0]["text"] == want);
    CHECK(j["choices"][0]["finish_reason"] == "stop");
    json sb = body;
    sb["stream"] = true;
    std::string finish;
    CHECK(streamed_text(stream(s, "/v1/completions", sb), &finish) == want);
    CHECK(finish == "stop");
  }
  // No match: everything held back is flushed at the end.
  const json body = completion("Once upon a time", 12, 0, {{"stop", json::array({", therx"})}, {"stream", true}});
  std::string finish;
  const std::string text = streamed_text(stream(s, "/v1/completions", body), &finish);
  CHECK(finish == "length");
  CHECK(std::string(kSample).rfind("Once upon a time" + text, 0) == 0);
}

TEST_CASE("serve: logprobs stop with the text a stop string cuts, streamed or not", "[cpu][serve]") {
  Running s;
  // " Lily" is one token that the stop "Lily" starts inside; "e" ends inside tokens; "girl"
  // spans three.
  for (const std::string stop : {"Lily", "girl", "e", "named L"}) {
    INFO("stop " << stop);
    const json body = completion("Once upon a time", 40, 0, {{"stop", stop}, {"logprobs", 2}});
    const auto [st, j] = s.post("/v1/completions", body.dump());
    REQUIRE(st == 200);
    const std::string text = j["choices"][0]["text"];
    const json& lp = j["choices"][0]["logprobs"];
    REQUIRE(lp["tokens"].size() == lp["text_offset"].size());
    REQUIRE(!lp["tokens"].empty());
    // Every token starts inside the text (ASCII here: offsets in chars are bytes), and the
    // tokens joined start with the text: only the last one may run into the stop string.
    std::string joined;
    for (size_t i = 0; i < lp["tokens"].size(); ++i) {
      CHECK(lp["text_offset"][i].get<size_t>() == joined.size());
      CHECK(lp["text_offset"][i].get<size_t>() < text.size());
      joined += lp["tokens"][i].get<std::string>();
    }
    CHECK(joined.rfind(text, 0) == 0);
    CHECK(joined.size() - lp["tokens"].back().get<std::string>().size() < text.size());
    // Streamed: the same tokens, none before the chunk that releases its text.
    json sb = body;
    sb["stream"] = true;
    std::vector<std::string> tokens;
    std::string so_far;
    const auto events = stream(s, "/v1/completions", sb);
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      const json c = json::parse(events[i])["choices"][0];
      so_far += c["text"].get<std::string>();
      if (c["logprobs"].is_null()) continue;
      for (size_t k = 0; k < c["logprobs"]["tokens"].size(); ++k) {
        CHECK(c["logprobs"]["text_offset"][k].get<size_t>() < so_far.size());
        tokens.push_back(c["logprobs"]["tokens"][k]);
      }
    }
    CHECK(so_far == text);
    CHECK(json(tokens) == lp["tokens"]);
  }
  // Chat: the content parts of logprobs join to the content where the stop "a" is a token.
  const json chat = {{"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}},
                     {"max_tokens", 30}, {"temperature", 0}, {"stop", "a"}, {"logprobs", true}};
  // An empty "model" is a bad value (400), not an unknown model.
  const auto [est, ej] = s.post("/v1/completions", json{{"model", ""}, {"prompt", "Once"}, {"max_tokens", 1}}.dump());
  CHECK(est == 400);
  CHECK(ej["error"]["param"] == "model");
  const auto [cst, cj] = s.post("/v1/chat/completions", chat.dump());
  REQUIRE(cst == 200);
  std::string joined;
  for (const auto& t : cj["choices"][0]["logprobs"]["content"]) joined += t["token"].get<std::string>();
  const std::string content = cj["choices"][0]["message"]["content"];
  CHECK(joined.rfind(content, 0) == 0);
  CHECK(joined.find('a', content.size()) == std::string::npos);
}

TEST_CASE("serve: SSE framing for completions and chat, usage chunk, [DONE]", "[cpu][serve]") {
  Running s;
  const json body = completion("Once upon a time", 9, 0, {{"stream", true}, {"stream_options", {{"include_usage", true}}}});
  const auto ev = stream(s, "/v1/completions", body);
  REQUIRE(ev.size() >= 3);
  const json usage = json::parse(ev[ev.size() - 2]);
  CHECK(usage["choices"].empty());
  CHECK(usage["usage"]["completion_tokens"] == 9);
  const json chat = {{"model", name()},
                     {"messages", json::array({{{"role", "user"}, {"content", "Tell me a story."}}})},
                     {"max_tokens", 5},
                     {"temperature", 0},
                     {"stream", true}};
  const auto ce = stream(s, "/v1/chat/completions", chat);
  REQUIRE(ce.size() >= 3);
  CHECK(ce.back() == "[DONE]");
  const json first = json::parse(ce[0]);
  CHECK(first["object"] == "chat.completion.chunk");
  CHECK(first["choices"][0]["delta"]["role"] == "assistant");
  const json last = json::parse(ce[ce.size() - 2]);
  CHECK(last["choices"][0]["finish_reason"] == "length");
  std::string content;
  for (size_t i = 1; i + 2 < ce.size(); ++i) content += json::parse(ce[i])["choices"][0]["delta"]["content"].get<std::string>();
  json nonstream = chat;
  nonstream.erase("stream");
  const auto [st, j] = s.post("/v1/chat/completions", nonstream.dump());
  REQUIRE(st == 200);
  CHECK(j["choices"][0]["message"]["content"] == content);
}

TEST_CASE("serve: bad requests get OpenAI error objects with the right status", "[cpu][serve]") {
  ServerConfig cfg;
  cfg.max_body_bytes = 4096;
  Running s({}, cfg);
  const auto expect = [&](const std::string& body, int status, const std::string& param) {
    const auto [st, j] = s.post("/v1/completions", body);
    INFO(body);
    CHECK(st == status);
    REQUIRE(j.is_object());
    REQUIRE(j.contains("error"));
    CHECK(j["error"]["message"].is_string());
    if (!param.empty()) CHECK(j["error"]["param"] == param);
  };
  expect("{\"model\": ", 400, "");
  expect("[1,2]", 400, "");
  expect(R"({"prompt": "a", "max_tokens": 1, "foo": 1e400})", 400, "");  // a number past double: 400, not 500
  expect(completion("hi", 5, 0, {{"max_tokens", "5"}}).dump(), 400, "max_tokens");
  expect(completion("hi", 0).dump(), 400, "max_tokens");
  expect(completion("hi", 5, 3.0).dump(), 400, "temperature");
  expect(completion("hi", 5, 0, {{"stop", json::array({"a", "b", "c", "d", "e"})}}).dump(), 400, "stop");
  expect(completion("hi", 5, 0, {{"model", "gpt-4"}}).dump(), 404, "");
  expect(completion("hi", 5, 0, {{"prompt", json::array({1, 2, 100000})}}).dump(), 400, "prompt");
  expect(completion("hi", 600).dump(), 400, "max_tokens");  // 600 + prompt > context 512; the prompt fits
  std::string long_prompt;
  for (int i = 0; i < 700; ++i) long_prompt += "a b ";
  expect(completion(long_prompt.substr(0, 3000), 5).dump(), 400, "prompt");
  expect(completion(std::string(5000, 'x'), 5).dump(), 413, "");
  expect(completion("hi", 5, 0, {{"cache_prompt", "no"}}).dump(), 400, "cache_prompt");
  expect(completion("hi", 5, 0, {{"logit_bias", {{"512", 1}}}}).dump(), 400, "logit_bias");  // vocab is 512
  expect(completion("hi", 5, 0, {{"frequency_penalty", 3}}).dump(), 400, "frequency_penalty");
  // The server still serves afterwards, with nothing leaked.
  CHECK(s.post("/v1/completions", completion("Once", 3).dump()).first == 200);
  CHECK(s.stats().kv_blocks_used == 0);
}

TEST_CASE("serve: chat's default max_tokens fits a KV pool smaller than the context", "[cpu][serve]") {
  SchedulerConfig sc;
  sc.kv_block_tokens = 16;
  sc.kv_blocks = 4;  // 64 positions; the context is 512
  Running s(sc);
  const json chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"temperature", 0}, {"ignore_eos", true}};
  const auto [st, j] = s.post("/v1/chat/completions", chat.dump());
  INFO(j.dump());
  REQUIRE(st == 200);
  CHECK(j["choices"][0]["finish_reason"] == "length");
  CHECK(j["usage"]["prompt_tokens"].get<int>() + j["usage"]["completion_tokens"].get<int>() == 64);
  // Asked for explicitly, a max_tokens past the pool is still refused, naming max_tokens.
  json big = chat;
  big["max_tokens"] = 100;
  const auto [st2, e] = s.post("/v1/chat/completions", big.dump());
  CHECK(st2 == 400);
  CHECK(e["error"]["param"] == "max_tokens");
  CHECK(s.stats().kv_blocks_used == 0);
}

TEST_CASE("serve: /tokenize counts what the endpoints run; /detokenize inverts it", "[cpu][serve]") {
  Running s;
  const std::unique_ptr<Model> own = load_model(model_path());
  const io::Tokenizer& tok = own->tokenizer();
  for (const std::string text : {"Once upon a time", "Lily and Tom saw a big dog.", "a", "caf\xc3\xa9 \xf0\x9f\x90\xb6"}) {
    INFO(text);
    const auto [st, t] = s.post("/tokenize", json{{"prompt", text}}.dump());
    REQUIRE(st == 200);
    std::vector<int32_t> want{own->info().bos};
    const auto ids = tok.encode(text);
    want.insert(want.end(), ids.begin(), ids.end());
    CHECK(t["tokens"] == json(want));
    CHECK(t["count"] == want.size());
    CHECK(t["max_model_len"] == 512);
    // The count is the prompt_tokens a completion of that prompt reports.
    const auto [cst, c] = s.post("/v1/completions", completion(text, 1).dump());
    REQUIRE(cst == 200);
    CHECK(c["usage"]["prompt_tokens"] == t["count"]);
    // detokenize(tokenize(s)) == s, with or without the BOS.
    const auto [dst, d] = s.post("/detokenize", json{{"tokens", t["tokens"]}}.dump());
    REQUIRE(dst == 200);
    CHECK(d["prompt"] == text);
    const auto [nst, n] = s.post("/tokenize", json{{"prompt", text}, {"add_special_tokens", false}}.dump());
    CHECK(n["tokens"] == json(ids));
    CHECK(s.post("/detokenize", json{{"tokens", n["tokens"]}}.dump()).second["prompt"] == text);
  }
  // Chat: the rendered template's tokens, as many as the chat endpoint's prompt_tokens.
  const json msgs = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "hi"}}};
  const auto [st, t] = s.post("/tokenize", json{{"messages", msgs}}.dump());
  REQUIRE(st == 200);
  const auto [cst, c] = s.post("/v1/chat/completions", json{{"messages", msgs}, {"max_tokens", 1}}.dump());
  REQUIRE(cst == 200);
  CHECK(c["usage"]["prompt_tokens"] == t["count"]);
  // Bad input: named, and the right status.
  const auto expect = [&](const std::string& path, const json& body, int status, const std::string& param) {
    const auto [code, e] = s.post(path, body.dump());
    INFO(path << " " << body.dump());
    CHECK(code == status);
    CHECK(e["error"]["param"] == (param.empty() ? json() : json(param)));
  };
  expect("/tokenize", json::object(), 400, "prompt");
  expect("/tokenize", {{"prompt", "a"}, {"messages", msgs}}, 400, "prompt");
  expect("/tokenize", {{"prompt", 5}}, 400, "prompt");
  expect("/tokenize", {{"prompt", "a"}, {"add_special_tokens", "yes"}}, 400, "add_special_tokens");
  expect("/tokenize", {{"messages", {{{"role", "bot"}, {"content", "x"}}}}}, 400, "messages[0].role");
  expect("/tokenize", {{"prompt", "a"}, {"model", "gpt-4"}}, 404, "");
  expect("/detokenize", json::object(), 400, "tokens");
  expect("/detokenize", {{"tokens", {1, 512}}}, 400, "tokens[1]");
  expect("/detokenize", {{"tokens", {1, -1}}}, 400, "tokens[1]");
  expect("/detokenize", {{"tokens", "1 2"}}, 400, "tokens");
  CHECK(s.client().Get("/tokenize")->status == 405);
}

TEST_CASE("serve: a known route with the wrong method is 405 with Allow; /v1/models/{id}", "[cpu][serve]") {
  Running s;
  auto c = s.client();
  for (auto [path, allow] : {std::pair{"/v1/completions", "POST"}, std::pair{"/v1/chat/completions", "POST"}}) {
    auto r = c.Get(path);
    REQUIRE(r);
    INFO(path << " " << r->body);
    CHECK(r->status == 405);
    CHECK(r->get_header_value("Allow") == allow);
    const json j = json::parse(r->body);
    CHECK(j["error"]["code"] == "method_not_allowed");
  }
  for (const char* path : {"/v1/models", "/v1/models/x", "/health", "/metrics"}) {
    auto r = c.Post(path, "{}", "application/json");
    REQUIRE(r);
    CHECK(r->status == 405);
    CHECK(r->get_header_value("Allow") == "GET, HEAD");
  }
  auto none = c.Get("/v2/nothing");
  REQUIRE(none);
  CHECK(none->status == 404);
  // GET /v1/models/{id}: the listed model's object; any other id is 404 model_not_found.
  auto list = c.Get("/v1/models");
  REQUIRE(list);
  const json models = json::parse(list->body);
  const std::string id = models["data"][0]["id"];
  // The id is the GGUF's general.name; the file shows by its name only, never by its path.
  CHECK(id == "tinyllamas-stories-260k");
  CHECK(models["data"][0]["owned_by"] == "rtx");
  CHECK(models["data"][0]["meta"] == json{{"arch", "llama"}, {"context", 512}, {"file", "tinyllamas-stories-260k-f32.gguf"},
                                          {"n_layer", 5}, {"vocab", 512}});
  CHECK(list->body.find(test::data_dir()) == std::string::npos);
  CHECK(list->body.find('/') == std::string::npos);
  auto one = c.Get(("/v1/models/" + id).c_str());
  REQUIRE(one);
  CHECK(one->status == 200);
  const json m = json::parse(one->body);
  CHECK(m["id"] == id);
  CHECK(m["object"] == "model");
  const auto not_found_before = s.metric("rtx_requests_total{engine=\"main\",status=\"404\"}");
  auto other = c.Get("/v1/models/gpt-4");
  REQUIRE(other);
  CHECK(other->status == 404);
  CHECK(json::parse(other->body) == json::parse(R"({"error":{"code":"model_not_found","message":"The model 'gpt-4' is not )"
                                                R"(served here; this server serves 'tinyllamas-stories-260k'.","param":null,)"
                                                R"("type":"invalid_request_error"}})"));
  // Counted once (the route used to count its 404 twice).
  CHECK(s.metric("rtx_requests_total{engine=\"main\",status=\"404\"}") == not_found_before + 1);
  for (const auto& [odd, shown] : {std::pair{"/v1/models/", ""}, std::pair{"/v1/models/a%0Ab", "a\nb"}}) {
    // ids the route pattern does not take
    auto r = c.Get(odd);
    REQUIRE(r);
    INFO(odd << " " << r->body);
    CHECK(r->status == 404);
    const json e = json::parse(r->body)["error"];
    CHECK(e["code"] == "model_not_found");
    CHECK(e["message"] == std::string("The model '") + shown + "' is not served here; this server serves "
                                                               "'tinyllamas-stories-260k'.");
  }
  CHECK(s.metric("rtx_requests_total{engine=\"main\",status=\"404\"}") == not_found_before + 3);
  // "created" is the server's start, the same in the list and the single object.
  CHECK(m["created"] == models["data"][0]["created"]);
}

TEST_CASE("serve: the access log has one whole line per answered request, streams included", "[cpu][serve]") {
  std::FILE* log = std::tmpfile();
  REQUIRE(log);
  ServerConfig cfg;
  cfg.access_log = log;
  {
    Running s({}, cfg);
    CHECK(s.post("/v1/completions", completion("Once", 2).dump()).first == 200);
    json stream = completion("Once", 3);
    stream["stream"] = true;
    CHECK(s.post("/v1/completions", stream.dump()).first == 200);
    CHECK(s.post("/v1/completions", "{bad").first == 400);
    auto c = s.client();
    CHECK(c.Get("/nowhere")->status == 404);
    // A decoded %0A or %20 in the path cannot start a forged line or shift the fields.
    CHECK(c.Get("/x%0A2026-01-01T00:00:00Z%20evil")->status == 404);
  }
  const std::vector<std::string> lines = read_lines_and_close(log);
  REQUIRE(lines.size() == 5);
  const std::regex re(R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \S+ (GET|POST) (\S+) (\d{3}) \d+\.\d (\S+)\n$)");
  // A stream's line comes when its connection's last write is done, so the order may differ.
  const std::multiset<std::tuple<std::string, std::string, std::string>> want = {
      {"/v1/completions", "200", "main"}, {"/v1/completions", "200", "main"}, {"/v1/completions", "400", "-"},
      {"/nowhere", "404", "-"}, {"/x\\x0A2026-01-01T00:00:00Z\\x20evil", "404", "-"}};
  std::multiset<std::tuple<std::string, std::string, std::string>> got;
  for (const auto& line : lines) {
    INFO(line);
    std::smatch m;
    REQUIRE(std::regex_match(line, m, re));
    got.emplace(m[2], m[3], m[4]);
  }
  CHECK(got == want);
}

TEST_CASE("serve: a port in use fails to bind (no SO_REUSEPORT sharing)", "[cpu][serve]") {
  Running s;
  Scheduler other(shared_model(), SchedulerConfig{});  // idle: it never runs a step
  ServerConfig cfg;
  cfg.port = s.port;
  Server second(Engine{&shared_model(), &other, "main"}, Engine{}, cfg);
  CHECK_THROWS_AS(second.bind(), Error);
  // The first server still answers alone.
  CHECK(s.post("/v1/completions", completion("Once", 2).dump()).first == 200);
}

/// A raw loopback connection for requests no well-behaved client sends (tests/test_util.hpp).
using test::RawConn;

TEST_CASE("serve: --api-key guards every route but /health", "[cpu][serve]") {
  ServerConfig cfg;
  cfg.api_key = "sekret";
  Running s({}, cfg);
  CHECK(s.post("/v1/completions", completion("Once", 2).dump()).first == 401);
  CHECK(s.post("/v1/completions", completion("Once", 2).dump(), "wrong").first == 401);
  CHECK(s.post("/v1/completions", completion("Once", 2).dump(), "sekret").first == 200);
  CHECK(s.post("/tokenize", R"({"prompt":"a"})").first == 401);
  CHECK(s.post("/detokenize", R"({"tokens":[1]})").first == 401);
  CHECK(s.post("/tokenize", R"({"prompt":"a"})", "sekret").first == 200);
  auto c = s.client();
  CHECK(c.Get("/health")->status == 200);
  CHECK(c.Get("/metrics")->status == 401);
  CHECK(c.Get("/v1/models")->status == 401);
  CHECK(c.Get("/v1/models/x")->status == 401);
  // The scheme is case-insensitive (RFC 9110 11.1); the key is not.
  CHECK(c.Get("/v1/models", {{"Authorization", "bearer sekret"}})->status == 200);
  CHECK(c.Get("/v1/models", {{"Authorization", "BEARER sekret"}})->status == 200);
  CHECK(c.Get("/v1/models", {{"Authorization", "Bearer SEKRET"}})->status == 401);
  CHECK(c.Get("/v1/models", {{"Authorization", "Basic sekret"}})->status == 401);
  CHECK(c.Get("/v1/models", {{"Authorization", "Bearer"}})->status == 401);
  // Two Authorization headers: which one counts would be a guess, so neither does (400), even
  // when one of them holds the key.
  RawConn two(s.port);
  two.send("GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekret\r\nAuthorization: Bearer wrong\r\n\r\n");
  const std::string r2 = two.read_all(5);
  CHECK(r2.rfind("HTTP/1.1 400 ", 0) == 0);
  CHECK_THAT(r2, Catch::Contains("bad_authorization"));
}


TEST_CASE("serve: TRACE on a route is 405; a garbage request line is logged with 7 fields", "[cpu][serve]") {
  std::FILE* log = std::tmpfile();
  REQUIRE(log);
  ServerConfig cfg;
  cfg.access_log = log;
  {
    Running s({}, cfg);
    {
      RawConn c(s.port);
      REQUIRE(c.send("TRACE /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
      const std::string got = c.read_all(5);
      INFO(got);
      CHECK(got.rfind("HTTP/1.1 405", 0) == 0);
      CHECK(got.find("Allow: POST") != std::string::npos);
    }
    {
      RawConn c(s.port);
      REQUIRE(c.send("GARBAGE\r\n\r\n"));
      const std::string got = c.read_all(5);
      INFO(got);
      CHECK(got.rfind("HTTP/1.1 400", 0) == 0);
    }
    {  // bytes from 0x80 up, raw and %-encoded: escaped, so the log stays valid UTF-8 (ASCII)
      RawConn c(s.port);
      REQUIRE(c.send("GET /caf\xC3\xA9%FF\xC3( HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
      CHECK(c.read_all(5).rfind("HTTP/1.1 404", 0) == 0);
    }
    {  // refused on the request line, answered by the guard: logged too
      RawConn c(s.port);
      REQUIRE(c.send("GET /health?" + std::string(9000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n"));
      CHECK(c.read_all(5).rfind("HTTP/1.1 414", 0) == 0);
    }
  }
  const std::vector<std::string> lines = read_lines_and_close(log);
  REQUIRE(lines.size() == 4);
  // 7 fields, ms not negative; the client's address is known even where the request line did
  // not parse.
  const std::regex re(R"(^\S+ 127\.0\.0\.1 (\S+) (\S+) (\d{3}) (\d+\.\d) (\S+)\n$)");
  std::vector<std::string> paths;
  for (const auto& line : lines) {
    INFO(line);
    std::smatch m;
    REQUIRE(std::regex_match(line, m, re));
    CHECK(std::stod(m[4]) < 5000);
    for (const unsigned char ch : line) CHECK(ch < 0x80);
    paths.push_back(m[1].str() + " " + m[2].str() + " " + m[3].str());
  }
  CHECK(paths == std::vector<std::string>{"TRACE /v1/completions 405", "GARBAGE - 400", "GET /caf\\xC3\\xA9\\xFF\\xC3( 404",
                                          "GET - 414"});
}

TEST_CASE("serve: a non-streamed request whose client goes away frees its slot at once", "[cpu][serve]") {
  SchedulerConfig sc;
  sc.max_batch = 1;
  Running s(sc);
  {
    RawConn c(s.port);
    const std::string body = completion("Once upon a time", 400, 0, {{"ignore_eos", true}}).dump();
    REQUIRE(c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                   std::to_string(body.size()) + "\r\n\r\n" + body));
    for (int i = 0; i < 500 && s.stats().running == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    REQUIRE(s.stats().running == 1);
  }  // the client closes its socket mid-generation
  for (int i = 0; i < 150 && s.stats().kv_blocks_used > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(s.stats().kv_blocks_used == 0);
  CHECK(s.stats().finished_by[static_cast<int>(Finish::Cancelled)] == 1);
  CHECK(s.post("/v1/completions", completion("Once", 2).dump()).first == 200);  // still serving
}

TEST_CASE("serve: header floods get 431, slow clients 408, within the configured bounds", "[cpu][serve]") {
  ServerConfig cfg;
  cfg.max_header_bytes = 4096;
  cfg.max_header_lines = 20;
  cfg.header_timeout_s = 0.6;
  cfg.receive_timeout_s = 1.2;
  Running s({}, cfg);
  using clock = std::chrono::steady_clock;
  SECTION("too many header lines") {
    RawConn c(s.port);
    std::string req = "GET /health HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < 25; ++i) req += "X-H" + std::to_string(i) + ": 1\r\n";
    c.send(req + "\r\n");
    const std::string r = c.read_all(5);
    CHECK(r.rfind("HTTP/1.1 431 ", 0) == 0);
    CHECK_THAT(r, Catch::Contains("\"code\":\"headers_too_large\"") && Catch::Contains("20 lines"));
  }
  SECTION("too many header bytes in few lines; the count shows in /metrics") {
    RawConn c(s.port);
    c.send("GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(3000, 'a') + "\r\nX-Big2: " +
           std::string(3000, 'b') + "\r\n\r\n");
    CHECK(c.read_all(5).rfind("HTTP/1.1 431 ", 0) == 0);
    CHECK(s.metric("rtx_http_refused_total{reason=\"headers_too_large\"}") == 1);
  }
  SECTION("headers trickling in one byte at a time end at the header deadline") {
    RawConn c(s.port);
    c.send("GET /health HTTP/1.1\r\nHost: x\r\n");
    const auto t0 = clock::now();
    while (clock::now() - t0 < std::chrono::seconds(5) && c.send("X"))
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const double waited = std::chrono::duration<double>(clock::now() - t0).count();
    CHECK(waited >= 0.5);
    CHECK(waited < 3);
    const std::string r = c.read_all(5);
    CHECK((r.empty() || r.rfind("HTTP/1.1 408 ", 0) == 0));  // the reset may drop the answer
  }
  SECTION("an unfinished request line, and an unfinished body, get 408") {
    RawConn line(s.port);
    line.send("GET /hea");
    auto t0 = clock::now();
    const std::string r1 = line.read_all(5);
    CHECK(r1.rfind("HTTP/1.1 408 ", 0) == 0);
    CHECK_THAT(r1, Catch::Contains("within 0.6 s"));
    CHECK(std::chrono::duration<double>(clock::now() - t0).count() < 3);
    RawConn body(s.port);
    body.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"pro");
    t0 = clock::now();
    const std::string r2 = body.read_all(5);
    CHECK(r2.rfind("HTTP/1.1 408 ", 0) == 0);
    CHECK_THAT(r2, Catch::Contains("within 1.2 s"));
    CHECK(std::chrono::duration<double>(clock::now() - t0).count() < 3);
    CHECK(s.metric("rtx_http_refused_total{reason=\"timeout\"}") == 2);
  }
  SECTION("a bare-LF or CR-CR-LF line does not end the headers: it is refused (cpp-httplib would skip it)") {
    for (const char* odd : {"\n", "\r\r\n"}) {
      RawConn c(s.port);
      std::string req = std::string("GET /health HTTP/1.1\r\nHost: x\r\n") + odd;
      for (int i = 0; i < 25; ++i) req += "X-H" + std::to_string(i) + ": 1\r\n";
      c.send(req + "\r\n");
      const std::string r = c.read_all(5);
      INFO(r);
      CHECK(r.rfind("HTTP/1.1 400 ", 0) == 0);
      CHECK_THAT(r, Catch::Contains("\"code\":\"bad_request\"") && Catch::Contains("header line 2"));
    }
  }
  SECTION("refusals before the body is read close the connection: nothing smuggled in the body runs") {
    ServerConfig keyed = cfg;
    keyed.api_key = "k";
    keyed.max_body_bytes = 1000;
    Running k({}, keyed);
    const std::string inner = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    {  // 401: the body (another request) is not parsed as the next request
      RawConn c(k.port);
      c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(inner.size()) + "\r\n\r\n" + inner);
      const std::string r = c.read_all(5);
      CHECK(r.rfind("HTTP/1.1 401 ", 0) == 0);
      CHECK(r.find("HTTP/1.1 200") == std::string::npos);
    }
    auto framing = [&](const std::string& head, const std::string& body, const char* status, const char* code) {
      RawConn c(k.port);
      const auto t0 = clock::now();
      c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n" + head + "\r\n" + body);
      const std::string r = c.read_all(5);
      INFO(head << " -> " << r.substr(0, 200));
      CHECK(r.rfind(std::string("HTTP/1.1 ") + status + " ", 0) == 0);
      CHECK_THAT(r, Catch::Contains(code));
      CHECK(r.find("HTTP/1.1 200") == std::string::npos);
      CHECK(std::chrono::duration<double>(clock::now() - t0).count() < 3);  // answered at once, not at a timeout
    };
    framing("", inner, "411", "length_required");                                      // no length: 411
    framing("Content-Length: 5000000\r\n", "", "413", "");                              // too big, nothing sent: 413 now
    framing("Content-Length: -1\r\n", "", "400", "bad_framing");
    framing("Content-Length: 2\r\nContent-Length: 30\r\n", "{}", "400", "bad_framing");
    framing("Content-Length: 2\r\nTransfer-Encoding: chunked\r\n", "{}", "400", "bad_framing");
    // A body-less PUT or POST where the route takes neither: the method is the problem (405 with
    // Allow, 404 for no route), not the missing length.
    for (const auto& [req, want] : std::vector<std::pair<std::string, std::string>>{
             {"PUT /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n\r\n", "405"},
             {"POST /health HTTP/1.1\r\nHost: x\r\n\r\n", "405"},
             {"PUT /nowhere HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n\r\n", "404"}}) {
      RawConn c(k.port);
      c.send(req);
      const std::string r = c.read_all(5);
      INFO(req << " -> " << r.substr(0, 200));
      CHECK(r.rfind("HTTP/1.1 " + want + " ", 0) == 0);
    }
    {  // An HTTP/2 connection preface: 505 (RFC 9110 15.6.6) that says what is wrong, at once.
      RawConn c(k.port);
      const auto t0 = clock::now();
      c.send("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
      const std::string r = c.read_all(5);
      CHECK(r.rfind("HTTP/1.1 505 ", 0) == 0);
      CHECK_THAT(r, Catch::Contains("HTTP/2.0 is not supported: this server speaks HTTP/1.1"));
      CHECK(std::chrono::duration<double>(clock::now() - t0).count() < 3);
    }
  }
  SECTION("well-formed requests at the limits still work, several per connection") {
    RawConn c(s.port);
    std::string req = "GET /health HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < 18; ++i) req += "X-H" + std::to_string(i) + ": 1\r\n";  // 20 lines, the blank one not counted
    req += "\r\n";
    c.send(req + req + "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    const std::string r = c.read_all(5);
    size_t oks = 0;
    for (size_t at = r.find("HTTP/1.1 200 "); at != std::string::npos; at = r.find("HTTP/1.1 200 ", at + 1)) ++oks;
    CHECK(oks == 3);
  }
  // The server still answers normally afterwards.
  auto c = s.client();
  auto h = c.Get("/health");
  REQUIRE(h);
  CHECK(h->status == 200);
}

namespace {

/// The values of header `name` in the head of response `r` (up to the blank line).
std::vector<std::string> header_values(const std::string& r, const std::string& name) {
  std::vector<std::string> out;
  const std::string head = r.substr(0, r.find("\r\n\r\n"));
  size_t at = head.find("\r\n");
  while (at != std::string::npos) {
    const size_t end = head.find("\r\n", at + 2);
    const std::string line = head.substr(at + 2, end == std::string::npos ? std::string::npos : end - at - 2);
    if (line.rfind(name + ": ", 0) == 0) out.push_back(line.substr(name.size() + 2));
    at = end;
  }
  return out;
}

/// The JSON body of response `r`.
json body_of(const std::string& r) {
  const size_t at = r.find("\r\n\r\n");
  return at == std::string::npos ? json() : json::parse(r.substr(at + 4), nullptr, false);
}

}  // namespace

TEST_CASE("serve: long request lines get 414, long header lines 431, each with a message; one Connection: close",
          "[cpu][serve]") {
  Running s;
  // Closing answers carry one "Connection: close" and no "Keep-Alive".
  const auto closes_once = [](const std::string& r) {
    CHECK(header_values(r, "Connection") == std::vector<std::string>{"close"});
    CHECK(header_values(r, "Keep-Alive").empty());
  };
  for (const size_t n : {10000, 70000}) {  // under and over --max-header-bytes (64 KiB)
    RawConn c(s.port);
    c.send("GET /health?" + std::string(n, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::string r = c.read_all(5);
    INFO(n << ": " << r.substr(0, 300));
    REQUIRE(r.rfind("HTTP/1.1 414 ", 0) == 0);
    const json j = body_of(r);
    CHECK(j["error"]["code"] == "uri_too_long");
    CHECK_THAT(j["error"]["message"].get<std::string>(), Catch::Contains("request line exceeds 8192 bytes"));
    closes_once(r);
  }
  {
    RawConn c(s.port);
    c.send("GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(10000, 'a') + "\r\n\r\n");
    const std::string r = c.read_all(5);
    INFO(r.substr(0, 300));
    REQUIRE(r.rfind("HTTP/1.1 431 ", 0) == 0);
    const json j = body_of(r);
    CHECK(j["error"]["code"] == "headers_too_large");
    CHECK_THAT(j["error"]["message"].get<std::string>(), Catch::Contains("a header line exceeds 8192 bytes"));
    closes_once(r);
  }
  {  // a 4xx from the error handler that leaves bytes unread (here a 404 for a GET with a body),
     // on a connection that would otherwise be kept
    RawConn c(s.port);
    c.send("GET /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}");
    const std::string r = c.read_all(5);
    REQUIRE(r.rfind("HTTP/1.1 404 ", 0) == 0);
    closes_once(r);
  }
  {  // the last request a keep-alive connection takes, refused: still one Connection header
    RawConn c(s.port);
    std::string reqs;
    for (int i = 0; i < 4; ++i) reqs += "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    c.send(reqs + "GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::string r = c.read_all(5);
    const size_t at = r.find("HTTP/1.1 404 ");
    REQUIRE(at != std::string::npos);
    closes_once(r.substr(at));
  }
  // A 200 keeps the connection.
  RawConn c(s.port);
  c.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string r = c.read_all(1);
  CHECK(header_values(r, "Connection").empty());
  CHECK(header_values(r, "Keep-Alive").size() == 1);
}

TEST_CASE("serve: requests RFC 9112 says to reject are refused at once, naming what is wrong", "[cpu][serve]") {
  ServerConfig cfg;
  cfg.max_body_bytes = 1000;
  Running s({}, cfg);
  using clock = std::chrono::steady_clock;
  const std::string body = completion("Once", 1).dump();
  const auto hex = [](size_t n) {
    char b[32];
    std::snprintf(b, sizeof b, "%zx", n);
    return std::string(b);
  };
  const std::string chunked_body = hex(body.size()) + "\r\n" + body + "\r\n0\r\n\r\n";
  const std::string post = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
  struct Case {
    std::string request;
    int status;
    std::string code, says;
  };
  const std::vector<Case> cases = {
      // Framing: answered at once, not when cpp-httplib's 30 s read timeout ends the body.
      {post + "Transfer-Encoding: gzip, chunked\r\n\r\n" + chunked_body, 501, "not_implemented", "transfer coding 'gzip'"},
      {post + "Transfer-Encoding: chunked, identity\r\n\r\n" + chunked_body, 400, "bad_framing", "chunked must be the last"},
      {post + "Transfer-Encoding: gzip\r\n\r\n" + body, 400, "bad_framing", "chunked must be the last"},
      {post + "Transfer-Encoding: chunked\r\n\r\n-1d\r\n" + body + "\r\n0\r\n\r\n", 400, "bad_framing", "not a hex digit"},
      {post + "Transfer-Encoding: chunked\r\n\r\n" + hex(body.size() - 4) + "\r\n" + body + "\r\n0\r\n\r\n", 400, "bad_framing",
       "longer than its size"},
      {post + "Transfer-Encoding: chunked\r\n\r\n" + hex(body.size()) + "\r\n" + body + "\r\n0\r\nX-Trailer: 1\r\n\r\n", 400,
       "bad_framing", "trailer"},
      {post + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked_body, 400, "bad_framing",
       "Transfer-Encoding sent 2 times"},
      {"POST /v1/completions HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
           chunked_body,
       400, "bad_framing", "HTTP/1.0"},
      {post + "Transfer-Encoding: chunked\r\n\r\n800\r\n", 413, "request_too_large", "1000 bytes"},  // over --max-body-bytes
      {post + "Content-Length: %31%30\r\n\r\n" + body, 400, "bad_framing", "not a byte count"},  // cpp-httplib decodes it to 10
      // Header syntax.
      {"GET /health HTTP/1.1\r\nHost : x\r\n\r\n", 400, "bad_request", "whitespace between the header name 'Host'"},
      {"GET /health HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", 400, "bad_request", "header line 2 has no colon"},
      {"GET /health HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n 2\r\n\r\n", 400, "bad_request", "obsolete line folding"},
      {std::string("GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n", 43), 400, "bad_request",
       "header 'X-A' has a NUL byte"},
      {"GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n", 400, "bad_request", "a bare CR"},
      {"GET /health HTTP/1.1\r\nHo(st: x\r\n\r\n", 400, "bad_request", "not allowed in a name"},
      // Methods and codings the server does not implement.
      {"FOO /health HTTP/1.1\r\nHost: x\r\n\r\n", 501, "not_implemented", "method 'FOO' is not implemented"},
      // PRI outside the HTTP/2 preface: refused at once (cpp-httplib would wait for a body).
      {"PRI /nowhere HTTP/1.1\r\nHost: a\r\n\r\n", 501, "not_implemented", "method 'PRI' is not implemented"},
      {post + "Content-Encoding: gzip\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body, 415,
       "unsupported_content_encoding", "Content-Encoding 'gzip'"},
  };
  for (const auto& c : cases) {
    RawConn conn(s.port);
    const auto t0 = clock::now();
    conn.send(c.request);
    const std::string r = conn.read_all(5);
    const double took = std::chrono::duration<double>(clock::now() - t0).count();
    INFO(c.request.substr(0, 160) << "\n -> " << r.substr(0, 400));
    CHECK(r.rfind("HTTP/1.1 " + std::to_string(c.status) + " ", 0) == 0);
    const json j = body_of(r);
    REQUIRE(j.is_object());
    CHECK(j["error"]["code"] == c.code);
    CHECK_THAT(j["error"]["message"].get<std::string>(), Catch::Contains(c.says));
    CHECK(header_values(r, "Connection") == std::vector<std::string>{"close"});
    CHECK(took < 3);
  }
  // Well-formed chunked bodies (with a chunk extension, in two chunks) still work, pipelined.
  const std::string two = post + "Transfer-Encoding: chunked\r\n\r\n5;ext=1\r\n" + body.substr(0, 5) + "\r\n" +
                          hex(body.size() - 5) + "\r\n" + body.substr(5) + "\r\n0\r\n\r\n";
  RawConn conn(s.port);
  conn.send(two + two + "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const std::string r = conn.read_all(10);
  size_t oks = 0;
  for (size_t at = r.find("HTTP/1.1 200 "); at != std::string::npos; at = r.find("HTTP/1.1 200 ", at + 1)) ++oks;
  CHECK(oks == 3);
  CHECK(s.stats().kv_blocks_used == 0);
}

TEST_CASE("serve: a full queue answers 429 with Retry-After; a disconnect frees the slot", "[cpu][serve]") {
  SchedulerConfig sc;
  sc.max_batch = 1;
  sc.token_budget = 8;
  sc.prefill_chunk = 8;
  sc.max_queue = 1;
  Running s(sc);
  const std::string long_req = completion("Once upon a time", 300, 0, {{"ignore_eos", true}}).dump();
  const auto wait_for = [&](auto pred) {
    for (int i = 0; i < 500 && !pred(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    REQUIRE(pred());
  };
  // One running, one queued; the next is refused with 429 and Retry-After.
  auto running = std::async(std::launch::async, [&] { return s.post("/v1/completions", long_req); });
  wait_for([&] { return s.stats().running == 1; });
  auto queued = std::async(std::launch::async, [&] { return s.post("/v1/completions", long_req); });
  wait_for([&] { return s.stats().queued == 1; });
  auto c = s.client();
  auto refused = c.Post("/v1/completions", long_req, "application/json");
  REQUIRE(refused);
  CHECK(refused->status == 429);
  CHECK(refused->get_header_value("Retry-After") == "1");
  CHECK(json::parse(refused->body)["error"]["code"] == "queue_full");
  CHECK(running.get().first == 200);
  CHECK(queued.get().first == 200);
  // A streaming client that goes away after 3 events: its blocks are freed at once.
  const auto ev = stream(s, "/v1/completions", completion("Once upon a time", 400, 0, {{"stream", true}, {"ignore_eos", true}}), 3);
  CHECK(ev.size() == 3);
  for (int i = 0; i < 100 && s.stats().kv_blocks_used > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(s.stats().kv_blocks_used == 0);
  CHECK(s.stats().finished_by[static_cast<int>(Finish::Cancelled)] == 1);
  CHECK(s.metric("rtx_requests_finished_total{engine=\"main\",reason=\"cancelled\"}") == 1);
}

TEST_CASE("serve: 64 concurrent streaming clients; every request completes or gets 429; no leaked blocks",
          "[cpu][serve]") {
  SchedulerConfig sc;
  sc.max_batch = 16;
  sc.max_queue = 24;
  ServerConfig cfg;
  cfg.http_threads = 128;
  Running s(sc, cfg);
  LoadConfig lc;
  lc.port = s.port;
  lc.model = name();
  lc.concurrency = 64;
  lc.duration_s = 3;
  lc.max_tokens = 24;
  lc.prompts = {"Once upon a time", "The little dog", "Lily and Ben"};
  lc.timeout_s = 60;
  const LoadReport rep = run_load(lc);
  const auto& sm = rep.summary;
  INFO(format_table(rep));
  CHECK(sm.completed > 0);
  for (const auto& r : rep.requests)
    if (r.status != RequestStatus::Ok && r.status != RequestStatus::RateLimited)
      FAIL_CHECK("request " << r.index << " at " << r.start_s << " s: " << status_name(r.status) << " " << r.http_status << " " << r.error);
  CHECK(sm.completed + sm.rate_limited == sm.num_requests);
  for (const auto& r : rep.requests)
    if (r.status == RequestStatus::Ok) CHECK(r.output_tokens == 24);
  CHECK(s.stats().kv_blocks_used == 0);
  CHECK(s.metric("rtx_kv_cache_blocks_used{engine=\"main\"}") == 0);
  CHECK(s.metric("rtx_running_sequences{engine=\"main\"}") == 0);
  CHECK(s.metric("rtx_time_to_first_token_seconds_count{engine=\"main\"}") == sm.completed);
  CHECK(s.metric("rtx_steps_tpot_capped_total{engine=\"main\"}") == 0);  // no --tpot-target-ms
  CHECK(s.metric("rtx_step_time_model_seconds{engine=\"main\",term=\"fixed\"}") +
            s.metric("rtx_step_time_model_seconds{engine=\"main\",term=\"per_row\"}") >
        0);
  CHECK(s.metric("rtx_step_time_model_seconds{engine=\"main\",term=\"per_decode_key\"}") >= 0);
  CHECK(s.metric("rtx_step_time_model_seconds{engine=\"main\",term=\"per_prefill_pair\"}") >= 0);
}

TEST_CASE("serve: graceful shutdown ends in-flight streams and stops the listener", "[cpu][serve]") {
  ServerConfig cfg;
  cfg.shutdown_deadline_s = 0;
  auto s = std::make_unique<Running>(SchedulerConfig{}, cfg);
  auto fut = std::async(std::launch::async, [&] {
    return stream(*s, "/v1/completions", completion("Once", 500, 0, {{"stream", true}, {"ignore_eos", true}}));
  });
  // Stop as soon as the request is generating (its 500 tokens take far longer than that).
  for (int i = 0; i < 2000 && s->stats().output_tokens == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(s->stats().output_tokens > 0);
  const auto t0 = std::chrono::steady_clock::now();
  s->server->stop();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(took < 5);
  const auto ev = fut.get();
  REQUIRE(!ev.empty());
  CHECK(ev.back() == "[DONE]");
  CHECK(ev[ev.size() - 2].find("cancelled") != std::string::npos);
  CHECK(s->post("/v1/completions", completion("Once", 2).dump()).first == 0);  // listener closed
  s.reset();
}

TEST_CASE("serve: a canary engine takes its share of requests, with its own metrics", "[cpu][serve]") {
  auto canary_model = load_model(model_path());
  SchedulerConfig csc;
  csc.max_batch = 4;
  Scheduler canary(*canary_model, csc);
  Scheduler main_sched(shared_model(), SchedulerConfig{});
  ServerConfig cfg;
  cfg.port = 0;
  cfg.canary_fraction = 0.25;
  Server server(Engine{&shared_model(), &main_sched, "main"}, Engine{canary_model.get(), &canary, "canary"}, cfg);
  const int port = server.bind();
  std::thread t([&] { server.run(); });
  httplib::Client c("127.0.0.1", port);
  std::map<std::string, int> by_engine;
  std::set<std::string> texts;
  for (int i = 0; i < 12; ++i) {
    auto r = c.Post("/v1/completions", completion("Once upon a time", 12).dump(), "application/json");
    REQUIRE(r);
    REQUIRE(r->status == 200);
    ++by_engine[r->get_header_value("X-Rtx-Engine")];
    texts.insert(json::parse(r->body)["choices"][0]["text"].get<std::string>());
  }
  CHECK(by_engine["canary"] == 3);  // floor((i+1)/4) > floor(i/4): i = 3, 7, 11
  CHECK(by_engine["main"] == 9);
  CHECK(texts.size() == 1);  // same weights, greedy: both engines give the same text
  auto m = c.Get("/metrics");
  REQUIRE(m);
  CHECK_THAT(m->body, Catch::Contains("rtx_requests_finished_total{engine=\"canary\",reason=\"length\"} 3"));
  CHECK_THAT(m->body, Catch::Contains("rtx_requests_finished_total{engine=\"main\",reason=\"length\"} 9"));
  server.stop();
  t.join();
  // A fraction without a canary engine, or outside [0, 1], is refused.
  ServerConfig bad;
  bad.canary_fraction = 0.5;
  CHECK_THROWS_AS(Server(Engine{&shared_model(), &main_sched, "main"}, Engine{}, bad), Error);
  bad.canary_fraction = 1.5;
  CHECK_THROWS_AS(Server(Engine{&shared_model(), &main_sched, "main"}, Engine{canary_model.get(), &canary, ""}, bad),
                  Error);
}

namespace {

/// What a refused raw request must get: `status`, the OpenAI error object with `code` and a
/// message containing `says`, and one `Connection: close`.
void check_refusal(const std::string& r, int status, const std::string& code, const std::string& says) {
  CHECK(r.rfind("HTTP/1.1 " + std::to_string(status) + " ", 0) == 0);
  const json j = body_of(r);
  REQUIRE(j.is_object());
  CHECK(j["error"]["type"] == "invalid_request_error");
  CHECK(j["error"]["code"] == code);
  CHECK(j["error"].contains("param"));
  CHECK_THAT(j["error"]["message"].get<std::string>(), Catch::Contains(says));
  CHECK(header_values(r, "Connection") == std::vector<std::string>{"close"});
}

}  // namespace

TEST_CASE("serve: an HTTP/1.1 request needs one valid Host (RFC 9112 3.2); HTTP/1.0 may leave it out", "[cpu][serve]") {
  Running s;
  struct Case {
    std::string request, says;
  };
  const std::vector<Case> refused = {
      {"GET /health HTTP/1.1\r\n\r\n", "no Host header: an HTTP/1.1 request must have one"},
      {"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n", "no Host header"},
      {"GET /health HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", "Host sent 2 times; send it once"},
      {"GET /health HTTP/1.0\r\nHost: a\r\nhost: b\r\n\r\n", "Host sent 2 times"},  // any version
      {"GET /health HTTP/1.1\r\nHost: a b\r\n\r\n", "Host 'a b' is not a valid host[:port] (RFC 9112 3.2, RFC 3986 3.2.2): it has ' ', a byte"},
      {"GET /health HTTP/1.1\r\nHost: user@a\r\n\r\n", "user information"},
      {"GET /health HTTP/1.1\r\nHost: a/b\r\n\r\n", "it has '/', a byte a host name cannot have"},
      {"GET /health HTTP/1.1\r\nHost: a:8o\r\n\r\n", "a port, '8o', that is not a number"},
      {"GET /health HTTP/1.1\r\nHost: :80\r\n\r\n", "an empty host name"},
      {"GET /health HTTP/1.1\r\nHost: ::1\r\n\r\n", "an IPv6 address goes in brackets, as in '[::1]:8080'"},
      {"GET /health HTTP/1.1\r\nHost: a:1:2\r\n\r\n", "more than one ':'"},
      {"GET /health HTTP/1.1\r\nHost: [::1\r\n\r\n", "without its closing ']'"},
      {"GET /health HTTP/1.1\r\nHost: [::g]:80\r\n\r\n", "'[::g]', that is not an IPv6 address"},
      {"GET /health HTTP/1.1\r\nHost: [::1]x\r\n\r\n", "not ':port'"},
      {"GET /health HTTP/1.1\r\nHost: a%4\r\n\r\n", "not followed by two hex digits"},
  };
  for (const auto& c : refused) {
    RawConn conn(s.port);
    conn.send(c.request);
    const std::string r = conn.read_all(5);
    INFO(c.request << "\n -> " << r.substr(0, 400));
    check_refusal(r, 400, "bad_request", c.says);
  }
  const std::vector<std::string> accepted = {
      "GET /health HTTP/1.0\r\n\r\n",  // HTTP/1.0 without Host
      "GET /health HTTP/1.1\r\nHost:\r\nConnection: close\r\n\r\n",  // empty: a URI without authority
      "GET /health HTTP/1.1\r\nhOST: 127.0.0.1:8080\r\nConnection: close\r\n\r\n",
      "GET /health HTTP/1.1\r\nHost: [::1]:8080\r\nConnection: close\r\n\r\n",
      "GET /health HTTP/1.1\r\nHost: [v1.fe:80]\r\nConnection: close\r\n\r\n",
      "GET /health HTTP/1.1\r\nHost: my-host.example_1.~%41\r\nConnection: close\r\n\r\n",
      "GET /health HTTP/1.1\r\nHost: x:\r\nConnection: close\r\n\r\n",  // port = *DIGIT (RFC 3986 3.2.3)
      // Empty lines before the request line are skipped (RFC 9112 2.2).
      "\r\n\r\n\nGET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
  };
  for (const auto& req : accepted) {
    RawConn conn(s.port);
    conn.send(req);
    const std::string r = conn.read_all(5);
    INFO(req << "\n -> " << r.substr(0, 400));
    CHECK(r.rfind("HTTP/1.1 200 ", 0) == 0);
    CHECK(body_of(r) == json{{"status", "ok"}});
    // Each closes (Connection: close, or HTTP/1.0), and says so once, with no Keep-Alive.
    CHECK(header_values(r, "Connection") == std::vector<std::string>{"close"});
    CHECK(header_values(r, "Keep-Alive").empty());
  }
  {  // ... also between two requests on one keep-alive connection
    RawConn conn(s.port);
    conn.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    const std::string r = conn.read_all(5);
    INFO(r.substr(0, 800));
    size_t ok = 0;
    for (size_t at = r.find("HTTP/1.1 200 "); at != std::string::npos; at = r.find("HTTP/1.1 200 ", at + 1)) ++ok;
    CHECK(ok == 2);
    CHECK(r.find("HTTP/1.1 400") == std::string::npos);
  }
}

TEST_CASE("serve: a request line is method SP target SP version: other spacing is 400, never served unchecked",
          "[cpu][serve]") {
  Running s;
  // cpp-httplib splits on runs of whitespace; the guard reads exactly two single spaces, so
  // these would have been served with the Host / target / framing checks skipped.
  const std::vector<std::string> refused = {
      "GET  /health HTTP/1.1\r\n\r\n",                          // no Host, doubled space
      "GET /health  HTTP/1.1\r\n\r\n",
      "GET /health HTTP/1.1 \r\n\r\n",                          // trailing space
      "GET\t/health HTTP/1.1\r\nHost: x\r\n\r\n",              // tab
      " GET /health HTTP/1.1\r\nHost: x\r\n\r\n",               // leading space
      "OPTIONS * HTTP/1.1 \r\nHost: x\r\n\r\n",
      "GET  http://localhost/health HTTP/1.1\r\nHost: x\r\n\r\n",
      "POST /v1/completions HTTP/1.0 \r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
      "GARBAGE\r\n\r\n",
  };
  for (const auto& req : refused) {
    RawConn conn(s.port);
    conn.send(req);
    const std::string r = conn.read_all(5);
    INFO(req << "\n -> " << r.substr(0, 400));
    check_refusal(r, 400, "bad_request", "malformed request line");
  }
  {
    RawConn conn(s.port);
    conn.send("GET /health HTTP/1.1\nHost: x\r\n\r\n");
    check_refusal(conn.read_all(5), 400, "bad_request", "the request line ends in a bare LF");
  }
  {  // a HEAD refused on its request line gets no content (RFC 9110 9.3.2)
    RawConn conn(s.port);
    conn.send("HEAD * HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::string r = conn.read_all(5);
    INFO(r);
    CHECK(r.rfind("HTTP/1.1 400 ", 0) == 0);
    REQUIRE(r.find("\r\n\r\n") != std::string::npos);
    CHECK(r.substr(r.find("\r\n\r\n") + 4).empty());
  }
  // Each counted under bad_request.
  RawConn m(s.port);
  m.send("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const std::string metrics = m.read_all(5);
  CHECK_THAT(metrics, Catch::Contains("rtx_http_refused_total{reason=\"bad_request\"} " +
                                      std::to_string(refused.size() + 2) + "\n"));
}

TEST_CASE("serve: absolute-form targets are routed by their path; CONNECT, OPTIONS * and other forms get 501 or 400",
          "[cpu][serve]") {
  Running s;
  {  // routed by the URI's path, its Host ignored; pipelined on one connection
    RawConn conn(s.port);
    const std::string body = completion("Once", 2).dump();
    conn.send("GET http://example.com/health HTTP/1.1\r\nHost: other.example\r\n\r\n"
              "GET HTTP://Example.COM:8080/v1/models?x=1 HTTP/1.1\r\nHost: example.com:8080\r\n\r\n"
              "POST https://[::1]:8080/v1/completions HTTP/1.1\r\nHost: [::1]:8080\r\nContent-Type: application/json\r\n"
              "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
    const std::string r = conn.read_all(10);
    INFO(r.substr(0, 1200));
    std::vector<size_t> at;
    for (size_t i = r.find("HTTP/1.1 "); i != std::string::npos; i = r.find("HTTP/1.1 ", i + 1)) at.push_back(i);
    REQUIRE(at.size() == 3);
    const std::string r1 = r.substr(at[0], at[1] - at[0]), r2 = r.substr(at[1], at[2] - at[1]), r3 = r.substr(at[2]);
    CHECK(r1.rfind("HTTP/1.1 200 ", 0) == 0);
    CHECK(body_of(r1) == json{{"status", "ok"}});
    CHECK(r2.rfind("HTTP/1.1 200 ", 0) == 0);
    const json models = body_of(r2);
    REQUIRE(models.is_object());
    CHECK(models["object"] == "list");
    CHECK(models["data"][0]["id"] == name());
    CHECK(r3.rfind("HTTP/1.1 200 ", 0) == 0);
    const json done = body_of(r3);
    REQUIRE(done.is_object());
    CHECK(done["object"] == "text_completion");
    CHECK(done["usage"]["completion_tokens"] == 2);
  }
  {  // an empty path is "/" (RFC 9112 3.2.1): no route there, the same 404 as for "GET /"
    RawConn a(s.port), b(s.port);
    a.send("GET http://example.com?q=1 HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n");
    b.send("GET / HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n");
    const std::string ra = a.read_all(5), rb = b.read_all(5);
    CHECK(ra.rfind("HTTP/1.1 404 ", 0) == 0);
    CHECK(body_of(ra) == body_of(rb));
    CHECK(body_of(ra)["error"]["message"] == "no route GET /");
  }
  struct Case {
    std::string request;
    int status;
    std::string code, says;
  };
  const std::vector<Case> cases = {
      {"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", 501, "not_implemented",
       "CONNECT (a tunnel, RFC 9110 9.3.6) is not implemented: this server is not a proxy"},
      {"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 501, "not_implemented", "OPTIONS * (about the whole server, RFC 9112 3.2.4)"},
      {"GET * HTTP/1.1\r\nHost: x\r\n\r\n", 400, "bad_request", "request target '*' is for OPTIONS only"},
      {"GET example.com:80 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "bad_request",
       "request target 'example.com:80' is neither a path ('/...') nor an absolute http URI"},
      {"GET health HTTP/1.1\r\nHost: x\r\n\r\n", 400, "bad_request", "'health' is neither a path"},
      {"GET ftp://x/health HTTP/1.1\r\nHost: x\r\n\r\n", 400, "bad_request", "is a 'ftp' URI"},
      {"GET http://user:pw@x/health HTTP/1.1\r\nHost: x\r\n\r\n", 400, "bad_request",
       "its authority 'user:pw@x' has user information"},
      {"GET http:///health HTTP/1.1\r\nHost: x\r\n\r\n", 400, "bad_request", "its authority '' has an empty host name"},
      {"GET http://x:y/health HTTP/1.1\r\nHost: x\r\n\r\n", 400, "bad_request", "a port, 'y', that is not a number"},
      // The Host rules hold for absolute-form too (RFC 9112 3.2).
      {"GET http://x/health HTTP/1.1\r\n\r\n", 400, "bad_request", "no Host header"},
  };
  for (const auto& c : cases) {
    RawConn conn(s.port);
    conn.send(c.request);
    const std::string r = conn.read_all(5);
    INFO(c.request << "\n -> " << r.substr(0, 400));
    check_refusal(r, c.status, c.code, c.says);
  }
  // An origin-form CONNECT is still a method the route does not take (405), as before.
  RawConn conn(s.port);
  conn.send("CONNECT /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const std::string r = conn.read_all(5);
  INFO(r);
  CHECK(r.rfind("HTTP/1.1 405 ", 0) == 0);
}

TEST_CASE("serve: every guard refusal counts in rtx_http_refused_total under its reason; all reasons listed from 0",
          "[cpu][serve]") {
  ServerConfig cfg;
  cfg.max_header_lines = 10;
  cfg.header_timeout_s = 0.5;
  cfg.max_body_bytes = 1000;
  Running s({}, cfg);
  const std::vector<std::string> reasons = {"headers_too_large", "uri_too_long",   "timeout",
                                            "bad_request",       "bad_framing",    "not_implemented",
                                            "unsupported_encoding", "body_too_large", "version_not_supported"};
  {  // one HELP and TYPE, then every reason, at 0 before any refusal
    auto c = s.client();
    auto m = c.Get("/metrics");
    REQUIRE(m);
    CHECK_THAT(m->body, Catch::Contains("# TYPE rtx_http_refused_total counter\n"));
    size_t series = 0;
    for (size_t at = m->body.find("\nrtx_http_refused_total{"); at != std::string::npos;
         at = m->body.find("\nrtx_http_refused_total{", at + 1))
      ++series;
    CHECK(series == reasons.size());
  }
  for (const auto& r : reasons) CHECK(s.metric("rtx_http_refused_total{reason=\"" + r + "\"}") == 0);
  const std::string body = completion("Once", 1).dump();
  const std::string post = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
  std::string many = "GET /health HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 12; ++i) many += "X-H" + std::to_string(i) + ": 1\r\n";
  const std::vector<std::tuple<std::string, int, std::string>> sent = {
      {many + "\r\n", 431, "headers_too_large"},
      {"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(9000, 'a') + "\r\n\r\n", 431, "headers_too_large"},
      {"GET /health?" + std::string(9000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n", 414, "uri_too_long"},
      {"GET /health HTTP/1.1\r\nHost: x\r\n", 408, "timeout"},  // never finished
      {"GET /health HTTP/1.1\r\n\r\n", 400, "bad_request"},
      {"GET /health HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400, "bad_request"},
      {"GET http://u@x/health HTTP/1.1\r\nHost: x\r\n\r\n", 400, "bad_request"},
      {post + "Transfer-Encoding: gzip\r\n\r\n" + body, 400, "bad_framing"},
      {"FOO /health HTTP/1.1\r\nHost: x\r\n\r\n", 501, "not_implemented"},
      {"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 501, "not_implemented"},
      {post + "Content-Encoding: gzip\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body, 415,
       "unsupported_encoding"},
      {post + "Transfer-Encoding: chunked\r\n\r\n800\r\n", 413, "body_too_large"},
      {"GET /health HTTP/2.0\r\nHost: x\r\n\r\n", 505, "version_not_supported"},
  };
  std::map<std::string, int> want;
  for (const auto& [request, status, reason] : sent) {
    RawConn conn(s.port);
    conn.send(request);
    const std::string r = conn.read_all(5);
    INFO(request.substr(0, 120) << "\n -> " << r.substr(0, 300));
    CHECK(r.rfind("HTTP/1.1 " + std::to_string(status) + " ", 0) == 0);
    ++want[reason];
  }
  // An answer the server's handlers give (here 404: no route) is not a guard refusal.
  RawConn other(s.port);
  other.send("PUT /nowhere HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(other.read_all(5).rfind("HTTP/1.1 404 ", 0) == 0);
  for (const auto& r : reasons) {
    INFO(r);
    CHECK(s.metric("rtx_http_refused_total{reason=\"" + r + "\"}") == want[r]);
  }
  CHECK(want.size() == reasons.size());
}

TEST_CASE("serve: a Host port over 65535, a #fragment and a malformed HTTP-version are 400; HTTP/2.0 is 505; "
          "HTTP/1.2 is served as 1.1; each counted",
          "[cpu][serve]") {
  Running s;
  const auto count = [&](const std::string& reason) { return s.metric("rtx_http_refused_total{reason=\"" + reason + "\"}"); };
  REQUIRE(count("bad_request") == 0);
  REQUIRE(count("version_not_supported") == 0);
  struct Case {
    std::string request, says;
  };
  const std::vector<Case> bad = {
      // A port is *DIGIT (RFC 3986 3.2.3), and a TCP port at most 65535.
      {"GET /health HTTP/1.1\r\nHost: x:99999\r\n\r\n", "Host 'x:99999' is not a valid host[:port] (RFC 9112 3.2, RFC "
                                                        "3986 3.2.2): it has a port, '99999', above 65535"},
      {"GET /health HTTP/1.1\r\nHost: x:65536\r\n\r\n", "a port, '65536', above 65535"},
      {"GET /health HTTP/1.1\r\nHost: x:0000099999\r\n\r\n", "a port, '0000099999', above 65535"},
      {"GET /health HTTP/1.1\r\nHost: x:123456789012345678901234567890\r\n\r\n", "above 65535"},
      {"GET /health HTTP/1.1\r\nHost: [::1]:70000\r\n\r\n", "a port, '70000', above 65535"},
      {"GET /health HTTP/1.1\r\nHost: [::1\r\n\r\n", "an IP literal without its closing ']'"},
      {"GET http://x:99999/health HTTP/1.1\r\nHost: x\r\n\r\n", "its authority 'x:99999' has a port, '99999', above 65535"},
      // A fragment is never part of a request target (RFC 9112 3.2), in any form.
      {"GET /health#frag HTTP/1.1\r\nHost: x\r\n\r\n", "request target '/health#frag' has a fragment ('#frag')"},
      {"GET /v1/models?x=1#top HTTP/1.1\r\nHost: x\r\n\r\n", "has a fragment ('#top')"},
      {"GET /# HTTP/1.1\r\nHost: x\r\n\r\n", "has a fragment ('#')"},
      {"GET http://x/health#f HTTP/1.1\r\nHost: x\r\n\r\n", "request target 'http://x/health#f' has a fragment ('#f')"},
      {"GET http://x#f HTTP/1.1\r\nHost: x\r\n\r\n", "has a fragment"},
      // HTTP-version = "HTTP/" DIGIT "." DIGIT, case-sensitive (RFC 9112 2.3).
      {"GET /health HTTP/1.1x\r\nHost: x\r\n\r\n", "malformed HTTP version 'HTTP/1.1x'"},
      {"GET /health http/1.1\r\nHost: x\r\n\r\n", "malformed HTTP version 'http/1.1'"},
      {"GET /health HTTP/1\r\nHost: x\r\n\r\n", "malformed HTTP version 'HTTP/1'"},
      {"GET /health HTTP/10.0\r\nHost: x\r\n\r\n", "malformed HTTP version"},
      {"FOO /health HTTP/2\r\nHost: x\r\n\r\n", "malformed HTTP version"},
      // A method is a token (RFC 9110 9.1).
      {"G(T /health HTTP/1.1\r\nHost: x\r\n\r\n", "method 'G(T' is not a token"},
      // HTTP/1.2 is read as HTTP/1.1 (RFC 9110 2.5): it needs a Host.
      {"GET /health HTTP/1.2\r\n\r\n", "no Host header"},
  };
  for (const auto& c : bad) {
    RawConn conn(s.port);
    conn.send(c.request);
    const std::string r = conn.read_all(5);
    INFO(c.request << "\n -> " << r.substr(0, 400));
    CHECK(r.rfind("HTTP/1.1 400 Bad Request\r\n", 0) == 0);
    check_refusal(r, 400, "bad_request", c.says);
  }
  CHECK(count("bad_request") == bad.size());
  // A well-formed version with a major version other than 1: 505 (RFC 9110 15.6.6), the HTTP/2
  // connection preface included.
  const std::vector<std::string> other_major = {
      "GET /health HTTP/2.0\r\nHost: x\r\n\r\n",
      "GET /health HTTP/3.0\r\nHost: x\r\n\r\n",
      "GET /health HTTP/0.9\r\n\r\n",
      "FOO /health HTTP/2.0\r\nHost: x\r\n\r\n",  // the version first: the method's meaning is HTTP/2's
      "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
  };
  for (const auto& req : other_major) {
    RawConn conn(s.port);
    conn.send(req);
    const std::string r = conn.read_all(5);
    INFO(req << "\n -> " << r.substr(0, 400));
    CHECK(r.rfind("HTTP/1.1 505 HTTP Version Not Supported\r\n", 0) == 0);
    check_refusal(r, 505, "http_version_not_supported", "is not supported: this server speaks HTTP/1.1");
  }
  {  // a HEAD gets the 505 without content (RFC 9110 9.3.2)
    RawConn conn(s.port);
    conn.send("HEAD /health HTTP/2.0\r\nHost: x\r\n\r\n");
    const std::string r = conn.read_all(5);
    INFO(r);
    CHECK(r.rfind("HTTP/1.1 505 ", 0) == 0);
    REQUIRE(r.find("\r\n\r\n") != std::string::npos);
    CHECK(r.substr(r.find("\r\n\r\n") + 4).empty());
  }
  CHECK(count("version_not_supported") == other_major.size() + 1);
  const std::vector<std::string> good = {
      "GET /health HTTP/1.1\r\nHost: x:65535\r\nConnection: close\r\n\r\n",
      "GET /health HTTP/1.1\r\nHost: x:0\r\nConnection: close\r\n\r\n",
      "GET /health HTTP/1.1\r\nHost: x:000000080\r\nConnection: close\r\n\r\n",  // leading zeros: port 80
      "GET /health HTTP/1.1\r\nHost: x:\r\nConnection: close\r\n\r\n",           // empty port (RFC 3986 3.2.3)
      "GET /health HTTP/1.1\r\nHost: [::1]:8080\r\nConnection: close\r\n\r\n",
      "GET /health HTTP/1.1\r\nHost: [::1]:65535\r\nConnection: close\r\n\r\n",
      "GET /health HTTP/1.1\r\nHost: [::1]\r\nConnection: close\r\n\r\n",
      "GET http://[::1]:65535/health HTTP/1.1\r\nHost: [::1]:65535\r\nConnection: close\r\n\r\n",
      "GET /health?q=%23 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",  // '#' %-encoded is data
      "GET /health HTTP/1.2\r\nHost: x\r\nConnection: close\r\n\r\n",
      "GET /health HTTP/1.9\r\nHost: x\r\nConnection: close\r\n\r\n",
  };
  for (const auto& req : good) {
    RawConn conn(s.port);
    conn.send(req);
    const std::string r = conn.read_all(5);
    INFO(req << "\n -> " << r.substr(0, 400));
    CHECK(r.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
    CHECK(body_of(r) == json{{"status", "ok"}});
  }
  {  // HTTP/1.2 is HTTP/1.1 for persistence too: kept open by default (RFC 9112 9.3), pipelined
    RawConn conn(s.port);
    conn.send("GET /health HTTP/1.2\r\nHost: x\r\n\r\nGET /health HTTP/1.2\r\nHost: x\r\nConnection: close\r\n\r\n");
    const std::string r = conn.read_all(5);
    INFO(r);
    size_t oks = 0;
    for (size_t at = r.find("HTTP/1.1 200 "); at != std::string::npos; at = r.find("HTTP/1.1 200 ", at + 1)) ++oks;
    CHECK(oks == 2);
  }
  CHECK(count("bad_request") == bad.size());
  CHECK(count("version_not_supported") == other_major.size() + 1);
}

TEST_CASE("serve: the 400s cpp-httplib gives itself count under bad_request; answers the handlers turn into 405 do not",
          "[cpu][serve]") {
  Running s;
  const auto count = [&](const std::string& reason) { return s.metric("rtx_http_refused_total{reason=\"" + reason + "\"}"); };
  REQUIRE(count("bad_request") == 0);
  // What the guard lets through but cpp-httplib refuses: a request cut short (the client closes
  // its sending half mid-headers or mid-body), a multipart body without a boundary.
  const std::vector<std::string> cut = {
      "GET /health HTTP/1.1\r\nHost: x\r\n",
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\":",
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data\r\nContent-Length: 2\r\n\r\n{}",
  };
  for (const auto& req : cut) {
    RawConn conn(s.port);
    conn.send(req);
    conn.close_write();
    const std::string r = conn.read_all(5);
    INFO(req << "\n -> " << r.substr(0, 400));
    CHECK(r.rfind("HTTP/1.1 400 Bad Request\r\n", 0) == 0);
    CHECK(body_of(r)["error"]["code"] == "bad_request");
  }
  CHECK(count("bad_request") == cut.size());
  // cpp-httplib's 400 for a method it routes nowhere, which the server answers 405 on a route
  // that exists: a route's answer, not a refusal.
  RawConn conn(s.port);
  conn.send("TRACE /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const std::string r = conn.read_all(5);
  INFO(r.substr(0, 400));
  CHECK(r.rfind("HTTP/1.1 405 ", 0) == 0);
  CHECK(count("bad_request") == cut.size());
  // ... and 404 on a path no route serves, with any method.
  RawConn nowhere(s.port);
  nowhere.send("TRACE /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const std::string nr = nowhere.read_all(5);
  INFO(nr.substr(0, 400));
  CHECK(nr.rfind("HTTP/1.1 404 Not Found\r\n", 0) == 0);
  CHECK(body_of(nr)["error"]["code"] == "not_found");
  CHECK(count("bad_request") == cut.size());
  for (const char* reason : {"headers_too_large", "uri_too_long", "timeout", "bad_framing", "not_implemented",
                             "unsupported_encoding", "body_too_large", "version_not_supported"})
    CHECK(count(reason) == 0);
}

TEST_CASE("serve: --model-name (--alias) is the only id served; model_not_found names it", "[cpu][serve]") {
  ServerConfig cfg;
  cfg.model_name = "stories";
  Running s({}, cfg);
  auto c = s.client();
  auto list = c.Get("/v1/models");
  REQUIRE(list);
  const json m = json::parse(list->body)["data"][0];
  CHECK(m["id"] == "stories");
  CHECK(m["meta"]["file"] == "tinyllamas-stories-260k-f32.gguf");
  CHECK(c.Get("/v1/models/stories")->status == 200);
  const std::string says = "is not served here; this server serves 'stories'.";
  for (const std::string& wrong : std::vector<std::string>{"tinyllamas-stories-260k", model_path()}) {
    INFO("model: '" << wrong << "'");
    const auto [st, j] = s.post("/v1/completions", json{{"model", wrong}, {"prompt", "Once"}, {"max_tokens", 1}}.dump());
    CHECK(st == 404);
    CHECK(j == json{{"error", {{"message", "The model '" + wrong + "' " + says}, {"type", "invalid_request_error"},
                               {"param", nullptr}, {"code", "model_not_found"}}}});
  }
  // An empty "model" is a bad value (400), not an unknown model.
  const auto [est, ej] = s.post("/v1/completions", json{{"model", ""}, {"prompt", "Once"}, {"max_tokens", 1}}.dump());
  CHECK(est == 400);
  CHECK(ej["error"]["param"] == "model");
  const auto [cst, cj] = s.post("/v1/chat/completions",
                                json{{"model", "gpt-4o"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}}.dump());
  CHECK(cst == 404);
  CHECK(cj["error"]["message"] == "The model 'gpt-4o' " + says);
  const auto [tst, tj] = s.post("/tokenize", json{{"model", "x"}, {"prompt", "a"}}.dump());
  CHECK(tst == 404);
  CHECK(tj["error"]["message"] == "The model 'x' " + says);
  // The served id, or none, is served.
  CHECK(s.post("/v1/completions", json{{"model", "stories"}, {"prompt", "Once"}, {"max_tokens", 1}}.dump()).first == 200);
  CHECK(s.post("/v1/completions", json{{"prompt", "Once"}, {"max_tokens", 1}}.dump()).first == 200);
}

TEST_CASE("serve: a 404 or 405 keeps the connection alive when the request was read whole; an unread body closes it",
          "[cpu][serve]") {
  Running s;
  using clock = std::chrono::steady_clock;
  const std::string health = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  // Status lines of the answers in `r`, in order.
  const auto statuses = [](const std::string& r) {
    std::vector<std::string> out;
    for (size_t at = r.find("HTTP/1.1 "); at != std::string::npos; at = r.find("HTTP/1.1 ", at + 1))
      out.push_back(r.substr(at + 9, 3));
    return out;
  };
  struct Case {
    std::string first, status, code;
  };
  const std::vector<Case> kept = {
      {"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n", "404", "not_found"},
      {"HEAD /nowhere HTTP/1.1\r\nHost: x\r\n\r\n", "404", ""},
      {"TRACE /nowhere HTTP/1.1\r\nHost: x\r\n\r\n", "404", "not_found"},
      {"POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", "404",
       "not_found"},
      {"POST /nowhere HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", "404", "not_found"},
      {"GET /v1/models/ HTTP/1.1\r\nHost: x\r\n\r\n", "404", "model_not_found"},
      {"GET /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n", "405", "method_not_allowed"},
      {"POST /health HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", "405", "method_not_allowed"},
  };
  for (const auto& c : kept) {
    RawConn conn(s.port);
    const auto t0 = clock::now();
    conn.send(c.first + health);
    const std::string r = conn.read_all(5);
    INFO(c.first << "\n -> " << r.substr(0, 600));
    CHECK(statuses(r) == std::vector<std::string>{c.status, "200"});
    const std::string first = r.substr(0, r.find("HTTP/1.1 200 "));
    CHECK(header_values(first, "Connection").empty());
    CHECK(header_values(first, "Keep-Alive") == std::vector<std::string>{"timeout=5, max=5"});
    if (!c.code.empty()) CHECK(body_of(first)["error"]["code"] == c.code);
    CHECK_THAT(r, Catch::EndsWith("{\"status\":\"ok\"}"));
    CHECK(std::chrono::duration<double>(clock::now() - t0).count() < 3);  // the second answer closed at once
  }
  // A GET or TRACE with a body: cpp-httplib does not read it, so what follows on the socket (here
  // a request hidden in the body) must not be read as the next request: the 404 closes.
  for (const std::string method : {"GET", "TRACE"}) {
    RawConn conn(s.port);
    const std::string hidden = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    conn.send(method + " /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(hidden.size()) + "\r\n\r\n" +
              hidden + health);
    const std::string r = conn.read_all(5);
    INFO(method << " -> " << r.substr(0, 600));
    CHECK(statuses(r) == std::vector<std::string>{"404"});
    CHECK(header_values(r, "Connection") == std::vector<std::string>{"close"});
  }
  {  // a GET /v1/models/ (an id the route does not take) with a body closes too
    RawConn conn(s.port);
    conn.send("GET /v1/models/ HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}" + health);
    const std::string r = conn.read_all(5);
    CHECK(statuses(r) == std::vector<std::string>{"404"});
    CHECK(header_values(r, "Connection") == std::vector<std::string>{"close"});
  }
  // Five requests per connection still; each 404 counted once.
  RawConn five(s.port);
  std::string req;
  for (int i = 0; i < 5; ++i) req += "GET /nowhere" + std::to_string(i) + " HTTP/1.1\r\nHost: x\r\n\r\n";
  five.send(req);
  const std::string r5 = five.read_all(8);
  CHECK(statuses(r5) == std::vector<std::string>(5, "404"));
  CHECK(s.metric("rtx_requests_total{engine=\"main\",status=\"404\"}") == 6 + 3 + 5);
}

TEST_CASE("serve: a request that stalls for the read timeout before the deadlines gets 408, counted under timeout",
          "[cpu][serve]") {
  ServerConfig cfg;
  cfg.read_timeout_s = 0.4;  // cpp-httplib's default here is 30 s; the deadlines are far off
  cfg.header_timeout_s = 20;
  cfg.receive_timeout_s = 60;
  Running s({}, cfg);
  using clock = std::chrono::steady_clock;
  struct Case {
    std::string sent, part;
  };
  const std::vector<Case> stalled = {
      {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"pro", "body"},
      {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{\"pro", "body"},
      {"GET /health HTTP/1.1\r\nHost: x\r\n", "headers"},
      {"GET /hea", "request line"},
  };
  for (const auto& c : stalled) {
    RawConn conn(s.port);
    const auto t0 = clock::now();
    conn.send(c.sent);
    const std::string r = conn.read_all(5);
    const double took = std::chrono::duration<double>(clock::now() - t0).count();
    INFO(c.sent << "\n -> " << r.substr(0, 400) << "\n after " << took << " s");
    CHECK(r.rfind("HTTP/1.1 408 Request Timeout\r\n", 0) == 0);  // was cpp-httplib's 400 bad_request
    check_refusal(r, 408, "request_timeout", "no byte of the request's " + c.part + " arrived for 0.4 s (the read timeout)");
    CHECK(took >= 0.35);
    CHECK(took < 3);
  }
  CHECK(s.metric("rtx_http_refused_total{reason=\"timeout\"}") == stalled.size());
  CHECK(s.metric("rtx_http_refused_total{reason=\"bad_request\"}") == 0);
  // The three refused after their request line was parsed are answers of the API too.
  CHECK(s.metric("rtx_requests_total{engine=\"main\",status=\"408\"}") == 3);
  // Bytes that keep coming, each within the read timeout, are not a stall: the request is served.
  RawConn slow(s.port);
  const std::string body = completion("Once", 1).dump();
  slow.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
            "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n");
  for (size_t i = 0; i < body.size(); i += body.size() / 4 + 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    slow.send(body.substr(i, body.size() / 4 + 1));
  }
  CHECK(slow.read_all(10).rfind("HTTP/1.1 200 ", 0) == 0);
  // The timeout must be a positive number of seconds, at most a day.
  for (const double bad : {0.0, -1.0, std::nan(""), 1e6}) {
    ServerConfig b;
    b.read_timeout_s = bad;
    Scheduler sched(shared_model(), {});
    CHECK_THROWS_WITH(Server(Engine{&shared_model(), &sched, "main"}, Engine{}, b),
                      Catch::Contains("read timeout must be > 0 and at most 86400 s"));
  }
}

TEST_CASE("serve: cpp-httplib's own 413 for a form-encoded body over 8 KiB counts under body_too_large", "[cpu][serve]") {
  ServerConfig cfg;
  cfg.max_body_bytes = 64 << 10;
  Running s({}, cfg);
  const auto refused = [&] { return s.metric("rtx_http_refused_total{reason=\"body_too_large\"}"); };
  REQUIRE(refused() == 0);
  RawConn conn(s.port);
  conn.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            "Content-Length: 9000\r\n\r\n" + std::string(9000, 'a'));
  const std::string r = conn.read_all(5);
  INFO(r.substr(0, 600));
  CHECK(r.rfind("HTTP/1.1 413 ", 0) == 0);
  CHECK(body_of(r)["error"]["code"] == "request_too_large");
  CHECK_THAT(body_of(r)["error"]["message"].get<std::string>(),
             Catch::Contains("9000 bytes sent as application/x-www-form-urlencoded, which the HTTP library caps at 8192"));
  CHECK(header_values(r, "Connection") == std::vector<std::string>{"close"});
  CHECK(refused() == 1);
  CHECK(s.metric("rtx_requests_total{engine=\"main\",status=\"413\"}") == 1);
  // At the cap it is read and parsed as usual (not JSON: 400 invalid_json), not refused.
  RawConn at(s.port);
  at.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
          "Connection: close\r\nContent-Length: 8192\r\n\r\n" + std::string(8192, 'a'));
  const std::string ra = at.read_all(5);
  CHECK(ra.rfind("HTTP/1.1 400 ", 0) == 0);
  CHECK(refused() == 1);
  // The server's own 413 for a declared length over --max-body-bytes stays out of this counter
  // (in rtx_requests_total only, as documented).
  RawConn big(s.port);
  big.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 70000\r\n\r\n");
  CHECK(big.read_all(5).rfind("HTTP/1.1 413 ", 0) == 0);
  CHECK(refused() == 1);
  CHECK(s.metric("rtx_requests_total{engine=\"main\",status=\"413\"}") == 2);
}

TEST_CASE("serve: a chunked form-encoded body over 8 KiB: the 413 names the bytes read, not 0", "[cpu][serve]") {
  ServerConfig cfg;
  cfg.max_body_bytes = 64 << 10;
  Running s({}, cfg);
  RawConn conn(s.port);
  // 9000 bytes in two chunks (0x1000 + 0x1328), no Content-Length.
  conn.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            "Transfer-Encoding: chunked\r\n\r\n1000\r\n" + std::string(4096, 'a') + "\r\n1328\r\n" +
            std::string(4904, 'a') + "\r\n0\r\n\r\n");
  const std::string r = conn.read_all(5);
  INFO(r.substr(0, 600));
  CHECK(r.rfind("HTTP/1.1 413 ", 0) == 0);
  const std::string msg = body_of(r)["error"]["message"].get<std::string>();
  CHECK_THAT(msg, Catch::Contains("Request body of 9000 bytes sent as application/x-www-form-urlencoded"));
  CHECK_THAT(msg, !Catch::Contains(" 0 bytes"));
  CHECK(s.metric("rtx_http_refused_total{reason=\"body_too_large\"}") == 1);
  // The guard's 413 for a chunked body over --max-body-bytes names the limit, no size.
  RawConn big(s.port);
  big.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           "Transfer-Encoding: chunked\r\n\r\n10001\r\n");
  const std::string rb = big.read_all(5);
  INFO(rb.substr(0, 600));
  CHECK(rb.rfind("HTTP/1.1 413 ", 0) == 0);
  CHECK_THAT(body_of(rb)["error"]["message"].get<std::string>(),
             Catch::Contains("the chunked body exceeds the limit of 65536 bytes") && !Catch::Contains(" 0 bytes"));
}

TEST_CASE("serve: a form-encoded body over 8 KiB to an unknown path is 404 (405 for a route without POST), not 413",
          "[cpu][serve]") {
  ServerConfig cfg;
  cfg.max_body_bytes = 64 << 10;
  Running s({}, cfg);
  const std::string form = "Content-Type: application/x-www-form-urlencoded\r\n";
  const std::string body(9000, 'a');
  const std::string chunked = "Transfer-Encoding: chunked\r\n\r\n2328\r\n" + body + "\r\n0\r\n\r\n";
  const std::string health = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  struct Case {
    std::string request, status, code;
  };
  const std::vector<Case> cases = {
      {"POST /nowhere HTTP/1.1\r\nHost: x\r\n" + form + "Content-Length: 9000\r\n\r\n" + body, "404", "not_found"},
      {"POST /v1/completion HTTP/1.1\r\nHost: x\r\n" + form + chunked, "404", "not_found"},
      {"PUT /nowhere HTTP/1.1\r\nHost: x\r\n" + form + "Content-Length: 9000\r\n\r\n" + body, "404", "not_found"},
      {"POST /health HTTP/1.1\r\nHost: x\r\n" + form + "Content-Length: 9000\r\n\r\n" + body, "405",
       "method_not_allowed"},
  };
  for (const auto& c : cases) {
    RawConn conn(s.port);
    conn.send(c.request + health);  // the body was read whole: the connection stays for the next request
    const std::string r = conn.read_all(5);
    INFO(c.request.substr(0, 120) << "\n -> " << r.substr(0, 600));
    CHECK(r.rfind("HTTP/1.1 " + c.status + " ", 0) == 0);
    const std::string first = r.substr(0, r.find("HTTP/1.1 200 "));
    CHECK(body_of(first)["error"]["code"] == c.code);
    CHECK(body_of(first)["error"]["type"] == "invalid_request_error");
    CHECK(header_values(first, "Connection").empty());
    CHECK_THAT(r, Catch::EndsWith("{\"status\":\"ok\"}"));
  }
  CHECK(s.metric("rtx_http_refused_total{reason=\"body_too_large\"}") == 0);
  CHECK(s.metric("rtx_requests_total{engine=\"main\",status=\"404\"}") == 3);
  CHECK(s.metric("rtx_requests_total{engine=\"main\",status=\"405\"}") == 1);
  // A route that takes the request keeps the library's 413.
  RawConn known(s.port);
  known.send("POST /tokenize HTTP/1.1\r\nHost: x\r\n" + form + "Content-Length: 9000\r\n\r\n" + body);
  const std::string rk = known.read_all(5);
  CHECK(rk.rfind("HTTP/1.1 413 ", 0) == 0);
  CHECK(s.metric("rtx_http_refused_total{reason=\"body_too_large\"}") == 1);
  CHECK(s.metric("rtx_requests_total{engine=\"main\",status=\"413\"}") == 1);  // the only 413
}
