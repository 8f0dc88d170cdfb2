// OpenAI protocol layer: every field's wrong type and out-of-range value is a 400 naming the
// field, malformed JSON names the byte offset, valid bodies parse to the expected struct, chat
// templates render exact strings, and response bodies equal hand-written OpenAI-shaped JSON.
#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/serve/openai.hpp"
#include "test_util.hpp"

using namespace rtx;
using namespace rtx::serve;
using nlohmann::json;

namespace {

// The ApiError a parser throws for `body` (fails the test when it does not throw one).
template <class Parsed>
ApiError error_of(Parsed (*parse)(std::string_view), const std::string& body) {
  try {
    parse(body);
  } catch (const ApiException& e) {
    return e.error();
  }
  FAIL("no ApiException for body: " << body);
  return {};
}

struct BadCase {
  std::string body;
  std::string param;  // the field the error must name
};

template <class Parsed>
void check_bad(Parsed (*parse)(std::string_view), const std::vector<BadCase>& cases) {
  for (const auto& c : cases) {
    INFO("body: " << c.body);
    const ApiError e = error_of(parse, c.body);
    CHECK(e.status == 400);
    CHECK(e.type == "invalid_request_error");
    CHECK(e.param == c.param);
    CHECK(e.message.find(c.param) != std::string::npos);
  }
}

const std::string P = R"("model":"m","prompt":"hi")";    // a valid completions base
const std::string M = R"("model":"m","messages":[{"role":"user","content":"hi"}])";  // chat base

}  // namespace

TEST_CASE("completions: wrong types are 400 naming the field", "[cpu]") {
  check_bad(parse_completion_request, {
      {R"({"model":5,"prompt":"hi"})", "model"},
      {R"({"model":"m","prompt":5})", "prompt"},
      {R"({"model":"m","prompt":true})", "prompt"},
      {R"({"model":"m","prompt":{}})", "prompt"},
      {R"({"model":"m"})", "prompt"},
      {R"({"model":"m","prompt":[1,"a"]})", "prompt[1]"},
      {R"({"model":"m","prompt":[1.5]})", "prompt[0]"},
      {R"({"model":"m","prompt":[[1,"x"]]})", "prompt[0][1]"},
      {"{" + P + R"(,"max_tokens":"5"})", "max_tokens"},
      {"{" + P + R"(,"max_tokens":1.5})", "max_tokens"},
      {"{" + P + R"(,"temperature":"1"})", "temperature"},
      {"{" + P + R"(,"temperature":true})", "temperature"},
      {"{" + P + R"(,"top_p":"x"})", "top_p"},
      {"{" + P + R"(,"top_k":1.5})", "top_k"},
      {"{" + P + R"(,"top_k":"3"})", "top_k"},
      {"{" + P + R"(,"seed":"1"})", "seed"},
      {"{" + P + R"(,"seed":1.5})", "seed"},
      {"{" + P + R"(,"stop":5})", "stop"},
      {"{" + P + R"(,"stop":{"a":1}})", "stop"},
      {"{" + P + R"(,"stop":["a",5]})", "stop[1]"},
      {"{" + P + R"(,"n":"1"})", "n"},
      {"{" + P + R"(,"stream":"true"})", "stream"},
      {"{" + P + R"(,"stream":1})", "stream"},
      {"{" + P + R"(,"stream":true,"stream_options":true})", "stream_options"},
      {"{" + P + R"(,"stream":true,"stream_options":{"include_usage":"yes"}})", "stream_options.include_usage"},
      {"{" + P + R"(,"logprobs":true})", "logprobs"},
      {"{" + P + R"(,"logprobs":"5"})", "logprobs"},
      {"{" + P + R"(,"echo":"no"})", "echo"},
      {"{" + P + R"(,"priority":1})", "priority"},
      {"{" + P + R"(,"ignore_eos":"yes"})", "ignore_eos"},
      {"{" + P + R"(,"frequency_penalty":"0.5"})", "frequency_penalty"},
      {"{" + P + R"(,"presence_penalty":"1"})", "presence_penalty"},
      {"{" + P + R"(,"repetition_penalty":true})", "repetition_penalty"},
      {"{" + P + R"(,"logit_bias":[5]})", "logit_bias"},
      {"{" + P + R"(,"logit_bias":{"1":"5"}})", R"(logit_bias["1"])"},
      {"{" + P + R"(,"logit_bias":{"1":[5]}})", R"(logit_bias["1"])"},
      {"{" + P + R"(,"response_format":{"type":"json_object"}})", "response_format.type"},
      {"{" + P + R"(,"tools":[{"type":"function"}]})", "tools"},
      {"{" + P + R"(,"cache_prompt":0})", "cache_prompt"},
      {"{" + P + R"(,"user":5})", "user"},
      {"{" + P + R"(,"best_of":"1"})", "best_of"},
  });
}

