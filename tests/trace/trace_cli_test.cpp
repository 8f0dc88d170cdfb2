// rtx-trace and rtx-flame as subprocesses: record a tiny rtx-train run (engine spans), exit
// status passthrough, capture window and cap, stats/merge/validate, flame graphs from the
// sample and from folded stacks, and exit 2 with a clear message for bad input.
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "rtx/trace/trace_event.hpp"
#include "test_util.hpp"

using rtx::test::run;

namespace {

std::string trace_bin() { return rtx::test::tool_path("rtx-trace"); }
std::string flame_bin() { return rtx::test::tool_path("rtx-flame"); }
std::string train_bin() { return rtx::test::tool_path("rtx-train"); }
std::string sample() { return rtx::test::source_dir() + "/tests/trace/data/torch_style_sample.json"; }

void write_file(const std::string& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

std::string read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

/// A prepared char dataset and a 2-layer config (once per process).
const std::string& train_dir() {
  static const std::string dir = [] {
    const std::string d = rtx::test::temp_dir();
    const auto p = run(train_bin() + " prepare --tokenizer char " + rtx::test::data_dir() +
                       "/tinyshakespeare/input.txt -o " + d + "/data -q");
    INFO(p.err);
    REQUIRE(p.exit_code == 0);
    write_file(d + "/cfg.json", R"({"model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32, "vocab_size": 65},
      "batch": 4, "lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 1, "eval_interval": 100, "eval_iters": 0})");
    return d;
  }();
  return dir;
}

std::string train_cmd(int steps) {
  return train_bin() + " run --data " + train_dir() + "/data --config " + train_dir() + "/cfg.json --threads 1 -q --steps " +
         std::to_string(steps);
}

}  // namespace

TEST_CASE("rtx-trace record of an rtx-train run gives a valid trace with its step spans", "[cpu][cli]") {
  const std::string dir = rtx::test::temp_dir();
  const auto p = run(trace_bin() + " record --cuda off -o " + dir + "/t.json -- " + train_cmd(3));
  INFO(p.err);
  REQUIRE(p.exit_code == 0);
  // Per step: train.step, data, forward (2 x layer.N > attn, mlp; lm_head), backward (lm_head; 2
  // x layer.N > mlp, attn), adamw = 19 spans, and the kernel runs inside them (kernel.launch):
  // forward 1 encoder + 2 x (2 layernorm, 4 matmul, attention, 2 residual, gelu) + lm_head's
  // layernorm, matmul, cross-entropy = 24; backward cross-entropy, matmul, layernorm + 2 x (4
  // matmul, gelu, 2 layernorm, attention) + encoder = 20; AdamW one update per run of
  // decayed / not decayed tensors, 8 per layer + 2 = 18. 19 + 62 = 81 a step; 3 steps = 243.
  CHECK_THAT(p.err, Catch::Contains("spans 243"));
  std::ifstream f(dir + "/t.json");
  const auto j = nlohmann::json::parse(f);  // plain JSON, object form
  CHECK(j["schema"] == "rtx.trace.v1");
  CHECK(j["otherData"]["start_unix_ns"].get<uint64_t>() > 0);
  const auto t = rtx::trace::load_trace(dir + "/t.json");
  const auto v = rtx::trace::validate(t.events);
  CHECK(v.empty());
  int steps = 0, pname = 0;
  for (const auto& e : t.events) {
    if (e.ph == 'X' && e.name == "train.step") {
      ++steps;
      CHECK(e.dur > 0);
      CHECK(e.ts >= 0);
    }
    if (e.ph == 'M' && e.name == "process_name") pname += e.args["name"].get<std::string>().find("rtx-train") == 0;
  }
  CHECK(steps == 3);
  CHECK(pname == 1);

  // Only the first train.step range; then a cap of one event with a clear message.
  const auto r = run(trace_bin() + " record --cuda off --nvtx-range train.step -o " + dir + "/r.json.gz -- " + train_cmd(3));
  REQUIRE(r.exit_code == 0);
  int in_range = 0, step_spans = 0;
  for (const auto& e : rtx::trace::load_trace(dir + "/r.json.gz").events) {
    in_range += e.ph == 'X';
    step_spans += e.ph == 'X' && e.name == "train.step";
  }
  CHECK(step_spans == 1);
  CHECK(in_range == 81);  // that step and the spans and kernel runs nested in it
  const auto c = run(trace_bin() + " record --cuda off --max-events 1 -o " + dir + "/c.json -- " + train_cmd(3));
  REQUIRE(c.exit_code == 0);
  CHECK_THAT(c.err, Catch::Contains("event cap reached") && Catch::Contains("--max-events"));

  // Flame graph of the recorded run: one frame per span name, weight = the spans' time.
  const auto fl = run(flame_bin() + " " + dir + "/t.json --folded -o " + dir + "/t.folded");
  INFO(fl.err);
  REQUIRE(fl.exit_code == 0);
  std::ifstream ff(dir + "/t.folded");
  std::string line;
  std::set<std::string> stacks;
  while (std::getline(ff, line)) stacks.insert(line.substr(0, line.rfind(' ')));
  CHECK(stacks.count("train.step") == 1);  // the step's self time
  CHECK(stacks.count("train.step;forward;layer.0;attn") == 1);
  CHECK(stacks.count("train.step;backward;layer.1;mlp") == 1);
  CHECK(stacks.count("train.step;adamw") == 1);
  CHECK(stacks.count("train.step;data") == 1);
  // Op -> layer -> step: the kernels are the leaves.
  CHECK(stacks.count("train.step;forward;layer.0;attn;matmul_forward") == 1);
  CHECK(stacks.count("train.step;forward;layer.1;attn;attention_forward") == 1);
  CHECK(stacks.count("train.step;backward;layer.0;mlp;matmul_backward") == 1);
  CHECK(stacks.count("train.step;adamw;adamw_update") == 1);
  CHECK(stacks.count("train.step;forward;lm_head;crossentropy_forward") == 1);
  // The kernel slices carry their shape and variant: layer 0's qkv projection is (B*T, 3C, C).
  bool qkv = false;
  for (const auto& e : t.events)
    if (e.ph == 'X' && e.name == "matmul_forward" && e.cat == "cpu_op" && e.args["dims"] == nlohmann::json{{"M", 128}, {"N", 96}, {"K", 32}}) {
      qkv = true;
      CHECK(e.args["variant"].get<std::string>().rfind("cpu.", 0) == 0);
      CHECK(e.args["dtype"] == "f32");
    }
  CHECK(qkv);
}

