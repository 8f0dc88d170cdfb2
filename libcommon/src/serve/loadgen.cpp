// Load generator of rtx-serve bench: SSE parsing, streaming OpenAI requests over cpp-httplib,
// and vLLM benchmark_serving-style statistics (TTFT, TPOT, ITL, E2EL, throughput).
#include "rtx/serve/loadgen.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <limits>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "rtx/core/build_info.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/time.hpp"
#include "rtx/serve/text.hpp"
#include "rtx/stats/stats.hpp"
#include "rtx/telemetry/hwprofile.hpp"

namespace rtx::serve {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// SseParser

namespace {
constexpr char kBom[3] = {'\xEF', '\xBB', '\xBF'};
}

std::vector<SseEvent> SseParser::feed(std::string_view chunk) {
  std::vector<SseEvent> out;
  size_t i = 0;
  if (!bom_checked_) {
    // The stream may start with a UTF-8 BOM, itself possibly split across chunks.
    bool mismatch = false;
    while (i < chunk.size() && bom_prefix_.size() < 3) {
      bom_prefix_.push_back(chunk[i++]);
      if (bom_prefix_.back() != kBom[bom_prefix_.size() - 1]) {
        mismatch = true;
        break;
      }
    }
    if (!mismatch && bom_prefix_.size() < 3) return out;  // need more bytes to decide
    bom_checked_ = true;
    std::string prefix;
    prefix.swap(bom_prefix_);
    if (mismatch) {
      // Not a BOM: the buffered bytes are ordinary stream content.
      std::vector<SseEvent> head = feed(prefix);
      out.insert(out.end(), head.begin(), head.end());
    }
  }
  while (i < chunk.size()) {
    const char c = chunk[i];
    if (saw_cr_) {
      saw_cr_ = false;
      if (c == '\n') {  // second half of "\r\n"
        ++i;
        continue;
      }
    }
    if (c == '\r' || c == '\n') {
      process_line(out);
      saw_cr_ = (c == '\r');
      ++i;
      continue;
    }
    // Append the run of ordinary bytes up to the next line end in one go.
    size_t j = i;
    while (j < chunk.size() && chunk[j] != '\r' && chunk[j] != '\n') ++j;
    line_.append(chunk.data() + i, j - i);
    i = j;
  }
  return out;
}

void SseParser::process_line(std::vector<SseEvent>& out) {
  std::string line;
  line.swap(line_);
  if (line.empty()) {  // dispatch
    if (data_.empty()) {
      event_type_.clear();
      return;
    }
    data_.pop_back();  // the data buffer always ends in the "\n" appended per data line
    out.push_back(SseEvent{event_type_, data_, last_id_});
    data_.clear();
    event_type_.clear();
    return;
  }
  if (line[0] == ':') return;  // comment
  std::string field, value;
  const size_t colon = line.find(':');
  if (colon == std::string::npos) {
    field = line;
  } else {
    field = line.substr(0, colon);
    size_t v = colon + 1;
    if (v < line.size() && line[v] == ' ') ++v;
    value = line.substr(v);
  }
  if (field == "event") {
    event_type_ = value;
  } else if (field == "data") {
    data_ += value;
    data_ += '\n';
  } else if (field == "id") {
    if (value.find('\0') == std::string::npos) last_id_ = value;
  }
  // "retry" and unknown fields are ignored.
}

// ---------------------------------------------------------------------------------------------
// Statistics

const char* status_name(RequestStatus s) noexcept {
  switch (s) {
    case RequestStatus::Ok: return "ok";
    case RequestStatus::HttpError: return "http_error";
    case RequestStatus::RateLimited: return "rate_limited";
    case RequestStatus::Transport: return "transport_error";
    case RequestStatus::Protocol: return "protocol_error";
  }
  return "unknown";
}

LatencyStats latency_stats(const std::vector<double>& seconds) {
  LatencyStats s;
  s.count = seconds.size();
  if (seconds.empty()) return s;
  std::vector<double> ms(seconds.size());
  for (size_t i = 0; i < seconds.size(); ++i) ms[i] = seconds[i] * 1e3;
  double sum = 0;
  for (double v : ms) sum += v;
  s.mean_ms = sum / static_cast<double>(ms.size());
  double ss = 0;
  for (double v : ms) ss += (v - s.mean_ms) * (v - s.mean_ms);
  s.std_ms = std::sqrt(ss / static_cast<double>(ms.size()));
  std::sort(ms.begin(), ms.end());
  s.median_ms = stats::percentile(ms, 0.50);
  s.p50_ms = s.median_ms;
  s.p95_ms = stats::percentile(ms, 0.95);
  s.p99_ms = stats::percentile(ms, 0.99);
  return s;
}

LoadSummary summarize(const std::vector<RequestResult>& requests, double duration_s) {
  LoadSummary s;
  std::vector<double> ttft, tpot, itl, e2el;
  for (const RequestResult& r : requests) {
    ++s.num_requests;
    if (r.status == RequestStatus::RateLimited) ++s.rate_limited;
    if (r.status != RequestStatus::Ok) {
      ++s.failed;
      continue;
    }
    ++s.completed;
    s.total_input_tokens += r.prompt_tokens;
    s.total_output_tokens += r.output_tokens;
    ttft.push_back(r.ttft_s);
    e2el.push_back(r.e2e_s);
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
    if (r.output_tokens > 1) tpot.push_back((r.e2e_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1));
  }
  if (s.completed > 0 && !(duration_s > 0))
    throw_usage("run duration must be > 0 s to compute throughput, got " + std::to_string(duration_s),
                "rtx::serve::summarize");
  s.duration_s = duration_s;
  if (duration_s > 0) {
    s.request_throughput = static_cast<double>(s.completed) / duration_s;
    s.output_throughput = static_cast<double>(s.total_output_tokens) / duration_s;
    s.total_token_throughput = static_cast<double>(s.total_input_tokens + s.total_output_tokens) / duration_s;
  }
  s.ttft = latency_stats(ttft);
  s.tpot = latency_stats(tpot);
  s.itl = latency_stats(itl);
  s.e2el = latency_stats(e2el);
  return s;
}

namespace {
// Exponential gaps of mean 1/rate from one mt19937_64 stream: the k-th call gives arrival k.
class ArrivalClock {
 public:
  ArrivalClock(double rate, uint64_t seed) : rate_(rate), rng_(seed), exp_(rate > 0 ? rate : 1.0) {}
  double next() {
    if (!(rate_ > 0)) return 0.0;
    const double t = t_;
    t_ += exp_(rng_);
    return t;
  }

