// record(): run the child with tracing environment, forward signals, pass its exit status on;
// convert_recording(): telemetry bus spans + CUPTI injection records -> Chrome trace.
#include "rtx/trace/record.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "rtx/core/error.hpp"
#include "rtx/io/atomic_file.hpp"
#include "rtx/telemetry/bus.hpp"
#include "rtx/telemetry/hwprofile.hpp"
#include "rtx/trace/gzip_io.hpp"
#include "rtx/trace/trace_event.hpp"

namespace rtx::trace {
namespace {

using json = nlohmann::json;

constexpr int64_t kGpuTidBase = 1000000000;   // + device * 1e6 + stream
constexpr int64_t kSyncTid = 999000000;
constexpr int64_t kOverheadTid = 999000001;

struct Rec {
  enum Kind { Span, Instant, Kernel, Memcpy, Memset, Api, Sync, Range, Mark, Overhead } kind = Span;
  int64_t pid = 0, tid = 0;
  int64_t begin = 0, end = 0;  // unix ns
  std::string name, cat;
  json args;
  uint64_t corr = 0;
};

bool is_gpu(Rec::Kind k) { return k == Rec::Kernel || k == Rec::Memcpy || k == Rec::Memset; }

int64_t num(const json& j, const char* key, int64_t dflt = 0) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return dflt;
  if (it->is_number_integer()) return it->get<int64_t>();
  const double x = it->get<double>();  // a float outside int64 would be undefined to convert
  return std::fabs(x) < 9.2e18 ? static_cast<int64_t>(x) : dflt;
}
std::string str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

/// Reads the recorded files, calling `cb` with each normalized record.
void scan(const std::string& events_jsonl, const std::string& cupti_dir, ConvertResult& res, bool first_pass,
          const std::function<void(Rec&)>& cb) {
  std::string line;
  if (!events_jsonl.empty() && ::access(events_jsonl.c_str(), R_OK) == 0) {
    ByteReader in(events_jsonl);
    std::map<int64_t, int64_t> epoch;  // pid -> unix_ns - time_ns
    while (in.getline(line)) {
      if (line.empty()) continue;
      json ev = json::parse(line, nullptr, false);
      if (ev.is_discarded() || !ev.is_object()) {
        if (first_pass) ++res.bad_lines;
        continue;
      }
      Rec r;
      r.pid = num(ev, "pid");
      auto ep = epoch.find(r.pid);
      if (ep == epoch.end()) ep = epoch.emplace(r.pid, num(ev, "unix_ns") - num(ev, "time_ns")).first;
      const std::string topic = str(ev, "topic");
      const json& f = ev.contains("fields") ? ev["fields"] : json();
      if (topic == telemetry::topic::span && f.is_object()) {
        r.kind = Rec::Span;
        r.tid = num(f, "tid", num(ev, "tid"));
        r.begin = ep->second + num(f, "begin_ns");
        r.end = ep->second + num(f, "end_ns");
        r.name = str(f, "name");
        r.cat = "op";
        if (f.contains("args") && f["args"].is_object()) r.args = f["args"];
      } else if (topic == telemetry::topic::kernel_launch && f.is_object() && f.contains("begin_ns")) {
        // A kernel run (core::KernelRun; CUDA: the launch call): a slice named after the op,
        // category cpu_op (Kineto's name for host ops: stats groups it with the ops, not the
        // GPU kernels, which CUPTI records), args variant, dtype and dims (and grid/block).
        r.kind = Rec::Span;
        r.tid = num(ev, "tid");
        r.begin = ep->second + num(f, "begin_ns");
        r.end = std::max(r.begin, ep->second + num(f, "end_ns"));
        r.name = str(f, "name");
        r.cat = str(f, "variant") == "cuda" ? "cuda_launch" : "cpu_op";
        r.args = f;
        for (const char* k : {"name", "begin_ns", "end_ns", "dur_ns"}) r.args.erase(k);
      } else {
        r.kind = Rec::Instant;
        r.tid = num(ev, "tid");
        r.begin = r.end = ep->second + num(ev, "time_ns");
        r.name = topic.empty() ? "event" : topic;
        r.cat = "telemetry";
        if (f.is_object()) r.args = f;
      }
      cb(r);
    }
  }
  if (cupti_dir.empty()) return;
  std::vector<std::string> files;
  if (DIR* d = ::opendir(cupti_dir.c_str())) {
    while (dirent* de = ::readdir(d)) {
      const std::string n = de->d_name;
      if (n.rfind("cupti.", 0) == 0 && n.size() > 6 && n.compare(n.size() - 6, 6, ".jsonl") == 0)
        files.push_back(cupti_dir + "/" + n);
    }
    ::closedir(d);
  }
  std::sort(files.begin(), files.end());
  for (const std::string& file : files) {
    ByteReader in(file);
    int64_t offset = 0;
    while (in.getline(line)) {
      if (line.empty()) continue;
      json ev = json::parse(line, nullptr, false);
      if (ev.is_discarded() || !ev.is_object()) {
        if (first_pass) ++res.bad_lines;
        continue;
      }
      const std::string k = str(ev, "k");
      Rec r;
      r.pid = num(ev, "pid");
      if (k == "clock") {
        offset = num(ev, "unix_ns") - num(ev, "cupti_ns");
        continue;
      }
      if (k == "note") {
        if (first_pass) res.notes.push_back(str(ev, "message"));
        continue;
      }
      if (k == "summary") {
        if (first_pass) res.cupti_dropped += static_cast<uint64_t>(num(ev, "dropped"));
        continue;
      }
      r.begin = num(ev, "start") + offset;
      r.end = std::max(r.begin, num(ev, "end") + offset);
      r.corr = static_cast<uint64_t>(num(ev, "corr"));
      r.name = str(ev, "name");
      const int64_t dev = num(ev, "device"), stream = num(ev, "stream");
      if (k == "kernel" || k == "memcpy" || k == "memset") {
        r.kind = k == "kernel" ? Rec::Kernel : k == "memcpy" ? Rec::Memcpy : Rec::Memset;
        r.cat = k;
        r.tid = kGpuTidBase + dev * 1000000 + stream;
        r.args = {{"device", dev}, {"stream", stream}, {"correlation", r.corr}};
        if (k == "kernel") {
          for (const char* key : {"grid", "block"})
            if (ev.contains(key)) r.args[key] = ev[key];
          r.args["registers_per_thread"] = num(ev, "regs");
          r.args["static_shared_memory_B"] = num(ev, "smem_static");
          r.args["dynamic_shared_memory_B"] = num(ev, "smem_dynamic");
        } else {
          r.args["bytes"] = num(ev, "bytes");
          if (k == "memcpy") {
            r.args["kind"] = str(ev, "copy");
            r.name = "Memcpy " + str(ev, "copy");
          } else {
            r.name = "Memset";
            r.args["value"] = num(ev, "value");
          }
        }
      } else if (k == "api") {
        r.kind = Rec::Api;
        r.tid = num(ev, "tid");
        r.cat = str(ev, "domain") == "driver" ? "cuda_driver" : "cuda_runtime";
        r.args = {{"correlation", r.corr}, {"cbid", num(ev, "cbid")}, {"return", num(ev, "ret")}};
      } else if (k == "sync") {
        r.kind = Rec::Sync;
        r.tid = kSyncTid;
        r.cat = "cuda_sync";
        r.name = "Sync " + str(ev, "type");
        r.args = {{"correlation", r.corr}, {"stream", stream}};
      } else if (k == "nvtx") {
        r.kind = Rec::Range;
        r.tid = num(ev, "tid");
        r.cat = "nvtx";
        if (!str(ev, "domain").empty()) r.args = {{"domain", str(ev, "domain")}};
      } else if (k == "mark") {
        r.kind = Rec::Mark;
        r.tid = num(ev, "tid");
        r.cat = "nvtx";
        r.end = r.begin = num(ev, "ts") + offset;
      } else if (k == "overhead") {
        r.kind = Rec::Overhead;
        r.tid = kOverheadTid;
        r.cat = "cupti_overhead";
        r.name = "CUPTI " + str(ev, "kind");
      } else {
        if (first_pass) ++res.bad_lines;
        continue;
      }
      cb(r);
    }
  }
}

/// The CPU samples inside [win_start, win_end] as a stack chart per thread (see
/// convert_recording): a sample at t covers [t, next sample of its thread) when that comes
/// within 1.5 periods, else [t, t + 1/freq); a frame stays one slice while consecutive samples
/// without a gap keep the same frames from the root down to it.
void write_cpu_samples(const CpuProfile& cpu, int64_t win_start, int64_t win_end, int64_t origin,
                       uint64_t max_events, TraceWriter& w, ConvertResult& res, std::set<int64_t>& procs,
                       std::set<std::pair<int64_t, int64_t>>& threads) {
  const int64_t period = cpu.freq_hz ? static_cast<int64_t>(1000000000 / cpu.freq_hz) : 10000000;
  std::map<std::pair<int64_t, int64_t>, std::vector<const CpuProfile::Sample*>> by_thread;
  for (const auto& s : cpu.samples) {
    if (s.unix_ns < win_start || s.unix_ns > win_end) continue;
    by_thread[{s.pid, s.tid}].push_back(&s);
    ++res.cpu_samples;
  }
  Event e;
  struct Open { uint32_t frame; int64_t begin; uint64_t samples; };
  struct Slice { int64_t begin, end; size_t depth; uint32_t frame; uint64_t samples; };
  std::vector<Slice> slices;
  for (auto& [key, v] : by_thread) {
    std::stable_sort(v.begin(), v.end(), [](const auto* a, const auto* b) { return a->unix_ns < b->unix_ns; });
    const int64_t track = kCpuSampleTidBase + key.second;
    std::vector<Open> open;
    slices.clear();
    int64_t prev_end = 0;
    auto close_to = [&](size_t depth, int64_t at) {
      for (; open.size() > depth; open.pop_back())
        slices.push_back({open.back().begin, at, open.size() - 1, open.back().frame, open.back().samples});
    };
    for (size_t i = 0; i < v.size(); ++i) {
      const auto& s = *v[i];
      // The next sample within 1.5 periods continues this one (timer jitter), else a gap.
      const int64_t next = i + 1 < v.size() ? v[i + 1]->unix_ns : std::numeric_limits<int64_t>::max();
      const int64_t end = next - s.unix_ns <= period + period / 2 ? next : s.unix_ns + period;
      size_t common = 0;
      if (!open.empty() && s.unix_ns <= prev_end)
        while (common < open.size() && common < s.stack.size() && open[common].frame == s.stack[common]) ++common;
      close_to(common, prev_end);
      for (size_t d = 0; d < open.size(); ++d) ++open[d].samples;
      for (size_t d = common; d < s.stack.size(); ++d) open.push_back({s.stack[d], s.unix_ns, 1});
      prev_end = end;
    }
    close_to(0, prev_end);
    // Parents before their children: a frame that is the whole of its parent's slice has the
    // same ts and dur, and readers keep file order for such ties.
    std::stable_sort(slices.begin(), slices.end(), [](const Slice& a, const Slice& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.depth < b.depth;
    });
    for (const Slice& sl : slices) {
      if (max_events && res.written >= max_events) {
        ++res.over_cap;
        continue;
      }
      e = Event();
      e.ph = 'X';
      e.name = cpu.frames[sl.frame];
      e.cat = "cpu_sample";
      e.pid = key.first;
      e.tid = track;
      e.ts = static_cast<double>(sl.begin - origin) / 1e3;
      e.dur = static_cast<double>(sl.end - sl.begin) / 1e3;
      e.args = {{"samples", sl.samples}};
      w.add(e);
      ++res.written;
      ++res.cpu_slices;
    }
    procs.insert(key.first);
    threads.insert({key.first, track});
  }
}

}  // namespace

