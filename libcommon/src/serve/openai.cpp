// rtx-serve's OpenAI protocol layer: request validation, chat templates, response bodies, SSE.
#include "rtx/serve/openai.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_set>
#include <vector>

#include "rtx/serve/text.hpp"

namespace rtx::serve {

using nlohmann::json;

// ---- errors -------------------------------------------------------------------------------------

ApiException::ApiException(ApiError e)
    : Error(ErrorCategory::Input, e.message, e.param), error_(std::move(e)) {}

json error_body(const ApiError& e) {
  json err = json::object();
  err["message"] = e.message;
  err["type"] = e.type;
  err["param"] = e.param.empty() ? json(nullptr) : json(e.param);
  err["code"] = e.code.empty() ? json(nullptr) : json(e.code);
  return json{{"error", err}};
}

ApiError invalid_request(std::string message, std::string param, std::string code) {
  ApiError e;
  e.status = 400;
  e.type = "invalid_request_error";
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

std::optional<ApiError> check_model(const std::string& name, const std::vector<std::string>& served) {
  for (const auto& s : served)
    if (s == name) return std::nullopt;
  std::string list;
  for (const auto& s : served) list += (list.empty() ? "'" : ", '") + s + "'";
  ApiError e;
  e.status = 404;
  e.message = "The model '" + name + "' is not served here; this server serves " +
              (list.empty() ? std::string("no model") : list) + ".";
  e.code = "model_not_found";
  return e;
}

std::optional<ApiError> check_context(int64_t prompt_tokens, int64_t max_tokens, int64_t context,
                                      const std::string& param) {
  if (prompt_tokens < context && prompt_tokens + max_tokens <= context) return std::nullopt;
  const std::string where = param == "messages" ? "messages" : "prompt";
  return invalid_request("This model's maximum context length is " + std::to_string(context) +
                             " tokens. However, you requested " + std::to_string(prompt_tokens + max_tokens) +
                             " tokens (" + std::to_string(prompt_tokens) + " in the " + where + ", " +
                             std::to_string(max_tokens) + " in the completion). Please reduce the length of the " +
                             where + " or completion.",
                         prompt_tokens >= context ? param : "max_tokens", "context_length_exceeded");
}

ApiError unauthorized() {
  ApiError e;
  e.status = 401;
  e.message = "Incorrect API key provided. Pass it as 'Authorization: Bearer <key>'.";
  e.code = "invalid_api_key";
  return e;
}

ApiError body_too_large(size_t bytes, size_t limit) {
  ApiError e;
  e.status = 413;
  e.message = "Request body too large: " + std::to_string(bytes) + " bytes (limit " + std::to_string(limit) +
              " bytes).";
  e.code = "request_too_large";
  return e;
}

ApiError body_too_large(size_t limit) {
  ApiError e = body_too_large(0, limit);
  e.message = "Request body too large: over the limit of " + std::to_string(limit) + " bytes.";
  return e;
}

ApiError overloaded(std::string message) {
  ApiError e;
  e.status = 429;
  e.type = "server_overloaded";
  e.message = "The server is overloaded: " + message;
  e.code = "queue_full";
  return e;
}

ApiError server_error(std::string message) {
  ApiError e;
  e.status = 500;
  e.type = "server_error";
  e.message = std::move(message);
  return e;
}

const char* priority_name(Priority p) noexcept { return p == Priority::Batch ? "batch" : "interactive"; }

// ---- request validation -------------------------------------------------------------------------

namespace {

[[noreturn]] void fail(std::string message, std::string param, std::string code = "invalid_value") {
  throw ApiException(invalid_request(std::move(message), std::move(param), std::move(code)));
}

const char* kind_of(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a decimal";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    default: return "an unsupported value";
  }
}

[[noreturn]] void wrong_type(const std::string& param, const std::string& expected, const json& v) {
  fail("Invalid type for '" + param + "': expected " + expected + ", but got " + kind_of(v) + " instead.", param,
       "invalid_type");
}

// The field, or nullptr when absent or null (OpenAI treats null as "not given").
const json* opt(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string get_string(const json& v, const std::string& param) {
  if (!v.is_string()) wrong_type(param, "a string", v);
  return v.get<std::string>();
}

bool get_bool(const json& v, const std::string& param) {
  if (!v.is_boolean()) wrong_type(param, "a boolean", v);
  return v.get<bool>();
}

// An integer in [lo, hi]; decimals (even 5.0) are a type error, as in OpenAI's API.
int64_t get_int(const json& v, const std::string& param, int64_t lo, int64_t hi) {
  const auto range = [&] { return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]"; };
  // An integer literal past uint64 (2^64) reaches us as a double: out of range, not a decimal.
  if (v.is_number_float() && std::isfinite(v.get<double>()) && std::fabs(v.get<double>()) >= 0x1p63 &&
      std::nearbyint(v.get<double>()) == v.get<double>())
    fail("Invalid value for '" + param + "': expected an integer in " + range() + ", but got " + v.dump() + ".",
         param);
  if (!v.is_number_integer()) wrong_type(param, "an integer", v);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail("Invalid value for '" + param + "': expected an integer in " + range() + ", but got " + v.dump() + ".",
         param);
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    fail("Invalid value for '" + param + "': expected an integer in " + range() + ", but got " + v.dump() + ".",
         param);
  return x;
}

// A number in [lo, hi], or (lo, hi] when lo_open.
double get_number(const json& v, const std::string& param, double lo, double hi, bool lo_open = false) {
  if (!v.is_number()) wrong_type(param, "a number", v);
  const double x = v.get<double>();
  std::ostringstream lo_s, hi_s;
  lo_s << lo;
  hi_s << hi;
  if ((lo_open ? !(x > lo) : !(x >= lo)) || !(x <= hi))
    fail("Invalid value for '" + param + "': expected a number in " + (lo_open ? "(" : "[") + lo_s.str() + ", " +
             hi_s.str() + "], but got " + v.dump() + ".",
         param);
  return x;
}

/// Thrown by parse_body's callback at a key its object already has.
struct DuplicateKey {
  std::string key;
  int depth;
};

json parse_body(std::string_view body) {
  json j;
  // RFC 8259 leaves duplicate names' meaning open (parsers keep the first, the last, or both),
  // so a body a proxy read one way could be served another: refuse them. One key set per
  // object being parsed.
  std::vector<std::unordered_set<std::string>> keys;
  const json::parser_callback_t unique = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) keys.emplace_back();
    else if (ev == json::parse_event_t::object_end) keys.pop_back();
    else if (ev == json::parse_event_t::key && !keys.back().insert(parsed.get<std::string>()).second)
      throw DuplicateKey{parsed.get<std::string>(), depth};
    return true;
  };
  try {
    j = json::parse(body.begin(), body.end(), unique);
  } catch (const DuplicateKey& d) {
    throw ApiException(invalid_request("We could not parse the JSON body of your request: the key " + json(d.key).dump() +
                                           (d.depth <= 1 ? std::string(" appears twice.")
                                                         : " appears twice in one object (nesting depth " +
                                                               std::to_string(d.depth) + ")."),
                                       d.depth <= 1 ? d.key : "", "invalid_json"));
  } catch (const json::out_of_range& e) {  // a number past double's range (1e400): bad input too
    throw ApiException(invalid_request(std::string("We could not parse the JSON body of your request: a number is out of range (") +
                                           e.what() + ")", "", "invalid_json"));
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    const auto colon = what.find(": ");
    if (colon != std::string::npos && what.rfind("[json.exception", 0) == 0) what = what.substr(colon + 2);
    throw ApiException(invalid_request("We could not parse the JSON body of your request: malformed JSON at byte offset " +
                                           std::to_string(e.byte > 0 ? e.byte - 1 : 0) + " (" + what +
                                           "). The body must be one JSON object.",
                                       "", "invalid_json"));
  }
  if (!j.is_object())
    fail(std::string("The request body must be a JSON object, but got ") + kind_of(j) + ".", "", "invalid_type");
  return j;
}

// "model": may be absent (as llama.cpp's server allows; "" then: the server uses the one it
// serves), else a non-empty string.
std::string parse_model(const json& b) {
  const json* model = opt(b, "model");
  if (!model) return {};
  std::string m = get_string(*model, "model");
  if (m.empty()) fail("Invalid value for 'model': must not be empty.", "model");
  return m;
}

// The fields both endpoints share.
void parse_common(const json& b, Request& r) {
  r.model = parse_model(b);

  if (const json* v = opt(b, "max_tokens"))
    r.max_tokens = get_int(*v, "max_tokens", 1, std::numeric_limits<int32_t>::max());
  if (const json* v = opt(b, "temperature")) r.temperature = get_number(*v, "temperature", 0.0, 2.0);
  if (const json* v = opt(b, "top_p")) {
    r.top_p = get_number(*v, "top_p", 0.0, 1.0, true);
    if (!(static_cast<float>(r.top_p) > 0.0f))  // the sampler works in float32
      fail("Invalid value for 'top_p': " + v->dump() + " is too small (below float32's least positive value).",
           "top_p");
  }
  if (const json* v = opt(b, "top_k"))
    r.top_k = static_cast<int>(get_int(*v, "top_k", 0, std::numeric_limits<int32_t>::max()));
  if (const json* v = opt(b, "seed"))
    r.seed = get_int(*v, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());

  if (const json* v = opt(b, "stop")) {
    if (v->is_string()) {
      r.stop.push_back(v->get<std::string>());
      if (r.stop.back().empty()) fail("Invalid value for 'stop': stop strings must not be empty.", "stop");
    } else if (v->is_array()) {
      if (v->size() > kMaxStops)
        fail("Invalid value for 'stop': at most " + std::to_string(kMaxStops) + " stop strings, but got " +
                 std::to_string(v->size()) + ".",
             "stop");
      for (size_t i = 0; i < v->size(); ++i) {
        const std::string p = "stop[" + std::to_string(i) + "]";
        r.stop.push_back(get_string((*v)[i], p));
        if (r.stop.back().empty()) fail("Invalid value for '" + p + "': stop strings must not be empty.", p);
      }
    } else {
      wrong_type("stop", "a string or an array of strings", *v);
    }
  }

  if (const json* v = opt(b, "n")) {
    r.n = static_cast<int>(get_int(*v, "n", 1, 128));
    if (r.n != 1) fail("Invalid value for 'n': this server returns one choice, so n must be 1.", "n");
  }
  if (const json* v = opt(b, "stream")) r.stream = get_bool(*v, "stream");
  if (const json* v = opt(b, "stream_options")) {
    if (!v->is_object()) wrong_type("stream_options", "an object", *v);
    if (!r.stream)
      fail("The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options");
    if (const json* u = opt(*v, "include_usage")) r.include_usage = get_bool(*u, "stream_options.include_usage");
  }
  if (const json* v = opt(b, "priority")) {
    const std::string p = get_string(*v, "priority");
    if (p == "interactive")
      r.priority = Priority::Interactive;
    else if (p == "batch")
      r.priority = Priority::Batch;
    else
      fail("Invalid value for 'priority': expected 'interactive' or 'batch', but got '" + p + "'.", "priority");
  }
  if (const json* v = opt(b, "frequency_penalty")) r.frequency_penalty = get_number(*v, "frequency_penalty", -2.0, 2.0);
  if (const json* v = opt(b, "presence_penalty")) r.presence_penalty = get_number(*v, "presence_penalty", -2.0, 2.0);
  if (const json* v = opt(b, "repetition_penalty"))
    r.repetition_penalty = get_number(*v, "repetition_penalty", 0.0, 10.0, true);
  if (const json* v = opt(b, "logit_bias")) {
    if (!v->is_object()) wrong_type("logit_bias", "an object", *v);
    for (const auto& [key, bias] : v->items()) {
      const std::string p = "logit_bias[" + json(key).dump() + "]";
      int64_t id = -1;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (key.empty() || ec != std::errc() || end != key.data() + key.size() || id < 0 ||
          id > std::numeric_limits<int32_t>::max())
        fail("Invalid value for 'logit_bias': keys must be token ids (decimal integers >= 0), but got " +
                 json(key).dump() + ".",
             "logit_bias");
      if (bias.is_null()) continue;
      r.logit_bias.emplace_back(static_cast<int32_t>(id), get_number(bias, p, -100.0, 100.0));
    }
    // JSON keys are unique, but "7" and "07" name one token.
    std::vector<int32_t> ids;
    for (const auto& e : r.logit_bias) ids.push_back(e.first);
    std::sort(ids.begin(), ids.end());
    for (size_t i = 1; i < ids.size(); ++i)
      if (ids[i] == ids[i - 1])
        fail("Invalid value for 'logit_bias': token id " + std::to_string(ids[i]) + " appears twice.", "logit_bias");
  }
  // OpenAI fields this server does not implement: accepted at their neutral value only, so a
  // client never believes a format or tool was applied when it was not.
  if (const json* v = opt(b, "response_format")) {
    if (!v->is_object()) wrong_type("response_format", "an object", *v);
    const json* t = opt(*v, "type");
    const std::string type = t ? get_string(*t, "response_format.type") : "text";
    if (type != "text")
      fail("Invalid value for 'response_format.type': only 'text' is supported by this server, but got '" + type + "'.",
           "response_format.type");
  }
  if (const json* v = opt(b, "tools")) {
    if (!v->is_array()) wrong_type("tools", "an array", *v);
    if (!v->empty()) fail("Invalid value for 'tools': tool calls are not supported by this server.", "tools");
  }
  if (const json* v = opt(b, "ignore_eos")) r.ignore_eos = get_bool(*v, "ignore_eos");
  if (const json* v = opt(b, "cache_prompt")) r.cache_prompt = get_bool(*v, "cache_prompt");
  if (const json* v = opt(b, "user")) r.user = get_string(*v, "user");
}

int32_t token_id(const json& v, const std::string& param) {
  return static_cast<int32_t>(get_int(v, param, 0, std::numeric_limits<int32_t>::max()));
}

void parse_prompt(const json& b, Request& r) {
  const json* p = opt(b, "prompt");
  if (!p) fail("you must provide a prompt parameter", "prompt", "missing_required_parameter");
  if (p->is_string()) {
    r.prompt = p->get<std::string>();
    return;
  }
  if (!p->is_array()) wrong_type("prompt", "a string, an array of strings or an array of token ids", *p);
  if (p->empty()) fail("Invalid value for 'prompt': the array must not be empty.", "prompt");
  const json& first = (*p)[0];
  if (first.is_string() || first.is_array()) {
    if (p->size() > 1)
      fail("Invalid value for 'prompt': got " + std::to_string(p->size()) +
               " prompts; this server takes one prompt per request.",
           "prompt");
    if (first.is_string()) {
      r.prompt = first.get<std::string>();
      return;
    }
    if (first.empty()) fail("Invalid value for 'prompt[0]': the token array must not be empty.", "prompt[0]");
    for (size_t i = 0; i < first.size(); ++i)
      r.prompt_tokens.push_back(token_id(first[i], "prompt[0][" + std::to_string(i) + "]"));
    r.prompt_is_tokens = true;
    return;
  }
  for (size_t i = 0; i < p->size(); ++i) r.prompt_tokens.push_back(token_id((*p)[i], "prompt[" + std::to_string(i) + "]"));
  r.prompt_is_tokens = true;
}

std::string parse_content(const json& c, const std::string& param, bool allow_null) {
  if (c.is_null()) {
    if (allow_null) return {};
    wrong_type(param, "a string or an array of content parts", c);
  }
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) wrong_type(param, "a string or an array of content parts", c);
  std::string out;
  for (size_t j = 0; j < c.size(); ++j) {
    const std::string pp = param + "[" + std::to_string(j) + "]";
    const json& part = c[j];
    if (!part.is_object()) wrong_type(pp, "an object", part);
    const json* type = opt(part, "type");
    if (!type) fail("Missing required parameter: '" + pp + ".type'.", pp + ".type", "missing_required_parameter");
    const std::string t = get_string(*type, pp + ".type");
    if (t != "text")
      fail("Invalid value for '" + pp + ".type': only 'text' content parts are supported, but got '" + t + "'.",
           pp + ".type");
    const json* text = opt(part, "text");
    if (!text) fail("Missing required parameter: '" + pp + ".text'.", pp + ".text", "missing_required_parameter");
    if (j > 0) out += "\n";
    out += get_string(*text, pp + ".text");
  }
  return out;
}

}  // namespace

