// The guarded connection loop of rtx-serve's HTTP server (http_guard.hpp): a buffered socket
// stream that counts request-header bytes and lines, checks their syntax (Host, target form,
// framing; an absolute-form target is rewritten to origin-form), enforces the header and
// request deadlines, and the keep-alive loop that drives cpp-httplib's process_request over it.
#include "http_guard.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "rtx/core/printable.hpp"

namespace rtx::serve {

namespace {

using Clock = std::chrono::steady_clock;

thread_local GuardRefusal t_refusal = GuardRefusal::None;
thread_local bool t_close_after = false;
thread_local Clock::time_point t_request_start = Clock::now();
thread_local socket_t t_sock = INVALID_SOCKET;  // the connection this thread is serving
thread_local std::string t_detail;                // what is wrong, for the syntax refusals
thread_local std::string t_peer;                  // the peer's address, for the access log
class GuardStream;
thread_local const GuardStream* t_stream = nullptr;  // the stream of the connection this thread serves

/// cpp-httplib's limit on one header line and on the request line, CRLF included.
constexpr size_t kLineMax = CPPHTTPLIB_HEADER_MAX_LENGTH;
constexpr size_t kRequestLineMax = CPPHTTPLIB_REQUEST_URI_MAX_LENGTH;
/// Most bytes of one chunk-size line (with its extensions).
constexpr size_t kChunkLineMax = 1024;

/// Whether `c` may be in a token (a method or a header name; RFC 9110 5.6.2).
bool tchar(unsigned char c) {
  return std::isalnum(c) || (c != 0 && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr);
}

/// `s` cut to 60 bytes, bytes outside printable ASCII (and a backslash) as \xNN, for a message.
std::string shown(std::string_view s) { return printable(s, Escape::NonAscii, "\\", 60); }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

/// RFC 3986 2.3 unreserved and 2.2 sub-delims: the bytes a reg-name may have besides %HH.
bool reg_name_char(unsigned char c) {
  return std::isalnum(c) || (c != 0 && std::strchr("-._~!$&'()*+,;=", c) != nullptr);
}

/// Why `v` is not a valid `uri-host [ ":" port ]` (RFC 9110 7.2 and 4.2.1 for Host, RFC 3986
/// 3.2.2-3.2.3: an IP-literal in brackets, an IPv4 address or a reg-name, then digits), or ""
/// when it is. The empty value RFC 9112 3.2 allows for Host is the caller's to accept; here
/// a host must not be empty.
std::string authority_problem(std::string_view v) {
  if (v.find('@') != std::string_view::npos)
    return "user information ('user@') before the host, which HTTP does not take (RFC 9110 4.2.4; RFC 3986 3.2.1)";
  std::string_view host = v, port;
  if (!v.empty() && v.front() == '[') {
    const size_t close = v.find(']');
    if (close == std::string_view::npos) return "an IP literal without its closing ']'";
    const std::string lit(v.substr(1, close - 1));
    const std::string_view after = v.substr(close + 1);
    if (!after.empty() && after.front() != ':') return "bytes after the IP literal's ']' that are not ':port'";
    host = v.substr(0, close + 1);
    port = after.empty() ? after : after.substr(1);
    in6_addr a6{};
    const bool future = lit.size() > 2 && (lit[0] == 'v' || lit[0] == 'V');  // IPvFuture: v1.x
    if (future) {
      const size_t dot = lit.find('.');
      const bool ok = dot != std::string::npos && dot > 1 && dot + 1 < lit.size() &&
                      std::all_of(lit.begin() + 1, lit.begin() + static_cast<std::ptrdiff_t>(dot),
                                  [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }) &&
                      std::all_of(lit.begin() + static_cast<std::ptrdiff_t>(dot) + 1, lit.end(), [](char c) {
                        return c == ':' || reg_name_char(static_cast<unsigned char>(c));
                      });
      if (!ok) return "an IP literal that is neither an IPv6 address nor 'v<hex>.<text>'";
    } else if (::inet_pton(AF_INET6, lit.c_str(), &a6) != 1) {
      return "an IP literal, '[" + shown(lit) + "]', that is not an IPv6 address";
    }
  } else {
    const size_t colon = v.find(':');
    host = v.substr(0, colon);
    port = colon == std::string_view::npos ? std::string_view() : v.substr(colon + 1);
    if (port.find(':') != std::string_view::npos)
      return "more than one ':' (an IPv6 address goes in brackets, as in '[::1]:8080'; RFC 3986 3.2.2)";
    if (host.empty()) return "an empty host name";
    for (size_t i = 0; i < host.size(); ++i) {
      const auto c = static_cast<unsigned char>(host[i]);
      if (c == '%') {
        if (i + 2 >= host.size() || !std::isxdigit(static_cast<unsigned char>(host[i + 1])) ||
            !std::isxdigit(static_cast<unsigned char>(host[i + 2])))
          return "a '%' in the host name not followed by two hex digits";
        i += 2;
      } else if (!reg_name_char(c)) {
        return "'" + shown(std::string_view(host.data() + i, 1)) + "', a byte a host name cannot have";
      }
    }
  }
  if (port.find_first_not_of("0123456789") != std::string_view::npos)
    return "a port, '" + shown(port) + "', that is not a number";
  // port = *DIGIT (RFC 3986 3.2.3): empty is allowed, leading zeros too; a TCP port is 16 bits.
  const size_t nz = port.find_first_not_of('0');
  if (nz != std::string_view::npos && (port.size() - nz > 5 || std::stoul(std::string(port.substr(nz))) > 65535))
    return "a port, '" + shown(port) + "', above 65535, the largest TCP port";
  return "";
}

/// Milliseconds from now until `t`, rounded up (0 when past), capped at `cap_ms`.
int ms_until(Clock::time_point t, int cap_ms) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(t - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left, cap_ms)));
}