TEST_CASE("rtx-trace record of rtx-bench gives a span per case phase and the kernel runs of its checks", "[cpu][cli]") {
  const std::string dir = rtx::test::temp_dir();
  const std::string pack = rtx::test::source_dir() + "/benchpacks/smoke.json";
  const auto p = run(trace_bin() + " record --cuda off -o " + dir + "/b.json -- " + rtx::test::tool_path("rtx-bench") +
                     " run " + pack + " -q --max-time 0.05 -o " + dir + "/r.json");
  INFO(p.err);
  REQUIRE(p.exit_code == 0);
  const auto t = rtx::trace::load_trace(dir + "/b.json");
  CHECK(rtx::trace::validate(t.events).empty());
  std::map<std::string, int> n;
  std::set<std::string> measured_cases;
  for (const auto& e : t.events) {
    if (e.ph != 'X' && e.ph != 'i' && e.ph != 'I') continue;
    ++n[e.name];
    if (e.name == "bench.measure") measured_cases.insert(e.args["case"].get<std::string>());
  }
  // One result per case (the parent's, merged); in each of the default 5 rounds (a process
  // each, recorded through RTX_EVENTS) every case is prepared (check), warmed up and measured
  // once (not interleaved), so each phase has rounds x cases spans.
  const auto rj = nlohmann::json::parse(read_file(dir + "/r.json"));
  const int cases = static_cast<int>(rj["cases"].size());
  const int rounds = rj["options"]["rounds"].get<int>();
  REQUIRE(cases >= 5);
  CHECK(rounds == 5);
  CHECK(n["bench.result"] == cases);
  CHECK(n["bench.prepare"] == rounds * cases);
  CHECK(n["bench.warmup"] == rounds * cases);
  CHECK(n["bench.measure"] == rounds * cases);
  CHECK(static_cast<int>(measured_cases.size()) == cases);
  std::set<int64_t> pids;
  for (const auto& e : t.events)
    if (e.name == "bench.measure") pids.insert(e.pid);
  CHECK(static_cast<int>(pids.size()) == rounds);  // one process track per round
  // The correctness check runs each case's kernel once inside bench.prepare; the timed loop
  // records none (muted), so kernel slices = rounds x cases (one op per smoke case).
  int kernels = 0;
  for (const auto& e : t.events) kernels += e.ph == 'X' && e.cat == "cpu_op";
  CHECK(kernels == rounds * cases);
  CHECK(n["bench.prepare"] + n["bench.warmup"] + n["bench.measure"] + kernels >= 10);
  // rtx-flame draws it: kernels under bench.prepare.
  const auto fl = run(flame_bin() + " " + dir + "/b.json --folded -o " + dir + "/b.folded");
  INFO(fl.err);
  REQUIRE(fl.exit_code == 0);
  CHECK_THAT(read_file(dir + "/b.folded"), Catch::Contains("bench.prepare;matmul_forward "));
  REQUIRE(run(flame_bin() + " " + dir + "/b.json -o " + dir + "/b.svg").exit_code == 0);
}