Request parse_completion_request(std::string_view body) {
  const json b = parse_body(body);
  Request r;
  r.endpoint = Endpoint::Completions;
  parse_common(b, r);
  parse_prompt(b, r);
  if (const json* v = opt(b, "logprobs")) {
    r.top_logprobs = static_cast<int>(get_int(*v, "logprobs", 0, 20));
    r.logprobs = true;
  }
  if (const json* v = opt(b, "echo"))
    if (get_bool(*v, "echo")) fail("Invalid value for 'echo': echo is not supported by this server.", "echo");
  if (const json* v = opt(b, "best_of"))
    if (get_int(*v, "best_of", 1, 20) != 1)
      fail("Invalid value for 'best_of': this server returns one choice, so best_of must be 1.", "best_of");
  if (const json* v = opt(b, "suffix"))
    if (!get_string(*v, "suffix").empty())
      fail("Invalid value for 'suffix': suffix is not supported by this server.", "suffix");
  return r;
}

namespace {
// The `messages` array of a chat body (required, non-empty).
std::vector<ChatMessage> parse_messages(const json& b) {
  std::vector<ChatMessage> out;
  const json* msgs = opt(b, "messages");
  if (!msgs) fail("you must provide a messages parameter", "messages", "missing_required_parameter");
  if (!msgs->is_array()) wrong_type("messages", "an array", *msgs);
  if (msgs->empty()) fail("Invalid value for 'messages': expected a non-empty array.", "messages");
  for (size_t i = 0; i < msgs->size(); ++i) {
    const std::string p = "messages[" + std::to_string(i) + "]";
    const json& m = (*msgs)[i];
    if (!m.is_object()) wrong_type(p, "an object", m);
    const json* role = opt(m, "role");
    if (!role) fail("Missing required parameter: '" + p + ".role'.", p + ".role", "missing_required_parameter");
    ChatMessage msg;
    msg.role = get_string(*role, p + ".role");
    if (msg.role == "developer") msg.role = "system";  // OpenAI's newer name for system instructions
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant")
      fail("Invalid value for '" + p + ".role': expected 'system', 'developer', 'user' or 'assistant', but got '" +
               msg.role + "'.",
           p + ".role");
    auto content = m.find("content");
    if (content == m.end())
      fail("Missing required parameter: '" + p + ".content'.", p + ".content", "missing_required_parameter");
    msg.content = parse_content(*content, p + ".content", msg.role == "assistant");
    for (const char* calls : {"tool_calls", "function_call"})
      if (const json* v = opt(m, calls))
        if (!(v->is_array() && v->empty()))
          fail("Invalid value for '" + p + "." + calls + "': tool calls are not supported by this server.",
               p + "." + calls);
    out.push_back(std::move(msg));
  }
  return out;
}
}  // namespace