TEST_CASE("completions: out-of-range and unsupported values are 400 naming the field", "[cpu]") {
  check_bad(parse_completion_request, {
      {R"({"model":"","prompt":"hi"})", "model"},
      {R"({"model":"m","prompt":[]})", "prompt"},
      {R"({"model":"m","prompt":["a","b"]})", "prompt"},
      {R"({"model":"m","prompt":[[1],[2]]})", "prompt"},
      {R"({"model":"m","prompt":[[]]})", "prompt[0]"},
      {R"({"model":"m","prompt":[3,-1]})", "prompt[1]"},
      {R"({"model":"m","prompt":[2147483648]})", "prompt[0]"},
      {"{" + P + R"(,"max_tokens":0})", "max_tokens"},
      {"{" + P + R"(,"max_tokens":-3})", "max_tokens"},
      {"{" + P + R"(,"temperature":-0.1})", "temperature"},
      {"{" + P + R"(,"temperature":2.01})", "temperature"},
      {"{" + P + R"(,"top_p":0})", "top_p"},
      {"{" + P + R"(,"top_p":1.5})", "top_p"},
      {"{" + P + R"(,"top_k":-1})", "top_k"},
      {"{" + P + R"(,"seed":18446744073709551615})", "seed"},
      {"{" + P + R"(,"stop":""})", "stop"},
      {"{" + P + R"(,"stop":["a",""]})", "stop[1]"},
      {"{" + P + R"(,"stop":["a","b","c","d","e"]})", "stop"},
      {"{" + P + R"(,"n":2})", "n"},
      {"{" + P + R"(,"n":0})", "n"},
      {"{" + P + R"(,"stream_options":{"include_usage":true}})", "stream_options"},
      {"{" + P + R"(,"stream":false,"stream_options":{"include_usage":true}})", "stream_options"},
      {"{" + P + R"(,"logprobs":21})", "logprobs"},
      {"{" + P + R"(,"logprobs":-1})", "logprobs"},
      {"{" + P + R"(,"echo":true})", "echo"},
      {"{" + P + R"(,"priority":"urgent"})", "priority"},
      {"{" + P + R"(,"best_of":3})", "best_of"},
      {"{" + P + R"(,"suffix":"end"})", "suffix"},
      {"{" + P + R"(,"frequency_penalty":2.5})", "frequency_penalty"},
      {"{" + P + R"(,"presence_penalty":-2.01})", "presence_penalty"},
      {"{" + P + R"(,"repetition_penalty":0})", "repetition_penalty"},
      {"{" + P + R"(,"repetition_penalty":10.5})", "repetition_penalty"},
      {"{" + P + R"(,"logit_bias":{"1":100.5}})", R"(logit_bias["1"])"},
      {"{" + P + R"(,"logit_bias":{"1":-101}})", R"(logit_bias["1"])"},
      {"{" + P + R"(,"logit_bias":{"abc":1}})", "logit_bias"},
      {"{" + P + R"(,"logit_bias":{"-1":1}})", "logit_bias"},
      {"{" + P + R"(,"logit_bias":{"1.5":1}})", "logit_bias"},
      {"{" + P + R"(,"logit_bias":{"":1}})", "logit_bias"},
      {"{" + P + R"(,"logit_bias":{" 1":1}})", "logit_bias"},
      {"{" + P + R"(,"logit_bias":{"+1":1}})", "logit_bias"},
      {"{" + P + R"(,"logit_bias":{"2147483648":1}})", "logit_bias"},
      {"{" + P + R"(,"logit_bias":{"7":1,"07":2}})", "logit_bias"},
  });
  // Past int64: the range in full, also for a literal past uint64 (read as a double).
  for (const char* seed : {"9223372036854775808", "18446744073709551616"}) {
    const ApiError big = error_of(parse_completion_request, "{" + P + R"(,"seed":)" + seed + "}");
    CHECK(big.param == "seed");
    CHECK(big.message.find("[-9223372036854775808, 9223372036854775807]") != std::string::npos);
  }
  // A top_p that rounds to 0 in float32 (the sampler's type) is refused here, naming top_p.
  CHECK(error_of(parse_completion_request, "{" + P + R"(,"top_p":1e-320})").param == "top_p");
  CHECK(parse_completion_request("{" + P + R"(,"top_p":1e-30})").top_p == 1e-30);
  // The range is named in the message.
  const ApiError e = error_of(parse_completion_request, "{" + P + R"(,"temperature":3})");
  CHECK(e.message.find("[0, 2]") != std::string::npos);
  CHECK(e.code == "invalid_value");
  const ApiError t = error_of(parse_completion_request, "{" + P + R"(,"temperature":"hot"})");
  CHECK(t.message == "Invalid type for 'temperature': expected a number, but got a string instead.");
  CHECK(t.code == "invalid_type");
}