TEST_CASE("rtx-trace record passes the exit status through and rejects a missing program", "[cpu][cli]") {
  const std::string dir = rtx::test::temp_dir();
  const auto p = run(trace_bin() + " record -q -o " + dir + "/t.json -- sh -c 'echo out; exit 7'");
  CHECK(p.exit_code == 7);
  CHECK(p.out == "out\n");  // the target's stdout is untouched
  CHECK(rtx::trace::validate(rtx::trace::load_trace(dir + "/t.json").events).empty());
  const auto k = run(trace_bin() + " record -q -o " + dir + "/k.json -- sh -c 'kill -TERM $$'");
  CHECK(k.exit_code == 128 + 15);
  const auto m = run(trace_bin() + " record -o " + dir + "/m.json -- /no/such/program");
  CHECK(m.exit_code == 2);
  CHECK_THAT(m.err, Catch::Contains("cannot run") && Catch::Contains("/no/such/program"));
  CHECK(run(trace_bin() + " record -o " + dir + "/n.json").exit_code == 2);  // no command
}

TEST_CASE("rtx-trace record claims CUDA capture only with an injection library and a CUDA device", "[cpu][cli]") {
  const std::string dir = rtx::test::temp_dir();
  // The child prints whether it got the CUPTI injection variable.
  const std::string child = " -- sh -c 'echo inject=${CUDA_INJECTION64_PATH-unset}'";
  const auto off = run(trace_bin() + " record --cuda off -o " + dir + "/off.json" + child);
  INFO(off.err);
  REQUIRE(off.exit_code == 0);
  CHECK_THAT(off.err, Catch::Contains("; CUDA capture off: --cuda off\n"));
  CHECK(off.out == "inject=unset\n");

#ifndef RTX_HAVE_CUDA
  // A CPU-only build has no injection library to inject.
  const auto cpu = run(trace_bin() + " record -o " + dir + "/cpu.json" + child, "RTX_TRACE_INJECT=");
  INFO(cpu.err);
  REQUIRE(cpu.exit_code == 0);
  CHECK_THAT(cpu.err, Catch::Contains("; CUDA capture off: rtx-trace was built without CUDA/CUPTI"));
  CHECK_THAT(cpu.err, !Catch::Contains("CUDA capture on"));
  CHECK(cpu.out == "inject=unset\n");
#endif

  // An injection library is there (any readable file: it is never loaded) but no device is:
  // CUDA_VISIBLE_DEVICES="" hides any GPU, and this machine may have no driver at all.
  write_file(dir + "/fake_inject.so", "");
  const std::string env = "RTX_TRACE_INJECT=" + dir + "/fake_inject.so CUDA_VISIBLE_DEVICES=";
  const auto nodev = run(trace_bin() + " record -o " + dir + "/nodev.json" + child, env);
  INFO(nodev.err);
  REQUIRE(nodev.exit_code == 0);
  CHECK_THAT(nodev.err, Catch::Contains("; CUDA capture off: no CUDA device ("));
  CHECK_THAT(nodev.err, !Catch::Contains("CUDA capture on"));
  CHECK(nodev.out == "inject=unset\n");  // nothing injected
  void* libcuda = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!libcuda) CHECK_THAT(nodev.err, Catch::Contains("no CUDA device (no NVIDIA driver (libcuda.so.1 cannot be loaded))"));
  else ::dlclose(libcuda);
  const auto js = run(trace_bin() + " record --json -o " + dir + "/nodev2.json -- true", env);
  REQUIRE(js.exit_code == 0);
  const auto j = nlohmann::json::parse(js.out);
  CHECK(j["cuda_capture"] == false);
  CHECK_THAT(j["cuda_off_reason"].get<std::string>(), Catch::StartsWith("no CUDA device ("));
  // The empty-recording hint names the same reason.
  CHECK_THAT(js.err, Catch::Contains("no CUDA activity was captured (CUDA capture off: no CUDA device ("));

  // A named injection library that does not exist is not claimed either.
  const auto missing =
      run(trace_bin() + " record -o " + dir + "/m.json -- true", "RTX_TRACE_INJECT=" + dir + "/none.so");
  REQUIRE(missing.exit_code == 0);
  CHECK_THAT(missing.err, Catch::Contains("CUDA capture off: injection library " + dir + "/none.so is not readable"));
}

