// Chrome Trace Event reader (nlohmann SAX over a chunked, gzip-transparent byte stream),
// streaming writer and rule validator.
#include "rtx/trace/trace_event.hpp"

#include <cctype>
#include <cmath>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <map>
#include <set>
#include <unordered_map>

#include "rtx/core/error.hpp"
#include "rtx/trace/gzip_io.hpp"

namespace rtx::trace {
namespace {

using json = nlohmann::json;

/// Input iterator over a ByteReader for nlohmann's iterator input adapter.
class ByteIter {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;
  ByteIter() = default;
  explicit ByteIter(ByteReader* r) : r_(r) { c_ = static_cast<char>(cur_ = r_->get()); }
  const char& operator*() const { return c_; }
  ByteIter& operator++() {
    cur_ = r_->get();
    c_ = static_cast<char>(cur_);
    return *this;
  }
  bool operator==(const ByteIter& o) const { return at_end() == o.at_end(); }
  bool operator!=(const ByteIter& o) const { return !(*this == o); }

 private:
  bool at_end() const { return r_ == nullptr || cur_ < 0; }
  ByteReader* r_ = nullptr;
  int cur_ = -1;
  char c_ = 0;
};

/// Builds a json value from SAX events (args, otherData) or just counts depth (discard).
struct ValueBuilder {
  bool active = false, discard = false;
  json root;
  std::vector<json*> stack;
  std::string key;
  int depth = 0;
  void begin(bool disc) {
    active = true;
    discard = disc;
    root = json();
    stack.clear();
    depth = 0;
  }
  json* slot() {
    if (stack.empty()) return &root;
    json* top = stack.back();
    if (top->is_array()) {
      top->push_back(json());
      return &top->back();
    }
    return &(*top)[key];
  }
  void value(json v) {
    if (!discard) *slot() = std::move(v);
    if (depth == 0) active = false;
  }
  void start(bool object) {
    if (!discard) {
      json* s = slot();
      *s = object ? json::object() : json::array();
      stack.push_back(s);
    }
    ++depth;
  }
  void end() {
    if (!discard) stack.pop_back();
    if (--depth == 0) active = false;
  }
};

class Sax {
 public:
  Sax(const std::string& path, const std::function<void(Event&&)>& cb, const ReadOptions& opt, TraceInfo& info)
      : path_(path), cb_(cb), opt_(opt), info_(info) {}