std::string addr_text(const sockaddr_storage& a, int& port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf);
    port = ntohs(in->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* in = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &in->sin6_addr, buf, sizeof buf);
    port = ntohs(in->sin6_port);
  }
  return buf;
}

/// A socket stream with a read buffer that watches the bytes it hands to cpp-httplib: until the
/// empty line that ends a request's headers it counts bytes and lines against the limits and
/// checks each line's syntax; a chunked body's framing is checked as it passes; and every read
/// of a request is bounded by its deadlines. A refused read returns -1 (cpp-httplib then
/// answers through the error handler, which reads current_guard_refusal(); a refusal on the
/// request line, which cpp-httplib does not answer, is answered by the connection loop).
class GuardStream final : public httplib::Stream {
 public:
  GuardStream(socket_t sock, const HttpLimits& l, size_t max_body, int read_timeout_ms, int write_timeout_ms)
      : sock_(sock), limits_(l), max_body_(max_body), read_timeout_ms_(read_timeout_ms),
        write_timeout_ms_(write_timeout_ms), buf_(16 << 10) {}

  /// Start a request: header counters and deadlines from now.
  void begin_request() {
    in_headers_ = true;
    header_bytes_ = header_lines_ = 0;
    line_.clear();
    written_ = 0;
    method_.clear();
    target_.clear();
    http10_ = http11_ = false;
    out_.clear();
    out_pos_ = 0;
    host_lines_ = 0;
    te_lines_ = 0;
    te_.clear();
    content_encoding_.clear();
    content_length_.clear();
    has_content_length_ = false;
    chunked_ = false;
    chunk_state_ = ChunkState::Size;
    chunk_left_ = body_bytes_ = 0;
    body_read_ = declared_length_ = 0;
    chunk_line_ = 0;
    chunk_digits_ = 0;
    ext_ = false;
    t_close_after = false;
    t_detail.clear();
    const auto now = Clock::now();
    t_request_start = now;
    header_deadline_ = now + std::chrono::microseconds(static_cast<int64_t>(limits_.header_timeout_s * 1e6));
    receive_deadline_ = now + std::chrono::microseconds(static_cast<int64_t>(limits_.receive_timeout_s * 1e6));
    t_refusal = GuardRefusal::None;
  }
  bool buffered() const { return pos_ < len_ || out_pos_ < out_.size(); }
  /// Whether the current request was handed out to its end: the headers, then the body as framed
  /// (Content-Length bytes, or a chunked body through its last chunk's CRLF).
  bool request_read_whole() const {
    if (in_headers_) return false;
    return chunked_ ? chunk_state_ == ChunkState::Done : body_read_ >= declared_length_;
  }
  /// Bytes written for the current request (0: nothing answered yet).
  size_t written() const { return written_; }
  /// The request line's method and target, as far as they arrived (for the access log of a
  /// refusal the connection loop answers).
  const std::string& method() const { return method_; }
  const std::string& target() const { return target_; }

