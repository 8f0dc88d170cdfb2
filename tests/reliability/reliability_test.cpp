// Fault injection (issue 10): processes killed with SIGKILL in the middle of store and checkpoint
// writes, a full disk (file-size rlimit) during checkpoint and GGUF writes, and the environment
// errors the tools must report with docs/architecture.md's exit codes (read-only RTX_HOME, missing data
// file, store locked by another process). Children are fork()ed; tools run as subprocesses.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <httplib.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include "rtx/core/error.hpp"
#include "rtx/io/gguf.hpp"
#include "rtx/io/tokenizer.hpp"
#include "rtx/models/checkpoint.hpp"
#include "rtx/models/export.hpp"
#include "rtx/store/store.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace rtx;

namespace {

/// Exit status of a waited-for child: the exit code, or 128 + signal.
int wait_status(pid_t pid) {
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/// Block until the child writes one byte to `fd` (or closes it); false on EOF.
bool wait_ready(int fd) {
  char c = 0;
  return ::read(fd, &c, 1) == 1;
}

int64_t count(store::Store& st, const std::string& table) {
  auto& s = st.prepare("SELECT count(*), coalesce(max(seq), 0) FROM " + table);
  REQUIRE(s.step());
  const int64_t n = s.column_int64(0), mx = s.column_int64(1);
  s.reset();
  CHECK(n == mx);  // rows 1..n: no committed transaction lost in the middle
  return n;
}

/// A gpt2-tiny checkpoint (3.3 M parameters plus AdamW moments: a 40 MB file) whose values
/// are a function of `step`, so a loaded file says which write it came from.
models::Checkpoint make_checkpoint(int step) {
  models::Checkpoint ck;
  ck.model = models::Gpt2Config::preset("gpt2-tiny");
  const size_t n = models::gpt2_num_params(ck.model);
  ck.params.assign(n, 0.001f * static_cast<float>(step));
  for (size_t i = 0; i < n; i += 4099) ck.params[i] = static_cast<float>(i % 97) * 0.01f;
  ck.m.assign(n, 0.5f);
  ck.v.assign(n, 0.25f);
  ck.step = step;
  ck.seed = 42;
  return ck;
}

/// Which step the checkpoint at `path` holds (it must load and verify).
int loaded_step(const std::string& path) {
  const models::Checkpoint ck = models::load_checkpoint(path, true);
  REQUIRE(ck.params.size() == models::gpt2_num_params(ck.model));
  CHECK(ck.params[1] == 0.001f * static_cast<float>(ck.step));
  CHECK(ck.m.size() == ck.params.size());
  return ck.step;
}

/// Files in `dir` whose names start with `prefix`.
size_t files_with_prefix(const std::string& dir, const std::string& prefix) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(prefix, 0) == 0) ++n;
  return n;
}

/// Run `fn` in a child with RLIMIT_FSIZE = `limit` bytes and SIGXFSZ ignored. Returns the
/// child's exit status: 0 success, 3 rtx::Error(Environment), 2 another rtx::Error, 5 any other
/// exception; the error message goes to `msg`.
template <class Fn>
int with_fsize_limit(rlim_t limit, std::string& msg, Fn fn) {
  int p[2];
  REQUIRE(pipe(p) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(p[0]);
    signal(SIGXFSZ, SIG_IGN);
    rlimit r{limit, limit};
    setrlimit(RLIMIT_FSIZE, &r);
    int code = 0;
    std::string m;
    try {
      fn();
    } catch (const Error& e) {
      code = e.category() == ErrorCategory::Environment ? 3 : 2;
      m = e.what();
    } catch (const std::exception& e) {
      code = 5;
      m = e.what();
    }
    if (!m.empty() && ::write(p[1], m.data(), m.size()) < 0) code = 6;
    _exit(code);
  }
  ::close(p[1]);
  char buf[4096];
  ssize_t k;
  msg.clear();
  while ((k = ::read(p[0], buf, sizeof buf)) > 0) msg.append(buf, static_cast<size_t>(k));
  ::close(p[0]);
  return wait_status(pid);
}

