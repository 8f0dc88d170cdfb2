// Events from the modules below telemetry (core, kernels): kernel runs and the caching
// allocator's fragmentation reach the telemetry bus through one sink that the bus installs
// while it has listeners. Core cannot include telemetry (the layering of
// docs/architecture.md), so the dependency is inverted: core owns the hook and the clock,
// telemetry owns the bus, its file sink and its subscribers.
//
// Cost when nothing listens: events_enabled() is one relaxed atomic load and one
// thread-local read; KernelRun then records nothing (no clock read, no allocation).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <utility>

namespace rtx::core {

/// Receives an event: `topic` (a telemetry topic name, e.g. "kernel.launch") and its fields.
/// Must not throw (exceptions are swallowed by emit_event).
using EventSink = void (*)(const char* topic, nlohmann::json&& fields);

/// Install `sink` (or remove it with nullptr). The telemetry bus calls this whenever its
/// listener count crosses zero; tests may install their own. Thread-safe.
void set_event_sink(EventSink sink) noexcept;

/// True when a sink is installed and the calling thread has not muted events (MuteEvents).
bool events_enabled() noexcept;

/// Deliver an event to the sink; no-op when none is installed or the thread is muted.
/// Never throws.
void emit_event(const char* topic, nlohmann::json&& fields) noexcept;

/// Steady-clock nanoseconds since process start: the time base of every event and span
/// (telemetry::now_ns is this clock).
uint64_t steady_now_ns() noexcept;

/// Mutes events on the calling thread while alive (nestable). rtx-bench's timed loops use it so
/// that tracing does not add a publish to every timed kernel run.
class MuteEvents {
 public:
  MuteEvents() noexcept;
  ~MuteEvents();
  MuteEvents(const MuteEvents&) = delete;
  MuteEvents& operator=(const MuteEvents&) = delete;
};

/// One kernel run, as an RAII record. When events are enabled at construction, the
/// destructor emits topic "kernel.launch" with fields
///   {"name": op, "variant": variant, "dtype": dtype, "dims": {dim: value...}, "begin_ns",
///    "end_ns", "dur_ns"}
/// (steady_now_ns times, CPU wall time of the call: for an asynchronous CUDA launch, the launch
/// itself). `op` and `variant` must outlive the record (string literals); at most 8 dims are
/// kept. Place it at the top of a public kernel entry point: a call that throws on bad
/// arguments still records its (short) time.
class KernelRun {
 public:
  using Dim = std::pair<const char*, int64_t>;
  KernelRun(const char* op, const char* variant, std::initializer_list<Dim> dims, const char* dtype = "f32") noexcept;
  ~KernelRun();
  KernelRun(const KernelRun&) = delete;
  KernelRun& operator=(const KernelRun&) = delete;
  /// Change the variant after construction (when the path taken is known only later).
  void set_variant(const char* variant) noexcept { variant_ = variant; }

 private:
  static constexpr int kMaxDims = 8;
  const char* op_;
  const char* variant_;
  const char* dtype_;
  Dim dims_[kMaxDims];
  int ndims_ = 0;
  uint64_t begin_ns_ = 0;
  bool on_ = false;
};

}  // namespace rtx::core