  bool is_readable() const override { return buffered() || wait(POLLIN, read_timeout_ms_); }
  bool is_writable() const override {
    if (!wait(POLLOUT, write_timeout_ms_)) return false;
    // Alive unless the peer has closed (readable with nothing to read).
    pollfd p{sock_, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0 && (p.revents & POLLIN)) {
      char c;
      const ssize_t n = ::recv(sock_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
      return n != 0;
    }
    return true;
  }

  ssize_t read(char* ptr, size_t size) override {
    if (t_refusal != GuardRefusal::None) return -1;
    // The request line is held back until its LF has arrived, so that request_line() can
    // rewrite its target (absolute-form to origin-form) before cpp-httplib reads it; it is then
    // handed out from out_.
    while (in_headers_ && header_lines_ == 0) {
      if (!fill()) return -1;
      size_t i = 0;
      while (i < len_ - pos_ && header_lines_ == 0)
        if (!header_byte(buf_[pos_ + i++])) return -1;
      pos_ += i;
    }
    if (out_pos_ < out_.size()) {
      const size_t k = std::min(size, out_.size() - out_pos_);
      std::memcpy(ptr, out_.data() + out_pos_, k);
      out_pos_ += k;
      return static_cast<ssize_t>(k);
    }
    if (!fill()) return -1;
    size_t k = std::min(size, len_ - pos_);
    if (in_headers_) {
      // Hand out bytes up to the end of the headers at most, counting and checking them.
      for (size_t i = 0; i < k; ++i) {
        const char c = buf_[pos_ + i];
        if (!header_byte(c)) return -1;
        if (!in_headers_) {  // that byte ended the headers
          k = i + 1;
          break;
        }
      }
    } else if (chunked_) {
      for (size_t i = 0; i < k; ++i)
        if (!chunk_byte(buf_[pos_ + i])) return -1;
    } else {
      body_read_ += k;
    }
    std::memcpy(ptr, buf_.data() + pos_, k);
    pos_ += k;
    return static_cast<ssize_t>(k);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!wait(POLLOUT, write_timeout_ms_)) return -1;
    ssize_t n;
    do {
      n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n > 0) written_ += static_cast<size_t>(n);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&a), &len) == 0) ip = addr_text(a, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&a), &len) == 0) ip = addr_text(a, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  enum class ChunkState { Size, SizeTail, SizeLf, Data, DataCr, DataLf, LastCr, LastLf, Done };

  /// Bytes in buf_ to read, waiting for them if there are none, within the current deadline
  /// (which holds however the bytes trickle in: one byte per second keeps a per-read timeout
  /// from ever firing) and cpp-httplib's read timeout. False on a refusal (a missed deadline, or
  /// the read timeout passing without a byte: a request stalled before its deadlines, 408, not
  /// the 400 cpp-httplib would answer for a failed read), end of stream or a socket error. The
  /// connection loop only starts a request once its first bytes are there, so a read that
  /// waits is always inside a request.
  bool fill() {
    const Clock::time_point deadline = in_headers_ ? header_deadline_ : receive_deadline_;
    if (Clock::now() >= deadline) return refuse(in_headers_ ? GuardRefusal::HeaderTimeout : GuardRefusal::ReceiveTimeout);
    if (pos_ < len_) return true;
    // Wait for bytes until the deadline or cpp-httplib's read timeout, whichever comes first.
    const Clock::time_point give_up = std::min(deadline, Clock::now() + std::chrono::milliseconds(read_timeout_ms_));
    for (;;) {
      pollfd p{sock_, POLLIN, 0};
      const int r = ::poll(&p, 1, ms_until(give_up, read_timeout_ms_));
      if (r > 0) break;
      if (r < 0 && errno != EINTR) return false;
      if (Clock::now() >= deadline)
        return refuse(in_headers_ ? GuardRefusal::HeaderTimeout : GuardRefusal::ReceiveTimeout);
      if (Clock::now() >= give_up) {
        char what[160];
        std::snprintf(what, sizeof what, "no byte of the request's %s arrived for %g s (the read timeout)",
                      in_headers_ ? (header_lines_ == 0 ? "request line" : "headers") : "body", read_timeout_ms_ / 1e3);
        return refuse(GuardRefusal::ReadTimeout, what);
      }
    }
    ssize_t n;
    do {
      n = ::recv(sock_, buf_.data(), buf_.size(), 0);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return false;
    pos_ = 0;
    len_ = static_cast<size_t>(n);
    return true;
  }

  bool refuse(GuardRefusal why, std::string detail = {}) {
    t_refusal = why;
    t_detail = std::move(detail);
    return false;
  }

  /// One byte of the request line or headers; false (and a refusal) to stop.
  bool header_byte(char c) {
    if (++header_bytes_ > limits_.max_header_bytes)
      return refuse(header_lines_ == 0 ? GuardRefusal::UriTooLong : GuardRefusal::HeadersTooLarge);
    if (c != '\n') {
      // cpp-httplib refuses a longer line after reading it whole; refuse it as it grows.
      if (header_lines_ == 0 && line_.size() + 1 >= std::min(kRequestLineMax, limits_.max_header_bytes)) {
        if (const size_t sp = line_.find(' '); sp != std::string::npos) method_ = line_.substr(0, sp);
        return refuse(GuardRefusal::UriTooLong);
      }
      if (header_lines_ > 0 && line_.size() + 1 >= kLineMax) return refuse(GuardRefusal::HeaderLineTooLong);
      line_ += c;
      return true;
    }
    // A whole line, its LF not in line_.
    if (header_lines_ == 0) {
      // Empty lines before the request line are skipped, as RFC 9112 2.2 says a server SHOULD
      // (a client may send a CRLF after a POST body); they still count against the byte limit.
      if (line_.empty() || line_ == "\r") {
        line_.clear();
        return true;
      }
      if (!request_line()) return false;
    } else if (line_ == "\r") {  // the end of the headers (not counted as a line)
      in_headers_ = false;
      return end_of_headers();
    } else if (!header_line()) {
      return false;
    }
    line_.clear();
    if (++header_lines_ > limits_.max_header_lines) return refuse(GuardRefusal::HeadersTooLarge);
    return true;
  }

  /// The request line (its LF not in line_): its method and target are kept, and the line to
  /// hand cpp-httplib is put in out_. Everything cpp-httplib's parser would refuse with a bare
  /// 400 is refused here, saying why: other spacing, a bare LF, an HTTP-version that is not
  /// `HTTP/DIGIT.DIGIT` (RFC 9112 2.3; 400), a major version other than 1 (505, RFC 9110
  /// 15.6.6), a method that is not a token (400). HTTP/1.x with x > 1 is handed on as HTTP/1.1
  /// (RFC 9110 2.5). A method cpp-httplib does not know is 501; so is CONNECT and OPTIONS *. A
  /// target that is not origin-form is rewritten or refused (target_form()).
  bool request_line() {
    out_ = line_ + "\n";
    std::string_view l(line_);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    const size_t sp1 = l.find(' ');
    const size_t sp2 = sp1 == std::string_view::npos ? sp1 : l.find(' ', sp1 + 1);
    method_ = std::string(l.substr(0, std::min(sp1, l.size())));
    // request-line = method SP request-target SP HTTP-version (RFC 9112 3): exactly two single
    // spaces. cpp-httplib splits on runs of whitespace, so a line with doubled or trailing
    // spaces or tabs would be served with the checks below skipped (Host, request-target
    // forms, Transfer-Encoding on HTTP/1.0 read the version from this split).
    const bool three_parts = sp1 != std::string_view::npos && sp1 > 0 && sp2 != std::string_view::npos &&
                             sp2 > sp1 + 1 && sp2 + 1 < l.size() &&
                             l.find_first_of(" \t", sp2 + 1) == std::string_view::npos &&
                             l.find('\t') == std::string_view::npos;
    if (!three_parts)
      return refuse(GuardRefusal::BadRequest, "malformed request line '" + shown(l) +
                                                  "': send the method, one space, the target, one space and "
                                                  "HTTP/1.1 (RFC 9112 3)");
    if (line_.back() != '\r')
      return refuse(GuardRefusal::BadRequest, "the request line ends in a bare LF; lines end in CRLF (RFC 9112 2.2)");
    target_ = std::string(l.substr(sp1 + 1, sp2 - sp1 - 1));
    const std::string_view version = l.substr(sp2 + 1);
    // HTTP-version = HTTP-name "/" DIGIT "." DIGIT, HTTP-name = %s"HTTP" (RFC 9112 2.3).
    const auto digit = [](char c) { return c >= '0' && c <= '9'; };
    if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || !digit(version[5]) || version[6] != '.' ||
        !digit(version[7]))
      return refuse(GuardRefusal::BadRequest, "malformed HTTP version '" + shown(version) +
                                                  "' in the request line: send HTTP/1.1 (RFC 9112 2.3)");
    if (version[5] != '1')
      return refuse(GuardRefusal::VersionNotSupported,
                    std::string(version) + " is not supported: this server speaks HTTP/1.1 (and HTTP/1.0) on this "
                                           "connection; send the request as HTTP/1.1 (RFC 9110 15.6.6)");
    // A higher minor version of HTTP/1 is read as the highest this server implements, 1.1
    // (RFC 9110 2.5: "SHOULD process the message as if it were in the highest minor version").
    http10_ = version[7] == '0';
    http11_ = !http10_;
    const std::string_view served = http10_ ? "HTTP/1.0" : "HTTP/1.1";
    const bool token = std::all_of(method_.begin(), method_.end(), [](char c) { return tchar(static_cast<unsigned char>(c)); });
    if (!token)
      return refuse(GuardRefusal::BadRequest, "method '" + shown(method_) +
                                                  "' is not a token (RFC 9110 9.1, 5.6.2); send GET, HEAD or POST");
    // Not PRI: over HTTP/2.0 it is the connection preface (505 above); over HTTP/1.x cpp-httplib
    // would wait for a body until the socket closes, even with no Content-Length.
    static const char* const kKnown[] = {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"};
    const bool known = std::any_of(std::begin(kKnown), std::end(kKnown), [&](const char* m) { return method_ == m; });
    if (!known)
      return refuse(GuardRefusal::NotImplemented,
                    "method '" + shown(method_) + "' is not implemented; this server takes GET, HEAD and POST");
    out_ = method_ + " " + target_ + " " + std::string(served) + "\r\n";
    return target_form(served);
  }

  /// The four forms of request-target (RFC 9112 3.2), for a well-formed request line:
  /// - origin-form (`/path?query`): passed on as it is.
  /// - absolute-form (`http://host:port/path?query`, 3.2.2): "a server MUST accept the
  ///   absolute-form in requests even though most HTTP/1.1 clients will only send [it] to a
  ///   proxy", so it is not refused. cpp-httplib 0.11 takes the whole URI as the path and
  ///   answers 404; the guard rewrites the line to origin-form (the path, "/" when empty, and
  ///   the query) so that it is routed by its path, as the RFC asks. The received Host is then
  ///   to be ignored in favour of the URI's authority: nothing in the server reads Host (it is
  ///   only checked, 3.2), so the rewrite loses nothing. Only http and https URIs are taken;
  ///   user information or an empty host in them is refused (RFC 9110 4.2.1, 4.2.4).
  /// - authority-form (`host:port`, 3.2.3) is for CONNECT only: CONNECT (a tunnel through a
  ///   proxy, RFC 9110 9.3.6) is 501, this server is not a proxy; any other method with it 400.
  /// - asterisk-form (`*`, 3.2.4) is for OPTIONS only: OPTIONS * asks about the server as a
  ///   whole, which is not implemented (501); any other method with it 400.
  /// - a `#fragment` in any form is 400: origin-form is absolute-path [ "?" query ] (3.2.1) and
  ///   absolute-form an absolute-URI (3.2.2, RFC 3986 4.3), neither with a fragment, which a
  ///   client never sends (RFC 9110 7.1). cpp-httplib would cut it off silently.
  bool target_form(std::string_view version) {
    const std::string& t = target_;
    if (const size_t hash = t.find('#'); hash != std::string::npos)
      return refuse(GuardRefusal::BadRequest, "request target '" + shown(t) + "' has a fragment ('" +
                                                  shown(std::string_view(t).substr(hash)) +
                                                  "'): a request target has none (RFC 9112 3.2); leave out the '#...'");
    if (method_ == "CONNECT" && t.front() != '/')
      return refuse(GuardRefusal::NotImplemented, "CONNECT (a tunnel, RFC 9110 9.3.6) is not implemented: this server is "
                                                  "not a proxy; it takes GET, HEAD and POST on its paths");
    if (t.front() == '/') return true;
    if (t == "*") {
      if (method_ == "OPTIONS")
        return refuse(GuardRefusal::NotImplemented, "OPTIONS * (about the whole server, RFC 9112 3.2.4) is not "
                                                    "implemented; this server takes GET, HEAD and POST on its paths");
      return refuse(GuardRefusal::BadRequest,
                    "request target '*' is for OPTIONS only (RFC 9112 3.2.4); send a path, e.g. " + method_ + " /health");
    }
    const size_t sep = t.find("://");
    const bool scheme = sep != std::string::npos && sep > 0 && std::isalpha(static_cast<unsigned char>(t[0])) &&
                        std::all_of(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(sep), [](char c) {
                          return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
                        });
    if (!scheme)
      return refuse(GuardRefusal::BadRequest, "request target '" + shown(t) +
                                                  "' is neither a path ('/...') nor an absolute http URI "
                                                  "(RFC 9112 3.2); authority-form is for CONNECT only");
    const std::string name = lower(std::string_view(t).substr(0, sep));
    if (name != "http" && name != "https")
      return refuse(GuardRefusal::BadRequest, "request target '" + shown(t) + "' is a '" + shown(name) +
                                                  "' URI; this server takes paths and http or https URIs");
    const size_t start = sep + 3;
    const size_t end = std::min(t.find_first_of("/?", start), t.size());
    const std::string_view authority = std::string_view(t).substr(start, end - start);
    if (const std::string why = authority_problem(authority); !why.empty())
      return refuse(GuardRefusal::BadRequest, "request target '" + shown(t) + "': its authority '" + shown(authority) +
                                                  "' has " + why);
    std::string origin = t.substr(end);
    if (origin.empty() || origin.front() != '/') origin.insert(0, "/");  // RFC 9112 3.2.1: an empty path is "/"
    out_ = method_ + " " + origin + " " + std::string(version) + "\r\n";
    return true;
  }

  /// A header line (RFC 9112 section 5 and RFC 9110 5.5): CRLF-terminated, a token name
  /// directly followed by ':', no line folding, no control bytes (NUL, CR) in the value.
  bool header_line() {
    const size_t n = header_lines_;  // this line's number (the request line is 0)
    std::string_view l(line_);
    if (l.empty() || l.back() != '\r')
      return refuse(GuardRefusal::BadRequest, "header line " + std::to_string(n) + " ends in a bare LF; lines end in CRLF");
    l.remove_suffix(1);
    if (l.front() == ' ' || l.front() == '\t')
      return refuse(GuardRefusal::BadRequest, "header line " + std::to_string(n) +
                                                  " starts with whitespace: obsolete line folding is not accepted "
                                                  "(RFC 9112 5.2); send each header on one line");
    const size_t colon = l.find(':');
    if (colon == std::string_view::npos)
      return refuse(GuardRefusal::BadRequest, "header line " + std::to_string(n) + " has no colon: '" + shown(l) + "'");
    const std::string_view name = l.substr(0, colon);
    if (name.empty()) return refuse(GuardRefusal::BadRequest, "header line " + std::to_string(n) + " has an empty name");
    if (name.back() == ' ' || name.back() == '\t')
      return refuse(GuardRefusal::BadRequest, "whitespace between the header name '" + shown(trim_ows(name)) +
                                                  "' and its colon (RFC 9112 5.1)");
    for (const char ch : name)
      if (!tchar(static_cast<unsigned char>(ch)))
        return refuse(GuardRefusal::BadRequest, "header name '" + shown(name) + "' has a character not allowed in a name");
    const std::string_view value = trim_ows(l.substr(colon + 1));
    for (const char ch : value) {
      const auto u = static_cast<unsigned char>(ch);
      if ((u < 0x20 && u != '\t') || u == 0x7f) {
        char what[32];
        std::snprintf(what, sizeof what, u == 0 ? "a NUL byte" : u == '\r' ? "a bare CR" : "control byte 0x%02X", u);
        return refuse(GuardRefusal::BadRequest, "header '" + shown(name) + "' has " + what + " in its value");
      }
    }
    const std::string key = lower(name);
    if (key == "host") {
      // RFC 9112 3.2: more than one Host line, or an invalid value, is 400 for any request.
      if (++host_lines_ > 1)
        return refuse(GuardRefusal::BadRequest, "Host sent " + std::to_string(host_lines_) +
                                                    " times; send it once (RFC 9112 3.2)");
      if (!value.empty())  // empty is what a client sends for a URI without an authority (3.2)
        if (const std::string why = authority_problem(value); !why.empty())
          return refuse(GuardRefusal::BadRequest, "Host '" + shown(value) + "' is not a valid host[:port] (RFC 9112 3.2, "
                                                      "RFC 3986 3.2.2): it has " + why);
    } else if (key == "transfer-encoding") {
      ++te_lines_;
      te_ = std::string(value);
    } else if (key == "content-encoding") {
      content_encoding_ = std::string(value);
    } else if (key == "content-length") {
      has_content_length_ = true;
      content_length_ = std::string(value);
    }
    return true;
  }

  /// Once all headers are in: the Host an HTTP/1.1 request must have (RFC 9112 3.2; HTTP/1.0
  /// may leave it out), and the body's framing and coding (RFC 9112 6.1, 6.3).
  bool end_of_headers() {
    if (http11_ && host_lines_ == 0)
      return refuse(GuardRefusal::BadRequest, "no Host header: an HTTP/1.1 request must have one (RFC 9112 3.2), "
                                              "e.g. 'Host: localhost:8080'");
    if (has_content_length_ && content_length_.find_first_not_of("0123456789") != std::string::npos)
      return refuse(GuardRefusal::BadFraming, "Content-Length '" + shown(content_length_) + "' is not a byte count");
    if (te_lines_ > 0) {
      if (te_lines_ > 1)
        return refuse(GuardRefusal::BadFraming,
                      "Transfer-Encoding sent " + std::to_string(te_lines_) + " times; send it once, as 'chunked'");
      if (http10_)
        return refuse(GuardRefusal::BadFraming, "Transfer-Encoding in an HTTP/1.0 request (RFC 9112 6.1); "
                                                "use HTTP/1.1 or Content-Length");
      std::vector<std::string> codings;
      std::string_view rest(te_);
      while (!rest.empty()) {
        const size_t comma = rest.find(',');
        const std::string_view one = trim_ows(rest.substr(0, comma));
        if (!one.empty()) codings.push_back(lower(one));
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      }
      const auto n_chunked = std::count(codings.begin(), codings.end(), "chunked");
      if (codings.empty() || codings.back() != "chunked" || n_chunked != 1)
        return refuse(GuardRefusal::BadFraming, "Transfer-Encoding '" + shown(te_) +
                                                    "': chunked must be the last coding, and only once (RFC 9112 6.1); "
                                                    "the body's length cannot be known");
      if (codings.size() > 1)
        return refuse(GuardRefusal::NotImplemented, "transfer coding '" + shown(codings.front()) +
                                                        "' is not implemented; send 'Transfer-Encoding: chunked' "
                                                        "alone, or a Content-Length");
      chunked_ = true;
    }
    // Digits only (checked above); past 19 digits it is more than any body this server reads.
    if (has_content_length_ && !chunked_)
      declared_length_ = content_length_.size() > 19 ? UINT64_MAX : std::strtoull(content_length_.c_str(), nullptr, 10);
    const bool body = chunked_ || (has_content_length_ && content_length_.find_first_not_of('0') != std::string::npos);
    if (body && !content_encoding_.empty() && lower(content_encoding_) != "identity")
      return refuse(GuardRefusal::UnsupportedEncoding,
                    "Content-Encoding '" + shown(content_encoding_) + "' is not supported; send the body uncompressed");
    return true;
  }

  /// One byte of a chunked body (RFC 9112 7.1): hex size [; extensions] CRLF, data CRLF, ...,
  /// 0 CRLF CRLF. cpp-httplib reads a size with strtoul (so "-1d" is a huge chunk it waits
  /// for), ends the body at a chunk not followed by CRLF, and bounds nothing: all refused here.
  bool chunk_byte(char c) {
    const auto bad = [&](const std::string& what) { return refuse(GuardRefusal::BadFraming, "chunked body: " + what); };
    switch (chunk_state_) {
      case ChunkState::Size:
        if (std::isxdigit(static_cast<unsigned char>(c))) {
          if (++chunk_digits_ > 15) return bad("a chunk size of more than 15 hex digits");
          const int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::tolower(c) - 'a' + 10;
          chunk_left_ = chunk_left_ * 16 + static_cast<uint64_t>(d);
          ++chunk_line_;
          return true;
        }
        if (chunk_digits_ == 0) return bad("a chunk size line starts with '" + shown(std::string_view(&c, 1)) + "', not a hex digit");
        chunk_state_ = ChunkState::SizeTail;
        [[fallthrough]];
      case ChunkState::SizeTail:  // whitespace and extensions (";name=value") up to CR
        if (++chunk_line_ > kChunkLineMax) return bad("a chunk size line of more than " + std::to_string(kChunkLineMax) + " bytes");
        if (c == '\r') {
          chunk_state_ = ChunkState::SizeLf;
          return true;
        }
        if (c == '\n') return bad("a chunk size line ends in a bare LF");
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t') return bad("a control byte in a chunk size line");
        if (!ext_ && c != ';' && c != ' ' && c != '\t') return bad("a chunk size is not a hex number");
        if (c == ';') ext_ = true;
        return true;
      case ChunkState::SizeLf:
        if (c != '\n') return bad("a chunk size line's CR is not followed by LF");
        body_bytes_ += chunk_left_;
        if (body_bytes_ > max_body_) return refuse(GuardRefusal::BodyTooLarge, std::to_string(max_body_));
        chunk_state_ = chunk_left_ == 0 ? ChunkState::LastCr : ChunkState::Data;
        chunk_digits_ = 0;
        chunk_line_ = 0;
        ext_ = false;
        return true;
      case ChunkState::Data:
        if (--chunk_left_ == 0) chunk_state_ = ChunkState::DataCr;
        return true;
      case ChunkState::DataCr:
        if (c != '\r') return bad("a chunk's data is longer than its size (no CRLF after it)");
        chunk_state_ = ChunkState::DataLf;
        return true;
      case ChunkState::DataLf:
        if (c != '\n') return bad("a chunk's data is not followed by CRLF");
        chunk_state_ = ChunkState::Size;
        return true;
      case ChunkState::LastCr:
        if (c != '\r') return bad("trailer fields after the last chunk are not accepted");
        chunk_state_ = ChunkState::LastLf;
        return true;
      case ChunkState::LastLf:
        if (c != '\n') return bad("the last chunk is not followed by CRLF");
        chunk_state_ = ChunkState::Done;
        return true;
      case ChunkState::Done:
        return true;  // not reached: cpp-httplib stops reading at the end of the body
    }
    return true;
  }

  bool wait(short events, int timeout_ms) const {
    pollfd p{sock_, events, 0};
    int r;
    do {
      r = ::poll(&p, 1, timeout_ms);
    } while (r < 0 && errno == EINTR);
    return r > 0 && (p.revents & (events | POLLHUP | POLLERR));
  }

  socket_t sock_;
  HttpLimits limits_;
  size_t max_body_;
  int read_timeout_ms_, write_timeout_ms_;
  std::vector<char> buf_;
  size_t pos_ = 0, len_ = 0;
  size_t written_ = 0;
  bool in_headers_ = true;
  size_t header_bytes_ = 0, header_lines_ = 0;
  std::string line_;  // the header line being read, its LF not included
  std::string method_, target_;
  bool http10_ = false, http11_ = false;
  std::string out_;     // the request line as cpp-httplib is to read it (target in origin-form)
  size_t out_pos_ = 0;  // bytes of out_ handed out
  size_t host_lines_ = 0;
  size_t te_lines_ = 0;
  std::string te_, content_encoding_, content_length_;
  bool has_content_length_ = false;
  bool chunked_ = false;
  ChunkState chunk_state_ = ChunkState::Size;
  uint64_t chunk_left_ = 0, body_bytes_ = 0;
  uint64_t body_read_ = 0, declared_length_ = 0;  // Content-Length body: bytes handed out, bytes declared
  size_t chunk_line_ = 0, chunk_digits_ = 0;
  bool ext_ = false;
  Clock::time_point header_deadline_, receive_deadline_;
};

}  // namespace

