// Fuzz target: rtx-serve's OpenAI request parsers (parse_completion_request,
// parse_chat_request, and /tokenize's and /detokenize's) on arbitrary bytes as the HTTP body, then chat rendering with every
// built-in template. Rejections must be ApiException (an rtx::Error) with a 4xx status.
#include <string>
#include <string_view>

#include "fuzz_util.hpp"
#include "rtx/core/error.hpp"
#include "rtx/serve/openai.hpp"
#include "rtx/serve/text.hpp"

namespace {

void check_common(const rtx::serve::Request& r) {
  RTX_FUZZ_CHECK(r.temperature >= 0 && r.temperature <= 2, "temperature out of [0, 2]");
  RTX_FUZZ_CHECK(r.top_p > 0 && r.top_p <= 1, "top_p out of (0, 1]");
  RTX_FUZZ_CHECK(r.top_k >= 0, "negative top_k");
  RTX_FUZZ_CHECK(r.n == 1, "n != 1");
  RTX_FUZZ_CHECK(!r.max_tokens || *r.max_tokens >= 1, "max_tokens < 1");
  RTX_FUZZ_CHECK(r.stop.size() <= rtx::serve::kMaxStops, "more than 4 stops");
  for (const auto& s : r.stop) RTX_FUZZ_CHECK(!s.empty(), "empty stop accepted");
  RTX_FUZZ_CHECK(r.top_logprobs >= 0 && r.top_logprobs <= 20, "top_logprobs out of 0..20");
  RTX_FUZZ_CHECK(!r.include_usage || r.stream, "include_usage without stream");
  RTX_FUZZ_CHECK(r.frequency_penalty >= -2 && r.frequency_penalty <= 2, "frequency_penalty out of [-2, 2]");
  RTX_FUZZ_CHECK(r.presence_penalty >= -2 && r.presence_penalty <= 2, "presence_penalty out of [-2, 2]");
  RTX_FUZZ_CHECK(r.repetition_penalty > 0 && r.repetition_penalty <= 10, "repetition_penalty out of (0, 10]");
  for (const auto& [id, b] : r.logit_bias) RTX_FUZZ_CHECK(id >= 0 && b >= -100 && b <= 100, "logit_bias entry");
  // What the server does with a parsed request's text fields must not throw either.
  (void)rtx::serve::dump_json(nlohmann::json{{"model", r.model}, {"prompt", r.prompt}});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rtx::serve;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  try {
    const Request r = parse_completion_request(body);
    RTX_FUZZ_CHECK(r.endpoint == Endpoint::Completions, "endpoint");
    for (int32_t t : r.prompt_tokens) RTX_FUZZ_CHECK(t >= 0, "negative prompt token");
    RTX_FUZZ_CHECK(r.prompt_is_tokens || r.prompt_tokens.empty(), "tokens without prompt_is_tokens");
    check_common(r);
  } catch (const ApiException& e) {
    RTX_FUZZ_CHECK(e.error().status >= 400 && e.error().status < 500, "non-4xx status for a bad body");
  } catch (const rtx::Error&) {
  }
  try {
    const Request r = parse_chat_request(body);
    RTX_FUZZ_CHECK(r.endpoint == Endpoint::ChatCompletions, "endpoint");
    RTX_FUZZ_CHECK(!r.messages.empty(), "chat without messages accepted");
    for (const auto& m : r.messages)
      RTX_FUZZ_CHECK(m.role == "system" || m.role == "user" || m.role == "assistant", "role " + m.role);
    check_common(r);
    for (const char* name : {"chatml", "llama2", "plain"}) {
      try {
        const std::string prompt = render_chat(chat_template(name), r.messages);
        RTX_FUZZ_CHECK(!prompt.empty(), "empty rendered prompt");
      } catch (const ApiException& e) {
        RTX_FUZZ_CHECK(e.error().status == 400, "render_chat status");
      }
    }
  } catch (const ApiException& e) {
    RTX_FUZZ_CHECK(e.error().status >= 400 && e.error().status < 500, "non-4xx status for a bad body");
  } catch (const rtx::Error&) {
  }
  try {
    const TokenizeRequest t = parse_tokenize_request(body);
    RTX_FUZZ_CHECK(t.chat != t.messages.empty(), "tokenize: messages iff chat");
  } catch (const ApiException& e) {
    RTX_FUZZ_CHECK(e.error().status >= 400 && e.error().status < 500, "non-4xx status for a bad body");
  } catch (const rtx::Error&) {
  }
  try {
    for (int32_t t : parse_detokenize_request(body).tokens) RTX_FUZZ_CHECK(t >= 0, "detokenize: negative id");
  } catch (const ApiException& e) {
    RTX_FUZZ_CHECK(e.error().status >= 400 && e.error().status < 500, "non-4xx status for a bad body");
  } catch (const rtx::Error&) {
  }
  return 0;
}