 private:
  double rate_;
  double t_ = 0;
  std::mt19937_64 rng_;
  std::exponential_distribution<double> exp_;
};
}  // namespace

std::vector<double> poisson_arrivals(size_t n, double rate, uint64_t seed) {
  ArrivalClock clock(rate, seed);
  std::vector<double> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = clock.next();
  return t;
}

// ---------------------------------------------------------------------------------------------
// Requests

namespace {
bool is_chat_endpoint(const std::string& endpoint) {
  const std::string suffix = "/chat/completions";
  return endpoint.size() >= suffix.size() &&
         endpoint.compare(endpoint.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The first `n` bytes of `s` (what a server sent) for an error message: cut between UTF-8
// characters and ill-formed bytes replaced (U+FFFD), so that the artifact stays valid JSON.
/// Seconds as a person writes them: "3", "0.5", "1e-05".
std::string secs(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", x);
  return b;
}

std::string excerpt(const std::string& s, size_t n = 200) {
  if (s.size() <= n) return utf8_sanitize(s);
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // not inside a UTF-8 character
  return utf8_sanitize(std::string_view(s).substr(0, n)) + "...";
}

// What an error answer says: an OpenAI error object's "code: message", else the body's start.
std::string error_body_text(const std::string& body) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    const json& e = j["error"];
    if (e.contains("message") && e["message"].is_string()) {
      const std::string code = e.contains("code") && e["code"].is_string() ? e["code"].get<std::string>() + ": " : "";
      return code + excerpt(e["message"].get<std::string>(), 300);
    }
  }
  return excerpt(body);
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Consumes one streamed response body: SSE events -> content-chunk timestamps, usage, errors.
class StreamState {
 public:
  StreamState(bool chat, Clock::time_point sent, RequestResult& r) : chat_(chat), sent_(sent), r_(r) {}

  /// Returns false when the transfer must stop (an event past kMaxSseEventBytes).
  bool on_bytes(const char* data, size_t n, Clock::time_point now) {
    for (const SseEvent& ev : parser_.feed(std::string_view(data, n))) on_event(ev, now);
    if (parser_.pending_bytes() > kMaxSseEventBytes) {
      fail("an SSE event longer than " + std::to_string(kMaxSseEventBytes) + " bytes (no end of line or event)");
      return false;
    }
    return true;
  }

  bool got_content() const { return content_chunks_ > 0; }
  bool done() const { return done_; }
  int64_t content_chunks() const { return content_chunks_; }
  const std::string& protocol_error() const { return protocol_error_; }
  Clock::time_point last_content() const { return last_content_; }

 private:
  void fail(const std::string& msg) {
    if (protocol_error_.empty()) protocol_error_ = msg;
  }

  void on_event(const SseEvent& ev, Clock::time_point now) {
    if (ev.data == "[DONE]") {
      done_ = true;
      return;
    }
    json j = json::parse(ev.data, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      fail("malformed JSON in SSE data: " + excerpt(ev.data, 80));
      return;
    }
    if (j.contains("error")) {
      const json& e = j["error"];
      fail("server error in stream: " + excerpt(e.is_object() && e.contains("message") && e["message"].is_string()
                                                    ? e["message"].get<std::string>()
                                                    : e.dump()));
      return;
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      const json& u = j["usage"];
      if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer()) {
        r_.output_tokens = u["completion_tokens"].get<int64_t>();
        r_.usage_reported = true;
      }
      if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer())
        r_.prompt_tokens = u["prompt_tokens"].get<int64_t>();
    }
    if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;
    const json& c = j["choices"][0];
    const json* text = nullptr;
    if (chat_) {
      if (c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content"))
        text = &c["delta"]["content"];
    } else if (c.contains("text")) {
      text = &c["text"];
    }
    if (!text || !text->is_string() || text->get_ref<const std::string&>().empty()) return;
    if (content_chunks_ == 0) {
      r_.ttft_s = seconds(now - sent_);
    } else {
      r_.itl_s.push_back(seconds(now - last_content_));
    }
    last_content_ = now;
    ++content_chunks_;
    r_.output_chars += static_cast<int64_t>(text->get_ref<const std::string&>().size());
  }

  bool chat_;
  Clock::time_point sent_;
  RequestResult& r_;
  SseParser parser_;
  Clock::time_point last_content_{};
  int64_t content_chunks_ = 0;
  bool done_ = false;
  std::string protocol_error_;
};

void set_timeouts(httplib::Client& cli, double timeout_s) {
  const auto sec = static_cast<time_t>(timeout_s);
  const auto usec = static_cast<time_t>((timeout_s - static_cast<double>(sec)) * 1e6);
  cli.set_connection_timeout(sec, usec);
  cli.set_read_timeout(sec, usec);
  cli.set_write_timeout(sec, usec);
}

// Send one streaming request and measure it. Never throws for server or network failures.
RequestResult run_one(httplib::Client& cli, const LoadConfig& cfg, int64_t index, const std::string& body,
                      Clock::time_point run_start) {
  RequestResult r;
  r.index = index;
  httplib::Request req;
  req.method = "POST";
  req.path = cfg.endpoint;
  req.headers.emplace("Accept", "text/event-stream");
  req.headers.emplace("Content-Type", "application/json");
  if (!cfg.api_key.empty()) req.headers.emplace("Authorization", "Bearer " + cfg.api_key);
  req.body = body;

  int status = 0;
  std::string error_body;
  bool timed_out = false;
  const Clock::time_point sent = Clock::now();
  const Clock::time_point deadline =
      sent + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg.timeout_s));
  StreamState stream(is_chat_endpoint(cfg.endpoint), sent, r);
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    r.engine = res.get_header_value("X-Rtx-Engine");
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    const Clock::time_point now = Clock::now();
    if (status >= 200 && status < 300) {
      if (!stream.on_bytes(data, n, now)) return false;  // cancels the transfer
    } else if (error_body.size() < 4096) {
      error_body.append(data, std::min(n, 4096 - error_body.size()));
    }
    if (now > deadline) {
      timed_out = true;
      return false;  // cancels the transfer
    }
    return true;
  };

  r.start_s = seconds(sent - run_start);
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool ok = cli.send(req, res, err);
  if (status == 0) status = res.status > 0 ? res.status : 0;
  r.http_status = status;
  if (error_body.empty() && !res.body.empty()) error_body = excerpt(res.body, 4096);

  if (timed_out) {
    r.status = RequestStatus::Transport;
    r.error = "timeout: no complete answer within " + secs(cfg.timeout_s) + " s";
    return r;
  }
  // A read that ran into the client's timeout (cpp-httplib says only "Read"): a server that
  // accepted the connection but did not answer in time.
  const bool read_timed_out = !ok && (err == httplib::Error::Read || err == httplib::Error::ConnectionTimeout) &&
                              seconds(Clock::now() - sent) >= 0.99 * cfg.timeout_s;
  if (read_timed_out && status == 0) {
    r.status = RequestStatus::Transport;
    r.connect_failed = err == httplib::Error::ConnectionTimeout;
    r.error = std::string("timeout: ") +
              (err == httplib::Error::ConnectionTimeout ? "could not connect to " : "no answer from ") + cfg.host + ":" +
              std::to_string(cfg.port) + cfg.endpoint + " within " + secs(cfg.timeout_s) + " s (--timeout)";
    return r;
  }
  if (!ok && status == 0) {
    r.status = RequestStatus::Transport;
    r.connect_failed = err == httplib::Error::Connection || err == httplib::Error::ConnectionTimeout;
    r.error = std::string("transport error (") + httplib::to_string(err) + ") talking to " + cfg.host + ":" +
              std::to_string(cfg.port) + cfg.endpoint;
    return r;
  }
  if (status == 429) {
    r.status = RequestStatus::RateLimited;
    r.error = "HTTP 429: " + error_body_text(error_body);
    return r;
  }
  if (status < 200 || status >= 300) {
    r.status = RequestStatus::HttpError;
    r.error = "HTTP " + std::to_string(status) + ": " + error_body_text(error_body);
    return r;
  }
  if (!ok && stream.protocol_error().empty()) {
    r.status = RequestStatus::Transport;
    r.error = read_timed_out ? "timeout: the stream stalled; no complete answer within " + secs(cfg.timeout_s) + " s (--timeout)"
                             : std::string("transport error (") + httplib::to_string(err) + ") in the middle of the stream";
    return r;
  }
  if (!stream.protocol_error().empty()) {
    r.status = RequestStatus::Protocol;
    r.error = stream.protocol_error();
    return r;
  }
  if (!stream.got_content()) {
    r.status = RequestStatus::Protocol;
    r.error = "the stream carried no content chunk (empty completion or not an SSE stream)";
    return r;
  }
  if (!stream.done()) {
    r.status = RequestStatus::Protocol;
    r.error = "the stream ended without 'data: [DONE]'";
    return r;
  }
  r.status = RequestStatus::Ok;
  r.e2e_s = seconds(stream.last_content() - sent);
  if (!r.usage_reported) r.output_tokens = stream.content_chunks();
  return r;
}
}  // namespace