std::chrono::steady_clock::time_point current_request_start() { return t_request_start; }

bool current_client_gone() {
  if (t_sock == INVALID_SOCKET) return false;
  pollfd p{t_sock, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
  if (!(p.revents & POLLIN)) return false;
  char c;
  const ssize_t n = ::recv(t_sock, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

GuardRefusal current_guard_refusal() { return t_refusal; }
bool current_request_read_whole() { return t_stream && t_stream->request_read_whole(); }
void close_after_response() { t_close_after = true; }
std::string current_client_addr() { return t_peer; }

std::string guard_refusal_message(GuardRefusal r, const HttpLimits& l) {
  auto num = [](double x) {
    std::string s = std::to_string(x);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  };
  switch (r) {
    case GuardRefusal::HeadersTooLarge:
      return "request line and headers exceed " + std::to_string(l.max_header_bytes) + " bytes or " +
             std::to_string(l.max_header_lines) + " lines";
    case GuardRefusal::HeaderLineTooLong:
      return "a header line exceeds " + std::to_string(kLineMax) + " bytes, the limit for one line (all headers: " +
             std::to_string(l.max_header_bytes) + " bytes, " + std::to_string(l.max_header_lines) + " lines)";
    case GuardRefusal::UriTooLong:
      return "the request line exceeds " + std::to_string(std::min(kRequestLineMax, l.max_header_bytes)) +
             " bytes: the URL (path and query) is too long";
    case GuardRefusal::HeaderTimeout:
      return "request headers did not arrive within " + num(l.header_timeout_s) + " s";
    case GuardRefusal::ReceiveTimeout:
      return "request body did not arrive within " + num(l.receive_timeout_s) + " s of the request's start";
    case GuardRefusal::ReadTimeout:
      return t_detail;
    case GuardRefusal::BodyTooLarge:
      return "Request body too large: the chunked body exceeds the limit of " + t_detail + " bytes.";
    case GuardRefusal::BadRequest:
    case GuardRefusal::BadFraming:
    case GuardRefusal::NotImplemented:
    case GuardRefusal::UnsupportedEncoding:
    case GuardRefusal::VersionNotSupported:
      return t_detail;
    case GuardRefusal::None:
      break;
  }
  return "";
}

const char* guard_refusal_reason(GuardRefusal r) {
  switch (r) {
    case GuardRefusal::HeadersTooLarge:
    case GuardRefusal::HeaderLineTooLong: return "headers_too_large";
    case GuardRefusal::UriTooLong: return "uri_too_long";
    case GuardRefusal::HeaderTimeout:
    case GuardRefusal::ReceiveTimeout:
    case GuardRefusal::ReadTimeout: return "timeout";
    case GuardRefusal::BadRequest: return "bad_request";
    case GuardRefusal::BadFraming: return "bad_framing";
    case GuardRefusal::NotImplemented: return "not_implemented";
    case GuardRefusal::UnsupportedEncoding: return "unsupported_encoding";
    case GuardRefusal::BodyTooLarge: return "body_too_large";
    case GuardRefusal::VersionNotSupported: return "version_not_supported";
    case GuardRefusal::None: break;
  }
  return "";
}

GuardAnswer guard_refusal_answer(GuardRefusal r, const HttpLimits& l) {
  GuardAnswer a;
  a.type = "invalid_request_error";
  a.message = guard_refusal_message(r, l);
  switch (r) {
    case GuardRefusal::HeadersTooLarge:
    case GuardRefusal::HeaderLineTooLong: a.status = 431, a.code = "headers_too_large"; break;
    case GuardRefusal::UriTooLong: a.status = 414, a.code = "uri_too_long"; break;
    case GuardRefusal::HeaderTimeout:
    case GuardRefusal::ReceiveTimeout:
    case GuardRefusal::ReadTimeout: a.status = 408, a.code = "request_timeout"; break;
    case GuardRefusal::BadRequest: a.status = 400, a.code = "bad_request"; break;
    case GuardRefusal::BadFraming: a.status = 400, a.code = "bad_framing"; break;
    case GuardRefusal::NotImplemented: a.status = 501, a.code = "not_implemented"; break;
    case GuardRefusal::UnsupportedEncoding: a.status = 415, a.code = "unsupported_content_encoding"; break;
    case GuardRefusal::BodyTooLarge: a.status = 413, a.code = "request_too_large"; break;
    case GuardRefusal::VersionNotSupported: a.status = 505, a.code = "http_version_not_supported"; break;
    case GuardRefusal::None: break;
  }
  return a;
}

namespace {

const char* reason_phrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
  }
}

}  // namespace

GuardedHttpServer::GuardedHttpServer(const HttpLimits& l) : limits_(l) {
  set_error_handler(httplib::Server::HandlerWithResponse{});
  // cpp-httplib adds "Connection: close" or "Keep-Alive" after the handlers ran, beside any
  // Connection header they set: a response that closes the connection says so once, and
  // never offers keep-alive.
  set_post_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    bool close = t_close_after;
    // HTTP/1.0 closes unless the client asked to keep the connection (RFC 9112 9.3); cpp-httplib
    // does close it, but would still offer Keep-Alive.
    if (req.version == "HTTP/1.0" && lower(req.get_header_value("Connection")) != "keep-alive") close = true;
    for (auto [it, end] = res.headers.equal_range("Connection"); it != end; ++it) close = close || lower(it->second) == "close";
    if (!close) return;
    t_close_after = true;
    res.headers.erase("Connection");
    res.headers.erase("Keep-Alive");
    res.headers.emplace("Connection", "close");
  });
}