/// Rows of `tuning_trials` in the store at `db` (0 when it cannot be read yet), read with a
/// read-only connection while another process may be writing.
int64_t trial_rows(const std::string& db) {
  sqlite3* h = nullptr;
  int64_t n = 0;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(h, 1000);
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(h, "SELECT count(*) FROM tuning_trials", -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
      n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
  }
  sqlite3_close(h);
  return n;
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("store: SIGKILL at random points of a write loop leaves every transaction whole", "[cpu]") {
  const std::string dir = test::temp_dir(), path = dir + "/rtx.db";
  {
    store::Store st(path);
    st.exec("CREATE TABLE fi_a(seq INTEGER PRIMARY KEY, payload TEXT NOT NULL);"
            "CREATE TABLE fi_b(seq INTEGER PRIMARY KEY, payload TEXT NOT NULL);");
  }
  std::mt19937 rng(20240610);
  int64_t last = 0, killed_writing = 0;
  for (int round = 0; round < 24; ++round) {
    int p[2];
    REQUIRE(pipe(p) == 0);
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(p[0]);
      try {
        store::Store st(path);
        auto& q = st.prepare("SELECT coalesce(max(seq), 0) FROM fi_a");
        q.step();
        int64_t next = q.column_int64(0) + 1;
        q.reset();
        if (::write(p[1], "r", 1) != 1) _exit(1);
        const std::string payload(3000, 'x');
        for (;; ++next) {
          {  // one transaction: a row in each table, never one without the other
            store::Transaction tx(st);
            st.prepare("INSERT INTO fi_a(seq, payload) VALUES (?1, ?2)").bind(1, next).bind(2, payload).run();
            st.prepare("INSERT INTO fi_b(seq, payload) VALUES (?1, ?2)").bind(1, next).bind(2, payload).run();
            tx.commit();
          }
          if (next % 7 == 0) st.put_artifact(0, "fi", "rtx.fi.v1", "{\"seq\":" + std::to_string(next) + "}");
        }
      } catch (...) {
        _exit(1);
      }
    }
    ::close(p[1]);
    // Every 4th round the kill may land while the store is being opened; otherwise mid-loop.
    if (round % 4 != 0 && wait_ready(p[0])) ++killed_writing;
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 15000)(rng)));
    ::kill(pid, SIGKILL);
    ::close(p[0]);
    CHECK(wait_status(pid) == 128 + SIGKILL);

    store::Store st(path);  // opens (WAL recovery) after every kill
    const auto ic = st.integrity_check();
    REQUIRE(ic == std::vector<std::string>{"ok"});
    const int64_t a = count(st, "fi_a"), b = count(st, "fi_b");
    CHECK(a == b);
    CHECK(a >= last);  // committed work is never lost
    last = a;
  }
  CHECK(killed_writing >= 15);
  CHECK(last > 0);  // the children did commit work between kills
}