TEST_CASE("rtx-trace stats, merge and validate on the hand-written sample", "[cpu][cli]") {
  const std::string dir = rtx::test::temp_dir();
  const auto t = run(trace_bin() + " stats " + sample());
  REQUIRE(t.exit_code == 0);
  CHECK_THAT(t.out, Catch::Contains("gpu_kernels") && Catch::Contains("ampere_sgemm_32x32") && Catch::Contains("120.000 us"));
  const auto c = run(trace_bin() + " stats --format csv " + sample());
  CHECK_THAT(c.out, Catch::Contains("cuda_api,\"cudaLaunchKernel\",2,15000,7500.0,5000,10000,2500.0"));
  // Self time (last column) and the share of it: the step's 1000 us less its three ops'
  // 500 us, of the ops' busy time 1000 - 35 us (the CUDA API calls inside them).
  CHECK_THAT(c.out, Catch::Contains("ops,\"ProfilerStep#1\",1,1000000,1000000.0,1000000,1000000,0.0,0.518135,500000\n"));
  CHECK_THAT(t.out, Catch::Contains("== ops: 5 names, busy 965.000 us") && Catch::Contains(" self ") &&
                        Catch::Contains(" 51.81%   500.000 us     1.000 ms         1 "));
  const auto h = run(trace_bin() + " stats --help");
  CHECK(h.exit_code == 0);
  CHECK_THAT(h.out, Catch::Contains("self    exclusive: duration minus the time covered by direct children"));
  const auto j = run(trace_bin() + " stats --json " + sample());
  REQUIRE(j.exit_code == 0);
  CHECK(nlohmann::json::parse(j.out)["schema"] == "rtx.trace_stats.v2");
  const auto m = run(trace_bin() + " merge " + sample() + " " + sample() + " -o " + dir + "/m.json");
  REQUIRE(m.exit_code == 0);
  CHECK(run(trace_bin() + " validate " + dir + "/m.json").exit_code == 0);
  write_file(dir + "/bad.json", R"({"traceEvents":[{"name":"a","ph":"B","ts":1,"pid":1,"tid":1},{"name":"x","ph":"X","ts":2,"pid":1,"tid":1}]})");
  const auto v = run(trace_bin() + " validate " + dir + "/bad.json");
  CHECK(v.exit_code == 1);
  CHECK_THAT(v.out, Catch::Contains("be-nesting") && Catch::Contains("x-dur"));
  CHECK(run(trace_bin() + " stats " + dir + "/nope.json").exit_code == 2);
}

TEST_CASE("rtx-flame renders the sample, folded stacks and diffs; bad input exits 2", "[cpu][cli]") {
  const std::string dir = rtx::test::temp_dir();
  const auto s = run(flame_bin() + " " + sample() + " -o " + dir + "/s.svg --title 'torch <sample>' --width 800");
  INFO(s.err);
  REQUIRE(s.exit_code == 0);
  CHECK(run("python3 -c \"import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])\" " + dir + "/s.svg").exit_code == 0);
  const auto f = run(flame_bin() + " " + sample() + " --folded");
  REQUIRE(f.exit_code == 0);
  CHECK(f.out ==
        "ProfilerStep#1;aten::linear;aten::addmm;ampere_sgemm_32x32 120000\n"
        "ProfilerStep#1;aten::mm;Memcpy DtoH (Device -> Pageable) 10000\n"
        "ProfilerStep#1;aten::relu;void at::native::vectorized_elementwise_kernel<relu> 30250\n");
  write_file(dir + "/a.folded", f.out);
  const auto rt = run("sh -c 'cat " + dir + "/a.folded | " + flame_bin() + " --folded'");  // stdin, folded detected
  CHECK(rt.out == f.out);
  CHECK(run(flame_bin() + " --diff " + dir + "/a.folded " + dir + "/a.folded -o " + dir + "/d.svg --icicle").exit_code == 0);
  CHECK(run(flame_bin() + " " + sample() + " --mode cpu --colors io -o " + dir + "/c.svg").exit_code == 0);

  auto expect2 = [&](const std::string& text, const std::string& needle) {
    write_file(dir + "/bad", text);
    const auto b = run(flame_bin() + " " + dir + "/bad -o " + dir + "/bad.svg");
    CHECK(b.exit_code == 2);
    CHECK_THAT(b.err, Catch::Contains(needle));
  };
  expect2(R"({"traceEvents":[{"name":"a","ph":"X","ts":1,"dur":2,"pid":1,"tid":1},{"name":"b","ph")", "truncated");
  auto expect2_strict = [&](const std::string& text, const std::string& needle) {
    write_file(dir + "/bad", text);
    const auto b = run(flame_bin() + " --strict " + dir + "/bad -o " + dir + "/bad.svg");
    CHECK(b.exit_code == 2);
    CHECK_THAT(b.err, Catch::Contains(needle));
  };
  expect2_strict(R"({"traceEvents":[{"name":"a","ph":"B","ts":1,"pid":1,"tid":1}]})", "unbalanced B/E");
  expect2_strict("main;a 1\nmain;b many\n", ":2");
  expect2("main;a x\nmain;b many\n", "the profile is empty");  // every line skipped
  CHECK(run(flame_bin() + " " + sample() + " --colors rainbow -o " + dir + "/x.svg").exit_code == 2);
}