TEST_CASE("chat: wrong types and out-of-range values are 400 naming the field", "[cpu]") {
  check_bad(parse_chat_request, {
      {R"({"model":"m"})", "messages"},
      {R"({"model":"m","messages":"hi"})", "messages"},
      {R"({"model":"m","messages":[]})", "messages"},
      {R"({"model":"m","messages":[5]})", "messages[0]"},
      {R"({"model":"m","messages":[{"content":"x"}]})", "messages[0].role"},
      {R"({"model":"m","messages":[{"role":5,"content":"x"}]})", "messages[0].role"},
      {R"({"model":"m","messages":[{"role":"user","content":"a"},{"role":"bot","content":"x"}]})", "messages[1].role"},
      {R"({"model":"m","messages":[{"role":"user"}]})", "messages[0].content"},
      {R"({"model":"m","messages":[{"role":"user","content":5}]})", "messages[0].content"},
      {R"({"model":"m","messages":[{"role":"user","content":null}]})", "messages[0].content"},
      {R"({"model":"m","messages":[{"role":"user","content":[5]}]})", "messages[0].content[0]"},
      {R"({"model":"m","messages":[{"role":"user","content":[{"text":"a"}]}]})", "messages[0].content[0].type"},
      {R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})",
       "messages[0].content[0].type"},
      {R"({"model":"m","messages":[{"role":"user","content":[{"type":"text"}]}]})", "messages[0].content[0].text"},
      {R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":5}]}]})",
       "messages[0].content[0].text"},
      {"{" + M + R"(,"max_completion_tokens":0})", "max_completion_tokens"},
      {"{" + M + R"(,"max_completion_tokens":"5"})", "max_completion_tokens"},
      {"{" + M + R"(,"max_tokens":0})", "max_tokens"},
      {"{" + M + R"(,"logprobs":5})", "logprobs"},
      {"{" + M + R"(,"logprobs":true,"top_logprobs":21})", "top_logprobs"},
      {"{" + M + R"(,"logprobs":true,"top_logprobs":"2"})", "top_logprobs"},
      {"{" + M + R"(,"top_logprobs":3})", "top_logprobs"},
      {"{" + M + R"(,"temperature":2.5})", "temperature"},
      {"{" + M + R"(,"top_p":-1})", "top_p"},
      {"{" + M + R"(,"n":3})", "n"},
      {"{" + M + R"(,"stop":[1]})", "stop[0]"},
      {"{" + M + R"(,"stream":"yes"})", "stream"},
      {"{" + M + R"(,"priority":"low"})", "priority"},
      {"{" + M + R"(,"functions":[{"name":"f"}]})", "functions"},
      {"{" + M + R"(,"functions":{}})", "functions"},
      {"{" + M + R"(,"tool_choice":"required"})", "tool_choice"},
      {"{" + M + R"(,"tool_choice":{"type":"function"}})", "tool_choice"},
      {"{" + M + R"(,"function_call":"auto2"})", "function_call"},
      {"{" + M + R"(,"modalities":["text","audio"]})", "modalities"},
      {"{" + M + R"(,"modalities":"text"})", "modalities"},
      {"{" + M + R"(,"reasoning_effort":"low"})", "reasoning_effort"},
      {"{" + M + R"(,"audio":{"voice":"x"}})", "audio"},
      {"{" + M + R"(,"prediction":{"type":"content"}})", "prediction"},
      {R"({"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1"}]}]})", "messages[0].tool_calls"},
      {R"({"messages":[{"role":"assistant","content":"","function_call":{"name":"f"}}]})", "messages[0].function_call"},
  });
  // Their neutral values pass.
  const Request ok = parse_chat_request("{" + M + R"(,"functions":[],"tool_choice":"none","function_call":"auto",
      "modalities":["text"],"parallel_tool_calls":false,"reasoning_effort":null})");
  CHECK(ok.messages.size() == 1);
  CHECK(parse_chat_request(R"({"messages":[{"role":"assistant","content":"x","tool_calls":[]}]})").messages.size() == 1);
}

