// rtx-serve's load generator: streams OpenAI-style completions from a server with N client
// threads and reports TTFT, TPOT, ITL and throughput as vLLM's benchmark_serving.py does.
// Not a server and not a tokenizer: token counts come from the server's usage (or chunk counts).
#pragma once
#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rtx/telemetry/hwprofile.hpp"

namespace rtx::serve {

// ---------------------------------------------------------------------------------------------
// Server-sent events

/// One dispatched server-sent event. `data` is the event's `data:` lines joined by "\n"
/// (no trailing newline); `event` is the `event:` field ("" means the default "message");
/// `id` is the last event id seen on the stream so far.
struct SseEvent {
  std::string event;
  std::string data;
  std::string id;
};

/// Incremental parser for a text/event-stream body, per the WHATWG HTML standard,
/// section 9.2 "Server-sent events" (event stream interpretation). Feed the body in arbitrary
/// byte chunks; each call returns the events completed by that chunk. Lines end in "\r\n",
/// "\n" or "\r" (a "\r\n" split across two chunks counts once); a leading UTF-8 BOM is
/// dropped; lines starting with ':' are comments; "field: value" drops one space after the
/// colon; a line without a colon is a field with an empty value; unknown fields and `retry`
/// are ignored; a blank line dispatches the event unless its data buffer is empty. An event
/// without its closing blank line at end of stream is discarded, as the spec says. Never
/// throws on any input.
class SseParser {
 public:
  /// Parse `chunk` (any split of the stream) and return the events it completes, in order.
  std::vector<SseEvent> feed(std::string_view chunk);
  /// Bytes buffered until an event completes: the line not yet terminated plus the data lines
  /// of the event being built (a load generator caps this: a server may never end a line).
  size_t pending_bytes() const noexcept { return line_.size() + data_.size(); }

