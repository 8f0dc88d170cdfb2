// rtx-trace: record a program's timeline (engine spans, CUDA activity via CUPTI injection) as
// a Chrome trace, print per-kernel/op statistics, merge traces, check a trace's rules.
// Flags only; the logic lives in libcommon (rtx/trace/*).
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "rtx/cli/cli.hpp"
#include "rtx/core/printable.hpp"
#include "rtx/core/device.hpp"
#include "rtx/core/error.hpp"
#include "rtx/trace/cpu_sampler.hpp"
#include "rtx/trace/merge.hpp"
#include "rtx/trace/record.hpp"
#include "rtx/trace/stats.hpp"
#include "rtx/trace/trace_event.hpp"

namespace {

std::string self_dir() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<size_t>(n));
  return p.substr(0, p.find_last_of('/'));
}

/// The CUPTI injection library: $RTX_TRACE_INJECT (when set and not empty), else next to the
/// binary (../lib or same dir); "" when none.
std::string find_inject_lib() {
  if (const char* e = std::getenv("RTX_TRACE_INJECT"); e && *e) return e;
  const std::string d = self_dir();
  for (const std::string& p : {d + "/../lib/librtx_cupti_inject.so", d + "/librtx_cupti_inject.so"})
    if (::access(p.c_str(), R_OK) == 0) return p;
  return {};
}

std::string cupti_library() {
  if (const char* e = std::getenv("RTX_CUPTI_LIB")) return e;
#ifdef RTX_CUPTI_LIBRARY
  return RTX_CUPTI_LIBRARY;
#else
  return {};
#endif
}

/// Decide CUDA capture for `record`: on only when the CUPTI injection library exists and a
/// CUDA device is present (probed only once the library is found). When on, sets
/// o.inject_lib and o.nvtx_lib (record() then sets CUDA_INJECTION64_PATH and
/// NVTX_INJECTION64_PATH in the child) and returns ""; otherwise leaves them empty, so the
/// child gets no injection, and returns why capture is off.
std::string decide_cuda_capture(const std::string& mode, rtx::trace::RecordOptions& o) {
  o.inject_lib.clear();
  o.nvtx_lib.clear();
  if (mode == "off") return "--cuda off";
  const std::string lib = find_inject_lib();
  if (lib.empty()) {
#ifdef RTX_CUPTI_LIBRARY
    return "librtx_cupti_inject.so not found next to rtx-trace (set RTX_TRACE_INJECT)";
#else
    return "rtx-trace was built without CUDA/CUPTI (no injection library: rebuild with the CUDA toolkit)";
#endif
  }
  if (::access(lib.c_str(), R_OK) != 0) return "injection library " + lib + " is not readable";
  std::string why;
  if (rtx::cuda_driver_device_count(why) == 0) return "no CUDA device (" + why + ")";
  o.inject_lib = lib;
  o.nvtx_lib = cupti_library();
  return {};
}