TEST_CASE("rtx-trace record checks -o before it runs the program: a missing folder 2, an unwritable one 3",
          "[cpu][cli]") {
  const std::string dir = rtx::test::temp_dir();
  const auto p = run(trace_bin() + " record -o " + dir + "/nonexist/x.json -- sh -c 'echo RAN'");
  INFO(p.err);
  CHECK(p.exit_code == 2);
  CHECK(p.out.empty());  // the program never ran
  CHECK(p.err == "rtx-trace: error: -o: the folder of " + dir +
                     "/nonexist/x.json does not exist (create it first or give another path)\n");
  const auto d = run(trace_bin() + " record -o " + dir + " -- sh -c 'echo RAN'");
  CHECK(d.exit_code == 2);
  CHECK(d.out.empty());
  CHECK_THAT(d.err, Catch::Contains("is a folder, not a file"));
  // merge and rtx-flame: the same condition, the same code and message shape, before reading.
  const auto m = run(trace_bin() + " merge " + sample() + " -o " + dir + "/nonexist/m.json");
  CHECK(m.exit_code == 2);
  CHECK_THAT(m.err, Catch::StartsWith("rtx-trace: error: -o: the folder of " + dir + "/nonexist/m.json does not exist"));
  const auto f = run(flame_bin() + " " + sample() + " -o " + dir + "/nonexist/x.svg");
  CHECK(f.exit_code == 2);
  CHECK_THAT(f.err, Catch::StartsWith("rtx-flame: error: -o: the folder of " + dir + "/nonexist/x.svg does not exist"));
  write_file(dir + "/in.folded", "a;b 1\n");
  const auto fi = run("sh -c '" + flame_bin() + " --folded -o " + dir + "/nonexist/x.folded < " + dir + "/in.folded'");
  CHECK(fi.exit_code == 2);
  // -o - for record would mix the trace into the program's stdout; merge -o onto an input would
  // overwrite it: both usage errors before any work.
  const auto rs = run(trace_bin() + " record -o - -- sh -c 'echo RAN'");
  CHECK(rs.exit_code == 2);
  CHECK(rs.out.empty());
  CHECK_THAT(rs.err, Catch::Contains("-o - would write the trace into the program's own stdout"));
  write_file(dir + "/in.json", R"({"traceEvents":[{"name":"a","ph":"X","ts":0,"dur":1,"pid":1,"tid":1}]})");
  const auto mo = run(trace_bin() + " merge " + dir + "/in.json " + sample() + " -o " + dir + "/in.json");
  CHECK(mo.exit_code == 2);
  CHECK_THAT(mo.err, Catch::Contains("is the input " + dir + "/in.json: the merge would overwrite it"));
  CHECK(read_file(dir + "/in.json").find(R"("name":"a")") != std::string::npos);
  // A parent that is a file is named as such, not as missing.
  const auto pf = run(trace_bin() + " record -o " + dir + "/in.folded/x.json -- sh -c 'echo RAN'");
  CHECK(pf.exit_code == 2);
  CHECK(pf.out.empty());
  CHECK_THAT(pf.err, Catch::Contains(dir + "/in.folded (in " + dir + "/in.folded/x.json) is not a folder"));
  // A folder where no file can be made, even by root (/proc): 3, and the program never ran.
  const auto pr = run(trace_bin() + " record -o /proc/rtx-x.json -- sh -c 'echo RAN'");
  INFO(pr.err);
  CHECK(pr.exit_code == 3);
  CHECK(pr.out.empty());
  CHECK_THAT(pr.err, Catch::Contains("cannot create a file in the folder of /proc/rtx-x.json"));
  if (::geteuid() == 0) {
    WARN("SKIPPED the unwritable-folder part: running as root, every folder is writable");
    return;
  }
  REQUIRE(::mkdir((dir + "/ro").c_str(), 0555) == 0);
  const auto w = run(trace_bin() + " record -o " + dir + "/ro/x.json -- sh -c 'echo RAN'");
  INFO(w.err);
  CHECK(w.exit_code == 3);
  CHECK(w.out.empty());
  CHECK_THAT(w.err, Catch::StartsWith("rtx-trace: error: -o: cannot write in the folder of " + dir + "/ro/x.json"));
  CHECK(run(flame_bin() + " " + sample() + " -o " + dir + "/ro/x.svg").exit_code == 3);
}

