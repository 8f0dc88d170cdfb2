// The event hook of the modules below telemetry, its clock, and KernelRun.
#include "rtx/core/events.hpp"

#include <atomic>
#include <chrono>

namespace rtx::core {
namespace {

// The process-start reference of steady_now_ns (static initialisation of this unit).
const std::chrono::steady_clock::time_point g_start = std::chrono::steady_clock::now();
std::atomic<EventSink> g_sink{nullptr};
thread_local int t_muted = 0;

}  // namespace

void set_event_sink(EventSink sink) noexcept { g_sink.store(sink, std::memory_order_release); }

bool events_enabled() noexcept { return g_sink.load(std::memory_order_relaxed) != nullptr && t_muted == 0; }

void emit_event(const char* topic, nlohmann::json&& fields) noexcept {
  if (t_muted) return;
  const EventSink sink = g_sink.load(std::memory_order_acquire);
  if (!sink) return;
  try {
    sink(topic, std::move(fields));
  } catch (...) {
    // Telemetry must never break the kernel that reported.
  }
}

uint64_t steady_now_ns() noexcept {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - g_start).count());
}

MuteEvents::MuteEvents() noexcept { ++t_muted; }
MuteEvents::~MuteEvents() { --t_muted; }

KernelRun::KernelRun(const char* op, const char* variant, std::initializer_list<Dim> dims, const char* dtype) noexcept
    : op_(op), variant_(variant), dtype_(dtype) {
  if (!events_enabled()) return;
  on_ = true;
  for (const Dim& d : dims) {
    if (ndims_ == kMaxDims) break;
    dims_[ndims_++] = d;
  }
  begin_ns_ = steady_now_ns();
}

KernelRun::~KernelRun() {
  if (!on_) return;
  const uint64_t end = steady_now_ns();
  try {
    nlohmann::json dims = nlohmann::json::object();
    for (int i = 0; i < ndims_; ++i) dims[dims_[i].first] = dims_[i].second;
    emit_event("kernel.launch", {{"name", op_},
                                 {"variant", variant_ ? variant_ : ""},
                                 {"dtype", dtype_ ? dtype_ : ""},
                                 {"dims", std::move(dims)},
                                 {"begin_ns", begin_ns_},
                                 {"end_ns", end},
                                 {"dur_ns", end - begin_ns_}});
  } catch (...) {
    // A destructor must not throw; a lost record is acceptable.
  }
}

}  // namespace rtx::core
