// In-process telemetry bus: publish/subscribe of JSON events by topic, a JSON Lines file sink
// (--events FILE / $RTX_EVENTS) and ScopedSpan (bus "span" event + NVTX range). Not a tracer:
// CUPTI and trace files live elsewhere (rtx-trace).
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace rtx::telemetry {

/// Topic names (docs/architecture.md, "Telemetry topics"). Subscribers may also use "*" for every topic.
namespace topic {
inline constexpr const char* compiler_pass = "compiler.pass";
inline constexpr const char* kernel_launch = "kernel.launch";
inline constexpr const char* occ_profile = "occ_profile";
inline constexpr const char* alloc_frag = "alloc.frag";
inline constexpr const char* graph_capture = "graph.capture";
inline constexpr const char* dist_collective = "dist.collective";
inline constexpr const char* serve_scheduler = "serve.scheduler";
inline constexpr const char* bench_result = "bench.result";
inline constexpr const char* span = "span";
}  // namespace topic

/// Schema tag written in every event ("rtx.events.v1").
inline constexpr const char* kEventsSchema = "rtx.events.v1";

/// True when at least one subscriber or the file sink is attached: one relaxed atomic load.
/// The zero-cost pattern for publishers is to test this BEFORE building the JSON fields:
///   if (rtx::telemetry::enabled()) rtx::telemetry::publish(topic::kernel_launch, {{"op", name}});
/// or use RTX_PUBLISH(topic, fields), which expands to exactly that.
bool enabled() noexcept;

/// Publish an event. The bus stamps it and delivers
///   {"schema","topic","time_ns" (steady clock ns since process start),"unix_ns" (wall clock),
///    "seed" (set_run_seed),"hw" {arch, driver, rtx_sha, digest},"pid","tid","fields": <fields>}
/// synchronously to every matching subscriber (in the publisher's thread) and to the file sink.
/// Returns immediately when !enabled(). Thread-safe. A throwing subscriber is isolated: its
/// exception is swallowed so publishers never fail because of telemetry.
void publish(const std::string& topic, nlohmann::json fields);

/// Subscriber callback: receives the full stamped event.
using Callback = std::function<void(const nlohmann::json& event)>;
/// Subscribe to `topic` (exact name) or "*" (all); returns an id > 0 for unsubscribe. Thread-safe.
/// Callbacks may publish or (un)subscribe themselves.
uint64_t subscribe(const std::string& topic, Callback cb);
/// Stop delivery to subscription `id`; after it returns no new delivery to it starts (one already
/// running in another thread may finish). Unknown ids are ignored.
void unsubscribe(uint64_t id);

/// Seed recorded in every event (and artifact) of this run.
void set_run_seed(uint64_t seed) noexcept;
uint64_t run_seed() noexcept;

/// Open the JSON Lines sink: append mode, line-buffered, one JSON object per line, written
/// under a lock (thread-safe), flushed and closed at exit or by close_event_file(). Replaces an
/// open sink. Throws rtx::Error(Environment) naming the path when it cannot be opened.
void open_event_file(const std::string& path);
/// Flush and close the sink (no-op when none is open).
void close_event_file();
/// Path of the open sink, "" when none.
std::string event_file();
/// Tool start-up: set the run seed and open the sink from `events_flag` (--events) or, when
/// that is empty, $RTX_EVENTS (nothing when both are empty). Errors as open_event_file.
void init_from_options(const std::string& events_flag, uint64_t seed);

/// Steady-clock nanoseconds since process start (the bus's time_ns).
uint64_t now_ns() noexcept;
/// Wall-clock nanoseconds since the Unix epoch.
uint64_t unix_now_ns() noexcept;
/// Kernel thread id (gettid) of the calling thread, as written in events.
uint64_t thread_id() noexcept;

/// RAII op span: on destruction publishes topic "span" with fields
/// {"name","begin_ns","end_ns","dur_ns","tid","args"} when the bus is enabled, and (CUDA builds)
/// brackets the scope in an NVTX range of the same name (nvtxRangePushA / nvtxRangePop) so
/// Nsight Systems shows it. Build `args` only when enabled() (it is evaluated by the caller):
///   ScopedSpan s("layer.3", enabled() ? nlohmann::json{{"layer", 3}} : nlohmann::json());
class ScopedSpan {
 public:
  explicit ScopedSpan(std::string name, nlohmann::json args = nullptr);
  ~ScopedSpan();
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

 private:
  std::string name_;
  nlohmann::json args_;
  uint64_t begin_ns_;
  bool record_;
};

/// Name of a model layer's span, "layer.<index>" (engine spans: forward > layer.N > attn|mlp >
/// kernel), so traces and flamegraphs tell the layers apart.
std::string layer_span_name(int index);

}  // namespace rtx::telemetry

/// Publish only when the bus is enabled; `fields` is not evaluated otherwise.
#define RTX_PUBLISH(topic_name, ...)                                           \
  do {                                                                         \
    if (::rtx::telemetry::enabled()) ::rtx::telemetry::publish((topic_name), __VA_ARGS__); \
  } while (0)