Request parse_chat_request(std::string_view body) {
  const json b = parse_body(body);
  Request r;
  r.endpoint = Endpoint::ChatCompletions;
  parse_common(b, r);
  if (const json* v = opt(b, "max_completion_tokens"))
    r.max_tokens = get_int(*v, "max_completion_tokens", 1, std::numeric_limits<int32_t>::max());

  r.messages = parse_messages(b);
  // Chat fields this server does not implement: neutral values only (see parse_common).
  if (const json* v = opt(b, "functions")) {
    if (!v->is_array()) wrong_type("functions", "an array", *v);
    if (!v->empty()) fail("Invalid value for 'functions': function calls are not supported by this server.", "functions");
  }
  for (const char* choice : {"tool_choice", "function_call"})
    if (const json* v = opt(b, choice))
      if (!(v->is_string() && (v->get<std::string>() == "none" || v->get<std::string>() == "auto")))
        fail(std::string("Invalid value for '") + choice +
                 "': tool calls are not supported by this server, so only 'none' or 'auto' is accepted.",
             choice);
  if (const json* v = opt(b, "modalities")) {
    if (!v->is_array()) wrong_type("modalities", "an array", *v);
    for (const auto& m : *v)
      if (!(m.is_string() && m.get<std::string>() == "text"))
        fail("Invalid value for 'modalities': only 'text' is supported by this server.", "modalities");
  }
  for (const char* field : {"reasoning_effort", "audio", "prediction", "web_search_options"})
    if (opt(b, field))
      fail(std::string("Unsupported parameter: '") + field + "' is not supported with this model.", field);

  if (const json* v = opt(b, "logprobs")) r.logprobs = get_bool(*v, "logprobs");
  if (const json* v = opt(b, "top_logprobs")) {
    r.top_logprobs = static_cast<int>(get_int(*v, "top_logprobs", 0, 20));
    if (r.top_logprobs > 0 && !r.logprobs)
      fail("Invalid value for 'top_logprobs': 'logprobs' must be true when 'top_logprobs' is used.",
           "top_logprobs");
  }
  return r;
}