uint64_t GuardedHttpServer::refused(std::string_view reason) const {
  for (size_t i = 0; i < kGuardRefusalReasonCount; ++i)
    if (reason == kGuardRefusalReasons[i]) return refused_[i].load();
  return 0;
}

void GuardedHttpServer::count_refusal(std::string_view reason) {
  for (size_t i = 0; i < kGuardRefusalReasonCount; ++i)
    if (reason == kGuardRefusalReasons[i]) refused_[i].fetch_add(1);
}

GuardedHttpServer& GuardedHttpServer::set_error_handler(httplib::Server::HandlerWithResponse handler) {
  httplib::Server::set_error_handler(httplib::Server::HandlerWithResponse(
      [this, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
    // cpp-httplib's own 400 (its parser or body reader refused the request, or it routes the
    // method nowhere) and 413 (a form-encoded body over its 8 KiB cap; larger declared bodies
    // are refused before routing) come with no body; a handler's or the guard's answers have one
    // or a refusal.
    const bool library = res.body.empty() && current_guard_refusal() == GuardRefusal::None;
    const int status = res.status;
    const auto r = handler ? handler(req, res) : httplib::Server::HandlerResponse::Unhandled;
    if (library && status == 400 && res.status == 400) count_refusal("bad_request");
    if (library && status == 413 && res.status == 413) count_refusal("body_too_large");
    return r;
  }));
  return *this;
}

