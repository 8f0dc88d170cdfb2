// rtx-serve's OpenAI protocol layer: request parsing and validation for /v1/completions and
// /v1/chat/completions, chat templates, response and streaming-chunk bodies, SSE framing. Pure:
// no HTTP, no model. Field names and types follow the OpenAI API reference
// (https://platform.openai.com/docs/api-reference/completions and .../chat).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtx/core/error.hpp"

namespace rtx::serve {

// ---- errors -------------------------------------------------------------------------------------

/// An error answered to the client: HTTP `status` and OpenAI's error object fields. `param` and
/// `code` are JSON null in the body when empty.
struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;
  std::string code;
};

/// The exception the parsers and render_chat throw: an rtx::Error (category Input, `where` =
/// the param) carrying the ApiError to answer with. The server catches it and sends
/// error_body(e.error()) with e.error().status.
class ApiException : public Error {
 public:
  explicit ApiException(ApiError e);
  const ApiError& error() const noexcept { return error_; }

 private:
  ApiError error_;
};

/// OpenAI's error body: {"error":{"message","type","param","code"}} (param/code null if empty).
nlohmann::json error_body(const ApiError& e);
/// 400 invalid_request_error naming `param`.
ApiError invalid_request(std::string message, std::string param = {}, std::string code = {});
/// 404 invalid_request_error, code model_not_found (OpenAI's code; param null, as OpenAI's),
/// naming the ids that are served: "The model 'gpt-4' is not served here; this server serves
/// 'stories'." (several ids: 'a', 'b'). nullopt when `name` is one of `served`.
std::optional<ApiError> check_model(const std::string& name, const std::vector<std::string>& served);
/// 400 code context_length_exceeded (OpenAI's wording: "This model's maximum context length is
/// C tokens. However, you requested P+M tokens (P in the prompt, M in the completion). ...") when
/// prompt_tokens + max_tokens > context, or when the prompt alone leaves no room
/// (prompt_tokens >= context). Its param is `param` ("prompt" or "messages") when the prompt alone
/// leaves no room, else "max_tokens" (the prompt fits; the completion asked for does not).
/// nullopt when it fits.
std::optional<ApiError> check_context(int64_t prompt_tokens, int64_t max_tokens, int64_t context,
                                      const std::string& param);
/// 401 "Incorrect API key provided." type invalid_request_error, code invalid_api_key.
ApiError unauthorized();
/// 413 "Request body too large: N bytes (limit L bytes)." code request_too_large.
ApiError body_too_large(size_t bytes, size_t limit);
/// 413 "Request body too large: over the limit of L bytes." code request_too_large: for a body
/// whose size is not known (a chunked body, no Content-Length), which must not be shown as 0.
ApiError body_too_large(size_t limit);
/// 429 "The server is overloaded: ..." type server_overloaded, code queue_full (send Retry-After).
ApiError overloaded(std::string message);
/// 500 type server_error with `message`.
ApiError server_error(std::string message);

// ---- requests -----------------------------------------------------------------------------------

enum class Endpoint { Completions, ChatCompletions };
/// Scheduler lane (extension field `priority`).
enum class Priority { Interactive, Batch };
const char* priority_name(Priority p) noexcept;

/// One chat message; `content` is the text (array content parts joined with "\n", as vLLM).
struct ChatMessage {
  std::string role;  ///< "system" | "user" | "assistant"
  std::string content;
};