  bool null() { return scalar(json(nullptr)); }
  bool boolean(bool v) { return scalar(json(v)); }
  bool number_integer(json::number_integer_t v) {
    if (is_time_key()) {
      int64_t ns = kNoNs;
      if (__builtin_mul_overflow(static_cast<int64_t>(v), int64_t(1000), &ns)) ns = kNoNs;
      (key_ == "ts" ? ev_.ts_ns : ev_.dur_ns) = ns;
    }
    return scalar(json(v));
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (is_time_key()) (key_ == "ts" ? ev_.ts_ns : ev_.dur_ns) = v <= uint64_t(INT64_MAX) / 1000 ? int64_t(v) * 1000 : kNoNs;
    return scalar(json(v));
  }
  bool number_float(json::number_float_t v, const std::string& text) {
    exact_time(text);
    return scalar(json(v));
  }
  bool string(std::string& v) {
    if (b_.active) {
      b_.value(json(std::move(v)));
      return true;
    }
    if (in_event_) return event_string(v);
    if (mode_ == 2 && depth_ == 1) {
      if (key_ == "displayTimeUnit") info_.display_time_unit = v;
      else if (key_ == "schema") info_.schema = v;
      return true;
    }
    return not_object("a string");
  }
  bool binary(json::binary_t&) { return true; }
  bool key(std::string& k) {
    if (b_.active) b_.key = k;
    else key_ = k;
    return true;
  }
  bool start_object(std::size_t) {
    ++depth_;
    if (b_.active) {
      b_.start(true);
    } else if (depth_ == 1) {
      mode_ = 2;
    } else if (in_events_ && !in_event_) {
      in_event_ = true;
      ev_ = Event();
      has_ph_ = false;
    } else if (in_event_) {
      b_.begin(!(key_ == "args"));
      b_.start(true);
    } else {
      b_.begin(!(mode_ == 2 && depth_ == 2 && key_ == "otherData"));
      target_other_ = !b_.discard;
      b_.start(true);
    }
    return true;
  }
  bool end_object() {
    --depth_;
    if (b_.active) {
      b_.end();
      if (!b_.active) finish_value();
      return true;
    }
    if (in_event_) {
      in_event_ = false;
      if (!has_ph_) return fail_event("has no \"ph\" (phase)");
      if (!opt_.keep_args && ev_.ph != 'M' && ev_.ph != 'C') ev_.args = json();
      ++info_.events;
      cb_(std::move(ev_));
    }
    return true;
  }
  bool start_array(std::size_t) {
    ++depth_;
    if (b_.active) {
      b_.start(false);
    } else if (depth_ == 1) {
      mode_ = 1;
      info_.array_form = true;
      in_events_ = true;
    } else if (mode_ == 2 && depth_ == 2 && key_ == "traceEvents" && !in_events_) {
      in_events_ = true;
    } else if (in_event_ || (mode_ == 2 && depth_ == 2)) {
      b_.begin(true);
      b_.start(false);
    } else {
      return not_object("an array");
    }
    return true;
  }
  bool end_array() {
    --depth_;
    if (b_.active) {
      b_.end();
      if (!b_.active) finish_value();
      return true;
    }
    if (in_events_ && !in_event_) in_events_ = false;
    return true;
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& ex) {
    err_pos_ = pos;
    err_ = ex.what();
    parse_failed_ = true;
    return false;
  }

  /// Array form may end without "]" (spec): accept EOF between events.
  bool tolerable_eof() const {
    return parse_failed_ && mode_ == 1 && in_events_ && !in_event_ && !b_.active && depth_ == 1 &&
           err_.find("unexpected end of input") != std::string::npos;
  }
  bool parse_failed_ = false;
  std::string err_;
  size_t err_pos_ = 0;
  std::string user_err_;
  int mode_ = 0;