json build_request_body(const LoadConfig& cfg, const std::string& prompt) {
  json body;
  if (!cfg.model.empty()) body["model"] = cfg.model;
  if (is_chat_endpoint(cfg.endpoint)) {
    body["messages"] = json::array({{{"role", "user"}, {"content", prompt}}});
  } else {
    body["prompt"] = prompt;
  }
  body["max_tokens"] = cfg.max_tokens;
  body["temperature"] = cfg.temperature;
  if (cfg.ignore_eos) body["ignore_eos"] = true;
  if (cfg.seed) body["seed"] = *cfg.seed;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  for (const auto& item : cfg.extra_body.items()) body[item.key()] = item.value();
  return body;
}

void validate(const LoadConfig& cfg) {
  const std::string where = kLoadConfigWhere;
  if (cfg.host.empty()) throw_usage("host is empty", where + ".host", "give the server's host, e.g. 127.0.0.1");
  if (cfg.port < 1 || cfg.port > 65535)
    throw_usage("port " + std::to_string(cfg.port) + " is outside 1..65535", where + ".port");
  if (cfg.endpoint.empty() || cfg.endpoint[0] != '/')
    throw_usage("endpoint '" + cfg.endpoint + "' must start with '/'", where + ".endpoint",
                "use /v1/completions or /v1/chat/completions");
  if (cfg.concurrency < 1 || cfg.concurrency > 4096)
    throw_usage("concurrency " + std::to_string(cfg.concurrency) + " is outside 1..4096", where + ".concurrency");
  if (cfg.num_requests < 0)
    throw_usage("num_requests " + std::to_string(cfg.num_requests) + " is negative", where + ".num_requests");
  if (!(cfg.duration_s >= 0) || !std::isfinite(cfg.duration_s))
    throw_usage("duration_s must be a finite number >= 0", where + ".duration_s");
  if (cfg.prompts.empty()) throw_usage("no prompts", where + ".prompts", "give at least one prompt");
  if (!cfg.extra_body.is_object())
    throw_usage("extra_body must be a JSON object, got " + cfg.extra_body.dump(), where + ".extra_body",
                "e.g. {\"cache_prompt\": false}");
  // Fields the load generator sets itself: overriding one would break the measurement (a
  // non-streamed answer has no TTFT) or make the artifact's config say what was not sent.
  static const std::pair<const char*, const char*> kOwn[] = {
      {"stream", "every request streams (the measurement needs it)"},
      {"stream_options", "the load generator asks for include_usage to count output tokens"},
      {"prompt", "set by --prompt / --prompts-file"},
      {"messages", "set by --prompt / --prompts-file"},
      {"model", "set by --model"},
      {"max_tokens", "set by --max-tokens"},
      {"temperature", "set by --temperature"},
      {"ignore_eos", "set by --no-ignore-eos"},
      {"seed", "set by --seed"},
  };
  for (const auto& [key, why] : kOwn)
    if (cfg.extra_body.is_object() && cfg.extra_body.contains(key))
      throw_usage(std::string("\"") + key + "\" cannot be given in extra_body: " + why, where + ".extra_body",
                  "remove it from the object");
  if (cfg.max_tokens < 1) throw_usage("max_tokens must be >= 1", where + ".max_tokens");
  if (!(cfg.temperature >= 0) || !std::isfinite(cfg.temperature))
    throw_usage("temperature must be a finite number >= 0", where + ".temperature");
  if (!(cfg.request_rate >= 0) || !std::isfinite(cfg.request_rate))
    throw_usage("request_rate must be a finite number >= 0 (0 = as fast as concurrency allows)",
                where + ".request_rate");
  if (!(cfg.timeout_s > 0) || !std::isfinite(cfg.timeout_s))
    throw_usage("timeout_s must be a finite number > 0", where + ".timeout_s");
  // Deadlines are steady_clock time points (nanoseconds in 64 bits: ~292 years from boot);
  // cap the spans so they cannot overflow.
  if (cfg.timeout_s > 7 * 86400.0)
    throw_usage("timeout_s " + secs(cfg.timeout_s) + " is more than a week", where + ".timeout_s");
  if (cfg.duration_s > 30 * 86400.0)
    throw_usage("duration_s " + secs(cfg.duration_s) + " is more than 30 days", where + ".duration_s");
  // Last, so that a field out of range is reported as such first.
  if (cfg.num_requests == 0 && cfg.duration_s == 0)
    throw_usage("neither num_requests nor duration_s is set: the run would never end", where,
                "set num_requests > 0 or duration_s > 0");
}