/// A validated request. Absent and JSON null fields take the defaults below.
struct Request {
  Endpoint endpoint = Endpoint::Completions;
  std::string model;                    ///< "" when absent or null (the server uses the model it serves)
  // completions: `prompt` is a string, [string], [int...] or [[int...]] (one prompt only).
  std::string prompt;                   ///< the text prompt, when not given as tokens
  std::vector<int32_t> prompt_tokens;   ///< token ids (each >= 0; the vocab bound is the caller's)
  bool prompt_is_tokens = false;
  // chat
  std::vector<ChatMessage> messages;    ///< non-empty for chat
  /// max_tokens (>= 1); for chat, max_completion_tokens takes precedence over max_tokens.
  /// nullopt: the caller's default (OpenAI: 16 for completions, up to the context for chat).
  std::optional<int64_t> max_tokens;
  double temperature = 1.0;             ///< [0, 2]; 0 means greedy
  double top_p = 1.0;                   ///< (0, 1]
  int top_k = 0;                        ///< extension, >= 0; 0 = disabled
  std::optional<int64_t> seed;          ///< any int64
  std::vector<std::string> stop;        ///< 0..4 non-empty strings
  int n = 1;                            ///< always 1 (other values are rejected)
  bool stream = false;
  bool include_usage = false;           ///< stream_options.include_usage (needs stream)
  /// Logprobs requested. Completions: `logprobs` k in 0..20 sets logprobs=true, top_logprobs=k.
  /// Chat: `logprobs` bool and `top_logprobs` 0..20 (which requires logprobs=true).
  bool logprobs = false;
  int top_logprobs = 0;
  /// OpenAI's penalties, each in [-2, 2] (0 = off): see models::SamplerConfig.
  double frequency_penalty = 0;
  double presence_penalty = 0;
  /// Extension (vLLM's name; llama.cpp's repeat_penalty): CTRL's repetition penalty over the
  /// prompt and the output, in (0, 10]; 1 = off.
  double repetition_penalty = 1;
  /// OpenAI's logit_bias: {"token id": bias in [-100, 100]}, ids as decimal strings (each >= 0,
  /// no duplicates; the vocab bound is the caller's), in key order.
  std::vector<std::pair<int32_t, double>> logit_bias;
  Priority priority = Priority::Interactive;  ///< extension: "interactive" | "batch"
  bool ignore_eos = false;              ///< extension (llama.cpp's and vLLM's name): generate past EOS
  bool cache_prompt = true;             ///< extension (llama.cpp's name): false = no prefix-cache reuse
  std::string user;                     ///< accepted and ignored
};

/// Parse and validate a POST /v1/completions body. Throws ApiException(400) for malformed JSON
/// (naming the 0-based byte offset where parsing failed: the body's length when it ends too
/// soon; code "invalid_json"), a body that is not an object, a missing or wrong-typed field
/// (naming it; code "invalid_type") or an out-of-range value (naming it and the range; code
/// "invalid_value"). Unknown fields are ignored; JSON null counts as absent.
/// Unsupported: echo=true, n != 1, best_of != 1, suffix, more than one prompt, tools,
/// response_format other than text.
Request parse_completion_request(std::string_view body);
/// Parse and validate a POST /v1/chat/completions body, as above. Messages: a non-empty array
/// of {role: system|user|assistant, content: string | [{type:"text", text}]} (assistant content
/// may be null, read as ""). Unsupported: n != 1, non-text content parts, tool and function
/// calls (`tools`/`functions` non-empty, `tool_choice`/`function_call` other than "none" or
/// "auto", a message's `tool_calls`), `modalities` other than ["text"], `reasoning_effort`,
/// `audio`, `prediction`, `web_search_options`.
Request parse_chat_request(std::string_view body);

/// POST /tokenize (vLLM's extension; llama.cpp's server has one too): the ids a completions or
/// chat request would send to the model, so a client can count tokens against the context.
struct TokenizeRequest {
  std::string model;                  ///< "" when absent (the served model)
  bool chat = false;                  ///< messages given (rendered by the chat template)
  std::string prompt;                 ///< when !chat
  std::vector<ChatMessage> messages;  ///< when chat: as parse_chat_request reads them
  bool add_special_tokens = true;     ///< BOS first where the model has one (as the endpoints do)
};
/// Parses {"prompt": string} or {"messages": [...]}, optional "model" and "add_special_tokens"
/// (bool). Throws ApiException(400) as parse_completion_request does; both or neither of
/// prompt and messages is an error naming "prompt".
TokenizeRequest parse_tokenize_request(std::string_view body);
/// POST /detokenize (vLLM's extension): {"tokens": [id, ...]} (each an integer >= 0; the vocab
/// bound is the caller's), optional "model".
struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};
DetokenizeRequest parse_detokenize_request(std::string_view body);