TEST_CASE("duplicate keys are refused at any depth, naming the key", "[cpu]") {
  const ApiError top = error_of(parse_completion_request, R"({"prompt":"a","max_tokens":"x","max_tokens":2})");
  CHECK(top.status == 400);
  CHECK(top.code == "invalid_json");
  CHECK(top.param == "max_tokens");
  CHECK(top.message.find("\"max_tokens\" appears twice") != std::string::npos);
  const ApiError nested = error_of(parse_chat_request,
                                   R"({"messages":[{"role":"user","content":"a","role":"system"}]})");
  CHECK(nested.code == "invalid_json");
  CHECK(nested.message.find("\"role\" appears twice in one object") != std::string::npos);
  // The same key in sibling objects, or in an object and its child, is fine.
  CHECK(parse_chat_request(R"({"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}],
      "stream_options":null,"logit_bias":{"1":1}})").messages.size() == 2);
  CHECK(parse_completion_request(R"({"prompt":"a","response_format":{"type":"text","x":{"type":1}}})").prompt == "a");
}

TEST_CASE("tokenize and detokenize bodies", "[cpu]") {
  const TokenizeRequest t = parse_tokenize_request(R"({"model":"m","prompt":"hi","add_special_tokens":false})");
  CHECK(t.model == "m");
  CHECK_FALSE(t.chat);
  CHECK(t.prompt == "hi");
  CHECK_FALSE(t.add_special_tokens);
  const TokenizeRequest c = parse_tokenize_request(R"({"messages":[{"role":"developer","content":[{"type":"text","text":"x"}]}]})");
  CHECK(c.chat);
  REQUIRE(c.messages.size() == 1);
  CHECK(c.messages[0].role == "system");
  CHECK(c.add_special_tokens);
  check_bad(parse_tokenize_request, {
      {R"({})", "prompt"},
      {R"({"prompt":["a"]})", "prompt"},
      {R"({"prompt":"a","messages":[{"role":"user","content":"b"}]})", "prompt"},
      {R"({"messages":[]})", "messages"},
      {R"({"prompt":"a","model":""})", "model"},
      {R"({"prompt":"a","add_special_tokens":1})", "add_special_tokens"},
  });
  CHECK(parse_detokenize_request(R"({"tokens":[0,5,2147483647]})").tokens == std::vector<int32_t>{0, 5, 2147483647});
  CHECK(parse_detokenize_request(R"({"tokens":[]})").tokens.empty());
  check_bad(parse_detokenize_request, {
      {R"({})", "tokens"},
      {R"({"tokens":5})", "tokens"},
      {R"({"tokens":[1,-2]})", "tokens[1]"},
      {R"({"tokens":[1,2.5]})", "tokens[1]"},
      {R"({"tokens":[2147483648]})", "tokens[0]"},
      {R"({"tokens":[1],"model":5})", "model"},
  });
}

TEST_CASE("malformed JSON names the byte offset", "[cpu]") {
  for (auto [body, byte] : std::vector<std::pair<std::string, int>>{
           {R"({"a":1,})", 7}, {R"({"model": )", 10}, {"", 0}, {R"({"model":"x")", 12}}) {
    INFO(body);
    const ApiError e = error_of(parse_completion_request, body);
    CHECK(e.status == 400);
    CHECK(e.code == "invalid_json");
    CHECK(e.message.find("at byte offset " + std::to_string(byte) + " ") != std::string::npos);
  }
  CHECK(error_of(parse_chat_request, "{\"model\":\"\xff\"}").code == "invalid_json");  // invalid UTF-8
  const ApiError arr = error_of(parse_chat_request, "[1,2]");
  CHECK(arr.status == 400);
  CHECK(arr.message.find("JSON object") != std::string::npos);
}