TEST_CASE("rtx-trace record: a child run with its own --events is named when the trace has no spans", "[cpu][cli]") {
  const std::string dir = rtx::test::temp_dir();
  const auto p = run(trace_bin() + " record --cuda off -o " + dir + "/t.json -- " + train_cmd(1) + " --events " + dir +
                     "/ev.jsonl");
  INFO(p.err);
  REQUIRE(p.exit_code == 0);
  CHECK_THAT(p.err, Catch::Contains("no events recorded: the program's engine spans went to its own --events " + dir +
                                    "/ev.jsonl"));
  CHECK_THAT(p.err, !Catch::Contains("run without --events"));
  std::ifstream ev(dir + "/ev.jsonl");
  CHECK(ev.good());  // the spans are there
  // Without a child --events, the old hint stays.
  const auto t = run(trace_bin() + " record --cuda off -o " + dir + "/u.json -- true");
  CHECK_THAT(t.err, Catch::Contains("is it an rtx tool run without --events?"));
}

TEST_CASE("rtx-trace stats says how many B events were never closed", "[cpu][cli]") {
  const std::string dir = rtx::test::temp_dir();
  write_file(dir + "/bad.json", R"({"traceEvents":[{"name":"a","ph":"B","ts":1,"pid":1,"tid":1}]})");
  const auto t = run(trace_bin() + " stats " + dir + "/bad.json");
  INFO(t.out << t.err);
  CHECK(t.exit_code == 0);  // docs: stats summarizes what pairs; validate is the check (exit 1)
  CHECK(t.out == "no complete slices (X or B/E pairs) in " + dir + "/bad.json\n"
                 "note: 1 B event(s) never closed (no matching E) were ignored (rtx-trace validate " + dir +
                     "/bad.json names them)\n");
  const auto j = run(trace_bin() + " stats --json " + dir + "/bad.json");
  const auto doc = nlohmann::json::parse(j.out);
  CHECK(doc["unmatched_be"] == 1);
  CHECK(doc["unclosed_b"] == 1);
  CHECK(run(trace_bin() + " validate " + dir + "/bad.json").exit_code == 1);
  // An E without a B is named as such, next to the table.
  write_file(dir + "/e.json", R"({"traceEvents":[{"name":"x","ph":"X","ts":1,"dur":2,"pid":1,"tid":1},)"
                              R"({"name":"a","ph":"E","ts":5,"pid":1,"tid":1}]})");
  const auto e = run(trace_bin() + " stats " + dir + "/e.json");
  CHECK_THAT(e.out, Catch::Contains("note: 1 E event(s) without an open B were ignored"));
  // csv holds rows only: the note goes to stderr (not under -q).
  const auto c = run(trace_bin() + " stats --format csv " + dir + "/bad.json");
  CHECK(c.exit_code == 0);
  CHECK(c.err == "rtx-trace: note: 1 B/E event(s) without a partner were ignored (1 B never closed); rtx-trace validate " +
                     dir + "/bad.json names them\n");
  CHECK(run(trace_bin() + " stats -q --format csv " + dir + "/bad.json").err.empty());
}

TEST_CASE("rtx-flame --diff - - is a usage error: stdin can be read only once", "[cpu][cli]") {
  const auto d = run(flame_bin() + " --diff - - -o /dev/null < /dev/null");
  CHECK(d.exit_code == 2);
  CHECK_THAT(d.err, Catch::Contains("BASE and NEW are both '-': stdin can be read only once"));
}

TEST_CASE("rtx-flame names stdin as <stdin> and prints the unit folded counts carry", "[cpu][cli]") {
  const std::string dir = rtx::test::temp_dir();
  write_file(dir + "/b.folded", "main;a 1\nmain;b x\n");
  const auto b = run("sh -c '" + flame_bin() + " --strict -o " + dir + "/b.svg < " + dir + "/b.folded'");
  INFO(b.err);
  CHECK(b.exit_code == 2);
  CHECK_THAT(b.err, Catch::StartsWith("rtx-flame: error: <stdin>:2: folded count \"x\""));
  CHECK_THAT(b.err, !Catch::Contains("/tmp/"));
  // Without --strict the line is skipped, with a note naming stdin, the count and the line.
  const auto bl = run("sh -c '" + flame_bin() + " -o " + dir + "/b.svg < " + dir + "/b.folded'");
  CHECK(bl.exit_code == 0);
  CHECK_THAT(bl.err, Catch::StartsWith("rtx-flame: note: <stdin>: skipped 1 malformed line(s) (first: line 2: folded "
                                       "count \"x\" is not a non-negative number); --strict refuses them\n"));
  CHECK_THAT(bl.err, Catch::Contains("total 1 count ->"));
  write_file(dir + "/t.json", R"({"traceEvents":[{"name":"a","ph")");
  const auto bt = run("sh -c '" + flame_bin() + " -o " + dir + "/b.svg < " + dir + "/t.json'");
  CHECK(bt.exit_code == 2);
  CHECK_THAT(bt.err, Catch::Contains("<stdin>") && !Catch::Contains("rtx-flame.stdin"));
  // Folded stacks carry no unit: a neutral word, not "samples"; --countname names it.
  write_file(dir + "/a.folded", "main;a 1500000\nmain;b 2500000\n");
  const auto d = run(flame_bin() + " --diff " + dir + "/a.folded " + dir + "/a.folded -o " + dir + "/d.svg");
  INFO(d.err);
  REQUIRE(d.exit_code == 0);
  CHECK_THAT(d.err, Catch::Contains("total 4,000,000 counts ->"));
  CHECK_THAT(d.err, !Catch::Contains("samples"));
  const auto n = run(flame_bin() + " --countname ns " + dir + "/a.folded -o " + dir + "/n.svg");
  CHECK_THAT(n.err, Catch::Contains("total 4.000 ms ->"));
  const auto s = run(flame_bin() + " --countname samples " + dir + "/a.folded -o " + dir + "/s.svg");
  CHECK_THAT(s.err, Catch::Contains("total 4,000,000 samples ->"));
}