// ---- chat templates -----------------------------------------------------------------------------

/// How messages become one prompt string. Affix templates wrap each message as
/// prefix(role) + content + suffix(role), after `bos`, and end with `generation_prompt`.
/// The "llama2" template is rendered by its own rule (below).
struct ChatTemplate {
  struct Affix {
    std::string prefix, suffix;
  };
  std::string name;
  bool llama2 = false;  ///< Llama 2 chat rule instead of affixes
  std::string bos;      ///< text placed first (not the BOS token id: the server prepends that)
  Affix system, user, assistant;
  std::string generation_prompt;
};

/// The template used when none is configured: "plain", which needs no special tokens, so it
/// suits every model (the GPT-2 and tinyllamas checkpoints have no chat tokens).
constexpr const char* kDefaultChatTemplate = "plain";

/// Built-in templates by name:
/// - "chatml": `<|im_start|>{role}\n{content}<|im_end|>\n` per message, then
///   `<|im_start|>assistant\n`.
/// - "llama2": Meta's Llama 2 chat format (as Hugging Face's llama-2-chat template without the
///   leading "<s>", which is the BOS token the server prepends):
///   `[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST] {user} [/INST]`.
///   A system message may only come first; user and assistant must alternate starting with
///   user (else ApiException 400 naming messages[i].role).
/// - "plain": `System: {content}\n`, `User: {content}\n`, `Assistant: {content}\n` per message,
///   then `Assistant:`.
/// Throws Error(Usage) naming the name and the choices for an unknown name.
ChatTemplate chat_template(const std::string& name);
/// A custom affix template from a JSON file {"bos": "", "system": {"prefix","suffix"},
/// "user": {...}, "assistant": {...}, "generation_prompt": "..."}; bos and generation_prompt
/// default to "", each role object is required, prefix/suffix default to "". Throws
/// Error(Input) naming the file and field when unreadable, malformed or wrongly typed.
ChatTemplate load_chat_template(const std::string& path);
/// The same from an already parsed document; `where` names it in errors.
ChatTemplate chat_template_from_json(const nlohmann::json& j, const std::string& where);
/// `messages` rendered by `t`, ending with the generation prompt. Throws ApiException(400) for
/// a role the template cannot place (llama2's ordering rule).
std::string render_chat(const ChatTemplate& t, const std::vector<ChatMessage>& messages);

// ---- responses ----------------------------------------------------------------------------------

/// Identity of one response: id ("cmpl-..." / "chatcmpl-..."), `created` (unix seconds) and
/// the model name, all given by the caller. include_usage adds "usage": null to every chunk.
struct ResponseMeta {
  std::string id;
  int64_t created = 0;
  std::string model;
  bool include_usage = false;
};

/// Token counts of a response ("usage"); cached_tokens: prompt tokens served from the prefix
/// cache (OpenAI's usage.prompt_tokens_details.cached_tokens).
struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};

/// One alternative token: raw bytes (may be partial UTF-8) and its natural-log probability.
struct TopLogprob {
  std::string token;
  double logprob = 0;
};
/// One generated token for logprobs: raw bytes, logprob, the top alternatives (most likely
/// first), and its text offset (completions' `text_offset`; see TextStream's TokenOffset).
struct TokenLogprob {
  std::string token;
  double logprob = 0;
  std::vector<TopLogprob> top;
  int64_t text_offset = 0;
};