void say(const rtx::cli::CommonOptions& c, const std::string& msg) {
  if (!c.quiet) std::fprintf(stderr, "rtx-trace: %s\n", msg.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rtx-trace: record, summarize, merge and check Chrome traces (engine spans on CPU, CUPTI on GPU)",
               "rtx-trace"};
  rtx::cli::CommonOptions common;
  rtx::cli::add_common_options(app, common);
  rtx::cli::Subcommands subs(app);

  subs.add("record", "Run a program and record its timeline: rtx-trace record -o run.trace.json[.gz] -- CMD ARGS...",
           [&](CLI::App& s) -> rtx::cli::Subcommands::Body {
    auto o = std::make_shared<rtx::trace::RecordOptions>();
    auto cuda = std::make_shared<std::string>("auto");
    s.add_option("-o,--output", o->output, "Trace file to write (.gz: gzip); '-' = stdout")->required();
    s.add_option("--delay", o->capture.delay_s, "Leave out events that start in the first S seconds")
        ->check(CLI::NonNegativeNumber);
    s.add_option("--duration", o->capture.duration_s, "Keep only events starting within S seconds after the delay")
        ->check(CLI::PositiveNumber);
    s.add_option("--nvtx-range", o->capture.range,
                 "Keep only what starts inside the first NVTX range / engine span of this name (e.g. train.step)");
    s.add_option("--max-events", o->capture.max_events, "Cap on recorded events (default 2000000; 0 = no cap)");
    s.add_option("--cuda", *cuda,
                 "CUDA capture by CUPTI injection: auto (on when built with CUPTI and a CUDA device is present) or off")
        ->check(CLI::IsMember({"auto", "off"}));
    auto cpu_sample = std::make_shared<bool>(false);
    auto* cpu_opt = s.add_flag("--cpu-sample", *cpu_sample,
                               "Sample the program's CPU call stacks (perf_event_open, user space; threads and "
                               "children too) into the trace, as 'CPU samples' tracks");
    auto freq = std::make_shared<long long>(99);
    s.add_option("--freq", *freq, "With --cpu-sample: samples per second of CPU time per thread (default 99)")
        ->needs(cpu_opt);
    auto call_graph = std::make_shared<std::string>("fp");
    s.add_option("--call-graph", *call_graph,
                 "With --cpu-sample: fp (kernel frame-pointer walk, cheap; needs -fno-omit-frame-pointer) or dwarf "
                 "(unwind a copy of 8 KiB of stack per sample with the files' CFI; works without frame pointers)")
        ->check(CLI::IsMember({"fp", "dwarf"}))
        ->needs(cpu_opt);
    s.add_option("--folded", o->folded, "With --cpu-sample: also write folded stacks (FlameGraph format, counts = samples)")
        ->needs(cpu_opt);
    s.add_option("command", o->command, "The program and its arguments, after --")->required();
    return [&, o, cuda, cpu_sample, freq, call_graph]() {
      if (*cpu_sample) {
        // Checked here as a number first: a negative or huge value must not wrap into range.
        if (*freq <= 0 || *freq > static_cast<long long>(rtx::trace::max_sample_rate()))
          rtx::throw_usage("--freq " + std::to_string(*freq) + " is out of range: the sampling frequency must be 1.." +
                               std::to_string(rtx::trace::max_sample_rate()) +
                               " Hz (kernel.perf_event_max_sample_rate)",
                           "--freq", "99 Hz (the default) keeps the overhead near 1%");
        o->cpu_sample_hz = static_cast<unsigned>(*freq);
        o->call_graph = *call_graph == "dwarf" ? rtx::trace::CallGraph::Dwarf : rtx::trace::CallGraph::Fp;
      }
      std::string cuda_off = decide_cuda_capture(*cuda, *o);
      const auto r = rtx::trace::record(*o);
      if (!r.cuda_capture && cuda_off.empty()) cuda_off = "injection library " + o->inject_lib + " is not readable";
      const auto& c = r.convert;
      for (const auto& n : c.notes) say(common, "CUPTI: " + n);
      std::string msg = "wrote " + o->output + ": " + std::to_string(c.written) + " events (spans " +
                        std::to_string(c.spans) + ", GPU " + std::to_string(c.gpu) + ", CUDA API " +
                        std::to_string(c.api) + ", NVTX " + std::to_string(c.ranges) + ", flows " +
                        std::to_string(c.flows) + "); " +
                        (r.cuda_capture ? "CUDA capture on (CUPTI injection " + o->inject_lib + ")"
                                        : "CUDA capture off: " + cuda_off);
      say(common, msg);
      if (o->cpu_sample_hz) {
        char share[32];
        std::snprintf(share, sizeof share, "%.1f%%", 100 * r.cpu_unknown_share);
        say(common, "CPU samples: " + std::to_string(r.cpu_samples) + " at " + std::to_string(o->cpu_sample_hz) +
                        " Hz, " + *call_graph + " call graph (" + std::to_string(c.cpu_samples) + " in the window, " +
                        std::to_string(c.cpu_slices) + " stack slices; " + share + " of frames unknown)" +
                        (o->folded.empty() ? "" : "; folded stacks in " + o->folded));
        if (r.cpu_lost)
          say(common, "the kernel dropped " + std::to_string(r.cpu_lost) +
                          " CPU samples (ring buffer full): lower --freq");
        if (r.cpu_samples == 0)
          say(common, "no CPU samples: the program used less CPU time than one sample period (1/" +
                          std::to_string(o->cpu_sample_hz) + " s); raise --freq");
      }
      if (c.outside_window) say(common, std::to_string(c.outside_window) + " events outside the capture window left out");
      if (c.over_cap)
        say(common, "event cap reached: " + std::to_string(c.over_cap) + " events left out after the first " +
                        std::to_string(o->capture.max_events) +
                        "; raise --max-events or narrow the window (--delay, --duration, --nvtx-range)");
      if (c.cupti_dropped)
        say(common, "CUPTI dropped " + std::to_string(c.cupti_dropped) +
                        " activity records (its buffers were full): the GPU timeline has gaps");
      if (c.bad_lines) say(common, std::to_string(c.bad_lines) + " unreadable recorded lines skipped (a killed program's last writes)");
      if (!c.range_found) say(common, "range \"" + o->capture.range + "\" never occurred: the trace is empty");
      if (c.written == 0 && c.range_found) {
        // An rtx tool's own --events FILE wins over the RTX_EVENTS record sets: its spans went there.
        const std::string spans_why =
            r.child_events.empty()
                ? "the program published no engine spans (is it an rtx tool run without --events?)"
                : "the program's engine spans went to its own --events " + r.child_events +
                      " (that flag wins over the trace's; drop it from the command to trace them)";
        say(common, "no events recorded: " + spans_why + " and no CUDA activity was captured" +
                        std::string(r.cuda_capture ? "" : " (CUDA capture off: " + cuda_off + ")"));
      } else if (c.spans == 0 && !r.child_events.empty()) {
        say(common, "no engine spans in the trace: the program's own --events " + r.child_events +
                        " took them (drop that flag from the command to trace them)");
      }
      if (common.json) {
        nlohmann::json j = {{"schema", "rtx.trace_record.v1"}, {"output", o->output}, {"exit_code", r.exit_code},
                            {"cuda_capture", r.cuda_capture}, {"cuda_off_reason", cuda_off},
                            {"events", c.written}, {"spans", c.spans}, {"gpu", c.gpu}, {"api", c.api},
                            {"nvtx", c.ranges}, {"flows", c.flows},
                            {"outside_window", c.outside_window}, {"over_cap", c.over_cap},
                            {"cupti_dropped", c.cupti_dropped}, {"notes", c.notes}};
        if (o->cpu_sample_hz)
          j["cpu_sample"] = {{"freq_hz", o->cpu_sample_hz}, {"call_graph", *call_graph}, {"samples", r.cpu_samples},
                             {"in_window", c.cpu_samples}, {"slices", c.cpu_slices}, {"lost", r.cpu_lost},
                             {"unknown_frame_share", r.cpu_unknown_share}, {"folded", o->folded}};
        std::cout << j.dump(2) << std::endl;
      }
      return r.exit_code;
    };
  });

  subs.add("stats", "Per-kernel / per-op statistics of a trace (count, self, total, mean, min, max, stddev, share of self)",
           [&](CLI::App& s) -> rtx::cli::Subcommands::Body {
    auto file = std::make_shared<std::string>();
    auto format = std::make_shared<std::string>("table");
    auto top = std::make_shared<size_t>(20);
    auto by = std::make_shared<std::string>("name");
    auto match = std::make_shared<std::string>();
    s.footer(
        "Per category (gpu_kernels, gpu_memory, cuda_api, ops) and name, over X slices and B/E pairs:\n"
        "  total   inclusive: the sum of the slices' durations (children included)\n"
        "  self    exclusive: duration minus the time covered by direct children, i.e. the time the\n"
        "          slice is the innermost open one on its thread. Slices nest only on the same\n"
        "          pid+tid, whatever their category; by start time (ties: the longer encloses, then\n"
        "          file order); touching slices are siblings; a child overrunning its parent is\n"
        "          clipped to the parent's end; a zero-duration slice has self 0\n"
        "  busy    a category's total (json: the group's total_ns): the sum of its self times, i.e.\n"
        "          its busy time summed over threads and streams; nothing is counted twice\n"
        "  share   self / busy: a category's shares sum to 1\n"
        "  mean, min, max, stddev (population): of the slices' durations\n"
        "Rows are sorted by self time. csv/json times are ns (self_ns is csv's last column).\n"
        "--by path: one row per stack path (enclosing slices, root first, joined by ';' as in\n"
        "rtx-flame --folded), e.g. ProfilerStep#1;aten::linear;aten::addmm: which op under which\n"
        "layer or phase. B/E pairs are matched per thread in timestamp order; timestamps may be\n"
        "relative or absolute (us since the Unix epoch, as PyTorch/Kineto write).");
    s.add_option("file", *file, "Chrome trace (.json/.json.gz; '-' = stdin)")->required();
    s.add_option("--format", *format, "table, csv or json (--json = json)")->check(CLI::IsMember({"table", "csv", "json"}));
    s.add_option("--top", *top, "Rows per category in table/json (0 = all; default 20)");
    s.add_option("--by", *by, "Rows per name (default) or per stack path (path)")->check(CLI::IsMember({"name", "path"}));
    s.add_option("--match", *match, "Keep rows whose name (or path) matches this regex (ECMAScript); shares stay of all");
    return [&, file, format, top, by, match]() {
      rtx::trace::StatsOptions so;
      so.by_path = *by == "path";
      so.match = *match;
      const auto st = rtx::trace::compute_stats(*file, so);
      if (common.json || *format == "json") std::cout << rtx::trace::stats_json(st, *top).dump(2) << std::endl;
      else if (*format == "csv") {
        std::cout << rtx::trace::stats_csv(st);
        // The CSV holds rows only: say on stderr what the table and json say about ignored B/E.
        if (st.unmatched && !common.quiet)
          std::cerr << "rtx-trace: note: " << st.unmatched << " B/E event(s) without a partner were ignored ("
                    << st.unclosed_b << " B never closed); rtx-trace validate " << rtx::printable(*file) << " names them\n";
        if (!common.quiet) std::cerr << rtx::trace::stats_notes(st);  // each line "note: ..."
      } else {
        std::cout << rtx::trace::stats_table(st, *top);
      }
      return 0;
    };
  });

  subs.add("merge", "Merge traces (ranks, processes) onto one timeline, one process track each",
           [&](CLI::App& s) -> rtx::cli::Subcommands::Body {
    auto in = std::make_shared<std::vector<std::string>>();
    auto out = std::make_shared<std::string>();
    s.add_option("inputs", *in, "Traces to merge (.json/.json.gz)")->required();
    s.add_option("-o,--output", *out, "Merged trace (.gz: gzip; '-' = stdout)")->required();
    return [&, in, out]() {
      const auto r = rtx::trace::merge_traces(*in, *out);
      say(common, "merged " + std::to_string(in->size()) + " traces into " + *out + ": " + std::to_string(r.processes) +
                      " process tracks, " + std::to_string(r.events) + " events" +
                      (r.clock_aligned ? ", aligned on the wall clock"
                                       : ", each starting at 0 (inputs lack otherData.start_unix_ns)"));
      if (common.json)
        std::cout << nlohmann::json{{"schema", "rtx.trace_merge.v1"}, {"output", *out}, {"events", r.events},
                                    {"processes", r.processes}, {"clock_aligned", r.clock_aligned}}.dump(2)
                  << std::endl;
      return 0;
    };
  });

  subs.add("validate", "Check a trace against the Trace Event Format rules; exit 1 when any is broken",
           [&](CLI::App& s) -> rtx::cli::Subcommands::Body {
    auto file = std::make_shared<std::string>();
    s.add_option("file", *file, "Chrome trace (.json/.json.gz; '-' = stdin)")->required();
    return [&, file]() {
      const auto t = rtx::trace::load_trace(*file);
      const auto v = rtx::trace::validate(t.events);
      if (common.json) {
        nlohmann::json arr = nlohmann::json::array();
        for (const auto& x : v) arr.push_back({{"index", x.index}, {"rule", x.rule}, {"message", x.message}});
        std::cout << nlohmann::json{{"schema", "rtx.trace_validate.v1"}, {"file", *file}, {"events", t.events.size()},
                                    {"valid", v.empty()}, {"violations", arr}}.dump(2)
                  << std::endl;
      } else {
        for (const auto& x : v) std::cout << x.rule << ": " << x.message << "\n";
        std::cout << *file << ": " << t.events.size() << " events, " << v.size() << " violation(s)\n";
      }
      return v.empty() ? 0 : 1;
    };
  });

  app.footer(
      "record sets RTX_EVENTS for rtx tools (engine spans, any backend) and, in CUDA builds,\n"
      "CUDA_INJECTION64_PATH=librtx_cupti_inject.so and NVTX_INJECTION64_PATH=libcupti.so (GPU only).\n"
      "Exit codes: record passes the program's exit status through (128+N when killed by signal N);\n"
      "otherwise 0 ok; 1 validate found violations; 2 usage or input error (bad trace, cannot run the\n"
      "command, the folder of -o does not exist); 3 environment (cannot write the output; --cpu-sample:\n"
      "the kernel refuses perf_event_open, see kernel.perf_event_paranoid); 4 internal\n"
      "error. -o is checked before the program starts. stats exits 0 when B/E events have no partner\n"
      "(it says how many; validate checks).");
  return rtx::cli::run_tool(app, argc, argv, common, [&]() { return subs.run(); });
}