TEST_CASE("rtx-trace stats / validate and rtx-flame read PyTorch profiler traces with epoch timestamps", "[cpu][cli]") {
  const std::string data = rtx::test::source_dir() + "/tests/trace/data/";
  const auto want = nlohmann::json::parse(read_file(data + "torch_cpu_trace.expected.json"));
  for (const char* name : {"torch_cpu_trace.json", "torch_cpu_trace_epoch.json"}) {
    INFO(name);
    const auto j = run(trace_bin() + " stats --json --top 0 " + data + name);
    INFO(j.err);
    REQUIRE(j.exit_code == 0);
    const auto doc = nlohmann::json::parse(j.out);
    std::map<std::string, nlohmann::json> got;
    for (const auto& g : doc["groups"])
      for (const auto& r : g["rows"]) got[r["name"].get<std::string>()] = r;
    const auto& mm = want["stats"]["aten::mm"];
    CHECK(got["aten::mm"]["self_ns"] == mm["self_ns"]);
    CHECK(got["aten::mm"]["total_ns"] == mm["total_ns"]);
    CHECK(got["backward"]["count"] == 2);
    CHECK(run(trace_bin() + " validate " + data + name).exit_code == 0);
    const auto f = run(flame_bin() + " --mode cpu --folded " + data + name);
    REQUIRE(f.exit_code == 0);
    std::string want_folded;
    for (const auto& [k, v] : want["folded_cpu"].items()) want_folded += k + " " + std::to_string(v.get<uint64_t>()) + "\n";
    CHECK(f.out == want_folded);
  }
  // --by path answers "which op under which phase": backward's matmuls apart from forward's.
  const auto p = run(trace_bin() + " stats --by path --match 'aten::mm$' --format csv " + data + "torch_cpu_trace.json");
  REQUIRE(p.exit_code == 0);
  CHECK_THAT(p.out, Catch::Contains("ops,\"backward;autograd::engine::evaluate_function: AddmmBackward0;AddmmBackward0;aten::mm\","));
  CHECK_THAT(p.out, !Catch::Contains("forward;"));
  CHECK_THAT(p.err, Catch::Contains("row(s) not matching --match left out"));
  CHECK(run(trace_bin() + " stats --by layer " + data + "torch_cpu_trace.json").exit_code == 2);
  CHECK(run(trace_bin() + " stats --match '(' " + data + "torch_cpu_trace.json").exit_code == 2);
}