namespace {

/// "" when a TCP connection to host:port opens within `timeout_s`, else why not (getaddrinfo's
/// or connect's error text, or "connect timed out"). The connection is closed at once.
std::string tcp_connect_error(const std::string& host, int port, double timeout_s) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    return std::string("cannot resolve host: ") + gai_strerror(rc);
  std::string why = "no address";
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd p{fd, POLLOUT, 0};
      rc = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left)));
      if (rc == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        if (err) why = std::strerror(err);
      } else {
        rc = -1;
        why = "connect timed out";
      }
    } else if (rc != 0) {
      why = std::strerror(errno);
    }
    ::close(fd);
    if (rc == 0) {
      freeaddrinfo(res);
      return "";
    }
  }
  freeaddrinfo(res);
  return why;
}

}  // namespace

void require_server(const LoadConfig& cfg) {
  // A TCP connect with a deadline, nothing read: a server that accepts and then stalls or
  // streams forever cannot hold the probe.
  if (const std::string why = tcp_connect_error(cfg.host, cfg.port, std::min(cfg.timeout_s, 5.0)); !why.empty())
    throw_env("no server answers at " + cfg.host + ":" + std::to_string(cfg.port) + " (" + why + ")", "--port",
              "start the server first (rtx-serve run ...) or point --host/--port at it");
}

