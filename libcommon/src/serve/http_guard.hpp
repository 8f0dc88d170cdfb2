// A cpp-httplib server whose connections are read through a guard: each request's line and
// headers are bounded in bytes and lines and must arrive within a deadline, and the whole
// request (headers and body) within another. cpp-httplib 0.11 (Debian's) bounds only the length
// of one header line, so without this a client could send headers without end (memory) or one
// byte every 29 s (a thread held forever): the "slowloris" attack.
#pragma once
#include <httplib.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <chrono>
#include <string>

namespace rtx::serve {

/// Bounds on what one request may send before it is answered (see ServerConfig).
struct HttpLimits {
  size_t max_header_bytes = 64 << 10;  ///< request line + headers, bytes
  size_t max_header_lines = 128;       ///< request line + header lines (the blank line not counted)
  double header_timeout_s = 10;        ///< request line + headers must arrive within this, s
  double receive_timeout_s = 60;       ///< headers + body must arrive within this, s
};

/// Why the guard refused the current request on this thread (read by the error handler, which
/// runs on the same thread, to answer 431 or 408 instead of cpp-httplib's generic 400).
enum class GuardRefusal { None, HeadersTooLarge, HeaderTimeout, ReceiveTimeout };
/// The refusal of the request being read on the calling thread (None when not refused).
GuardRefusal current_guard_refusal();
/// When the request being handled on the calling thread began to arrive (its first bytes were
/// ready), for the access log; every request the guard reads has one, refused ones included.
std::chrono::steady_clock::time_point current_request_start();
/// Whether the client of the request being handled on the calling thread has closed its end
/// (end of stream or a socket error, without waiting). Bytes it sent ahead (a pipelined next
/// request) do not count as gone. For handlers that wait without writing (non-streamed
/// completions), so that a client that went away frees its slot at once.
bool current_client_gone();
/// Close the connection once the current response is written (a refusal that left the request
/// unread: what follows on the socket must not be read as a next request).
void close_after_response();
/// Text for a refusal: what was exceeded and the bound.
std::string guard_refusal_message(GuardRefusal r, const HttpLimits& l);

/// httplib::Server with guarded connections: the keep-alive loop of cpp-httplib (up to
/// keep_alive_max_count requests, keep_alive_timeout between them, stop() honoured) over a
/// socket stream that enforces `HttpLimits`. Everything else (routes, handlers, thread pool,
/// timeouts set with set_read_timeout / set_write_timeout) is cpp-httplib's.
class GuardedHttpServer : public httplib::Server {
 public:
  explicit GuardedHttpServer(const HttpLimits& l = {}) : limits_(l) {}
  /// Set before listening.
  void set_limits(const HttpLimits& l) { limits_ = l; }
  const HttpLimits& limits() const { return limits_; }
  /// Requests refused for oversized headers / for a missed deadline, since start.
  uint64_t refused_too_large() const { return too_large_.load(); }
  uint64_t refused_timeout() const { return timeouts_.load(); }

 private:
  bool process_and_close_socket(socket_t sock) override;
  HttpLimits limits_;
  std::atomic<uint64_t> too_large_{0}, timeouts_{0};
};

}  // namespace rtx::serve