TEST_CASE("rtx-flame: unclosed B / stray E and clipped slices are notes, B/E out of order pair by ts", "[cpu][cli]") {
  const std::string dir = rtx::test::temp_dir();
  // A killed program: "train" never closed; "step" [1,4] closes; "over" overruns "step".
  write_file(dir + "/k.json", R"({"traceEvents":[{"name":"train","ph":"B","ts":0,"pid":1,"tid":1},
    {"name":"step","ph":"B","ts":1,"pid":1,"tid":1},{"name":"over","ph":"X","ts":3,"dur":5,"pid":1,"tid":1},
    {"ph":"E","ts":4,"pid":1,"tid":1}]})");
  const auto f = run(flame_bin() + " --folded " + dir + "/k.json");
  INFO(f.err);
  REQUIRE(f.exit_code == 0);
  CHECK(f.out == "step 2000\nstep;over 1000\n");
  CHECK_THAT(f.err, Catch::Contains("rtx-flame: note: " + dir + "/k.json: 1 B event(s) never closed and 0 E event(s) "
                                    "without an open B were left out"));
  CHECK_THAT(f.err, Catch::Contains("1 slice(s) overran their parent on the same thread and were clipped to its end"));
  const auto s = run(trace_bin() + " stats " + dir + "/k.json");
  CHECK(s.exit_code == 0);
  CHECK_THAT(s.out, Catch::Contains("note: 1 slice(s) overran their parent") && Catch::Contains("1 B event(s) never closed"));
  const auto c = run(trace_bin() + " stats --format csv " + dir + "/k.json");
  CHECK_THAT(c.err, Catch::Contains("note: 1 slice(s) overran their parent"));
  CHECK(run(flame_bin() + " --strict --folded " + dir + "/k.json").exit_code == 2);
  const auto js = run(flame_bin() + " --json -q " + dir + "/k.json -o " + dir + "/k.svg");
  REQUIRE(js.exit_code == 0);
  CHECK(js.err.empty());
  CHECK(nlohmann::json::parse(js.out)["notes"].size() == 2);
  // B/E out of file order: validate no longer reports what a sort by ts resolves.
  write_file(dir + "/o.json", R"({"traceEvents":[{"name":"a","ph":"B","ts":0,"pid":1,"tid":1},
    {"name":"b","ph":"B","ts":5,"pid":1,"tid":1},{"ph":"E","ts":3,"pid":1,"tid":1},{"ph":"E","ts":10,"pid":1,"tid":1}]})");
  CHECK(run(trace_bin() + " validate " + dir + "/o.json").exit_code == 0);
  CHECK(run(flame_bin() + " --folded " + dir + "/o.json").out == "a 3000\nb 5000\n");
}

TEST_CASE("rtx-flame reads perf script text (detected or --input-format perf) and BASE NEW folded diffs", "[cpu][cli]") {
  const std::string data = rtx::test::source_dir() + "/tests/trace/data/";
  const std::string dir = rtx::test::temp_dir();
  const auto p = run(flame_bin() + " --folded " + data + "perf_sample.txt");
  INFO(p.err);
  REQUIRE(p.exit_code == 0);
  CHECK(p.out == read_file(data + "perf_sample.folded"));
  CHECK_THAT(p.err, Catch::Contains("rtx-flame: 114 samples,") && Catch::Contains("total 114.114 ms"));
  const auto ps = run("sh -c '" + flame_bin() + " --input-format perf --folded - < " + data + "perf_sample.txt'");
  CHECK(ps.out == p.out);
  const auto svg = run(flame_bin() + " " + data + "perf_sample.txt -o " + dir + "/p.svg");
  CHECK(svg.exit_code == 0);
  CHECK(read_file(dir + "/p.svg").find("perf samples from") != std::string::npos);
  // A line perf script does not write: skipped with a note naming it; --strict refuses it.
  write_file(dir + "/g.perf", read_file(data + "perf_sample.txt") + "not a perf line\n");
  const auto g = run(flame_bin() + " --folded " + dir + "/g.perf");
  CHECK(g.exit_code == 0);
  CHECK(g.out == p.out);
  CHECK_THAT(g.err, Catch::Contains("skipped 1 line(s) that are neither sample headers nor stack frames (first: line 901)"));
  const auto gs = run(flame_bin() + " --strict --folded " + dir + "/g.perf");
  CHECK(gs.exit_code == 2);
  CHECK_THAT(gs.err, Catch::Contains(dir + "/g.perf:901: perf script line is neither"));
  // Forcing another format onto perf text: folded refuses every line (empty profile).
  CHECK(run(flame_bin() + " --input-format trace " + data + "perf_sample.txt -o " + dir + "/x.svg").exit_code == 2);
  // difffolded.pl output: drawn as a differential flame graph without --diff.
  write_file(dir + "/d.folded", "main;grew 4 6\nmain;shrank 10 2\n");
  const auto d = run(flame_bin() + " " + dir + "/d.folded -o " + dir + "/d.svg");
  INFO(d.err);
  REQUIRE(d.exit_code == 0);
  CHECK_THAT(d.err, Catch::Contains("total 8 counts"));  // NEW's total
  const std::string ds = read_file(dir + "/d.svg");
  CHECK(ds.find("differential folded stacks") != std::string::npos);
  CHECK(run(flame_bin() + " --folded " + dir + "/d.folded").exit_code == 2);
  CHECK(run(flame_bin() + " --diff " + dir + "/d.folded " + dir + "/d.folded -o " + dir + "/dd.svg").exit_code == 2);
  // Fractional counts are kept: three 0.4 lines are 1.2, not an empty profile.
  write_file(dir + "/f.folded", "a 0.4\na 0.4\nb 0.4\n");
  const auto fr = run(flame_bin() + " --folded " + dir + "/f.folded");
  CHECK(fr.exit_code == 0);
  CHECK(fr.out == "a 0.8\nb 0.4\n");
  CHECK_THAT(fr.err, Catch::Contains("total 1.2 counts"));
}