 private:
  /// The exact ns of an event's ts/dur from the number's text (a double holds an epoch ts in
  /// us only to 0.25 us).
  bool is_time_key() const { return !b_.active && in_event_ && (key_ == "ts" || key_ == "dur"); }
  void exact_time(const std::string& text) {
    if (!is_time_key()) return;
    int64_t ns = kNoNs;
    if (!decimal_us_to_ns(text, ns)) ns = kNoNs;
    (key_ == "ts" ? ev_.ts_ns : ev_.dur_ns) = ns;
  }
  bool scalar(json v) {
    if (b_.active) {
      b_.value(std::move(v));
      if (!b_.active) finish_value();
      return true;
    }
    if (in_event_) return event_scalar(v);
    if (mode_ == 2 && depth_ == 1) return true;  // other top-level keys
    return not_object(std::string("a ") + v.type_name());
  }
  void finish_value() {
    if (in_event_) {
      if (!b_.discard) ev_.args = std::move(b_.root);
    } else if (target_other_) {
      info_.other_data = std::move(b_.root);
      target_other_ = false;
    }
  }
  bool not_object(const std::string& what) {
    if (in_events_)
      user_err_ = "trace event #" + std::to_string(info_.events) + " is " + what + ", not an object";
    else
      user_err_ = std::string("the top-level value is ") + what +
                  ", not a trace (expected {\"traceEvents\": [...]} or [...])";
    return false;
  }
  bool fail_event(const std::string& what) {
    user_err_ = "trace event #" + std::to_string(info_.events) + " (\"" + ev_.name + "\") " + what;
    return false;
  }
  int64_t intern(const std::string& s) {
    auto it = ids_.find(s);
    if (it != ids_.end()) return it->second;
    const int64_t id = (int64_t(1) << 40) + static_cast<int64_t>(ids_.size());
    ids_.emplace(s, id);
    info_.string_ids.emplace_back(id, s);
    return id;
  }
  bool event_string(std::string& v) {
    if (key_ == "name") ev_.name = std::move(v);
    else if (key_ == "ph") {
      if (v.empty()) return fail_event("has an empty \"ph\"");
      ev_.ph = v[0];
      has_ph_ = true;
    } else if (key_ == "cat") ev_.cat = std::move(v);
    else if (key_ == "id") ev_.id = std::move(v);
    else if (key_ == "bp") ev_.bp = std::move(v);
    else if (key_ == "s") ev_.scope = std::move(v);
    else if (key_ == "pid") ev_.pid = intern(v);
    else if (key_ == "tid") ev_.tid = intern(v);
    else if (key_ == "ts" || key_ == "dur")
      return fail_event("has a non-numeric \"" + key_ + "\" (\"" + v + "\"): the format's times are numbers in us");
    return true;
  }
  bool event_scalar(const json& v) {
    if (key_ == "ts" || key_ == "dur" || key_ == "pid" || key_ == "tid") {
      if (!v.is_number()) return fail_event("has a non-numeric \"" + key_ + "\"");
      if (key_ == "ts") ev_.ts = v.get<double>();
      else if (key_ == "dur") ev_.dur = v.get<double>();
      else {
        // An integer in int64 (or an integral float inside it): converting a float outside
        // int64 would be undefined behaviour (fuzz finding 9).
        const double x = v.get<double>();
        const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(INT64_MAX)
                                                 : v.is_number_integer() || (std::fabs(x) < 9.2e18 && x == std::floor(x));
        if (!fits) return fail_event("has a \"" + key_ + "\" that is not a 64-bit integer (" + v.dump() + ")");
        (key_ == "pid" ? ev_.pid : ev_.tid) = v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(x);
      }
    } else if (key_ == "id") {
      ev_.id = v.is_number_float() ? json(v).dump() : v.dump();
    } else if (key_ == "name" && v.is_number()) {
      ev_.name = v.dump();
    }
    return true;
  }

