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
#include <string_view>

namespace rtx::serve {

/// Bounds on what one request may send before it is answered (see ServerConfig).
struct HttpLimits {
  size_t max_header_bytes = 64 << 10;  ///< request line + headers, bytes
  size_t max_header_lines = 128;       ///< request line + header lines (the blank line not counted)
  double header_timeout_s = 10;        ///< request line + headers must arrive within this, s
  double receive_timeout_s = 60;       ///< headers + body must arrive within this, s
};

/// Why the guard refused the current request on this thread (read by the error handler, which
/// runs on the same thread, to answer with guard_refusal_answer() instead of cpp-httplib's
/// generic 400). Besides sizes and deadlines the guard checks what cpp-httplib 0.11 would
/// accept silently or misread (RFC 9112): the syntax of each header line, the request's method
/// token and target form (3.2), the Host header (3.2), Transfer-Encoding and Content-Encoding,
/// and the framing of a chunked body. An absolute-form target (`GET http://h/v1/models`, 3.2.2)
/// is not refused: the guard rewrites it to origin-form before cpp-httplib reads it. The
/// request line's HTTP-version (RFC 9112 2.3) is checked too: a major version other than 1 is
/// 505 (RFC 9110 15.6.6), and HTTP/1.x with x > 1 is served as HTTP/1.1, as RFC 9110 2.5 says
/// a recipient SHOULD (cpp-httplib alone answers it 400).
enum class GuardRefusal {
  None,
  HeadersTooLarge,       ///< request line + headers over max_header_bytes or max_header_lines (431)
  HeaderLineTooLong,     ///< one header line over cpp-httplib's per-line limit, 8192 bytes (431)
  UriTooLong,            ///< the request line over 8192 bytes (or max_header_bytes): 414
  HeaderTimeout,         ///< 408
  ReceiveTimeout,        ///< 408
  ReadTimeout,           ///< no byte for the read timeout (set_read_timeout) mid-request, before a deadline: 408
  BadRequest,            ///< a header line, Host or request target RFC 9112 says to reject (400 bad_request)
  BadFraming,            ///< Transfer-Encoding or chunked framing that cannot be trusted (400 bad_framing)
  NotImplemented,        ///< an unknown method or transfer coding, CONNECT, OPTIONS * (501)
  UnsupportedEncoding,   ///< a Content-Encoding other than identity on a request with a body (415)
  BodyTooLarge,          ///< a chunked body over the server's payload limit (413)
  VersionNotSupported,   ///< a well-formed HTTP-version whose major version is not 1, e.g. HTTP/2.0 (505)
};
/// The refusal of the request being read on the calling thread (None when not refused).
GuardRefusal current_guard_refusal();
/// When the request being handled on the calling thread began to arrive (its first bytes were
/// ready), for the access log; every request the guard reads has one, refused ones included.
std::chrono::steady_clock::time_point current_request_start();
/// The peer address of the connection served on the calling thread ("" when none), for the
/// access log of requests whose line did not parse (cpp-httplib fills remote_addr after it).
std::string current_client_addr();
/// Whether the client of the request being handled on the calling thread has closed its end
/// (end of stream or a socket error, without waiting). Bytes it sent ahead (a pipelined next
/// request) do not count as gone. For handlers that wait without writing (non-streamed
/// completions), so that a client that went away frees its slot at once.
bool current_client_gone();
/// Whether the request being handled on the calling thread has been read to its end: its
/// headers, and its body as framed (Content-Length bytes, or a chunked body up to its last
/// chunk). False while bytes of it may still be on the socket (cpp-httplib does not read the
/// body of a GET, HEAD, OPTIONS or TRACE), which must then not be read as a next request.
bool current_request_read_whole();
/// Close the connection once the current response is written (a refusal that left the request
/// unread: what follows on the socket must not be read as a next request). The response then
/// carries one `Connection: close` and no `Keep-Alive`.
void close_after_response();
/// Text for a refusal: what was exceeded and the bound, or what is wrong with the request.
std::string guard_refusal_message(GuardRefusal r, const HttpLimits& l);
/// The answer to a refusal: status, OpenAI error type and code, and message.
struct GuardAnswer {
  int status = 0;
  std::string type, code, message;
};
/// The status (RFC 9110 section 15: 400, 408, 413, 414, 415, 431, 501, 505), OpenAI error
/// type and code, and message of refusal `r`.
GuardAnswer guard_refusal_answer(GuardRefusal r, const HttpLimits& l);

/// The `reason` label of a refusal in rtx_http_refused_total ("" for None): headers_too_large
/// (431, HeadersTooLarge and HeaderLineTooLong), uri_too_long (414), timeout (408, both
/// deadlines and the read timeout), bad_request and bad_framing (400), not_implemented (501), unsupported_encoding
/// (415), body_too_large (413, a chunked body), version_not_supported (505, RFC 9110 15.6.6).
/// headers_too_large and timeout are the labels of the first version of the metric; 414
/// counted under headers_too_large before it had its own.
const char* guard_refusal_reason(GuardRefusal r);
/// Every reason label guard_refusal_reason() returns, once each, in the order /metrics lists them
/// (new labels are appended, so existing series keep their place).
inline constexpr const char* kGuardRefusalReasons[] = {
    "headers_too_large", "uri_too_long",         "timeout",        "bad_request",          "bad_framing",
    "not_implemented",   "unsupported_encoding", "body_too_large", "version_not_supported"};
inline constexpr size_t kGuardRefusalReasonCount = sizeof kGuardRefusalReasons / sizeof kGuardRefusalReasons[0];

/// httplib::Server with guarded connections: the keep-alive loop of cpp-httplib (up to
/// keep_alive_max_count requests, keep_alive_timeout between them, stop() honoured) over a
/// socket stream that enforces `HttpLimits`. Everything else (routes, handlers, thread pool,
/// timeouts set with set_read_timeout / set_write_timeout) is cpp-httplib's.
class GuardedHttpServer : public httplib::Server {
 public:
  explicit GuardedHttpServer(const HttpLimits& l = {});
  /// Set before listening.
  void set_limits(const HttpLimits& l) { limits_ = l; }
  const HttpLimits& limits() const { return limits_; }
  /// Requests the guard refused with `reason` (a kGuardRefusalReasons label) since start; 0 for
  /// a label that is not one of them. Each refused request counts once, whoever answered it
  /// (the error handler or the connection loop). A 400 Bad Request (RFC 9110 15.5.1) that
  /// cpp-httplib gives itself, past the guard's checks (a request cut short mid-headers or
  /// mid-body, a multipart body it cannot parse, a method it routes nowhere such as TRACE on an
  /// unknown path), counts under bad_request when it is still 400 after the error handler ran;
  /// its own 413 (a form-encoded body over CPPHTTPLIB_FORM_URL_ENCODED_PAYLOAD_MAX_LENGTH, 8 KiB)
  /// counts under body_too_large when it is still 413.
  /// Refusals made by the server's own handlers (pre-routing: several Content-Length, a
  /// declared body over the limit, 401, 411) are not counted here.
  uint64_t refused(std::string_view reason) const;
  /// refused("headers_too_large") and refused("timeout"), the first version's two counters.
  uint64_t refused_too_large() const { return refused("headers_too_large"); }
  uint64_t refused_timeout() const { return refused("timeout"); }
  /// cpp-httplib's logger, also called for the refusals the guard answers itself (a request
  /// line too long or with an unknown method, a request line that never arrived), which
  /// cpp-httplib never sees as requests. Hides httplib::Server::set_logger.
  GuardedHttpServer& set_logger(httplib::Logger logger);
  /// cpp-httplib's error handler (called for every answer with status >= 400, RFC 9110 15.5),
  /// wrapped so that a 400 or 413 cpp-httplib raised itself, with no guard refusal and no body
  /// from a handler, is counted under bad_request or body_too_large in refused() when the
  /// handler leaves that status.
  /// Hides httplib::Server::set_error_handler; the constructor installs the wrapper with no
  /// handler, so such 400s count even when none is set.
  GuardedHttpServer& set_error_handler(httplib::Server::HandlerWithResponse handler);
  GuardedHttpServer& set_error_handler(httplib::Server::Handler handler);

 private:
  void count_refusal(std::string_view reason);
  bool process_and_close_socket(socket_t sock) override;
  HttpLimits limits_;
  httplib::Logger logger_;
  std::atomic<uint64_t> refused_[kGuardRefusalReasonCount] = {};  // by kGuardRefusalReasons index
};

}  // namespace rtx::serve
