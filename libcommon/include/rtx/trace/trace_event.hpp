// Chrome Trace Event Format: the event model, a streaming reader (object and array forms,
// gzip), a streaming writer (object form, ts/dur in us relative to the trace start, gzip) and
// a validator of the format's rules. Spec: "Trace Event Format" (Google, Duncan/Sadakane),
// https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace rtx::trace {

/// Schema tag of traces rtx writes (top-level "schema" key; viewers ignore it).
inline constexpr const char* kTraceSchema = "rtx.trace.v1";

/// No exact ns time (Event::ts_ns / dur_ns): absent, or not representable in int64 ns.
inline constexpr int64_t kNoNs = std::numeric_limits<int64_t>::min();

/// One trace event. Times are microseconds (the format's unit), as in the file: relative to
/// the trace start, or absolute (Kineto / PyTorch profiler and perf converters write us since
/// the Unix epoch, about 1.7e15); `ts` is NaN when the event had none (metadata), `dur` is
/// negative when absent. A double holds such an epoch ts only to 0.25 us, so the reader also
/// keeps the exact integer ns of the file's decimal text in ts_ns / dur_ns (kNoNs when absent
/// or beyond int64 ns); code that changes ts/dur leaves them stale and should reset them.
/// time_ns() picks the exact value when there is one.
struct Event {
  char ph = 'X';                 ///< phase: X B E i I C M s t f b e n ...
  std::string name, cat;
  double ts = std::numeric_limits<double>::quiet_NaN();  ///< us
  double dur = -1;               ///< us; X only
  int64_t ts_ns = kNoNs;         ///< ts in exact ns from the file's text (kNoNs: none)
  int64_t dur_ns = kNoNs;        ///< dur in exact ns from the file's text (kNoNs: none)
  int64_t pid = 0, tid = 0;
  std::string id;                ///< flow/async id as text ("" = none)
  std::string bp;                ///< flow binding point ("e": enclosing slice)
  std::string scope;             ///< instant scope "g" | "p" | "t" ("" = none)
  nlohmann::json args;           ///< null or an object
};

/// Top-level facts of a trace file.
struct TraceInfo {
  bool array_form = false;       ///< JSON array form (no traceEvents object)
  std::string display_time_unit; ///< "ms" | "ns" | ""
  std::string schema;            ///< "schema" key when present
  nlohmann::json other_data;     ///< "otherData" object or null
  uint64_t events = 0;           ///< events delivered
  /// Names interned for string pids/tids (torch writes tid "stream 7"): id -> text.
  std::vector<std::pair<int64_t, std::string>> string_ids;
};

struct ReadOptions {
  /// Keep `args` of every event (false: only of M and C events, which need them): saves
  /// memory and time when only names and times matter (flame graphs, stats).
  bool keep_args = true;
};

/// Stream the events of a Chrome trace file (.json or .json.gz by content; "-" = stdin) to
/// `on_event` in file order, holding one event at a time. Accepts the object form
/// ({"traceEvents": [...], ...}) and the array form ([...], whose closing "]" the spec lets
/// a writer omit). String pid/tid values are mapped to ids >= 2^40 (listed in TraceInfo).
/// Errors: rtx::Error(Input) naming the file, byte offset and event index for invalid or
/// truncated JSON, a non-object event, a non-numeric ts/dur/pid/tid.
TraceInfo read_trace(const std::string& path, const std::function<void(Event&&)>& on_event,
                     const ReadOptions& opt = {});

/// Largest |time| in ns that the analyses (stats, fold, validate) accept: 4e18 ns = 4e15 us
/// (126.8 years: absolute Unix-epoch times until 2096, durations as long), so that a start
/// plus a duration stays inside int64 ns.
inline constexpr int64_t kMaxAbsNs = 4000000000000000000;

/// A time of an event in integer ns: `exact_ns` when it is not kNoNs (the reader's ts_ns /
/// dur_ns), else llround(us * 1000). False when missing (NaN), not finite or beyond
/// +-kMaxAbsNs; `ns` is then unchanged.
bool time_ns(double us, int64_t exact_ns, int64_t& ns);

/// Decimal text of a JSON number in us ("1733400000123456.789", "12", "1.5e3") to integer ns,
/// exactly (half away from zero below 1 ns). False when it is not a JSON number or the
/// result does not fit int64.
bool decimal_us_to_ns(const std::string& text, int64_t& ns);

/// A whole trace in memory (merge, validation, tests).
struct Trace {
  TraceInfo info;
  std::vector<Event> events;
};
/// read_trace into memory.
Trace load_trace(const std::string& path, const ReadOptions& opt = {});

/// One broken rule of the Trace Event Format.
struct Violation {
  size_t index = 0;      ///< event index in file order
  std::string rule;      ///< short tag: "x-dur", "be-nesting", "flow-pair", "phase", "ts", "x-nesting", "metadata", "counter"
  std::string message;   ///< human sentence naming the event
};
/// Check the format's rules: every event but M has a numeric ts; X has dur >= 0; B/E nest
/// per (pid, tid): taken in timestamp order (a stable sort per thread: the format does not
/// require B/E in file order, speedscope and Perfetto sort them too), an E closes the
/// innermost open B, with the same name when the E names one; X slices on one thread nest or
/// are disjoint (1 ns slack); flow events s/t/f pair by (cat, id), a step or end after its
/// start, bp absent or "e", and a start is followed by a step (t) or an end (f) (s then t
/// without f is a drawn flow, as in Perfetto); M events are known names with args; C args are
/// numbers; the phase is known. Times are compared in integer ns (time_ns), so absolute epoch
/// timestamps compare exactly. Returns every violation (empty = valid), by event index.
std::vector<Violation> validate(const std::vector<Event>& events);

/// Shortest decimal text of `us` with at most 3 fractional digits (ns precision): 12.5, 3, 0.001.
std::string format_us(double us);
/// Integer ns as exact decimal us text, shortest: 1700000000000000001 -> "1700000000000000.001".
std::string format_ns_as_us(int64_t ns);
/// Append `s` as a JSON string literal (quotes added; invalid UTF-8 becomes U+FFFD).
void append_json_string(std::string& out, const std::string& s);

/// Writes a trace in the object form, one event per line, streaming (constant memory):
///   {"traceEvents":[ ...events... ],"displayTimeUnit":"ns","schema":"rtx.trace.v1","otherData":{...}}
/// The file appears atomically at commit(); gzip when `gzip` (or the path ends in .gz).
class TraceWriter {
 public:
  struct Options {
    bool gzip = false;
    std::string display_time_unit = "ns";
    nlohmann::json other_data = nlohmann::json::object();
  };
  TraceWriter(const std::string& path, Options opt);
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;
  /// Append one event (args dumped as given). ts/dur are written from ts_ns/dur_ns when set
  /// (exact), else from ts/dur.
  void add(const Event& e);
  /// Metadata helpers: ph "M" process_name / thread_name / *_sort_index.
  void process_name(int64_t pid, const std::string& name);
  void thread_name(int64_t pid, int64_t tid, const std::string& name);
  void process_sort_index(int64_t pid, int64_t index);
  void thread_sort_index(int64_t pid, int64_t tid, int64_t index);
  /// Close the array, write the trailer and make the file visible. Errors as ByteWriter.
  void commit();
  uint64_t events_written() const { return count_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  Options opt_;
  std::string line_;
  uint64_t count_ = 0;
};

}  // namespace rtx::trace