TEST_CASE("a valid completions request parses to the expected struct", "[cpu]") {
  const Request r = parse_completion_request(R"({
      "model": "stories260k", "prompt": "Once upon a time", "max_tokens": 7, "temperature": 0,
      "top_p": 0.9, "top_k": 40, "seed": -42, "stop": ["\n\n", "The end"], "n": 1,
      "stream": true, "stream_options": {"include_usage": true}, "logprobs": 3, "echo": false,
      "priority": "batch", "user": "u1", "best_of": 1, "frequency_penalty": 0, "unknown_field": {"x": 1},
      "ignore_eos": true, "cache_prompt": false})");
  CHECK(r.endpoint == Endpoint::Completions);
  CHECK(r.model == "stories260k");
  CHECK(r.prompt == "Once upon a time");
  CHECK_FALSE(r.prompt_is_tokens);
  REQUIRE(r.max_tokens);
  CHECK(*r.max_tokens == 7);
  CHECK(r.temperature == 0.0);
  CHECK(r.top_p == 0.9);
  CHECK(r.top_k == 40);
  REQUIRE(r.seed);
  CHECK(*r.seed == -42);
  CHECK(r.stop == std::vector<std::string>{"\n\n", "The end"});
  CHECK(r.stream);
  CHECK(r.include_usage);
  CHECK(r.logprobs);
  CHECK(r.top_logprobs == 3);
  CHECK(r.priority == Priority::Batch);
  CHECK(r.ignore_eos);
  CHECK_FALSE(r.cache_prompt);
  CHECK(r.user == "u1");
  CHECK(r.frequency_penalty == 0.0);
  CHECK(r.presence_penalty == 0.0);
  CHECK(r.repetition_penalty == 1.0);
  CHECK(r.logit_bias.empty());

  // Penalties and logit_bias (OpenAI's ranges; ids as decimal strings, null biases skipped).
  const Request pen = parse_completion_request(R"({"prompt":"x","frequency_penalty":-2,"presence_penalty":1.5,
      "repetition_penalty":1.3,"logit_bias":{"50256":-100,"13":100,"0":0.5,"99":null}})");
  CHECK(pen.frequency_penalty == -2.0);
  CHECK(pen.presence_penalty == 1.5);
  CHECK(pen.repetition_penalty == 1.3);
  CHECK(pen.logit_bias == std::vector<std::pair<int32_t, double>>{{0, 0.5}, {13, 100.0}, {50256, -100.0}});
  const ApiError dup = error_of(parse_completion_request, "{" + P + R"(,"logit_bias":{"7":1,"007":2}})");
  CHECK(dup.message == "Invalid value for 'logit_bias': token id 7 appears twice.");
  const ApiError key = error_of(parse_completion_request, "{" + P + R"(,"logit_bias":{"x1":2}})");
  CHECK(key.message == R"(Invalid value for 'logit_bias': keys must be token ids (decimal integers >= 0), but got "x1".)");
  const ApiError rng = error_of(parse_completion_request, "{" + P + R"(,"logit_bias":{"5":200}})");
  CHECK(rng.message.find("[-100, 100]") != std::string::npos);

  // Defaults, nulls as absent, and the prompt forms.
  const Request d = parse_completion_request(
      R"({"model":"m","prompt":"x","max_tokens":null,"stop":null,"logprobs":null,"ignore_eos":null,"cache_prompt":null})");
  CHECK_FALSE(d.ignore_eos);
  CHECK(d.cache_prompt);
  CHECK_FALSE(d.max_tokens);
  CHECK(d.temperature == 1.0);
  CHECK(d.top_p == 1.0);
  CHECK(d.top_k == 0);
  CHECK_FALSE(d.seed);
  CHECK(d.stop.empty());
  CHECK_FALSE(d.stream);
  CHECK_FALSE(d.logprobs);
  CHECK(d.priority == Priority::Interactive);
  CHECK(parse_completion_request(R"({"model":"m","prompt":"x","logprobs":0})").logprobs);
  CHECK(parse_completion_request(R"({"model":"m","prompt":"x","stop":"END"})").stop == std::vector<std::string>{"END"});
  CHECK(parse_completion_request(R"({"model":"m","prompt":["only"]})").prompt == "only");
  const Request t = parse_completion_request(R"({"model":"m","prompt":[1, 7, 127, 0]})");
  CHECK(t.prompt_is_tokens);
  CHECK(t.prompt_tokens == std::vector<int32_t>{1, 7, 127, 0});
  CHECK(parse_completion_request(R"({"model":"m","prompt":[[5]]})").prompt_tokens == std::vector<int32_t>{5});
  CHECK(parse_completion_request(R"({"model":"m","prompt":"","temperature":2,"top_p":1})").prompt.empty());
}

TEST_CASE("a valid chat request parses to the expected struct", "[cpu]") {
  const Request r = parse_chat_request(R"({
      "model": "m", "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}], "name": "bob"},
        {"role": "assistant", "content": null},
        {"role": "user", "content": "Again"}],
      "max_tokens": 100, "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 2, "seed": 7})");
  CHECK(r.endpoint == Endpoint::ChatCompletions);
  REQUIRE(r.messages.size() == 4);
  CHECK(r.messages[0].role == "system");
  CHECK(r.messages[0].content == "Be brief.");
  CHECK(r.messages[1].content == "Hi\nthere");
  CHECK(r.messages[2].role == "assistant");
  CHECK(r.messages[2].content.empty());
  CHECK(r.messages[3].content == "Again");
  CHECK(*r.max_tokens == 9);  // max_completion_tokens wins
  CHECK(r.logprobs);
  CHECK(r.top_logprobs == 2);
  CHECK(*r.seed == 7);
  CHECK(*parse_chat_request("{" + M + R"(,"max_tokens":5})").max_tokens == 5);
  // "developer" is OpenAI's newer name for system instructions: rendered as system.
  const Request dev = parse_chat_request(R"({"model":"m","messages":[{"role":"developer","content":"Be brief."},{"role":"user","content":"Hi"}]})");
  CHECK(dev.messages[0].role == "system");
  CHECK_FALSE(parse_chat_request("{" + M + R"(,"logprobs":false,"top_logprobs":0})").logprobs);
}