LoadReport run_load(const LoadConfig& cfg) {
  validate(cfg);
  LoadReport report;
  report.config = cfg;

  std::vector<std::string> bodies;
  bodies.reserve(cfg.prompts.size());
  for (const std::string& p : cfg.prompts) bodies.push_back(build_request_body(cfg, p).dump());

  std::mutex mu;
  int64_t issued = 0;
  ArrivalClock arrivals(cfg.request_rate, cfg.seed.value_or(0));
  std::vector<RequestResult> results;
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline =
      cfg.duration_s > 0
          ? start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg.duration_s))
          : Clock::time_point::max();

  // Before any load: is anything listening? A typo in --port should be one clear error, not a
  // report of N failed requests (or, for a duration-bounded run, a loop of refusals).
  require_server(cfg);

  const int abort_after = std::max(kAbortAfterConnectFailures, 2 * cfg.concurrency);
  int connect_failures_in_a_row = 0;
  bool stop = false;
  auto worker = [&]() {
    httplib::Client cli(cfg.host, cfg.port);
    // One connection per request ("Connection: close"): reusing a kept-alive socket that the
    // server closed after a streamed answer fails the next request with a read error in
    // cpp-httplib 0.11 (seen with llama-server), and loopback connects cost microseconds.
    cli.set_keep_alive(false);
    cli.set_tcp_nodelay(true);
    set_timeouts(cli, cfg.timeout_s);
    const auto interrupted = [&] {  // mu held
      if (!cfg.interrupt || !cfg.interrupt->load()) return false;
      if (!stop) {
        stop = true;
        report.aborted = "interrupted: no request started after it; the ones in flight finished";
      }
      return true;
    };
    for (;;) {
      int64_t index = 0;
      double at = 0;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stop || interrupted()) return;
        if (cfg.num_requests > 0 && issued >= cfg.num_requests) return;
        if (Clock::now() >= deadline) return;
        index = issued++;
        at = arrivals.next();
      }
      const Clock::time_point when =
          start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at));
      if (when >= deadline) return;
      // Wait for the arrival time in slices, so that an interrupt is not held up by a long gap.
      while (Clock::now() < when) {
        std::this_thread::sleep_until(std::min(when, Clock::now() + std::chrono::milliseconds(50)));
        if (cfg.interrupt && cfg.interrupt->load()) break;
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        if (interrupted()) return;
      }
      RequestResult r = run_one(cli, cfg, index, bodies[static_cast<size_t>(index) % bodies.size()], start);
      const bool refused = r.connect_failed;
      {
        std::lock_guard<std::mutex> lock(mu);
        connect_failures_in_a_row = refused ? connect_failures_in_a_row + 1 : 0;
        if (refused && connect_failures_in_a_row >= abort_after && !stop) {
          stop = true;
          report.aborted = "the server went away: " + std::to_string(connect_failures_in_a_row) +
                           " requests in a row could not connect (" + r.error + ")";
        }
        results.push_back(std::move(r));
      }
      if (refused) std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
  };

  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(cfg.concurrency));
  for (int t = 0; t < cfg.concurrency; ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  const double duration = seconds(Clock::now() - start);

  std::sort(results.begin(), results.end(),
            [](const RequestResult& a, const RequestResult& b) { return a.index < b.index; });
  report.summary = summarize(results, duration);
  report.requests = std::move(results);
  return report;
}