TokenizeRequest parse_tokenize_request(std::string_view body) {
  const json b = parse_body(body);
  TokenizeRequest r;
  r.model = parse_model(b);
  const json* prompt = opt(b, "prompt");
  const bool has_messages = opt(b, "messages") != nullptr;
  if (prompt && has_messages) fail("Give either 'prompt' or 'messages', not both.", "prompt");
  if (!prompt && !has_messages)
    fail("you must provide a prompt (a string) or messages parameter", "prompt", "missing_required_parameter");
  if (prompt) {
    r.prompt = get_string(*prompt, "prompt");
  } else {
    r.chat = true;
    r.messages = parse_messages(b);
  }
  if (const json* v = opt(b, "add_special_tokens")) r.add_special_tokens = get_bool(*v, "add_special_tokens");
  return r;
}

DetokenizeRequest parse_detokenize_request(std::string_view body) {
  const json b = parse_body(body);
  DetokenizeRequest r;
  r.model = parse_model(b);
  const json* t = opt(b, "tokens");
  if (!t) fail("you must provide a tokens parameter", "tokens", "missing_required_parameter");
  if (!t->is_array()) wrong_type("tokens", "an array of integers", *t);
  r.tokens.reserve(t->size());
  for (size_t i = 0; i < t->size(); ++i)
    r.tokens.push_back(static_cast<int32_t>(
        get_int((*t)[i], "tokens[" + std::to_string(i) + "]", 0, std::numeric_limits<int32_t>::max())));
  return r;
}