TEST_CASE("error bodies and model/context helpers", "[cpu]") {
  const ApiError e = invalid_request("Invalid value for 'n'.", "n", "invalid_value");
  CHECK(error_body(e) == json::parse(R"({"error":{"message":"Invalid value for 'n'.",
      "type":"invalid_request_error","param":"n","code":"invalid_value"}})"));
  CHECK(error_body(invalid_request("x")) ==
        json::parse(R"({"error":{"message":"x","type":"invalid_request_error","param":null,"code":null}})"));

  CHECK_FALSE(check_model("stories", {"gpt2", "stories"}));
  const auto nf = check_model("gpt-9", {"stories"});
  REQUIRE(nf);
  CHECK(nf->status == 404);
  CHECK(error_body(*nf) == json::parse(R"({"error":{"message":"The model 'gpt-9' is not served here; this server serves 'stories'.",
      "type":"invalid_request_error","param":null,"code":"model_not_found"}})"));
  // Several served ids are all named; none served says so; the empty name is shown as such.
  CHECK(check_model("x", {"a", "b"})->message == "The model 'x' is not served here; this server serves 'a', 'b'.");
  CHECK(check_model("x", {})->message == "The model 'x' is not served here; this server serves no model.");
  CHECK(check_model("", {"a"})->message == "The model '' is not served here; this server serves 'a'.");
  CHECK(check_model("", {"a"})->status == 404);
  CHECK_FALSE(check_model("a", {"a"}));
  CHECK(check_model("A", {"a"}));  // ids compare exactly

  CHECK_FALSE(check_context(100, 156, 256, "prompt"));
  CHECK_FALSE(check_context(1, 1, 2, "prompt"));
  const auto ctx = check_context(200, 57, 256, "messages");
  REQUIRE(ctx);
  CHECK(ctx->status == 400);
  CHECK(ctx->code == "context_length_exceeded");
  CHECK(ctx->param == "max_tokens");  // the messages fit; the completion asked for does not
  CHECK(ctx->message == "This model's maximum context length is 256 tokens. However, you requested 257 tokens "
                        "(200 in the messages, 57 in the completion). Please reduce the length of the messages "
                        "or completion.");
  const auto full = check_context(256, 0, 256, "prompt");  // no room left for a single token
  REQUIRE(full);
  CHECK(full->param == "prompt");
  const auto over = check_context(300, 16, 256, "messages");  // the messages alone overflow
  REQUIRE(over);
  CHECK(over->param == "messages");

  CHECK(unauthorized().status == 401);
  CHECK(body_too_large(2000000, 1048576).status == 413);
  CHECK(body_too_large(2000000, 1048576).message == "Request body too large: 2000000 bytes (limit 1048576 bytes).");
  // Size unknown (chunked): the limit alone, never "0 bytes".
  CHECK(body_too_large(1048576).status == 413);
  CHECK(body_too_large(1048576).code == "request_too_large");
  CHECK(body_too_large(1048576).message == "Request body too large: over the limit of 1048576 bytes.");
  CHECK(overloaded("queue full (64 waiting)").status == 429);
  CHECK(server_error("boom").status == 500);

  // ApiException is an rtx::Error of category Input with the param as `where`.
  try {
    parse_completion_request(R"({"model":"m","prompt":"x","n":2})");
    FAIL("no throw");
  } catch (const Error& err) {
    CHECK(err.category() == ErrorCategory::Input);
    CHECK(err.where() == "n");
  }
}