// ---------------------------------------------------------------------------------------------
// Output

std::vector<FailureGroup> failure_groups(const std::vector<RequestResult>& requests, size_t max) {
  std::vector<FailureGroup> groups;
  for (const RequestResult& r : requests) {
    if (r.status == RequestStatus::Ok) continue;
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&](const FailureGroup& x) { return x.status == r.status && x.error == r.error; });
    if (g == groups.end()) {
      groups.push_back(FailureGroup{r.status, r.http_status, r.error, 1, r.index});
      continue;
    }
    ++g->count;
    if (r.index < g->first_index) {
      g->first_index = r.index;
      g->http_status = r.http_status;
    }
  }
  std::stable_sort(groups.begin(), groups.end(), [](const FailureGroup& a, const FailureGroup& b) {
    return a.count != b.count ? a.count > b.count : a.first_index < b.first_index;
  });
  if (groups.size() > max) groups.resize(max);
  return groups;
}

namespace {
void put_stats(json& doc, const std::string& name, const LatencyStats& s) {
  doc["mean_" + name + "_ms"] = s.mean_ms;
  doc["median_" + name + "_ms"] = s.median_ms;
  doc["std_" + name + "_ms"] = s.std_ms;
  doc["p50_" + name + "_ms"] = s.p50_ms;
  doc["p95_" + name + "_ms"] = s.p95_ms;
  doc["p99_" + name + "_ms"] = s.p99_ms;
  doc["num_" + name + "_samples"] = s.count;
}

}  // namespace