// ---- chat templates -----------------------------------------------------------------------------

ChatTemplate chat_template(const std::string& name) {
  ChatTemplate t;
  t.name = name;
  if (name == "chatml") {
    t.system = {"<|im_start|>system\n", "<|im_end|>\n"};
    t.user = {"<|im_start|>user\n", "<|im_end|>\n"};
    t.assistant = {"<|im_start|>assistant\n", "<|im_end|>\n"};
    t.generation_prompt = "<|im_start|>assistant\n";
  } else if (name == "llama2") {
    t.llama2 = true;
  } else if (name == "plain") {
    t.system = {"System: ", "\n"};
    t.user = {"User: ", "\n"};
    t.assistant = {"Assistant: ", "\n"};
    t.generation_prompt = "Assistant:";
  } else {
    throw_usage("unknown chat template '" + name + "'", "--chat-template",
                "use chatml, llama2 or plain, or a JSON file path");
  }
  return t;
}

ChatTemplate chat_template_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) throw_input("a chat template must be a JSON object", where);
  ChatTemplate t;
  t.name = where;
  const auto str = [&](const json& obj, const char* key, const std::string& field) -> std::string {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return {};
    if (!it->is_string()) throw_input(std::string("field '") + field + "' must be a string", where);
    return it->get<std::string>();
  };
  t.bos = str(j, "bos", "bos");
  t.generation_prompt = str(j, "generation_prompt", "generation_prompt");
  for (auto [key, affix] : {std::pair<const char*, ChatTemplate::Affix*>{"system", &t.system},
                            {"user", &t.user},
                            {"assistant", &t.assistant}}) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_object())
      throw_input(std::string("field '") + key + "' must be an object {\"prefix\": ..., \"suffix\": ...}", where,
                  "give prefix and suffix strings for system, user and assistant");
    affix->prefix = str(*it, "prefix", std::string(key) + ".prefix");
    affix->suffix = str(*it, "suffix", std::string(key) + ".suffix");
  }
  return t;
}

