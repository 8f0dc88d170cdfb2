// rtx-flame: flame graphs (interactive SVG, icicle, differential) or folded stacks from an rtx
// trace, any Chrome Trace Event JSON (.json/.json.gz, e.g. torch.profiler) or folded stacks.
// Flags only; the logic lives in libcommon (rtx/trace/folded.hpp, flamegraph.hpp).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "rtx/cli/cli.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/printable.hpp"
#include "rtx/io/atomic_file.hpp"
#include "rtx/trace/flamegraph.hpp"
#include "rtx/trace/folded.hpp"

namespace {

struct Loaded {
  std::string kind;  // "trace" | "folded" | "perf"
  uint64_t items = 0;
  rtx::trace::FoldMode mode = rtx::trace::FoldMode::Cpu;
  uint64_t differential = 0;  // folded lines with two counts (BASE NEW)
  std::vector<std::string> notes;  // what was skipped or clipped, for stderr
};

/// Stdin can be read once: spool it to a temp file so the format can be sniffed.
std::string spool_stdin(std::string& tmp_out) {
  char templ[] = "/tmp/rtx-flame.stdin.XXXXXX";
  const int fd = ::mkstemp(templ);
  if (fd < 0) rtx::throw_env("cannot create a temporary file for stdin", "/tmp", "set TMPDIR or pass a file");
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0)
    if (::write(fd, buf, n) != static_cast<ssize_t>(n)) {
      ::close(fd);
      rtx::throw_env("cannot spool stdin to a temporary file", templ);
    }
  ::close(fd);
  tmp_out = templ;
  return tmp_out;
}

/// `s` with every occurrence of `from` replaced by `to`.
std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