json to_json(const LoadReport& report, bool include_requests) {
  const LoadConfig& c = report.config;
  const LoadSummary& s = report.summary;
  json doc;
  doc["schema"] = "rtx.serve_bench.v1";
  doc["rtx_version"] = rtx::version();
  doc["rtx_sha"] = rtx::git_sha();
  doc["date"] = utc_now(TimeStampPrecision::Seconds);
  doc["hardware"] = telemetry::to_json(telemetry::hardware_profile());
  json cfg = {{"host", c.host},
              {"port", c.port},
              {"endpoint", c.endpoint},
              {"model", c.model},
              {"max_concurrency", c.concurrency},
              {"num_prompts", c.num_requests},
              {"duration_limit_s", c.duration_s},
              {"prompts", c.prompts},
              {"max_tokens", c.max_tokens},
              {"ignore_eos", c.ignore_eos},
              {"temperature", c.temperature},
              {"seed", c.seed ? json(*c.seed) : json(nullptr)},
              {"request_rate", c.request_rate},
              {"timeout_s", c.timeout_s},
              {"extra_body", c.extra_body},
              {"api_key_set", !c.api_key.empty()}};
  doc["config"] = cfg;
  doc["max_concurrency"] = c.concurrency;
  doc["request_rate"] = c.request_rate;  // 0 = unthrottled (vLLM writes "inf")
  doc["num_prompts"] = s.num_requests;
  doc["completed"] = s.completed;
  doc["failed"] = s.failed;
  doc["rate_limited"] = s.rate_limited;
  doc["duration"] = s.duration_s;
  doc["total_input_tokens"] = s.total_input_tokens;
  doc["total_output_tokens"] = s.total_output_tokens;
  doc["request_throughput"] = s.request_throughput;
  doc["output_throughput"] = s.output_throughput;
  doc["total_token_throughput"] = s.total_token_throughput;
  put_stats(doc, "ttft", s.ttft);
  put_stats(doc, "tpot", s.tpot);
  put_stats(doc, "itl", s.itl);
  put_stats(doc, "e2el", s.e2el);
  json errors = json::object();
  for (const RequestResult& r : report.requests)
    if (r.status != RequestStatus::Ok) errors[status_name(r.status)] = errors.value(status_name(r.status), 0) + 1;
  doc["errors"] = errors;
  json failures = json::array();
  for (const FailureGroup& g : failure_groups(report.requests))
    failures.push_back({{"count", g.count},
                        {"status", status_name(g.status)},
                        {"http_status", g.http_status},
                        {"error", g.error},
                        {"first_request", g.first_index}});
  doc["failures"] = failures;
  doc["aborted"] = report.aborted.empty() ? json(nullptr) : json(report.aborted);
  if (include_requests) {
    json reqs = json::array();
    for (const RequestResult& r : report.requests) {
      reqs.push_back({{"index", r.index},
                      {"status", status_name(r.status)},
                      {"http_status", r.http_status},
                      {"error", r.error},
                      {"start_s", r.start_s},
                      {"ttft_s", r.ttft_s},
                      {"e2e_s", r.e2e_s},
                      {"itl_s", r.itl_s},
                      {"output_tokens", r.output_tokens},
                      {"prompt_tokens", r.prompt_tokens},
                      {"usage_reported", r.usage_reported},
                      {"output_chars", r.output_chars},
                      {"engine", r.engine}});
    }
    doc["requests"] = reqs;
  }
  return doc;
}