ChatTemplate load_chat_template(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw_input("cannot open chat template file", path, "check the path given to --chat-template");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw_input("malformed JSON at byte offset " + std::to_string(e.byte > 0 ? e.byte - 1 : 0), path);
  } catch (const json::exception& e) {  // out_of_range: a number past double's range
    throw_input(std::string("malformed JSON: ") + e.what(), path);
  }
  return chat_template_from_json(j, path);
}

namespace {

std::string strip(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

// Hugging Face's llama-2-chat template, without the leading BOS (the server prepends the id).
std::string render_llama2(const ChatTemplate& t, const std::vector<ChatMessage>& msgs) {
  size_t first = 0;
  std::string system;
  bool has_system = false;
  if (!msgs.empty() && msgs[0].role == "system") {
    system = msgs[0].content;
    has_system = true;
    first = 1;
  }
  if (first >= msgs.size())
    throw ApiException(invalid_request("The llama2 chat template needs a user message.", "messages", "invalid_value"));
  std::string out = t.bos;
  for (size_t i = first; i < msgs.size(); ++i) {
    const bool want_user = (i - first) % 2 == 0;
    const std::string& role = msgs[i].role;
    if ((role == "user") != want_user || role == "system") {
      const std::string p = "messages[" + std::to_string(i) + "].role";
      throw ApiException(invalid_request("Conversation roles must alternate user/assistant/user/assistant/... "
                                         "(a system message may only come first) for the llama2 chat template.",
                                         p, "invalid_value"));
    }
    std::string content = msgs[i].content;
    if (i == first && has_system) content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content;
    if (role == "user")
      out += (i == first ? std::string() : std::string("<s>")) + "[INST] " + strip(content) + " [/INST]";
    else
      out += " " + strip(content) + " </s>";
  }
  return out;
}

}  // namespace

std::string render_chat(const ChatTemplate& t, const std::vector<ChatMessage>& messages) {
  if (t.llama2) return render_llama2(t, messages);
  std::string out = t.bos;
  for (const auto& m : messages) {
    const ChatTemplate::Affix& a = m.role == "system" ? t.system : m.role == "user" ? t.user : t.assistant;
    if (m.role != "system" && m.role != "user" && m.role != "assistant")
      throw ApiException(invalid_request("unknown role '" + m.role + "'", "messages", "invalid_value"));
    out += a.prefix;
    out += m.content;
    out += a.suffix;
  }
  out += t.generation_prompt;
  return out;
}

// ---- responses ----------------------------------------------------------------------------------

std::string token_display(std::string_view bytes) {
  if (utf8_valid(bytes)) return std::string(bytes);
  static const char* hex = "0123456789abcdef";
  std::string out = "bytes:";
  for (char c : bytes) {
    const unsigned char u = static_cast<unsigned char>(c);
    out += "\\x";
    out += hex[u >> 4];
    out += hex[u & 15];
  }
  return out;
}

namespace {

ResponseJson bytes_array(std::string_view s) {
  ResponseJson a = ResponseJson::array();
  for (char c : s) a.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return a;
}

ResponseJson usage_json(const Usage& u) {
  return ResponseJson{{"prompt_tokens", u.prompt_tokens},
                      {"completion_tokens", u.completion_tokens},
                      {"total_tokens", u.prompt_tokens + u.completion_tokens},
                      {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

ResponseJson base(const ResponseMeta& m, const char* object) {
  ResponseJson j = ResponseJson::object();
  j["id"] = m.id;
  j["object"] = object;
  j["created"] = m.created;
  j["model"] = m.model;
  return j;
}

ResponseJson finish_json(const std::string& reason) {
  return reason.empty() ? ResponseJson(nullptr) : ResponseJson(reason);
}

}  // namespace

ResponseJson completion_logprobs(const std::vector<TokenLogprob>& lp, int64_t base_offset) {
  ResponseJson tokens = ResponseJson::array(), token_logprobs = ResponseJson::array(), top = ResponseJson::array(),
               offsets = ResponseJson::array();
  for (const auto& t : lp) {
    tokens.push_back(token_display(t.token));
    token_logprobs.push_back(t.logprob);
    ResponseJson alt = ResponseJson::object();
    for (const auto& a : t.top) {
      std::string key = token_display(a.token);
      if (!alt.contains(key)) alt[std::move(key)] = a.logprob;
    }
    top.push_back(alt);
    offsets.push_back(base_offset + t.text_offset);
  }
  return ResponseJson{
      {"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

ResponseJson chat_logprobs(const std::vector<TokenLogprob>& lp) {
  ResponseJson content = ResponseJson::array();
  for (const auto& t : lp) {
    ResponseJson alts = ResponseJson::array();
    for (const auto& a : t.top)
      alts.push_back(
          ResponseJson{{"token", token_display(a.token)}, {"logprob", a.logprob}, {"bytes", bytes_array(a.token)}});
    content.push_back(ResponseJson{{"token", token_display(t.token)},
                                   {"logprob", t.logprob},
                                   {"bytes", bytes_array(t.token)},
                                   {"top_logprobs", alts}});
  }
  return ResponseJson{{"content", content}};
}

ResponseJson completion_response(const ResponseMeta& m, const std::string& text, const std::string& finish_reason,
                                 const Usage& u, const std::vector<TokenLogprob>* lp) {
  ResponseJson j = base(m, "text_completion");
  j["choices"] = ResponseJson::array({ResponseJson{{"text", text},
                                                   {"index", 0},
                                                   {"logprobs", lp ? completion_logprobs(*lp) : ResponseJson(nullptr)},
                                                   {"finish_reason", finish_json(finish_reason)}}});
  j["usage"] = usage_json(u);
  return j;
}

ResponseJson chat_response(const ResponseMeta& m, const std::string& content, const std::string& finish_reason,
                           const Usage& u, const std::vector<TokenLogprob>* lp) {
  ResponseJson j = base(m, "chat.completion");
  j["choices"] =
      ResponseJson::array({ResponseJson{{"index", 0},
                                        {"message", ResponseJson{{"role", "assistant"}, {"content", content}}},
                                        {"logprobs", lp ? chat_logprobs(*lp) : ResponseJson(nullptr)},
                                        {"finish_reason", finish_json(finish_reason)}}});
  j["usage"] = usage_json(u);
  return j;
}

ResponseJson completion_chunk(const ResponseMeta& m, const std::string& text, const std::string& finish_reason,
                              const std::vector<TokenLogprob>* lp, int64_t base_offset) {
  ResponseJson j = base(m, "text_completion");
  j["choices"] = ResponseJson::array(
      {ResponseJson{{"text", text},
                    {"index", 0},
                    {"logprobs", lp ? completion_logprobs(*lp, base_offset) : ResponseJson(nullptr)},
                    {"finish_reason", finish_json(finish_reason)}}});
  if (m.include_usage) j["usage"] = nullptr;
  return j;
}

namespace {
ResponseJson chat_chunk(const ResponseMeta& m, ResponseJson delta, ResponseJson logprobs,
                        const std::string& finish_reason) {
  ResponseJson j = base(m, "chat.completion.chunk");
  j["choices"] = ResponseJson::array({ResponseJson{{"index", 0},
                                                   {"delta", std::move(delta)},
                                                   {"logprobs", std::move(logprobs)},
                                                   {"finish_reason", finish_json(finish_reason)}}});
  if (m.include_usage) j["usage"] = nullptr;
  return j;
}
}  // namespace

ResponseJson chat_chunk_role(const ResponseMeta& m) {
  return chat_chunk(m, ResponseJson{{"role", "assistant"}, {"content", ""}}, nullptr, {});
}

ResponseJson chat_chunk_content(const ResponseMeta& m, const std::string& content,
                                const std::vector<TokenLogprob>* lp) {
  return chat_chunk(m, ResponseJson{{"content", content}}, lp ? chat_logprobs(*lp) : ResponseJson(nullptr), {});
}

ResponseJson chat_chunk_finish(const ResponseMeta& m, const std::string& finish_reason) {
  return chat_chunk(m, ResponseJson::object(), nullptr, finish_reason);
}

ResponseJson usage_chunk(const ResponseMeta& m, const std::string& object, const Usage& u) {
  if (object != "text_completion" && object != "chat.completion.chunk")
    throw_usage("usage_chunk: object must be text_completion or chat.completion.chunk, got '" + object + "'",
                "rtx::serve::usage_chunk");
  ResponseJson j = base(m, object.c_str());
  j["choices"] = ResponseJson::array();
  j["usage"] = usage_json(u);
  return j;
}

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string dump_response(const ResponseJson& j) {
  return j.dump(-1, ' ', false, ResponseJson::error_handler_t::replace);
}

std::string sse_event(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

std::string sse_event(const ResponseJson& j) { return "data: " + dump_response(j) + "\n\n"; }

std::string sse_done() { return "data: [DONE]\n\n"; }

}  // namespace rtx::serve