TEST_CASE("chat templates render exact strings", "[cpu]") {
  const std::vector<ChatMessage> conv = {
      {"system", "You are terse."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}};
  CHECK(render_chat(chat_template("chatml"), conv) ==
        "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
  CHECK(render_chat(chat_template("plain"), conv) ==
        "System: You are terse.\nUser: Hi\nAssistant: Hello.\nUser: Bye\nAssistant:");
  CHECK(render_chat(chat_template(kDefaultChatTemplate), {{"user", "Hi"}}) == "User: Hi\nAssistant:");
  CHECK(render_chat(chat_template("llama2"), conv) ==
        "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] Bye [/INST]");
  CHECK(render_chat(chat_template("llama2"), {{"user", "  Hi  "}}) == "[INST] Hi [/INST]");

  // llama2's ordering rule.
  const auto llama_err = [](const std::vector<ChatMessage>& m) {
    try {
      render_chat(chat_template("llama2"), m);
    } catch (const ApiException& e) {
      return e.error().param;
    }
    return std::string("no error");
  };
  CHECK(llama_err({{"user", "a"}, {"user", "b"}}) == "messages[1].role");
  CHECK(llama_err({{"assistant", "a"}}) == "messages[0].role");
  CHECK(llama_err({{"user", "a"}, {"assistant", "b"}, {"system", "c"}}) == "messages[2].role");
  CHECK(llama_err({{"system", "a"}}) == "messages");
  CHECK_THROWS_AS(chat_template("vicuna"), Error);
}

TEST_CASE("custom chat template from a JSON file", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  const std::string good = dir + "/zephyr.json";
  std::ofstream(good) << R"({"bos": "<s>", "system": {"prefix": "<|system|>\n", "suffix": "</s>\n"},
      "user": {"prefix": "<|user|>\n", "suffix": "</s>\n"}, "assistant": {"prefix": "<|assistant|>\n", "suffix": "</s>\n"},
      "generation_prompt": "<|assistant|>\n"})";
  const ChatTemplate t = load_chat_template(good);
  CHECK(render_chat(t, {{"system", "S"}, {"user", "U"}}) == "<s><|system|>\nS</s>\n<|user|>\nU</s>\n<|assistant|>\n");

  const ChatTemplate minimal = chat_template_from_json(
      json::parse(R"({"system": {}, "user": {"prefix": "> "}, "assistant": {"suffix": "."}})"), "inline");
  CHECK(render_chat(minimal, {{"user", "a"}, {"assistant", "b"}}) == "> ab.");

  const auto where_of = [&](const std::string& text) {
    const std::string path = dir + "/bad.json";
    std::ofstream(path) << text;
    try {
      load_chat_template(path);
    } catch (const Error& e) {
      CHECK(e.category() == ErrorCategory::Input);
      return std::string(e.what()) + " @ " + e.where();
    }
    return std::string("no error");
  };
  CHECK(where_of(R"({"system":{},"user":{}})").find("'assistant'") != std::string::npos);
  CHECK(where_of(R"({"system":{},"user":{"prefix":5},"assistant":{}})").find("user.prefix") != std::string::npos);
  CHECK(where_of(R"({"bos":1,"system":{},"user":{},"assistant":{}})").find("'bos'") != std::string::npos);
  CHECK(where_of(R"({"system":)").find("byte") != std::string::npos);
  CHECK(where_of("[]").find("bad.json") != std::string::npos);
  CHECK_THROWS_AS(load_chat_template(dir + "/missing.json"), Error);
}

TEST_CASE("completion response bodies", "[cpu]") {
  const ResponseMeta m{"cmpl-abc", 1700000000, "stories260k", false};
  CHECK(json(completion_response(m, "Once", "length", Usage{5, 2})) == json::parse(R"({
      "id":"cmpl-abc","object":"text_completion","created":1700000000,"model":"stories260k",
      "choices":[{"text":"Once","index":0,"logprobs":null,"finish_reason":"length"}],
      "usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":0}}})"));

  const std::vector<TokenLogprob> lp = {{"On", -0.5, {{"On", -0.5}, {"In", -1.25}}, 0},
                                        {"\xE2\x82", -2.0, {{"\xE2\x82", -2.0}}, 2}};
  CHECK(json(completion_response(m, "On", "stop", Usage{3, 2, 2}, &lp)) == json::parse(R"({
      "id":"cmpl-abc","object":"text_completion","created":1700000000,"model":"stories260k",
      "choices":[{"text":"On","index":0,"finish_reason":"stop","logprobs":{
        "tokens":["On","bytes:\\xe2\\x82"],"token_logprobs":[-0.5,-2.0],
        "top_logprobs":[{"On":-0.5,"In":-1.25},{"bytes:\\xe2\\x82":-2.0}],"text_offset":[0,2]}}],
      "usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":2}}})"));
  CHECK(json(completion_logprobs(lp, 10)["text_offset"]) == json::parse("[10,12]"));

  // Each top_logprobs object goes out most likely first (TokenLogprob::top's order), not in
  // key order, and the body's fields in OpenAI's order; a repeated display text keeps the first.
  const std::vector<TokenLogprob> ranked = {
      {"the", -0.25, {{"the", -0.25}, {"a", -1.5}, {"\xFF", -3.0}, {"\xFF", -4.0}, {"An", -5.0}}, 0}};
  const std::string body = dump_response(completion_response(m, "the", "length", Usage{1, 1}, &ranked));
  const size_t top = body.find("\"top_logprobs\":[{");
  REQUIRE(top != std::string::npos);
  const std::string want_top = R"("top_logprobs":[{"the":-0.25,"a":-1.5,"bytes:\\xff":-3.0,"An":-5.0}],"text_offset")";
  CHECK(body.substr(top, want_top.size()) == want_top);
  const std::string want_head =
      R"({"id":"cmpl-abc","object":"text_completion","created":1700000000,"model":"stories260k","choices":[)";
  CHECK(body.substr(0, want_head.size()) == want_head);
  CHECK(body.find(R"(,"usage":{"prompt_tokens":1,)") != std::string::npos);
}