 private:
  void process_line(std::vector<SseEvent>& out);
  std::string line_;        // current partial line
  std::string data_;        // data buffer of the event being built
  std::string event_type_;  // event type buffer
  std::string last_id_;     // last event id buffer
  bool saw_cr_ = false;     // previous byte was '\r' (swallow a following '\n')
  bool bom_checked_ = false;
  std::string bom_prefix_;  // up to 2 leading bytes that may be the start of a BOM
};

// ---------------------------------------------------------------------------------------------
// Load configuration and results

/// What to send and how hard. Requests go to http://host:port<endpoint> as streaming POSTs with
/// "stream": true and "stream_options": {"include_usage": true}. An endpoint ending in
/// "/chat/completions" sends the prompt as one user message; any other sends "prompt".
struct LoadConfig {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;                     ///< sent as "Authorization: Bearer <key>" when non-empty
  std::string model;                       ///< "model" field (omitted when empty)
  std::string endpoint = "/v1/completions";
  int concurrency = 1;                     ///< client threads = maximum requests in flight (>= 1)
  int num_requests = 0;                    ///< total requests; 0 = unlimited (then duration_s > 0)
  double duration_s = 0;                   ///< stop starting requests after this many s; 0 = no limit
  std::vector<std::string> prompts;        ///< request i sends prompts[i % size] (non-empty)
  int max_tokens = 128;                    ///< "max_tokens" (>= 1)
  bool ignore_eos = true;                  ///< sends "ignore_eos": true (llama-server, rtx-serve, vLLM)
  double temperature = 0.0;                ///< "temperature"
  std::optional<uint64_t> seed;            ///< "seed" sent with every request when set; also seeds arrivals
  double request_rate = 0;                 ///< mean requests/s, Poisson arrivals; 0 = as fast as concurrency allows
  double timeout_s = 300;                  ///< per-request limit (connect + whole stream), s (> 0)
  /// Fields merged into every request body last (a JSON object; e.g. {"cache_prompt": false} to
  /// turn prompt caching off on llama-server and rtx-serve), as vLLM's bench --extra-body.
  nlohmann::json extra_body = nlohmann::json::object();
  /// When set and it becomes true (a SIGINT handler sets it), no further request starts; the
  /// ones in flight finish (or time out) and the run ends with LoadReport::aborted saying so.
  /// Not owned; must outlive run_load.
  const std::atomic<bool>* interrupt = nullptr;
};

/// How a request ended.
enum class RequestStatus {
  Ok,           ///< 2xx, streamed at least one content chunk
  HttpError,    ///< non-2xx other than 429 (http_status says which)
  RateLimited,  ///< HTTP 429 (admission control)
  Transport,    ///< connect/read/write failure or timeout: no complete HTTP answer
  Protocol,     ///< 2xx but the stream was malformed, carried an error object, or had no content
};
/// "ok", "http_error", "rate_limited", "transport_error", "protocol_error".
const char* status_name(RequestStatus s) noexcept;

/// One request's measurements. Times in seconds, from steady_clock.
struct RequestResult {
  int64_t index = 0;                  ///< request number (0-based, in start order)
  RequestStatus status = RequestStatus::Transport;
  int http_status = 0;                ///< HTTP status code (0 when none arrived)
  std::string error;                  ///< what went wrong ("" when ok)
  double start_s = 0;                 ///< request sent, relative to the run's start
  double ttft_s = 0;                  ///< sent -> first content chunk
  double e2e_s = 0;                   ///< sent -> last content chunk (vLLM's "latency")
  std::vector<double> itl_s;          ///< gaps between successive content chunks
  int64_t output_tokens = 0;          ///< usage.completion_tokens, else number of content chunks
  int64_t prompt_tokens = 0;          ///< usage.prompt_tokens (0 when the server sent no usage)
  bool usage_reported = false;        ///< the stream carried a usage object
  int64_t output_chars = 0;           ///< bytes of generated text
  std::string engine;                 ///< rtx-serve's X-Rtx-Engine header ("main", "canary"), "" if absent
  bool connect_failed = false;        ///< no connection could be made (refused, unreachable, connect timeout)
};

/// Mean, median, standard deviation (population, numpy's default ddof=0) and percentiles of one
/// latency metric, in milliseconds. All zero when count == 0 (as vLLM reports an empty metric).
struct LatencyStats {
  size_t count = 0;
  double mean_ms = 0, median_ms = 0, std_ms = 0, p50_ms = 0, p95_ms = 0, p99_ms = 0;
};

/// The run's summary, with vLLM benchmark_serving's definitions:
/// TTFT per request; TPOT per request = (e2e - ttft) / (output_tokens - 1), for requests with
/// more than one output token; ITL = every gap between successive content chunks of all
/// requests; E2EL per request; throughputs = totals of successful requests / duration.
struct LoadSummary {
  int64_t num_requests = 0;           ///< requests sent
  int64_t completed = 0;              ///< status ok
  int64_t failed = 0;                 ///< any other status (includes rate_limited)
  int64_t rate_limited = 0;           ///< HTTP 429
  double duration_s = 0;              ///< run start -> last request finished
  int64_t total_input_tokens = 0;     ///< sum of usage.prompt_tokens over successful requests
  int64_t total_output_tokens = 0;    ///< sum of output tokens over successful requests
  double request_throughput = 0;      ///< completed / duration, requests/s
  double output_throughput = 0;       ///< total_output_tokens / duration, tokens/s
  double total_token_throughput = 0;  ///< (input + output tokens) / duration, tokens/s
  LatencyStats ttft, tpot, itl, e2el;
};

/// A finished run: the configuration, every request (in index order) and the summary.
struct LoadReport {
  LoadConfig config;
  std::vector<RequestResult> requests;
  LoadSummary summary;
  /// Why the run stopped before its request count or duration ("" when it did not): the server
  /// went away, i.e. kAbortAfterConnectFailures-or-more requests in a row could not connect.
  std::string aborted;
};

/// Failed requests that ended the same way: one status and one error message.
struct FailureGroup {
  RequestStatus status = RequestStatus::Transport;
  int http_status = 0;        ///< of the first of them (0 when none arrived)
  std::string error;          ///< RequestResult::error they share
  int64_t count = 0;          ///< how many requests failed so
  int64_t first_index = 0;    ///< the first of them (RequestResult::index)
};

/// The failed requests of `requests` grouped by status and error message, most frequent first
/// (ties: the earliest first), at most `max` groups: the failures a summary shows.
std::vector<FailureGroup> failure_groups(const std::vector<RequestResult>& requests, size_t max = 3);

/// Most bytes of one SSE event run_load buffers; a stream that exceeds it (a server that never
/// ends a line) fails that request as a protocol error and its transfer is cancelled.
inline constexpr size_t kMaxSseEventBytes = size_t{1} << 20;

/// Consecutive requests that could not connect before run_load gives up: the larger of this and
/// 2 x concurrency. A worker whose request could not connect waits 25 ms before its next one.
inline constexpr int kAbortAfterConnectFailures = 8;

// ---------------------------------------------------------------------------------------------
// Statistics

/// LatencyStats of `seconds` (converted to ms). Empty input gives all zeros.
LatencyStats latency_stats(const std::vector<double>& seconds);

/// Summary of `requests` over a run of `duration_s` seconds (definitions on LoadSummary).
/// Throws rtx::Error(Usage) when duration_s <= 0 and some request succeeded.
LoadSummary summarize(const std::vector<RequestResult>& requests, double duration_s);

/// Arrival offsets (s from the run start) of n requests as a Poisson process of `rate`
/// requests/s (exponential gaps of mean 1/rate, as vLLM's get_request with burstiness 1),
/// drawn from a std::mt19937_64 seeded with `seed`. rate <= 0 gives all zeros. Deterministic.
std::vector<double> poisson_arrivals(size_t n, double rate, uint64_t seed);

// ---------------------------------------------------------------------------------------------
// Running

/// JSON body of one request for `prompt` (see LoadConfig for the fields sent).
nlohmann::json build_request_body(const LoadConfig& cfg, const std::string& prompt);

/// What validate() puts in rtx::Error::where(): kLoadConfigWhere + "." + the field's name
/// ("rtx::serve::LoadConfig.max_tokens"), or kLoadConfigWhere alone for a run without an end.
inline constexpr const char* kLoadConfigWhere = "rtx::serve::LoadConfig";

/// Check a configuration; throws rtx::Error(Usage) naming the bad field and its allowed range.
/// Every field is checked before num_requests == 0 with duration_s == 0 (a run that would never end).
void validate(const LoadConfig& cfg);

/// Is anything listening at cfg.host:cfg.port? A TCP connect with a deadline (min(timeout_s,
/// 5 s)), nothing sent or read. Throws rtx::Error(Environment) "no server answers at H:P (why)"
/// naming --port when not. run_load calls it first; a tool calls it before other checks
/// whose output would be noise without a server (the busy-host warning).
void require_server(const LoadConfig& cfg);

/// Run the load: `concurrency` client threads (one httplib::Client each, a new connection per
/// request, so TTFT includes the loopback connect as with a fresh client) take
/// requests in order, wait for each one's arrival time (request_rate > 0) and stream it,
/// until num_requests were sent or duration_s passed (requests in flight then finish).
/// Individual request failures are recorded, never thrown; when the server goes away
/// (kAbortAfterConnectFailures or 2 x concurrency requests in a row cannot connect) the run
/// stops early and says why in LoadReport::aborted. Throws rtx::Error(Usage) for a bad
/// configuration (validate) and rtx::Error(Environment) when nothing accepts a connection at
/// host:port before the run (one GET /health probe; any HTTP answer, even 404, passes).
LoadReport run_load(const LoadConfig& cfg);

/// The report as an "rtx.serve_bench.v1" artifact: schema, hardware identity, config, the
/// summary with vLLM's field names (completed, duration, request_throughput, output_throughput,
/// total_token_throughput, mean_ttft_ms, median_ttft_ms, std_ttft_ms, p50_ttft_ms, p95_ttft_ms,
/// p99_ttft_ms, and the same for tpot, itl, e2el), "errors" (count per status), "failures" (the
/// failure_groups, each {"count", "status", "http_status", "error", "first_request"}; [] when
/// none failed), "aborted" (LoadReport::aborted or null) and, when include_requests, every request.
nlohmann::json to_json(const LoadReport& report, bool include_requests = false);

/// Shortest run window judged for host contention, s: rtx-bench's kMinJudgedWindow (a single
/// 4 ms time slice in a shorter window would read as 8% or more of it).
inline constexpr double kMinJudgedRunS = 0.05;

/// Whether other work competed for the CPUs during a bench run, by the suite's busy-host rule
/// (telemetry::judge_host_window): the CPU time other processes took in the run's window
/// (/proc/stat minus this process), or without /proc/stat the PSI cpu "some" stall.
struct RunContention {
  bool judged = false;     ///< a signal was readable at both ends and the window is >= kMinJudgedRunS
  bool contended = false;  ///< judged, and the rule found the host busy
  double psi_share = 0;    ///< stall / wall, clamped to [0, 1] (0 when PSI was not readable)
  double other_share = 0;  ///< share of the window's CPU time other processes took (0 without /proc/stat)
  std::string basis;       ///< "other_cpu", "psi" (no /proc/stat) or "" (not judged)
  std::string reason;      ///< "" unless contended: "other processes took 1.10 CPU-s of 2 CPUs x 3.20 s (17%, > 10%)"
};
/// The verdict on a run's window (telemetry::judge_host_window; the clients of this bench are
/// this process, so they do not count against the host; a server on this host does).
RunContention judge_run_contention(const telemetry::CpuWindow& w);
/// The verdict on PSI alone: a window of `wall_s` seconds in which PSI counted `stall_s` seconds
/// of stall (`psi_valid`: read at both ends); the rule's fallback without /proc/stat.
RunContention judge_run_contention(bool psi_valid, double stall_s, double wall_s);

/// A human-readable table of the summary (like benchmark_serving's printout), units in names.
/// When requests failed, a "Failures" section after the counts gives their failure_groups (and
/// says so when none succeeded, so the zeros below it are not read as measurements).
std::string format_table(const LoadReport& report);

}  // namespace rtx::serve