  const std::string& path_;
  const std::function<void(Event&&)>& cb_;
  const ReadOptions& opt_;
  TraceInfo& info_;
  int depth_ = 0;
  bool in_events_ = false, in_event_ = false, has_ph_ = false, target_other_ = false;
  std::string key_;
  Event ev_;
  ValueBuilder b_;
  std::unordered_map<std::string, int64_t> ids_;
};

bool valid_utf8_at(const unsigned char* p, size_t n, size_t& len) {
  const unsigned char c = p[0];
  if (c < 0x80) return (len = 1), true;
  size_t need;
  if ((c & 0xE0) == 0xC0 && c >= 0xC2) need = 2;
  else if ((c & 0xF0) == 0xE0) need = 3;
  else if ((c & 0xF8) == 0xF0 && c <= 0xF4) need = 4;
  else return false;
  if (n < need) return false;
  for (size_t i = 1; i < need; ++i)
    if ((p[i] & 0xC0) != 0x80) return false;
  if (need == 3 && c == 0xE0 && p[1] < 0xA0) return false;
  if (need == 3 && c == 0xED && p[1] >= 0xA0) return false;  // surrogates
  if (need == 4 && c == 0xF0 && p[1] < 0x90) return false;
  if (need == 4 && c == 0xF4 && p[1] >= 0x90) return false;
  len = need;
  return true;
}

}  // namespace

TraceInfo read_trace(const std::string& path, const std::function<void(Event&&)>& on_event, const ReadOptions& opt) {
  TraceInfo info;
  ByteReader reader(path);
  Sax sax(path, on_event, opt, info);
  ByteIter first(&reader), last;
  const bool ok = json::sax_parse(first, last, &sax, json::input_format_t::json, true);
  if (!ok && !sax.tolerable_eof()) {
    if (!sax.user_err_.empty())
      throw_input(sax.user_err_, path, "fix the event or regenerate the trace (Trace Event Format)");
    if (sax.mode_ == 0 && reader.offset() == 0)
      throw_input("the file is empty: no trace events", path, "record again or pass a trace file");
    throw_input("invalid or truncated JSON at byte " + std::to_string(sax.err_pos_) + " after " +
                    std::to_string(info.events) + " events: " + sax.err_,
                path, "the trace is cut short or not JSON: re-record it or repair the file");
  }
  if (sax.mode_ == 0) throw_input("the file holds no JSON value", path, "pass a Chrome trace (.json/.json.gz)");
  return info;
}

Trace load_trace(const std::string& path, const ReadOptions& opt) {
  Trace t;
  t.info = read_trace(path, [&](Event&& e) { t.events.push_back(std::move(e)); }, opt);
  return t;
}

bool decimal_us_to_ns(const std::string& text, int64_t& ns) {
  // One pass, no allocation (this runs for every ts and dur of a trace): the significant digits
  // (21 kept: 19 for int64 ns, one to round) and the decimal exponent, value = digits * 10^exp10 us.
  size_t i = 0;
  const size_t n = text.size();
  const bool neg = i < n && text[i] == '-';
  if (neg) ++i;
  char dig[21];
  int nd = 0;        // significant digits kept in dig
  long dropped = 0;  // significant digits past those 21: they only ever lie below 1 ns or make
                     // the integer part longer than 19 digits (refused), so only their count matters
  bool any = false;  // a digit was seen
  long exp10 = 0;
  auto take = [&](char c) {
    if (nd == 0 && c == '0') return;  // leading zeros
    if (nd < 21) dig[nd++] = c;
    else ++dropped;
  };
  for (; i < n && std::isdigit(static_cast<unsigned char>(text[i])); ++i, any = true) take(text[i]);
  if (i < n && text[i] == '.') {
    for (++i; i < n && std::isdigit(static_cast<unsigned char>(text[i])); ++i, any = true) {
      if (nd == 0 && text[i] == '0') {
        --exp10;
        continue;
      }
      take(text[i]);
      --exp10;
    }
  }
  if (!any) return false;
  if (i < n && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    const bool eneg = i < n && text[i] == '-';
    if (i < n && (text[i] == '-' || text[i] == '+')) ++i;
    long e = 0;
    bool edig = false;
    for (; i < n && std::isdigit(static_cast<unsigned char>(text[i])); ++i, edig = true)
      if (e < 100000) e = e * 10 + (text[i] - '0');
    if (!edig) return false;
    exp10 += eneg ? -e : e;
  }
  if (i != n) return false;
  if (nd == 0) {
    ns = 0;
    return true;
  }
  // value = dig[0..nd) followed by `dropped` more digits, times 10^(exp10 + 3) ns.
  const long int_len = static_cast<long>(nd) + dropped + exp10 + 3;  // digits before the point
  if (int_len > 19) return false;
  unsigned __int128 v = 0;
  for (long k = 0; k < int_len; ++k) v = v * 10 + (k < nd ? dig[k] - '0' : 0);
  if (int_len >= 0 && int_len < nd && dig[int_len] >= '5') ++v;  // half away from zero
  if (v > static_cast<unsigned __int128>(INT64_MAX)) return false;
  ns = neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
  return true;
}

bool time_ns(double us, int64_t exact_ns, int64_t& ns) {
  if (exact_ns != kNoNs) {
    if (exact_ns < -kMaxAbsNs || exact_ns > kMaxAbsNs) return false;
    ns = exact_ns;
    return true;
  }
  if (!(std::fabs(us) <= static_cast<double>(kMaxAbsNs) / 1e3)) return false;
  const int64_t v = static_cast<int64_t>(std::llround(us * 1000.0));
  if (v < -kMaxAbsNs || v > kMaxAbsNs) return false;
  ns = v;
  return true;
}

std::string format_ns_as_us(int64_t ns) {
  const bool neg = ns < 0;
  // |INT64_MIN| does not fit int64: work in unsigned.
  const uint64_t a = neg ? uint64_t(0) - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
  std::string r = (neg ? "-" : "") + std::to_string(a / 1000);
  if (a % 1000) {
    char frac[8];
    std::snprintf(frac, sizeof frac, ".%03llu", static_cast<unsigned long long>(a % 1000));
    std::string f = frac;
    while (f.back() == '0') f.pop_back();
    r += f;
  }
  return r;
}

std::string format_us(double us) {
  if (!std::isfinite(us)) return "0";
  const long long ns = std::llround(us * 1000.0);
  const bool neg = ns < 0;
  const unsigned long long a = static_cast<unsigned long long>(neg ? -ns : ns);
  char buf[40];
  const unsigned long long ip = a / 1000, fp = a % 1000;
  int n;
  if (fp == 0) n = std::snprintf(buf, sizeof buf, "%s%llu", neg ? "-" : "", ip);
  else {
    n = std::snprintf(buf, sizeof buf, "%s%llu.%03llu", neg ? "-" : "", ip, fp);
    while (buf[n - 1] == '0') --n;
  }
  return std::string(buf, static_cast<size_t>(n));
}

void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      ++i;
    } else if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
    } else {
      size_t len = 0;
      if (valid_utf8_at(p + i, n - i, len)) {
        out.append(s, i, len);
        i += len;
      } else {
        out += "\\ufffd";
        ++i;
      }
    }
  }
  out += '"';
}