ConvertResult convert_recording(const std::string& events_jsonl, const std::string& cupti_dir,
                                const std::string& output, uint64_t t0_unix_ns, const CaptureOptions& cap,
                                int64_t child_pid, const std::string& child_name, const CpuProfile* cpu) {
  ConvertResult res;
  const int64_t t0 = static_cast<int64_t>(t0_unix_ns);
  int64_t win_start = t0 + static_cast<int64_t>(std::llround(cap.delay_s * 1e9));
  int64_t win_end = cap.duration_s > 0 ? win_start + static_cast<int64_t>(std::llround(cap.duration_s * 1e9))
                                       : std::numeric_limits<int64_t>::max();
  // Pass 1: the named range (first occurrence inside the window) and the launch/GPU pairs.
  int64_t range_begin = std::numeric_limits<int64_t>::max(), range_end = 0;
  std::set<std::pair<int64_t, uint64_t>> api_corr, gpu_corr;
  scan(events_jsonl, cupti_dir, res, true, [&](Rec& r) {
    if (!cap.range.empty() && (r.kind == Rec::Span || r.kind == Rec::Range) && r.name == cap.range &&
        r.begin >= win_start && r.begin <= win_end && r.begin < range_begin) {
      range_begin = r.begin;
      range_end = r.end;
    }
    if (r.corr) {
      if (r.kind == Rec::Api) api_corr.insert({r.pid, r.corr});
      else if (is_gpu(r.kind)) gpu_corr.insert({r.pid, r.corr});
    }
  });
  if (!cap.range.empty()) {
    if (range_end == 0) {
      res.range_found = false;
      win_end = win_start - 1;  // nothing is kept
    } else {
      win_start = range_begin;
      win_end = range_end;
    }
  }
  const int64_t origin = win_start;
  TraceWriter::Options wo;
  wo.other_data = {{"start_unix_ns", static_cast<uint64_t>(origin)},
                   {"recorder", "rtx-trace"},
                   {"hw", telemetry::identity_json()},
                   {"seed", telemetry::run_seed()}};
  TraceWriter w(output, wo);
  struct FlowEnd { int64_t pid = 0, api_tid = 0, api_ts = 0, gpu_tid = 0, gpu_ts = 0; bool api = false, gpu = false; };
  std::map<std::pair<int64_t, uint64_t>, FlowEnd> flows;
  std::set<std::pair<int64_t, int64_t>> threads;
  std::set<int64_t> procs;
  Event e;
  scan(events_jsonl, cupti_dir, res, false, [&](Rec& r) {
    if (r.begin < win_start || r.begin > win_end) {
      ++res.outside_window;
      return;
    }
    if (cap.max_events && res.written >= cap.max_events) {
      ++res.over_cap;
      return;
    }
    e = Event();
    e.name = r.name.empty() ? "[unnamed]" : r.name;
    e.cat = r.cat;
    e.pid = r.pid;
    e.tid = r.tid;
    e.ts = static_cast<double>(r.begin - origin) / 1e3;
    e.args = std::move(r.args);
    if (r.kind == Rec::Instant || r.kind == Rec::Mark) {
      e.ph = 'i';
      e.scope = "t";
    } else {
      e.ph = 'X';
      e.dur = static_cast<double>(r.end - r.begin) / 1e3;
    }
    w.add(e);
    ++res.written;
    procs.insert(r.pid);
    threads.insert({r.pid, r.tid});
    switch (r.kind) {
      case Rec::Span: ++res.spans; break;
      case Rec::Kernel: case Rec::Memcpy: case Rec::Memset: ++res.gpu; break;
      case Rec::Api: ++res.api; break;
      case Rec::Range: case Rec::Mark: ++res.ranges; break;
      default: break;
    }
    if (r.kind == Rec::Memcpy || r.kind == Rec::Memset) {
      // Counter track: bytes moved by the copy while it runs (drops to 0 at its end).
      Event c;
      c.ph = 'C';
      c.name = "GPU memory ops (bytes)";
      c.pid = r.pid;
      c.ts = e.ts;
      c.args = {{r.kind == Rec::Memcpy ? "memcpy" : "memset", e.args.value("bytes", 0)}};
      w.add(c);
      c.ts = e.ts + e.dur;
      c.args = {{r.kind == Rec::Memcpy ? "memcpy" : "memset", 0}};
      w.add(c);
    }
    const auto key = std::make_pair(r.pid, r.corr);
    if (r.corr && api_corr.count(key) && gpu_corr.count(key)) {
      FlowEnd& fe = flows[key];
      fe.pid = r.pid;
      if (r.kind == Rec::Api) {
        fe.api = true;
        fe.api_tid = r.tid;
        fe.api_ts = r.begin - origin;
      } else if (is_gpu(r.kind) && !fe.gpu) {
        fe.gpu = true;
        fe.gpu_tid = r.tid;
        fe.gpu_ts = r.begin - origin;
      }
    }
  });
  if (cpu) write_cpu_samples(*cpu, win_start, win_end, origin, cap.max_events, w, res, procs, threads);
  // Flow arrows launch -> GPU work (all starts, then all ends, so each s precedes its f).
  uint64_t flow_id = 0;
  std::vector<std::pair<uint64_t, const FlowEnd*>> done;
  for (const auto& [key, fe] : flows)
    if (fe.api && fe.gpu) done.emplace_back(++flow_id, &fe);
  for (int pass = 0; pass < 2; ++pass)
    for (const auto& [id, fe] : done) {
      Event f;
      f.ph = pass == 0 ? 's' : 'f';
      f.name = "launch";
      f.cat = "launch";
      f.id = std::to_string(id);
      f.pid = fe->pid;
      f.tid = pass == 0 ? fe->api_tid : fe->gpu_tid;
      f.ts = static_cast<double>(pass == 0 ? fe->api_ts : fe->gpu_ts) / 1e3;
      if (pass == 1) f.bp = "e";
      w.add(f);
    }
  res.flows = done.size();
  for (int64_t p : procs) {
    w.process_name(p, p == child_pid && !child_name.empty() ? child_name + " (pid " + std::to_string(p) + ")"
                                                            : "pid " + std::to_string(p));
    w.process_sort_index(p, p == child_pid ? 0 : 1);
  }
  for (const auto& [p, t] : threads) {
    std::string n;
    int64_t sort = 0;
    if (t >= kGpuTidBase) {
      const int64_t dev = (t - kGpuTidBase) / 1000000, stream = (t - kGpuTidBase) % 1000000;
      n = "GPU " + std::to_string(dev) + " stream " + std::to_string(stream);
      sort = 1000 + dev * 1000 + stream;
    } else if (t == kSyncTid) {
      n = "CUDA synchronization";
      sort = 900;
    } else if (t == kOverheadTid) {
      n = "CUPTI overhead";
      sort = 901;
    } else if (t >= kCpuSampleTidBase && t < kSyncTid) {
      const int64_t real = t - kCpuSampleTidBase;
      n = "CPU samples: " + (real == p ? std::string("main thread") : "thread " + std::to_string(real));
      sort = 800 + (real == p ? 0 : 1);
    } else {
      n = t == p ? "main thread" : "thread " + std::to_string(t);
      sort = t == p ? 0 : 1;
    }
    w.thread_name(p, t, n);
    w.thread_sort_index(p, t, sort);
  }
  w.commit();
  return res;
}

