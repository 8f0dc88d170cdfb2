// The guarded connection loop of rtx-serve's HTTP server (http_guard.hpp): a buffered socket
// stream that counts request-header bytes and lines and enforces the header and request
// deadlines, and the keep-alive loop that drives cpp-httplib's process_request over it.
#include "http_guard.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

namespace rtx::serve {

namespace {

using Clock = std::chrono::steady_clock;

thread_local GuardRefusal t_refusal = GuardRefusal::None;
thread_local bool t_close_after = false;
thread_local Clock::time_point t_request_start = Clock::now();
thread_local socket_t t_sock = INVALID_SOCKET;  // the connection this thread is serving

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
/// empty line that ends a request's headers it counts bytes and lines against the limits, and
/// every read of a request is bounded by its deadlines. A refused read returns -1 (cpp-httplib
/// then answers through the error handler, which reads current_guard_refusal()).
class GuardStream final : public httplib::Stream {
 public:
  GuardStream(socket_t sock, const HttpLimits& l, int read_timeout_ms, int write_timeout_ms)
      : sock_(sock), limits_(l), read_timeout_ms_(read_timeout_ms), write_timeout_ms_(write_timeout_ms), buf_(16 << 10) {}

  /// Start a request: header counters and deadlines from now.
  void begin_request() {
    in_headers_ = true;
    header_bytes_ = header_lines_ = 0;
    line_bytes_ = 0;
    prev_ = 0;
    t_close_after = false;
    const auto now = Clock::now();
    t_request_start = now;
    header_deadline_ = now + std::chrono::microseconds(static_cast<int64_t>(limits_.header_timeout_s * 1e6));
    receive_deadline_ = now + std::chrono::microseconds(static_cast<int64_t>(limits_.receive_timeout_s * 1e6));
    t_refusal = GuardRefusal::None;
  }
  bool buffered() const { return pos_ < len_; }

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
    // Deadlines hold however the bytes trickle in (one byte per second keeps a per-read
    // timeout from ever firing).
    const Clock::time_point deadline = in_headers_ ? header_deadline_ : receive_deadline_;
    if (Clock::now() >= deadline) {
      t_refusal = in_headers_ ? GuardRefusal::HeaderTimeout : GuardRefusal::ReceiveTimeout;
      return -1;
    }
    if (!buffered()) {
      // Wait for bytes until the deadline or cpp-httplib's read timeout, whichever comes first.
      const Clock::time_point give_up = std::min(deadline, Clock::now() + std::chrono::milliseconds(read_timeout_ms_));
      for (;;) {
        pollfd p{sock_, POLLIN, 0};
        const int r = ::poll(&p, 1, ms_until(give_up, read_timeout_ms_));
        if (r > 0) break;
        if (r < 0 && errno != EINTR) return -1;
        if (Clock::now() >= deadline) {
          t_refusal = in_headers_ ? GuardRefusal::HeaderTimeout : GuardRefusal::ReceiveTimeout;
          return -1;
        }
        if (Clock::now() >= give_up) return -1;
      }
      ssize_t n;
      do {
        n = ::recv(sock_, buf_.data(), buf_.size(), 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return -1;
      pos_ = 0;
      len_ = static_cast<size_t>(n);
    }
    size_t k = std::min(size, len_ - pos_);
    if (in_headers_) {
      // Hand out bytes up to the end of the headers at most, counting them.
      for (size_t i = 0; i < k; ++i) {
        const char c = buf_[pos_ + i];
        if (++header_bytes_ > limits_.max_header_bytes) {
          t_refusal = GuardRefusal::HeadersTooLarge;
          return -1;
        }
        if (c != '\n') {
          ++line_bytes_;
          prev_ = c;
          continue;
        }
        // Only a line that is exactly CRLF ends the headers, as cpp-httplib reads them (it skips
        // a bare-LF line and reads on): anything else is one more header line, counted.
        const bool blank = line_bytes_ == 1 && prev_ == '\r' && header_lines_ > 0;
        line_bytes_ = 0;
        prev_ = c;
        if (blank) {  // the end of the headers (not counted as a line)
          in_headers_ = false;
          k = i + 1;
          break;
        }
        if (++header_lines_ > limits_.max_header_lines) {
          t_refusal = GuardRefusal::HeadersTooLarge;
          return -1;
        }
      }
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
  int read_timeout_ms_, write_timeout_ms_;
  std::vector<char> buf_;
  size_t pos_ = 0, len_ = 0;
  bool in_headers_ = true;
  size_t header_bytes_ = 0, header_lines_ = 0, line_bytes_ = 0;
  char prev_ = 0;  // the header byte before the current one
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
void close_after_response() { t_close_after = true; }

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
    case GuardRefusal::HeaderTimeout:
      return "request headers did not arrive within " + num(l.header_timeout_s) + " s";
    case GuardRefusal::ReceiveTimeout:
      return "request body did not arrive within " + num(l.receive_timeout_s) + " s of the request's start";
    case GuardRefusal::None:
      break;
  }
  return "";
}

bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  const int read_ms = static_cast<int>(read_timeout_sec_ * 1000 + read_timeout_usec_ / 1000);
  const int write_ms = static_cast<int>(write_timeout_sec_ * 1000 + write_timeout_usec_ / 1000);
  GuardStream strm(sock, limits_, std::max(read_ms, 1), std::max(write_ms, 1));
  t_sock = sock;
  struct Forget {
    ~Forget() { t_sock = INVALID_SOCKET; }
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
    if (!ret && why == GuardRefusal::HeaderTimeout) {
      // The request line itself did not arrive: cpp-httplib wrote nothing; answer 408 here.
      const std::string body =
          nlohmann::json{{"error", {{"message", guard_refusal_message(why, limits_)}, {"type", "invalid_request_error"},
                                    {"param", nullptr}, {"code", "request_timeout"}}}}.dump();
      const std::string head = "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nConnection: close\r\n"
                               "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
      strm.write((head + body).data(), head.size() + body.size());
    }
    if (why == GuardRefusal::HeadersTooLarge) too_large_.fetch_add(1);
    if (why == GuardRefusal::HeaderTimeout || why == GuardRefusal::ReceiveTimeout) timeouts_.fetch_add(1);
    if (!ret || closed || why != GuardRefusal::None || t_close_after) break;
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ret;
}

}  // namespace rtx::serve