/// Load a trace, perf script text or folded stacks into `trie` column `which` (`format`:
/// auto, trace, folded, perf). Folded counts carry no unit: `count_unit` names it ("ns" prints
/// times), else the neutral "counts". Skipped or repaired input is listed in notes.
Loaded load(const std::string& in, rtx::trace::StackTrie& trie, int which, rtx::trace::FoldMode mode,
            const std::string& count_unit, const std::string& format, bool strict) {
  Loaded l;
  std::string tmp;
  const std::string path = in == "-" ? spool_stdin(tmp) : in;
  struct Rm {
    std::string p;
    ~Rm() {
      if (!p.empty()) ::unlink(p.c_str());
    }
  } rm{tmp};
  const std::string shown = in == "-" ? "<stdin>" : in;
  try {
    std::string kind = format;
    if (kind == "auto")
      kind = rtx::trace::looks_like_trace(path) ? "trace" : rtx::trace::looks_like_perf(path) ? "perf" : "folded";
    l.kind = kind;
    if (kind == "trace") {
      const auto r = rtx::trace::fold_trace(path, trie, which, mode, strict);
      l.items = r.slices;
      l.mode = r.mode;
      if (r.unclosed_b || r.stray_e)
        l.notes.push_back(shown + ": " + std::to_string(r.unclosed_b) + " B event(s) never closed and " +
                          std::to_string(r.stray_e) +
                          " E event(s) without an open B were left out (a killed or truncated recording?); "
                          "rtx-trace validate names them, --strict refuses them");
      if (r.clipped)
        l.notes.push_back(shown + ": " + std::to_string(r.clipped) +
                          " slice(s) overran their parent on the same thread and were clipped to its end "
                          "(rtx-trace validate names them as x-nesting)");
    } else if (kind == "perf") {
      const auto r = rtx::trace::collapse_perf(path, trie, which);
      l.items = r.samples;
      if (strict && r.unrecognized)
        rtx::throw_input("perf script line is neither a sample header nor a stack frame",
                         path + ":" + std::to_string(r.first_unrecognized_line),
                         "without --strict such lines are skipped and counted");
      if (r.other_event_samples)
        l.notes.push_back(shown + ": kept the " + std::to_string(r.samples) + " samples of event " + r.event + ", left out " +
                          std::to_string(r.other_event_samples) +
                          " of other events (as stackcollapse-perf.pl; record one event per profile)");
      if (r.unrecognized)
        l.notes.push_back(shown + ": skipped " + std::to_string(r.unrecognized) +
                          " line(s) that are neither sample headers nor stack frames (first: line " +
                          std::to_string(r.first_unrecognized_line) + ")");
    } else {
      rtx::trace::FoldedOptions fo;
      fo.strict = strict;
      const auto r = rtx::trace::read_folded(path, trie, which, fo);
      l.items = r.stacks;
      l.differential = r.differential;
      trie.unit = count_unit.empty() ? "counts" : count_unit;
      if (r.bad_lines)
        l.notes.push_back(shown + ": skipped " + std::to_string(r.bad_lines) + " malformed line(s) (first: line " +
                          std::to_string(r.first_bad_line) + ": " + r.first_bad_reason + "); --strict refuses them");
      if (r.empty_frames)
        l.notes.push_back(shown + ": dropped " + std::to_string(r.empty_frames) +
                          " empty frame name(s) (\"a;;b\" or a trailing ';'); --strict refuses them");
    }
  } catch (const rtx::Error& e) {
    if (tmp.empty()) throw;
    // The spool file is ours, not the user's: errors name stdin ("<stdin>:2: ...").
    throw rtx::Error(e.category(), replace_all(e.message(), tmp, "<stdin>"), replace_all(e.where(), tmp, "<stdin>"),
                     replace_all(e.hint(), tmp, "<stdin>"));
  }
  return l;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rtx-flame: flame graphs from traces (Chrome Trace Event JSON) or folded stacks", "rtx-flame"};
  rtx::cli::CommonOptions common;
  rtx::cli::add_common_options(app, common);
  std::string input = "-", output = "-", mode_s = "auto", count_unit;
  std::vector<std::string> diff;
  bool folded = false, normalize = false, strict = false;
  std::string input_format = "auto";
  rtx::trace::FlameOptions fo;
  fo.title.clear();
  app.add_option("input", input,
                 "Trace (.json/.json.gz), perf script text or folded stacks, detected by content ('-' = stdin)");
  app.add_option("--input-format", input_format, "auto (by content), trace, perf (perf script output) or folded")
      ->check(CLI::IsMember({"auto", "trace", "perf", "folded"}));
  app.add_flag("--strict", strict,
               "Refuse malformed folded or perf script lines, empty frames, and unbalanced B/E in traces "
               "(default: skip them with a note on stderr)");
  app.add_option("-o,--output", output, "Output file (SVG, or folded text with --folded); '-' = stdout");
  app.add_flag("--folded", folded, "Write folded stacks (frame;frame;frame count) instead of an SVG");
  app.add_flag("--icicle", fo.icicle, "Icicle layout: root at the top, stacks grow down");
  app.add_option("--diff", diff, "Differential flame graph of NEW against BASE: --diff BASE NEW")->expected(2);
  app.add_flag("--normalize", normalize, "With --diff: scale BASE to NEW's total before comparing");
  app.add_option("--title", fo.title, "Title (default: Flame Graph / Icicle Graph / Differential Flame Graph)");
  app.add_option("--width", fo.width, "Image width in px (default 1200)");
  app.add_option("--minwidth", fo.minwidth, "Leave out frames narrower than this many px (default 0.1)");
  app.add_option("--colors", fo.colors, "Palette: hot mem io aqua yellow green blue red orange purple gray");
  app.add_option("--mode", mode_s, "Trace folding: auto (GPU when GPU slices exist), cpu or gpu")
      ->check(CLI::IsMember({"auto", "cpu", "gpu"}));
  app.add_option("--countname", count_unit,
                 "Unit of folded input's counts (folded text carries none; default \"counts\"): e.g. samples, "
                 "or ns to print times (folded stacks written from a trace are ns)");
  app.footer(
      "Traces: CPU stacks are slice nesting per thread (weight = self time, ns); GPU stacks are the CPU op /\n"
      "NVTX ranges around the launching API call, then the kernel (weight = GPU time, ns).\n"
      "B/E pairs are matched per thread in timestamp order; unclosed B / stray E are left out with a note.\n"
      "Folded input: 'a;b;c COUNT' per line (FlameGraph/inferno collapse output); counts may be\n"
      "fractional; 'a;b;c BASE NEW' lines (difffolded.pl) draw a differential flame graph. Malformed\n"
      "lines are skipped with a note (--strict: refused).\n"
      "perf input: 'perf script' text, collapsed as stackcollapse-perf.pl does (comm;frames root first;\n"
      "weight = the sample's period: ns for cpu-clock).\n"
      "Exit codes: 0 ok; 2 usage or input error (bad JSON, with --strict a malformed line or unbalanced\n"
      "B/E, empty profile, the folder of -o does not exist); 3 environment (cannot write the output);\n"
      "4 internal error.");
  return rtx::cli::run_tool(app, argc, argv, common, [&]() {
    const auto mode = mode_s == "cpu" ? rtx::trace::FoldMode::Cpu
                      : mode_s == "gpu" ? rtx::trace::FoldMode::Gpu
                                        : rtx::trace::FoldMode::Auto;
    // A missing folder of -o is a usage error found before reading any input (exit 2).
    rtx::io::require_output_dir(output, "-o");
    rtx::trace::StackTrie trie;
    Loaded a, b;
    std::string what;
    if (!diff.empty()) {
      if (app.get_option("input")->count() > 0)
        rtx::throw_usage("--diff BASE NEW takes both inputs; drop the positional input", "input");
      if (diff[0] == "-" && diff[1] == "-")
        rtx::throw_usage("BASE and NEW are both '-': stdin can be read only once", "--diff", "give at least one of them as a file");
      b = load(diff[0], trie, 1, mode, count_unit, input_format, strict);
      a = load(diff[1], trie, 0, mode, count_unit, input_format, strict);
      if (a.differential || b.differential)
        rtx::throw_usage("an input of --diff already holds two counts per line (BASE NEW): draw it alone, without --diff",
                         "--diff");
      if (a.kind != b.kind)
        rtx::throw_usage("--diff inputs must both be traces or both folded stacks (got " + b.kind + " and " + a.kind + ")",
                         "--diff");
      fo.diff = true;
      fo.diff_normalize = normalize;
      what = "NEW " + diff[1] + " vs BASE " + diff[0] + ": red grew, blue shrank" + (normalize ? " (normalized)" : "");
    } else {
      a = load(input, trie, 0, mode, count_unit, input_format, strict);
      what = a.kind == "folded" ? "folded stacks from " + input
             : a.kind == "perf"   ? "perf samples from " + input
             : a.mode == rtx::trace::FoldMode::Gpu ? "GPU time by launching op stack, " + input
                                                   : "self time of op spans per thread, " + input;
      if (a.differential) {  // "stack BASE NEW" lines: flamegraph.pl draws them as a differential
        fo.diff = true;
        fo.diff_normalize = normalize;
        what = "differential folded stacks from " + input + " (BASE NEW counts): red grew, blue shrank" +
               (normalize ? " (normalized)" : "");
      }
    }
    std::vector<std::string> notes;  // what was skipped, dropped or clipped (stderr; --json's "notes")
    for (const Loaded* l : {&b, &a}) notes.insert(notes.end(), l->notes.begin(), l->notes.end());
    if (!common.quiet)
      for (const std::string& n : notes) std::fprintf(stderr, "rtx-flame: note: %s\n", rtx::printable(n).c_str());
    if (fo.title.empty())
      fo.title = fo.diff ? "Differential Flame Graph" : fo.icicle ? "Icicle Graph" : "Flame Graph";
    fo.subtitle = what;
    const uint64_t total = trie.total_weight(0);
    if (folded) {
      if (a.differential)
        rtx::throw_usage("--folded writes one profile; the input holds two counts per line (BASE NEW)", "--folded");
      if (fo.diff) rtx::throw_usage("--folded writes one profile; drop --diff", "--folded");
      rtx::io::write_text_output(output, rtx::trace::write_folded(trie, 0));
    } else {
      rtx::io::write_text_output(output, rtx::trace::render_flamegraph(trie, fo));
    }
    if (!common.quiet)
      std::fprintf(stderr, "rtx-flame: %llu %s, %zu frames, total %s -> %s\n", (unsigned long long)a.items,
                   a.kind == "trace" ? "slices" : a.kind == "perf" ? "samples" : "stack lines", trie.nodes().size() - 1,
                   rtx::printable(rtx::trace::format_weight(total, trie.unit, trie.frac_digits())).c_str(),
                   rtx::printable(output).c_str());
    if (common.json && output != "-")
      std::cout << nlohmann::json{{"schema", "rtx.flame.v1"}, {"output", output}, {"input_kind", a.kind},
                                  {"items", a.items}, {"frames", trie.nodes().size() - 1},
                                  {"total", trie.frac_digits() ? nlohmann::json(static_cast<double>(total) /
                                                                                std::pow(10.0, trie.frac_digits()))
                                                               : nlohmann::json(total)},
                                  {"unit", trie.unit}, {"diff", fo.diff}, {"notes", notes}}.dump(2)
                << std::endl;
    return 0;
  });
}
