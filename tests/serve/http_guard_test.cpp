// The guard (libcommon/src/serve/http_guard.cpp) derives from httplib::Server and reaches into
// what cpp-httplib 0.11 leaves protected: process_request, svr_sock_, keep_alive_max_count_,
// keep_alive_timeout_sec_, read/write_timeout_*_ and payload_max_length_, and replaces the
// private virtual process_and_close_socket. A newer cpp-httplib may rename, move or stop
// honouring any of them; this test drives each over a real loopback connection (no model, no
// engine) so such an upgrade fails here, by name, and not in production. The pinned version
// is checked too (CMakeLists.txt: RTX_HTTPLIB_VERSION).
#include "serve/http_guard.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

using namespace rtx::serve;
using Clock = std::chrono::steady_clock;

namespace {

/// A server on 127.0.0.1 (any port) with GET /ok and rtx-serve's answer to a guard refusal.
struct Running {
  GuardedHttpServer http;
  int port = 0;
  std::thread thread;
  explicit Running(const HttpLimits& l, void (*configure)(GuardedHttpServer&) = nullptr) : http(l) {
    http.Get("/ok", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok", "text/plain"); });
    http.set_error_handler([this](const httplib::Request&, httplib::Response& res) {
      if (const GuardRefusal why = current_guard_refusal(); why != GuardRefusal::None) {
        const GuardAnswer a = guard_refusal_answer(why, http.limits());
        res.status = a.status;
        res.set_content(a.message, "text/plain");
        res.set_header("Connection", "close");
        close_after_response();
      }
    });
    if (configure) configure(http);
    port = http.bind_to_any_port("127.0.0.1");
    REQUIRE(port > 0);
    thread = std::thread([this] { http.listen_after_bind(); });
    for (int i = 0; i < 200 && !http.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    REQUIRE(http.is_running());
  }
  ~Running() {
    http.stop();
    thread.join();
  }
};

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

void send_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;  // the server may close early (a refusal): what it answered is read next
    off += static_cast<size_t>(n);
  }
}

/// Everything the server sends until it closes the connection, or until `limit_s` passes.
/// `closed` says which.
std::string read_until_close(int fd, double limit_s, bool& closed) {
  std::string out;
  const auto end = Clock::now() + std::chrono::duration<double>(limit_s);
  closed = false;
  while (Clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      closed = true;
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

const std::string kGet = "GET /ok HTTP/1.1\r\nHost: localhost\r\n\r\n";

}  // namespace

TEST_CASE("cpp-httplib is the pinned version http_guard.cpp was written against", "[cpu][serve]") {
  INFO("cpp-httplib " CPPHTTPLIB_VERSION " found; http_guard.cpp relies on " RTX_HTTPLIB_VERSION
       "'s protected members: review it before moving the pin");
  CHECK(std::string(CPPHTTPLIB_VERSION) == RTX_HTTPLIB_VERSION);
}

TEST_CASE("http guard over cpp-httplib: process_request serves; keep_alive_max_count_ ends the connection",
          "[cpu][serve]") {
  Running s(HttpLimits{}, [](GuardedHttpServer& h) { h.set_keep_alive_max_count(2); });
  const int fd = connect_to(s.port);
  send_all(fd, kGet + kGet + kGet);  // three pipelined requests, two allowed per connection
  bool closed = false;
  const std::string got = read_until_close(fd, 5, closed);
  ::close(fd);
  INFO(got);
  CHECK(closed);
  CHECK(count(got, "HTTP/1.1 200 OK\r\n") == 2);
  CHECK(count(got, "\r\n\r\nok") == 2);
  CHECK(count(got, "Connection: close\r\n") == 1);  // the last one allowed says so
}

TEST_CASE("http guard over cpp-httplib: header bounds give 431 on a real connection", "[cpu][serve]") {
  HttpLimits l;
  l.max_header_lines = 8;
  Running s(l);
  const int fd = connect_to(s.port);
  std::string req = "GET /ok HTTP/1.1\r\nHost: localhost\r\n";
  for (int i = 0; i < 20; ++i) req += "X-Filler-" + std::to_string(i) + ": y\r\n";
  send_all(fd, req + "\r\n");
  bool closed = false;
  const std::string got = read_until_close(fd, 5, closed);
  ::close(fd);
  INFO(got);
  CHECK(got.rfind("HTTP/1.1 431 ", 0) == 0);
  CHECK(closed);
  CHECK(s.http.refused("headers_too_large") == 1);
}

TEST_CASE("http guard over cpp-httplib: payload_max_length_ bounds a chunked body (413)", "[cpu][serve]") {
  Running s(HttpLimits{}, [](GuardedHttpServer& h) {
    h.set_payload_max_length(16);
    h.Post("/ok", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok", "text/plain"); });
  });
  const int fd = connect_to(s.port);
  send_all(fd,
           "POST /ok HTTP/1.1\r\nHost: localhost\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
           "10\r\n0123456789abcdef\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n");
  bool closed = false;
  const std::string got = read_until_close(fd, 5, closed);
  ::close(fd);
  INFO(got);
  CHECK(got.rfind("HTTP/1.1 413 ", 0) == 0);
  CHECK(s.http.refused("body_too_large") == 1);
}

TEST_CASE("http guard over cpp-httplib: read_timeout_*_ reach the guard (408 before the header deadline)",
          "[cpu][serve]") {
  HttpLimits l;
  l.header_timeout_s = 30;
  Running s(l, [](GuardedHttpServer& h) { h.set_read_timeout(0, 300000); });  // 0.3 s
  const int fd = connect_to(s.port);
  const auto t0 = Clock::now();
  send_all(fd, "GET /ok HTTP/1.1\r\nHost: localhost\r\n");  // and then nothing
  bool closed = false;
  const std::string got = read_until_close(fd, 10, closed);
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  ::close(fd);
  INFO(got);
  CHECK(got.rfind("HTTP/1.1 408 ", 0) == 0);
  CHECK(took >= 0.25);
  CHECK(took < 5);  // the 0.3 s read timeout, not the 30 s header deadline
  CHECK(s.http.refused("timeout") == 1);
}

TEST_CASE("http guard over cpp-httplib: stop() (svr_sock_) ends an idle keep-alive connection at once",
          "[cpu][serve]") {
  auto s = std::make_unique<Running>(HttpLimits{}, [](GuardedHttpServer& h) { h.set_keep_alive_timeout(30); });
  const int fd = connect_to(s->port);
  send_all(fd, kGet);
  // The answer, then the connection idles in the guard's keep-alive wait (up to 30 s).
  std::string got;
  for (auto end = Clock::now() + std::chrono::seconds(5);
       Clock::now() < end && got.find("\r\n\r\nok") == std::string::npos;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  REQUIRE(got.find("\r\n\r\nok") != std::string::npos);
  const auto t0 = Clock::now();
  s.reset();  // stop() + join: returns only once the connection's thread has left the loop
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  bool closed = false;
  read_until_close(fd, 2, closed);
  ::close(fd);
  CHECK(closed);
  CHECK(took < 5);
}