/// How a token's raw bytes appear as a JSON string: the bytes when they are valid UTF-8, else
/// OpenAI's "bytes:\\xNN..." form (lower-case hex per byte), e.g. "bytes:\\xe2\\x80".
std::string token_display(std::string_view bytes);

/// A response body or chunk: JSON whose objects keep insertion order, so that fields go out in
/// OpenAI's order (id, object, created, model, choices, usage) and each completions
/// `top_logprobs` object lists its tokens most likely first, the order OpenAI's responses show (JSON
/// objects are unordered by RFC 8259, but clients read `next(iter(d))` as the top choice).
using ResponseJson = nlohmann::ordered_json;

/// Completions' logprobs object {tokens, token_logprobs, top_logprobs:[{token: logprob}],
/// text_offset}; `text_offset` values are added to `base_offset`; each top_logprobs object in
/// the order of TokenLogprob::top (most likely first). Two alternatives with the same display
/// text (not possible for distinct valid-UTF-8 tokens of one vocabulary) keep the first.
ResponseJson completion_logprobs(const std::vector<TokenLogprob>& lp, int64_t base_offset = 0);
/// Chat's logprobs object {content:[{token, logprob, bytes:[int], top_logprobs:[{token,
/// logprob, bytes}]}]}; `token` is token_display(bytes), `bytes` the exact bytes.
ResponseJson chat_logprobs(const std::vector<TokenLogprob>& lp);

/// Non-streaming POST /v1/completions body: object "text_completion", choices[0] {text, index 0,
/// logprobs (null when `lp` is null), finish_reason "stop"|"length"}, usage {prompt_tokens,
/// completion_tokens, total_tokens}.
ResponseJson completion_response(const ResponseMeta& m, const std::string& text, const std::string& finish_reason,
                                 const Usage& u, const std::vector<TokenLogprob>* lp = nullptr);
/// Non-streaming POST /v1/chat/completions body: object "chat.completion", choices[0] {index,
/// message {role "assistant", content}, logprobs (null or chat_logprobs), finish_reason}, usage.
ResponseJson chat_response(const ResponseMeta& m, const std::string& content, const std::string& finish_reason,
                           const Usage& u, const std::vector<TokenLogprob>* lp = nullptr);

/// A streaming completions chunk: object "text_completion", choices[0] {text, index 0, logprobs
/// (null or completion_logprobs from base_offset), finish_reason (null when empty)}.
ResponseJson completion_chunk(const ResponseMeta& m, const std::string& text, const std::string& finish_reason = {},
                              const std::vector<TokenLogprob>* lp = nullptr, int64_t base_offset = 0);
/// The first chat chunk: delta {role "assistant", content ""}, finish_reason null.
ResponseJson chat_chunk_role(const ResponseMeta& m);
/// A chat content chunk: delta {content}, logprobs null or chat_logprobs, finish_reason null.
ResponseJson chat_chunk_content(const ResponseMeta& m, const std::string& content,
                                const std::vector<TokenLogprob>* lp = nullptr);
/// The last chat chunk: empty delta {} and finish_reason.
ResponseJson chat_chunk_finish(const ResponseMeta& m, const std::string& finish_reason);
/// The usage chunk sent after the last one when include_usage: `choices` [] and usage set.
/// `object` is "text_completion" or "chat.completion.chunk".
ResponseJson usage_chunk(const ResponseMeta& m, const std::string& object, const Usage& u);

/// Server-sent event framing: "data: " + compact JSON + "\n\n". Invalid UTF-8 in strings is
/// replaced by U+FFFD rather than throwing.
std::string sse_event(const nlohmann::json& j);
std::string sse_event(const ResponseJson& j);
/// The end of a stream: "data: [DONE]\n\n".
std::string sse_done();
/// Compact JSON for a response body, invalid UTF-8 replaced by U+FFFD.
std::string dump_json(const nlohmann::json& j);
/// dump_json for a response body built by the functions above (insertion order kept).
std::string dump_response(const ResponseJson& j);

}  // namespace rtx::serve
