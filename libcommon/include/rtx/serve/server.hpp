// rtx-serve's OpenAI-compatible HTTP server (cpp-httplib): POST /v1/completions and
// /v1/chat/completions (JSON or server-sent events), GET /v1/models, /health, /metrics
// (Prometheus text format), API-key auth, body limits, a canary engine, graceful shutdown.
#pragma once
#include <atomic>
#include <cstddef>
#include <memory>
#include <cstdio>
#include <string>
#include <vector>

#include "rtx/serve/model.hpp"
#include "rtx/serve/openai.hpp"
#include "rtx/serve/scheduler.hpp"

namespace rtx::serve {

/// One engine: a model and the scheduler that runs it. The server routes requests to the main
/// engine, or to the canary for a fraction of them; metrics carry engine="main"|"canary".
struct Engine {
  Model* model = nullptr;
  Scheduler* scheduler = nullptr;
  std::string label = "main";
};

/// Server settings (rtx-serve flags).
struct ServerConfig {
  std::string host = "127.0.0.1";  ///< loopback unless told otherwise
  int port = 8080;                 ///< 0 = any free port (see Server::port())
  std::string api_key;             ///< non-empty: every route but /health needs "Authorization: Bearer KEY"
  size_t max_body_bytes = 1 << 20; ///< larger bodies get 413
  std::string model_name;          ///< the id served in /v1/models and accepted in "model" (default: the model's name)
  ChatTemplate chat;               ///< default: chat_template(kDefaultChatTemplate)
  double canary_fraction = 0;      ///< share of requests routed to the canary engine, [0, 1]
  double shutdown_deadline_s = 10; ///< SIGTERM: in-flight requests get this long, then are cancelled
  int http_threads = 0;            ///< 0 = max_queue + max_batch + 8 of the main engine
  int default_max_tokens = 16;     ///< completions without max_tokens (OpenAI's default)
  size_t max_header_bytes = 64 << 10;  ///< request line + headers, bytes; beyond: 431
  size_t max_header_lines = 128;   ///< request line + header lines; beyond: 431
  double header_timeout_s = 10;    ///< a request's line + headers must arrive within this (else 408)
  double receive_timeout_s = 60;   ///< its headers + body within this (else 408): slow clients end
  /// cpp-httplib's read timeout: a request whose next byte does not come for this long is
  /// answered 408 (counted under timeout), even before the deadlines above; (0, 86400].
  double read_timeout_s = 30;
  /// Non-null: one access-log line per answered request, after its last byte (streams too):
  /// "<UTC ISO 8601 time> <client addr> <method> <path> <status> <ms> <engine>" (engine "-" when
  /// none ran it; bytes of method and path below 0x21, 0x7f and backslash as \xNN), written with
  /// one fputs, so concurrent lines never interleave.
  std::FILE* access_log = nullptr;
};

/// The HTTP front end. Thread-safe; run() blocks until stop().
class Server {
 public:
  /// `main` (required) and `canary` (model/scheduler null = none) must outlive the server.
  /// Error(Input) on a bad config (canary_fraction outside [0,1], or > 0 without a canary).
  Server(Engine main, Engine canary, ServerConfig cfg);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  /// Binds host:port; Error(Environment) naming them when the port is taken or not permitted.
  /// Returns the bound port.
  int bind();
  /// Serves until stop() (bind() first, or it binds). Returns when the listener has closed.
  void run();
  /// Graceful shutdown: new requests get 503, in-flight ones may finish until the deadline
  /// (then they end as cancelled), then the listener closes. Safe from any thread; idempotent.
  void stop();
  /// True while run() is serving (its accept loop has started and not ended). A stop() that
  /// comes before does not end a run() that starts later, so a thread that stops the server
  /// (a signal watcher) waits for running() first.
  bool running() const;
  int port() const { return port_; }
  /// The /metrics body (Prometheus text exposition format 0.0.4).
  std::string metrics() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace rtx::serve