TEST_CASE("tuning: SIGKILL during rtx-tune run; a resumed run continues from the recorded trials", "[cpu]") {
  const std::string dir = test::temp_dir(), db = dir + "/rtx.db";
  // A seeded random search: its path does not depend on timings, so trials recorded before a
  // kill are a prefix of the path the resumed run walks.
  const std::string cmd = test::tool_path("rtx-tune") +
                          " run --op matmul_forward --shape M=200,N=190,K=180 --strategy random --budget 60evals --seed 5"
                          " --min-samples 20 --max-samples 20 --max-time 0.2 --abort-ratio 0 --confirm 0 --json --db " + db +
                          // ctest -j runs other tests beside this one: busy-host trials are
                          // reused and compete like quiet ones, so the resume is deterministic.
                          " --include-busy";
  std::mt19937 rng(77);
  int64_t last_rows = 0;
  for (int round = 0; round < 8; ++round) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", ("exec " + cmd + " >/dev/null 2>&1").c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    // Kill in the middle of the search whatever the machine's load: wait until the child has
    // recorded a new trial (or exited), then a random 0-60 ms more.
    const auto t0 = std::chrono::steady_clock::now();
    auto running = [pid] {
      siginfo_t info{};
      return ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0;
    };
    while (trial_rows(db) <= last_rows && running() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60))
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 60)(rng)));
    ::kill(pid, SIGKILL);
    const int st_code = wait_status(pid);
    CHECK((st_code == 128 + SIGKILL || st_code == 0));
    if (!fs::exists(db)) continue;  // killed before the store was created
    store::Store st(db);
    REQUIRE(st.integrity_check() == std::vector<std::string>{"ok"});
    // Every current profile points at a stored version (the FK holds; no half-made profile).
    auto& orphans = st.prepare(
        "SELECT count(*) FROM profile_current c LEFT JOIN profiles p ON p.key = c.key AND p.version = c.version "
        "WHERE p.id IS NULL");
    REQUIRE(orphans.step());
    CHECK(orphans.column_int64(0) == 0);
    orphans.reset();
    auto& rows = st.prepare("SELECT count(*) FROM tuning_trials");
    REQUIRE(rows.step());
    const int64_t n = rows.column_int64(0);
    rows.reset();
    CHECK(n >= last_rows);  // recorded trials are never lost
    last_rows = n;
  }
  int64_t ok_before = 0;
  {
    store::Store st(db);
    auto& q = st.prepare("SELECT count(*) FROM tuning_trials WHERE status = 'ok'");
    REQUIRE(q.step());
    ok_before = q.column_int64(0);
    q.reset();
  }
  CHECK(ok_before > 0);  // the killed runs did record work
  // The same command again finishes and answers every recorded trial from the store.
  const auto r = test::run(cmd);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto k = nlohmann::json::parse(r.out)["keys"][0];
  CHECK(k["evaluations"] == 60);
  CHECK(k["reused"].get<int64_t>() == std::min<int64_t>(ok_before, 60));
  CHECK(k["reused"].get<int64_t>() + k["measured"].get<int64_t>() == 60);
  CHECK(k["profile_version"].get<int>() >= 1);
  store::Store st(db);
  CHECK(st.integrity_check() == std::vector<std::string>{"ok"});
  auto& q = st.prepare("SELECT count(*) FROM tuning_trials WHERE status = 'ok'");
  REQUIRE(q.step());
  CHECK(q.column_int64(0) == 60);  // one row per configuration: nothing measured twice
  q.reset();
}

TEST_CASE("secrets: the API key is never printed by rtx-serve run, its responses, or rtx-serve bench", "[cpu]") {
  const std::string dir = test::temp_dir();
  const std::string key = "rtx-test-key-5f3a9c0e71";
  int port = 0;
  {  // a free loopback port: bind port 0, read it back, close (the server binds it just after)
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
    ::close(fd);
  }
  const std::string model = test::data_dir() + "/stories260k/tinyllamas-stories-260k-f32.gguf";
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const std::string cmd = "exec " + test::tool_path("rtx-serve") + " -vv run --port " + std::to_string(port) + " -m " + model +
                            " --threads 1 --api-key " + key + " >" + dir + "/serve.out 2>" + dir + "/serve.err";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  struct Reaper {  // the server never outlives a failed check
    pid_t pid;
    ~Reaper() {
      if (pid > 0 && ::kill(pid, SIGKILL) == 0) ::waitpid(pid, nullptr, 0);
    }
  } reaper{pid};
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1);
  bool up = false;
  for (int i = 0; i < 600 && !up; ++i) {
    auto h = c.Get("/health");
    up = h && h->status == 200;
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  INFO("rtx-serve stderr: " << file_bytes(dir + "/serve.err"));
  REQUIRE(up);
  std::string seen;
  // Wrong and missing tokens: 401, and the answer echoes neither the token sent nor the key.
  const std::string body = R"({"prompt": "Once upon a time", "max_tokens": 3})";
  auto wrong = c.Post("/v1/completions", {{"Authorization", "Bearer " + key + "-wrong"}}, body, "application/json");
  INFO("POST /v1/completions: " << httplib::to_string(wrong.error()));
  REQUIRE(wrong);
  CHECK(wrong->status == 401);
  seen += wrong->body;
  for (const auto& [h, v] : wrong->headers) seen += h + v;
  auto none = c.Get("/metrics");
  INFO("GET /metrics: " << httplib::to_string(none.error()));
  REQUIRE(none);
  CHECK(none->status == 401);
  seen += none->body;
  auto metrics = c.Get("/metrics", {{"Authorization", "Bearer " + key}});
  REQUIRE(metrics);
  CHECK(metrics->status == 200);
  seen += metrics->body;
  // The load generator with the key from RTX_API_KEY: its report and artifact carry no key.
  const auto b = test::run(test::tool_path("rtx-serve") + " bench --port " + std::to_string(port) +
                               " -n 3 --max-tokens 4 --prompt Once -o " + dir + "/bench.json",
                           "RTX_API_KEY=" + key);
  INFO(b.err);
  CHECK(b.exit_code == 0);
  seen += b.out + b.err;
  ::kill(pid, SIGTERM);
  CHECK(wait_status(pid) == 0);
  reaper.pid = -1;
  for (const char* f : {"/serve.out", "/serve.err", "/bench.json"}) seen += file_bytes(dir + f);
  // Loopback unless told otherwise: the banner names the address it bound.
  CHECK_THAT(file_bytes(dir + "/serve.err"), Catch::Contains("on http://127.0.0.1:" + std::to_string(port)));
  CHECK(seen.size() > 2000);  // the logs, metrics and reports were read
  CHECK(seen.find("5f3a9c0e71") == std::string::npos);
}