namespace {

std::atomic<pid_t> g_child{0};

void forward_signal(int sig) {
  const pid_t c = g_child.load();
  if (c > 0) ::kill(c, sig);
}

void remove_tree(const std::string& dir) {
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* de = ::readdir(d)) {
      const std::string n = de->d_name;
      if (n == "." || n == "..") continue;
      ::unlink((dir + "/" + n).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

}  // namespace

std::string child_events_flag(const std::vector<std::string>& command) {
  // Any argument of the command line counts (rtx tools take --events before or after a
  // subcommand); "--" ends the options of CLI11-parsed tools, so what follows is data.
  for (size_t i = 1; i < command.size(); ++i) {
    const std::string& a = command[i];
    if (a == "--") break;
    if (a == "--events" && i + 1 < command.size()) return command[i + 1];
    if (a.rfind("--events=", 0) == 0) return a.substr(9);
  }
  return {};
}

RecordResult record(const RecordOptions& opt) {
  if (opt.command.empty())
    throw_usage("no command to record", "--", "usage: rtx-trace record -o trace.json -- PROGRAM ARGS...");
  // Before the program runs: a trace that cannot be written would lose the whole recording.
  if (opt.output == "-")
    throw_usage("-o - would write the trace into the program's own stdout, which it shares", "-o",
                "give a file path (then `cat` it, or rtx-trace stats FILE)");
  io::require_output_dir(opt.output, "-o");
  if (opt.cpu_sample_hz) {
    check_sample_freq(opt.cpu_sample_hz);
    if (opt.call_graph == CallGraph::Dwarf && !dwarf_unwind_supported())
      throw_usage("--call-graph dwarf is supported on x86-64 only", "--call-graph", "use --call-graph fp");
    if (opt.folded == "-")
      throw_usage("--folded - would write into the program's own stdout, which it shares", "--folded",
                  "give a file path");
    io::require_output_dir(opt.folded, "--folded");
    namespace fs = std::filesystem;
    std::error_code ec, ec2;
    const bool same = fs::absolute(opt.folded, ec).lexically_normal() == fs::absolute(opt.output, ec2).lexically_normal() ||
                      fs::equivalent(opt.folded, opt.output, ec);  // an existing file under two names
    if (same)
      throw_usage("--folded names the trace file itself (" + opt.output + "): the trace would be overwritten",
                  "--folded", "give the folded stacks another path");
  } else if (!opt.folded.empty()) {
    throw_usage("--folded needs --cpu-sample (folded stacks come from CPU samples)", "--folded");
  }
  RecordResult rr;
  rr.child_events = child_events_flag(opt.command);
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/rtx-trace.XXXXXX";
  std::vector<char> tb(templ.begin(), templ.end());
  tb.push_back('\0');
  if (!::mkdtemp(tb.data()))
    throw_env(std::string("cannot create a temporary directory: ") + std::strerror(errno), templ,
              "set TMPDIR to a writable directory");
  const std::string dir = tb.data();
  struct Cleanup {
    std::string d;
    ~Cleanup() { remove_tree(d); }
  } cleanup{dir};
  const std::string events = dir + "/events.jsonl";
  rr.cuda_capture = !opt.inject_lib.empty() && ::access(opt.inject_lib.c_str(), R_OK) == 0;

  int errpipe[2];
  if (::pipe2(errpipe, O_CLOEXEC) != 0) throw_env(std::string("pipe failed: ") + std::strerror(errno));
  // With sampling, the child waits on `gate` until the sampler is attached, then execs (the
  // counters start at its exec: enable_on_exec).
  int gate[2] = {-1, -1};
  if (opt.cpu_sample_hz && ::pipe2(gate, O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(errpipe[0]);
    ::close(errpipe[1]);
    throw_env(std::string("pipe failed: ") + std::strerror(err));
  }
  const uint64_t t0 = telemetry::unix_now_ns();
  struct sigaction sa {}, old_int {}, old_term {}, old_hup {};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    for (int fd : {errpipe[0], errpipe[1], gate[0], gate[1]})
      if (fd >= 0) ::close(fd);
    throw_env(std::string("fork failed: ") + std::strerror(err));
  }
  if (pid == 0) {
    ::close(errpipe[0]);
    if (gate[0] >= 0) {
      ::close(gate[1]);
      char go = 0;
      ssize_t n;
      do n = ::read(gate[0], &go, 1);
      while (n < 0 && errno == EINTR);
      if (n != 1) ::_exit(127);  // the sampler could not attach: the parent reports why
    }
    ::setenv("RTX_EVENTS", events.c_str(), 1);
    ::setenv("RTX_TRACE_CUPTI_DIR", dir.c_str(), 1);
    ::setenv("RTX_TRACE_MAX_EVENTS", std::to_string(opt.capture.max_events).c_str(), 1);
    if (rr.cuda_capture) {
      ::setenv("CUDA_INJECTION64_PATH", opt.inject_lib.c_str(), 1);
      if (!opt.nvtx_lib.empty() && ::access(opt.nvtx_lib.c_str(), R_OK) == 0)
        ::setenv("NVTX_INJECTION64_PATH", opt.nvtx_lib.c_str(), 0);
    }
    std::vector<char*> argv;
    for (const auto& a : opt.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    const int err = errno;
    [[maybe_unused]] ssize_t n = ::write(errpipe[1], &err, sizeof err);
    ::_exit(127);
  }
  ::close(errpipe[1]);
  std::unique_ptr<CpuSampler> sampler;
  if (gate[0] >= 0) {
    ::close(gate[0]);
    try {
      // DWARF samples carry 8 KiB of stack each: a 512 KiB ring per CPU (the default
      // kernel.perf_event_mlock_kb still allows it unprivileged), 256 KiB otherwise.
      sampler = std::make_unique<CpuSampler>(pid, opt.cpu_sample_hz, opt.call_graph,
                                             opt.call_graph == CallGraph::Dwarf ? 128 : 64);
    } catch (...) {
      ::close(gate[1]);
      ::close(errpipe[0]);
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
      throw;
    }
    [[maybe_unused]] ssize_t n = ::write(gate[1], "g", 1);
    ::close(gate[1]);
  }
  g_child.store(pid);
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  ::sigaction(SIGHUP, &sa, &old_hup);
  // The handlers stay until the output is written: a Ctrl-C reaches the whole process group
  // (and `timeout` signals the child and then the group), so a second SIGINT can arrive just
  // after the child died; with the default action back it would kill rtx-trace before it
  // wrote anything. Once the child is gone the handler ignores them.
  struct RestoreSignals {
    struct sigaction *i, *t, *h;
    ~RestoreSignals() {
      ::sigaction(SIGINT, i, nullptr);
      ::sigaction(SIGTERM, t, nullptr);
      ::sigaction(SIGHUP, h, nullptr);
    }
  } restore{&old_int, &old_term, &old_hup};
  int exec_err = 0;
  ssize_t got;
  do got = ::read(errpipe[0], &exec_err, sizeof exec_err);
  while (got < 0 && errno == EINTR);
  ::close(errpipe[0]);
  int status = 0;
  pid_t w;
  if (sampler) {
    // Read the ring buffers while the program runs (10 times a second, or when data is ready).
    for (;;) {
      w = ::waitpid(pid, &status, WNOHANG);
      if (w == pid || (w < 0 && errno != EINTR)) break;
      sampler->poll(100);
    }
  } else {
    do w = ::waitpid(pid, &status, 0);
    while (w < 0 && errno == EINTR);
  }
  g_child.store(0);
  if (got == static_cast<ssize_t>(sizeof exec_err))
    throw_usage(std::string("cannot run \"") + opt.command[0] + "\": " + std::strerror(exec_err), opt.command[0],
                "check the program name and PATH (the command follows \"--\")");
  rr.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 4;
  const std::string name = opt.command[0].substr(opt.command[0].find_last_of('/') + 1);
  if (!sampler) {
    rr.convert = convert_recording(events, dir, opt.output, t0, opt.capture, pid, name);
    return rr;
  }
  const CpuProfile prof = sampler->finish();
  sampler.reset();
  rr.cpu_samples = prof.samples.size();
  rr.cpu_lost = prof.lost;
  uint64_t frames = 0;
  for (const auto& s : prof.samples) frames += s.stack.size();
  rr.cpu_unknown_share = frames ? static_cast<double>(prof.unknown_frames) / static_cast<double>(frames) : 0;
  rr.convert = convert_recording(events, dir, opt.output, t0, opt.capture, pid, name, &prof);
  if (!opt.folded.empty()) io::atomic_write_file(opt.folded, fold_profile(prof));
  return rr;
}

}  // namespace rtx::trace