TEST_CASE("chat response bodies", "[cpu]") {
  const ResponseMeta m{"chatcmpl-1", 42, "m", false};
  CHECK(json(chat_response(m, "Hi!", "stop", Usage{10, 3})) == json::parse(R"({
      "id":"chatcmpl-1","object":"chat.completion","created":42,"model":"m",
      "choices":[{"index":0,"message":{"role":"assistant","content":"Hi!"},"logprobs":null,"finish_reason":"stop"}],
      "usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13,"prompt_tokens_details":{"cached_tokens":0}}})"));
  const std::vector<TokenLogprob> lp = {{"Hi", -0.25, {{"Hi", -0.25}, {"\xC3", -3.0}}, 0}};
  CHECK(json(chat_response(m, "Hi", "length", Usage{1, 1}, &lp)["choices"][0]["logprobs"]) == json::parse(R"({
      "content":[{"token":"Hi","logprob":-0.25,"bytes":[72,105],"top_logprobs":[
        {"token":"Hi","logprob":-0.25,"bytes":[72,105]},{"token":"bytes:\\xc3","logprob":-3.0,"bytes":[195]}]}]})"));
}

TEST_CASE("streaming chunks, usage chunk and SSE framing", "[cpu]") {
  ResponseMeta m{"chatcmpl-7", 99, "m", false};
  CHECK(json(chat_chunk_role(m)) == json::parse(R"({"id":"chatcmpl-7","object":"chat.completion.chunk","created":99,
      "model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]})"));
  CHECK(json(chat_chunk_content(m, "Once")) == json::parse(R"({"id":"chatcmpl-7","object":"chat.completion.chunk",
      "created":99,"model":"m","choices":[{"index":0,"delta":{"content":"Once"},"logprobs":null,"finish_reason":null}]})"));
  CHECK(json(chat_chunk_finish(m, "stop")) == json::parse(R"({"id":"chatcmpl-7","object":"chat.completion.chunk",
      "created":99,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]})"));
  m.include_usage = true;
  CHECK(chat_chunk_content(m, "x")["usage"].is_null());
  CHECK(chat_chunk_content(m, "x").contains("usage"));
  CHECK(json(usage_chunk(m, "chat.completion.chunk", Usage{4, 6})) == json::parse(R"({"id":"chatcmpl-7",
      "object":"chat.completion.chunk","created":99,"model":"m","choices":[],
      "usage":{"prompt_tokens":4,"completion_tokens":6,"total_tokens":10,"prompt_tokens_details":{"cached_tokens":0}}})"));
  CHECK_THROWS_AS(usage_chunk(m, "chat.completion", Usage{}), Error);

  const ResponseMeta c{"cmpl-9", 5, "m", false};
  CHECK(json(completion_chunk(c, " upon")) == json::parse(R"({"id":"cmpl-9","object":"text_completion","created":5,
      "model":"m","choices":[{"text":" upon","index":0,"logprobs":null,"finish_reason":null}]})"));
  CHECK(completion_chunk(c, "", "length")["choices"][0]["finish_reason"] == "length");
  CHECK_FALSE(completion_chunk(c, "x").contains("usage"));
  CHECK(usage_chunk(c, "text_completion", Usage{1, 2})["object"] == "text_completion");

  CHECK(sse_event(json{{"a", 1}}) == "data: {\"a\":1}\n\n");
  CHECK(sse_done() == "data: [DONE]\n\n");
  CHECK(sse_event(json{{"t", std::string("a\xFF")}}) == "data: {\"t\":\"a\xEF\xBF\xBD\"}\n\n");
  CHECK(token_display("ok \xC3\xA9") == "ok \xC3\xA9");
  CHECK(token_display("\xF0\x9F") == "bytes:\\xf0\\x9f");
}

TEST_CASE("openai: a request without model parses with an empty model (the server's default)", "[cpu][serve]") {
  CHECK(rtx::serve::parse_completion_request(R"({"prompt":"hi"})").model.empty());
  CHECK(rtx::serve::parse_completion_request(R"({"model":null,"prompt":"hi"})").model.empty());
  CHECK(rtx::serve::parse_chat_request(R"({"messages":[{"role":"user","content":"hi"}]})").model.empty());
  CHECK(rtx::serve::parse_completion_request(R"({"model":"m","prompt":"hi"})").model == "m");
}