TEST_CASE("checkpoint: SIGKILL during save_checkpoint leaves the old or the new file, never a torn one", "[cpu]") {
  const std::string dir = test::temp_dir(), path = dir + "/ckpt.safetensors";
  const auto t0 = std::chrono::steady_clock::now();
  models::save_checkpoint(path, make_checkpoint(1));
  const double full_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(loaded_step(path) == 1);
  std::mt19937 rng(7);
  int current = 1, replaced = 0, kept = 0;
  for (int round = 0; round < 6; ++round) {
    const int next = current + 1;
    const models::Checkpoint ck = make_checkpoint(next);  // built before fork: the child only writes
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      try {
        models::save_checkpoint(path, ck);
      } catch (...) {
        _exit(1);
      }
      _exit(0);
    }
    const double at = std::uniform_real_distribution<double>(0.05, 1.1)(rng) * full_ms;
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(at * 1000)));
    ::kill(pid, SIGKILL);
    const int status = wait_status(pid);
    CHECK((status == 0 || status == 128 + SIGKILL));
    const int step = loaded_step(path);  // loads and its SHA-256 verifies
    INFO("round " << round << ": killed at " << at << " ms of " << full_ms << " ms");
    CHECK((step == current || step == next));
    if (step == next) {
      ++replaced;
      current = next;
    } else {
      ++kept;
    }
  }
  CHECK(kept >= 1);  // at least one kill landed mid-write (the rest may have finished)
  // A killed writer cannot remove its temp file: such leftovers never carry the final name.
  WARN("temp files left by killed writers: " << files_with_prefix(dir, ".ckpt.safetensors.tmp"));
  CHECK(files_with_prefix(dir, "ckpt.safetensors") == 1);
}

TEST_CASE("disk full (RLIMIT_FSIZE): checkpoint and GGUF writes fail with Error(Environment), old files intact", "[cpu]") {
  const std::string dir = test::temp_dir();
  const std::string ckpt = dir + "/ckpt.safetensors", gguf = dir + "/model.gguf";
  models::save_checkpoint(ckpt, make_checkpoint(3));
  const std::string ckpt_before = file_bytes(ckpt);
  std::string msg;
  const models::Checkpoint bigger = make_checkpoint(4);
  CHECK(with_fsize_limit(1 << 20, msg, [&] { models::save_checkpoint(ckpt, bigger); }) == 3);
  INFO(msg);
  CHECK(msg.find(ckpt) != std::string::npos);
  CHECK(file_bytes(ckpt) == ckpt_before);
  CHECK(loaded_step(ckpt) == 3);
  CHECK(files_with_prefix(dir, ".ckpt.safetensors.tmp") == 0);  // the failed writer cleaned up

  const auto tok = io::make_char_tokenizer_from_text("abcdefgh \n");
  models::Gpt2Config cfg = models::Gpt2Config::preset("gpt2-tiny");
  cfg.vocab_size = 64;
  std::vector<float> params(models::gpt2_num_params(cfg), 0.125f);
  models::export_gpt2_gguf(cfg, params.data(), params.size(), *tok, gguf);
  const std::string gguf_before = file_bytes(gguf);
  REQUIRE(gguf_before.size() > (64u << 10));
  params.assign(params.size(), -0.5f);
  CHECK(with_fsize_limit(64 << 10, msg, [&] {
          models::export_gpt2_gguf(cfg, params.data(), params.size(), *tok, gguf);
        }) == 3);
  INFO(msg);
  CHECK(msg.find(gguf) != std::string::npos);
  CHECK(file_bytes(gguf) == gguf_before);
  CHECK(!io::GgufFile::open(gguf).tensors().empty());  // the old file still parses
}