struct TraceWriter::Impl {
  ByteWriter out;
  bool first = true;
  Impl(const std::string& path, bool gz) : out(path, gz) {}
};

TraceWriter::TraceWriter(const std::string& path, Options opt) : opt_(std::move(opt)) {
  impl_ = std::make_unique<Impl>(path, opt_.gzip || has_gz_suffix(path));
  impl_->out.write("{\"traceEvents\":[");
}

TraceWriter::~TraceWriter() = default;

void TraceWriter::add(const Event& e) {
  std::string& s = line_;
  s.clear();
  s += impl_->first ? "\n" : ",\n";
  impl_->first = false;
  s += "{\"name\":";
  append_json_string(s, e.name);
  if (!e.cat.empty()) {
    s += ",\"cat\":";
    append_json_string(s, e.cat);
  }
  s += ",\"ph\":\"";
  s += e.ph;
  s += "\",\"ts\":";
  // The exact ns read from a file when there is one (an epoch ts in a double is 0.25 us coarse).
  s += e.ts_ns != kNoNs ? format_ns_as_us(e.ts_ns) : std::isnan(e.ts) ? std::string("0") : format_us(e.ts);
  if (e.ph == 'X' || e.dur >= 0) {
    s += ",\"dur\":";
    s += e.dur_ns != kNoNs && e.dur_ns >= 0 ? format_ns_as_us(e.dur_ns) : format_us(e.dur < 0 ? 0 : e.dur);
  }
  s += ",\"pid\":" + std::to_string(e.pid) + ",\"tid\":" + std::to_string(e.tid);
  if (!e.id.empty()) {
    s += ",\"id\":";
    const bool numeric = e.id.find_first_not_of("0123456789") == std::string::npos && e.id.size() < 16;
    if (numeric) s += e.id;
    else append_json_string(s, e.id);
  }
  if (!e.bp.empty()) {
    s += ",\"bp\":";
    append_json_string(s, e.bp);
  }
  if (!e.scope.empty()) {
    s += ",\"s\":";
    append_json_string(s, e.scope);
  }
  if (!e.args.is_null()) {
    s += ",\"args\":";
    s += e.args.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  s += '}';
  impl_->out.write(s);
  ++count_;
}

void TraceWriter::process_name(int64_t pid, const std::string& name) {
  Event e;
  e.ph = 'M';
  e.name = "process_name";
  e.pid = pid;
  e.tid = 0;
  e.args = {{"name", name}};
  add(e);
}
void TraceWriter::thread_name(int64_t pid, int64_t tid, const std::string& name) {
  Event e;
  e.ph = 'M';
  e.name = "thread_name";
  e.pid = pid;
  e.tid = tid;
  e.args = {{"name", name}};
  add(e);
}
void TraceWriter::process_sort_index(int64_t pid, int64_t index) {
  Event e;
  e.ph = 'M';
  e.name = "process_sort_index";
  e.pid = pid;
  e.args = {{"sort_index", index}};
  add(e);
}
void TraceWriter::thread_sort_index(int64_t pid, int64_t tid, int64_t index) {
  Event e;
  e.ph = 'M';
  e.name = "thread_sort_index";
  e.pid = pid;
  e.tid = tid;
  e.args = {{"sort_index", index}};
  add(e);
}

void TraceWriter::commit() {
  std::string tail = "\n],\"displayTimeUnit\":";
  append_json_string(tail, opt_.display_time_unit);
  tail += ",\"schema\":\"";
  tail += kTraceSchema;
  tail += "\",\"otherData\":";
  tail += opt_.other_data.dump(-1, ' ', false, json::error_handler_t::replace);
  tail += "}\n";
  impl_->out.write(tail);
  impl_->out.commit();
}

std::vector<Violation> validate(const std::vector<Event>& events) {
  std::vector<Violation> v;
  auto add = [&](size_t i, const char* rule, std::string msg) {
    v.push_back({i, rule, "event #" + std::to_string(i) + " (\"" + events[i].name + "\", ph " + events[i].ph +
                              "): " + std::move(msg)});
  };
  static const std::string known = "XBEiICMstfbenPOND()Rcv";
  using Track = std::pair<int64_t, int64_t>;
  // Times in integer ns (exact for epoch timestamps); INT64_MIN where an event has none.
  std::vector<int64_t> ts(events.size(), INT64_MIN), dur(events.size(), 0);
  std::map<Track, std::vector<size_t>> be_by_track;       // B/E per thread, paired after a sort by ts
  std::map<Track, std::vector<size_t>> x_by_track;        // X slices per thread
  struct FlowStart {
    size_t index;
    bool stepped;  // a t or f followed
  };
  std::map<std::pair<std::string, std::string>, std::vector<FlowStart>> flows;  // open s per (cat,id)
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    if (known.find(e.ph) == std::string::npos) {
      add(i, "phase", std::string("unknown phase '") + e.ph + "'");
      continue;
    }
    int64_t t = 0;
    const bool has_ts = time_ns(e.ts, e.ts_ns, t);
    if (has_ts) ts[i] = t;
    if (e.ph != 'M' && !has_ts)
      add(i, "ts", std::isnan(e.ts) && e.ts_ns == kNoNs ? "has no numeric ts" : "has a ts beyond +-4e15 us (126.8 years)");
    const Track tr{e.pid, e.tid};
    switch (e.ph) {
      case 'X': {
        int64_t d = 0;
        if (!(e.dur >= 0)) add(i, "x-dur", "complete event without a non-negative dur");
        else if (!time_ns(e.dur, e.dur_ns, d)) add(i, "x-dur", "dur beyond 4e15 us (126.8 years)");
        else if (has_ts) {
          dur[i] = d;
          x_by_track[tr].push_back(i);
        }
        break;
      }
      case 'B':
      case 'E':
        if (has_ts) be_by_track[tr].push_back(i);
        break;
      case 's':
        flows[{e.cat, e.id}].push_back({i, false});
        if (e.id.empty()) add(i, "flow-pair", "flow start without an id");
        break;
      case 't':
      case 'f': {
        auto it = flows.find({e.cat, e.id});
        if (it == flows.end() || it->second.empty()) {
          add(i, "flow-pair", "flow " + std::string(1, e.ph) + " with id " + e.id + " has no earlier flow start (s)");
        } else {
          if (has_ts && ts[it->second.back().index] != INT64_MIN && ts[i] < ts[it->second.back().index])
            add(i, "flow-pair", "flow step is earlier than its start");
          if (e.ph == 'f') it->second.pop_back();
          else it->second.back().stepped = true;
        }
        if (!e.bp.empty() && e.bp != "e") add(i, "flow-pair", "bp must be \"e\" or absent, not \"" + e.bp + "\"");
        break;
      }
      case 'M': {
        static const std::set<std::string> names = {"process_name", "process_labels", "process_sort_index",
                                                    "thread_name", "thread_sort_index", "process_uptime_seconds"};
        if (!names.count(e.name)) add(i, "metadata", "unknown metadata name");
        else if (!e.args.is_object()) add(i, "metadata", "metadata without args");
        else if ((e.name == "process_name" || e.name == "thread_name") &&
                 !(e.args.contains("name") && e.args["name"].is_string()))
          add(i, "metadata", "args.name must be a string");
        break;
      }
      case 'C':
        if (!e.args.is_object() || e.args.empty()) add(i, "counter", "counter without args");
        else
          for (const auto& kv : e.args.items())
            if (!kv.value().is_number()) {
              add(i, "counter", "counter series \"" + kv.key() + "\" is not a number");
              break;
            }
        break;
      default:
        break;
    }
  }
  // B/E: the format lets a writer emit them out of timestamp order; pair them after a stable
  // sort by ts per thread (speedscope PR #322 does the same), so equal times keep file order.
  for (auto& [tr, idx] : be_by_track) {
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return ts[a] < ts[b]; });
    std::vector<size_t> st;
    for (size_t i : idx) {
      const Event& e = events[i];
      if (e.ph == 'B') {
        st.push_back(i);
        continue;
      }
      if (st.empty()) {
        add(i, "be-nesting", "E with no open B on pid " + std::to_string(e.pid) + " tid " + std::to_string(e.tid));
        continue;
      }
      const Event& b = events[st.back()];
      if (!e.name.empty() && e.name != b.name)
        add(i, "be-nesting", "E names \"" + e.name + "\" but the innermost open B is \"" + b.name + "\"");
      st.pop_back();
    }
    for (size_t i : st) add(i, "be-nesting", "B is never closed by an E");
  }
  for (const auto& [key, st] : flows)
    for (const FlowStart& f : st)
      if (!f.stepped) add(f.index, "flow-pair", "flow start with id " + key.second + " has no flow step (t) or end (f)");
  // X slices on one thread: nested or disjoint (Perfetto rejects partial overlap). 1 ns slack.
  for (auto& [tr, idx] : x_by_track) {
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
      if (ts[a] != ts[b]) return ts[a] < ts[b];
      return dur[a] > dur[b];
    });
    std::vector<size_t> st;
    for (size_t i : idx) {
      while (!st.empty() && ts[st.back()] + dur[st.back()] <= ts[i] + 1) st.pop_back();
      if (!st.empty()) {
        const size_t p = st.back();
        if (ts[i] + dur[i] > ts[p] + dur[p] + 1)
          add(i, "x-nesting", "overlaps \"" + events[p].name + "\" on the same thread without nesting inside it");
      }
      st.push_back(i);
    }
  }
  std::stable_sort(v.begin(), v.end(), [](const Violation& a, const Violation& b) { return a.index < b.index; });
  return v;
}

}  // namespace rtx::trace