GuardedHttpServer& GuardedHttpServer::set_error_handler(httplib::Server::Handler handler) {
  return set_error_handler(httplib::Server::HandlerWithResponse(
      [handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
        handler(req, res);
        return httplib::Server::HandlerResponse::Handled;
      }));
}

GuardedHttpServer& GuardedHttpServer::set_logger(httplib::Logger logger) {
  logger_ = logger;
  httplib::Server::set_logger(std::move(logger));
  return *this;
}

bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  const int read_ms = static_cast<int>(read_timeout_sec_ * 1000 + read_timeout_usec_ / 1000);
  const int write_ms = static_cast<int>(write_timeout_sec_ * 1000 + write_timeout_usec_ / 1000);
  GuardStream strm(sock, limits_, payload_max_length_, std::max(read_ms, 1), std::max(write_ms, 1));
  t_sock = sock;
  t_stream = &strm;
  int peer_port = 0;
  strm.get_remote_ip_and_port(t_peer, peer_port);
  struct Forget {
    ~Forget() {
      t_sock = INVALID_SOCKET;
      t_stream = nullptr;
      t_peer.clear();
    }
  } forget;
  bool ret = false;
  for (size_t left = keep_alive_max_count_; left > 0 && svr_sock_ != INVALID_SOCKET; --left) {
    // Wait for the next request, in slices, so that stop() ends idle keep-alive connections.
    bool ready = strm.buffered();
    const auto idle_end = Clock::now() + std::chrono::seconds(keep_alive_timeout_sec_);
    while (!ready && svr_sock_ != INVALID_SOCKET && Clock::now() < idle_end) {
      pollfd p{sock, POLLIN, 0};
      const int r = ::poll(&p, 1, ms_until(idle_end, 100));
      if (r < 0 && errno != EINTR) break;
      ready = r > 0;
    }
    if (!ready) break;
    strm.begin_request();
    bool closed = false;
    ret = process_request(strm, left == 1, closed, {});
    const GuardRefusal why = current_guard_refusal();
    if (!ret && why != GuardRefusal::None && strm.written() == 0) {
      // Refused on the request line (too long, an unknown method, or it did not arrive):
      // cpp-httplib wrote nothing; answer here.
      const GuardAnswer a = guard_refusal_answer(why, limits_);
      const std::string body = nlohmann::json{{"error", {{"message", a.message}, {"type", a.type}, {"param", nullptr},
                                                         {"code", a.code}}}}.dump(-1, ' ', false,
                                                                                  nlohmann::json::error_handler_t::replace);
      const std::string head = "HTTP/1.1 " + std::to_string(a.status) + " " + reason_phrase(a.status) +
                               "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
                               std::to_string(body.size()) + "\r\n\r\n";
      // A response to HEAD has no content (RFC 9110 9.3.2); its Content-Length still says what
      // a GET would get.
      const std::string out = strm.method() == "HEAD" ? head : head + body;
      strm.write(out.data(), out.size());
      if (logger_) {
        httplib::Request req;
        req.remote_addr = t_peer;
        req.method = strm.method();
        req.path = strm.target().substr(0, strm.target().find('?'));
        httplib::Response res;
        res.status = a.status;
        logger_(req, res);
      }
    }
    if (why != GuardRefusal::None) count_refusal(guard_refusal_reason(why));  // each refused request once
    if (!ret || closed || why != GuardRefusal::None || t_close_after) break;
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ret;
}

}  // namespace rtx::serve
