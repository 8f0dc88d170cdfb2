// Telemetry bus: copy-on-write subscriber list, atomic enabled flag, JSON Lines file sink,
// ScopedSpan with NVTX ranges in CUDA builds.
#include "rtx/telemetry/bus.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/core/events.hpp"
#include "rtx/telemetry/hwprofile.hpp"

#ifdef RTX_HAVE_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

namespace rtx::telemetry {
namespace {

struct Sub {
  uint64_t id;
  std::string topic;
  std::shared_ptr<Callback> cb;
};
using SubList = std::vector<Sub>;

struct Bus {
  std::mutex mu;                                                     // guards subs, next_id, sink
  std::shared_ptr<const SubList> subs = std::make_shared<SubList>();  // replaced, never mutated
  uint64_t next_id = 1;
  std::mutex file_mu;  // guards writes to file
  std::FILE* file = nullptr;
  std::string file_path;
  ~Bus() {
    if (file) std::fclose(file);
  }
};

std::atomic<int> g_listeners{0};  // subscribers + (file sink open ? 1 : 0)
std::atomic<uint64_t> g_seed{0};

Bus& bus() {
  static Bus* b = new Bus();  // intentionally leaked: usable from other static destructors
  return *b;
}

/// Closes the sink at normal exit so the last lines reach the disk.
struct ExitFlush {
  ~ExitFlush() { close_event_file(); }
} g_exit_flush;

const nlohmann::json& identity() {
  static const nlohmann::json id = [] {
    nlohmann::json j = identity_json();
    return j;
  }();
  return id;
}

/// The sink of core's event hook (kernel runs, allocator fragmentation): the bus itself.
void core_sink(const char* topic, nlohmann::json&& fields) { publish(topic, std::move(fields)); }

/// Installs or removes core's sink to match the listener count. Called after every change of
/// the count; the mutex and the re-read make the last caller's view win.
void sync_core_sink() {
  static std::mutex mu;
  std::lock_guard<std::mutex> lk(mu);
  core::set_event_sink(g_listeners.load() > 0 ? &core_sink : nullptr);
}

}  // namespace

bool enabled() noexcept { return g_listeners.load(std::memory_order_relaxed) > 0; }

uint64_t now_ns() noexcept { return core::steady_now_ns(); }

uint64_t unix_now_ns() noexcept {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

uint64_t thread_id() noexcept {
  thread_local const uint64_t tid = static_cast<uint64_t>(::syscall(SYS_gettid));
  return tid;
}

void set_run_seed(uint64_t seed) noexcept { g_seed.store(seed, std::memory_order_relaxed); }
uint64_t run_seed() noexcept { return g_seed.load(std::memory_order_relaxed); }

void publish(const std::string& topic, nlohmann::json fields) {
  if (!enabled()) return;
  std::shared_ptr<const SubList> subs;
  std::FILE* file = nullptr;
  Bus& b = bus();
  {
    std::lock_guard<std::mutex> lk(b.mu);
    subs = b.subs;
    file = b.file;
  }
  const uint64_t t_ns = now_ns(), u_ns = unix_now_ns();
  bool matched = false;
  for (const Sub& s : *subs) matched = matched || s.topic == "*" || s.topic == topic;
  nlohmann::json ev;
  if (matched) {
    ev = {{"schema", kEventsSchema},
          {"topic", topic},
          {"time_ns", t_ns},
          {"unix_ns", u_ns},
          {"seed", run_seed()},
          {"hw", identity()},
          {"pid", static_cast<int64_t>(::getpid())},
          {"tid", thread_id()},
          {"fields", std::move(fields)}};
    for (const Sub& s : *subs) {
      if (s.topic != "*" && s.topic != topic) continue;
      try {
        (*s.cb)(ev);
      } catch (...) {
        // Telemetry must never break the publisher; the subscriber's failure is its own.
      }
    }
  }
  if (file) {
    constexpr auto replace = nlohmann::json::error_handler_t::replace;
    std::string line;
    if (matched) {
      line = ev.dump(-1, ' ', false, replace);
    } else {
      // The file-only path (rtx-trace record): the same bytes as ev.dump() (nlohmann writes an
      // object's keys in sorted order), without building the event object or re-serialising
      // the constant hardware identity for every line.
      static const std::string hw = identity().dump(-1, ' ', false, replace);
      line.reserve(hw.size() + 256);
      line += "{\"fields\":";
      line += fields.dump(-1, ' ', false, replace);
      line += ",\"hw\":";
      line += hw;
      line += ",\"pid\":" + std::to_string(::getpid());
      line += ",\"schema\":\"";
      line += kEventsSchema;
      line += "\",\"seed\":" + std::to_string(run_seed());
      line += ",\"tid\":" + std::to_string(thread_id());
      line += ",\"time_ns\":" + std::to_string(t_ns);
      line += ",\"topic\":" + nlohmann::json(topic).dump(-1, ' ', false, replace);
      line += ",\"unix_ns\":" + std::to_string(u_ns) + "}";
    }
    line += '\n';
    std::lock_guard<std::mutex> lk(b.file_mu);
    if (b.file) std::fwrite(line.data(), 1, line.size(), b.file);  // line-buffered: flushed per line
  }
}

uint64_t subscribe(const std::string& topic, Callback cb) {
  if (!cb) throw_usage("telemetry subscribe: empty callback", topic, "pass a callable");
  Bus& b = bus();
  std::lock_guard<std::mutex> lk(b.mu);
  auto next = std::make_shared<SubList>(*b.subs);
  const uint64_t id = b.next_id++;
  next->push_back({id, topic, std::make_shared<Callback>(std::move(cb))});
  b.subs = std::move(next);
  g_listeners.fetch_add(1, std::memory_order_relaxed);
  sync_core_sink();
  return id;
}

void unsubscribe(uint64_t id) {
  Bus& b = bus();
  std::lock_guard<std::mutex> lk(b.mu);
  auto next = std::make_shared<SubList>();
  for (const Sub& s : *b.subs)
    if (s.id != id) next->push_back(s);
  if (next->size() != b.subs->size()) g_listeners.fetch_sub(1, std::memory_order_relaxed);
  b.subs = std::move(next);
  sync_core_sink();
}

void open_event_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (!f)
    throw_env(std::string("cannot open the telemetry events file for appending: ") + std::strerror(errno), path,
              "check that the directory exists and is writable, or drop --events / RTX_EVENTS");
  std::setvbuf(f, nullptr, _IOLBF, 1 << 16);
  identity();  // probe the hardware profile now, not inside the first timed event
  Bus& b = bus();
  std::FILE* old = nullptr;
  {
    std::lock_guard<std::mutex> lk(b.mu);
    std::lock_guard<std::mutex> lf(b.file_mu);
    old = b.file;
    b.file = f;
    b.file_path = path;
  }
  if (old) std::fclose(old);
  else g_listeners.fetch_add(1, std::memory_order_relaxed);
  sync_core_sink();
}

void close_event_file() {
  Bus& b = bus();
  std::FILE* old = nullptr;
  {
    std::lock_guard<std::mutex> lk(b.mu);
    std::lock_guard<std::mutex> lf(b.file_mu);
    old = b.file;
    b.file = nullptr;
    b.file_path.clear();
  }
  if (old) {
    std::fclose(old);
    g_listeners.fetch_sub(1, std::memory_order_relaxed);
    sync_core_sink();
  }
}

std::string event_file() {
  Bus& b = bus();
  std::lock_guard<std::mutex> lk(b.mu);
  return b.file_path;
}

void init_from_options(const std::string& events_flag, uint64_t seed) {
  set_run_seed(seed);
  std::string path = events_flag;
  if (path.empty())
    if (const char* e = std::getenv("RTX_EVENTS")) path = e;
  if (!path.empty()) open_event_file(path);
}

ScopedSpan::ScopedSpan(std::string name, nlohmann::json args)
    : name_(std::move(name)), args_(std::move(args)), begin_ns_(now_ns()), record_(enabled()) {
#ifdef RTX_HAVE_CUDA
  nvtxRangePushA(name_.c_str());
#endif
}

ScopedSpan::~ScopedSpan() {
#ifdef RTX_HAVE_CUDA
  nvtxRangePop();
#endif
  if (!record_ || !enabled()) return;
  const uint64_t end = now_ns();
  try {
    publish(topic::span, {{"name", std::move(name_)},
                          {"begin_ns", begin_ns_},
                          {"end_ns", end},
                          {"dur_ns", end - begin_ns_},
                          {"tid", thread_id()},
                          {"args", std::move(args_)}});
  } catch (...) {
    // A destructor must not throw; a lost span is acceptable.
  }
}

std::string layer_span_name(int index) { return "layer." + std::to_string(index); }

}  // namespace rtx::telemetry