RunContention judge_run_contention(const telemetry::CpuWindow& w) {
  static_assert(kMinJudgedRunS == telemetry::kMinJudgedWindowS, "one shortest judged window");
  const telemetry::HostVerdict v = telemetry::judge_host_window(w);
  RunContention c;
  c.judged = v.judged;
  c.contended = v.busy;
  c.psi_share = v.psi_share;
  c.other_share = v.other_share;
  c.basis = v.basis;
  c.reason = v.reason;
  return c;
}

RunContention judge_run_contention(bool psi_valid, double stall_s, double wall_s) {
  telemetry::CpuWindow w;
  w.wall_s = wall_s;
  w.psi_valid = psi_valid;
  w.psi_stall_s = stall_s;
  return judge_run_contention(w);
}

std::string format_table(const LoadReport& report) {
  const LoadSummary& s = report.summary;
  std::ostringstream o;
  char line[128];
  auto row = [&](const char* name, double v, int prec) {
    std::snprintf(line, sizeof line, "%-40s %12.*f\n", name, prec, v);
    o << line;
  };
  auto irow = [&](const char* name, long long v) {
    std::snprintf(line, sizeof line, "%-40s %12lld\n", name, v);
    o << line;
  };
  auto head = [&](const std::string& title) {
    const size_t width = 53;
    const size_t pad = title.size() + 2 < width ? width - title.size() - 2 : 0;
    o << std::string(pad / 2, '-') << ' ' << title << ' ' << std::string(pad - pad / 2, '-') << '\n';
  };
  auto stats = [&](const char* tag, const LatencyStats& st) {
    const std::string t = tag;
    row(("Mean " + t + " (ms):").c_str(), st.mean_ms, 2);
    row(("Median " + t + " (ms):").c_str(), st.median_ms, 2);
    row(("P95 " + t + " (ms):").c_str(), st.p95_ms, 2);
    row(("P99 " + t + " (ms):").c_str(), st.p99_ms, 2);
  };
  o << std::string(16, '=') << " Serving Benchmark Result " << std::string(11, '=') << '\n';
  irow("Max concurrency:", report.config.concurrency);
  irow("Requests sent:", s.num_requests);
  irow("Successful requests:", s.completed);
  irow("Failed requests:", s.failed);
  irow("  of which rate limited (429):", s.rate_limited);
  row("Benchmark duration (s):", s.duration_s, 2);
  irow("Total input tokens:", s.total_input_tokens);
  irow("Total generated tokens:", s.total_output_tokens);
  row("Request throughput (req/s):", s.request_throughput, 2);
  row("Output token throughput (tokens/s):", s.output_throughput, 2);
  row("Total token throughput (tokens/s):", s.total_token_throughput, 2);
  if (s.failed > 0) {
    head("Failures");
    if (s.completed == 0)
      o << "All " << s.num_requests << " requests failed: the latency figures below are empty.\n";
    int64_t shown = 0;
    for (const FailureGroup& g : failure_groups(report.requests)) {
      o << g.count << " x " << status_name(g.status) << " (first: request " << g.first_index << "): " << g.error << '\n';
      shown += g.count;
    }
    if (shown < s.failed) o << s.failed - shown << " more failed otherwise (-o FILE --requests lists every request)\n";
  }
  head("Time to First Token");
  stats("TTFT", s.ttft);
  head("Time per Output Token (excl. 1st token)");
  stats("TPOT", s.tpot);
  head("Inter-token Latency");
  stats("ITL", s.itl);
  head("End-to-end Latency");
  stats("E2EL", s.e2el);
  o << std::string(53, '=') << '\n';
  return o.str();
}

}  // namespace rtx::serve