TEST_CASE("tools: missing data file -> exit 2 naming the file", "[cpu]") {
  const std::string dir = test::temp_dir(), missing = dir + "/no-such-pack.json";
  const auto bench = test::run(test::tool_path("rtx-bench") + " run " + missing + " --json",
                               "RTX_HOME=" + dir + "/home");
  CHECK(bench.exit_code == 2);
  CHECK((bench.out + bench.err).find("no-such-pack.json") != std::string::npos);
  const auto train = test::run(test::tool_path("rtx-train") + " run --data " + dir + "/no-such-data --steps 1 --json",
                               "RTX_HOME=" + dir + "/home");
  CHECK(train.exit_code == 2);
  CHECK((train.out + train.err).find("no-such-data") != std::string::npos);
  const auto imp = test::run(test::tool_path("rtx-tune") + " import " + dir + "/no-such-profile.json --json",
                             "RTX_HOME=" + dir + "/home");
  CHECK(imp.exit_code == 2);
  CHECK((imp.out + imp.err).find("no-such-profile.json") != std::string::npos);
}

TEST_CASE("tools: read-only RTX_HOME -> exit 3 naming the store path", "[cpu]") {
  // A directory the tool's user cannot write. Root ignores modes, so as root the tool runs as
  // `nobody` (setpriv); the folders on the way are made traversable for it.
  const std::string base = test::temp_dir();
  REQUIRE(chmod(base.c_str(), 0755) == 0);
  const std::string home = base + "/ro-home";
  REQUIRE(mkdir(home.c_str(), 0555) == 0);
  std::string prefix;
  if (geteuid() == 0) {
    if (!fs::exists("/usr/bin/setpriv")) {
      WARN("SKIPPED: running as root without setpriv: a read-only folder cannot be simulated");
      return;
    }
    prefix = "/usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups ";
  }
  const std::string profile = test::source_dir() + "/tests/fuzz/corpus/profile/valid.json";
  const auto r = test::run(prefix + test::tool_path("rtx-tune") + " import " + profile + " --force --json",
                           "RTX_HOME=" + home);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 3);
  CHECK((r.out + r.err).find(home) != std::string::npos);
  const auto s = test::run(prefix + test::tool_path("rtx-tune") + " show --json", "RTX_HOME=" + home);
  INFO(s.out << s.err);
  CHECK(s.exit_code == 3);
}

TEST_CASE("tools: a store locked by another process -> busy timeout, then exit 3 'locked'", "[cpu]") {
  const std::string dir = test::temp_dir(), db = dir + "/rtx.db";
  { store::Store st(db); }
  int p[2];
  REQUIRE(pipe(p) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // holds an EXCLUSIVE transaction until killed
    ::close(p[0]);
    try {
      store::Store st(db);
      st.exec("BEGIN EXCLUSIVE");
      if (::write(p[1], "r", 1) != 1) _exit(1);
      for (;;) pause();
    } catch (...) {
      _exit(1);
    }
  }
  ::close(p[1]);
  REQUIRE(wait_ready(p[0]));
  ::close(p[0]);
  const std::string profile = test::source_dir() + "/tests/fuzz/corpus/profile/valid.json";
  const auto t0 = std::chrono::steady_clock::now();
  const auto locked = test::run(test::tool_path("rtx-tune") + " import " + profile + " --force --json --db " + db);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::kill(pid, SIGKILL);
  wait_status(pid);
  INFO(locked.out << locked.err);
  CHECK(locked.exit_code == 3);
  CHECK((locked.out + locked.err).find("locked") != std::string::npos);
  CHECK(waited >= 4.0);  // it waited out the busy timeout (5 s) rather than failing at once
  // Once the other process is gone the same import succeeds: the failure was the lock.
  const auto ok = test::run(test::tool_path("rtx-tune") + " import " + profile + " --force --json --db " + db);
  INFO(ok.out << ok.err);
  CHECK(ok.exit_code == 0);
  store::Store st(db);
  CHECK(st.integrity_check() == std::vector<std::string>{"ok"});
}
