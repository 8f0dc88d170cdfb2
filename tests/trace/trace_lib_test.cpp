// rtx::trace library: trace writer/reader round trip (gzip, precision), the Trace Event rules,
// folding (CPU self time, GPU by launching op) of a hand-written torch-style sample, folded
// round trip, SVG well-formedness (python3's XML parser), stats and merge.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "rtx/core/error.hpp"
#include "rtx/trace/flamegraph.hpp"
#include "rtx/trace/folded.hpp"
#include "rtx/trace/merge.hpp"
#include "rtx/trace/record.hpp"
#include "rtx/trace/stats.hpp"
#include "rtx/trace/trace_event.hpp"
#include "test_util.hpp"

using namespace rtx::trace;

namespace {

std::string sample() { return rtx::test::source_dir() + "/tests/trace/data/torch_style_sample.json"; }

void write_file(const std::string& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}
/// Folded text written to `path`, read back and written again (a round trip must not change it).
std::string reread_folded(const std::string& path, const std::string& text) {
  write_file(path, text);
  StackTrie t;
  read_folded(path, t);
  return write_folded(t);
}

std::string read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::map<std::string, uint64_t> folded_map(const std::string& text) {
  std::map<std::string, uint64_t> m;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto sp = line.rfind(' ');
    m[line.substr(0, sp)] += std::stoull(line.substr(sp + 1));
  }
  return m;
}

bool xml_well_formed(const std::string& path) {
  const auto p = rtx::test::run("python3 -c \"import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])\" '" + path + "'");
  INFO(p.err);
  return p.exit_code == 0;
}

Event x(const std::string& name, double ts, double dur, int64_t tid = 1) {
  Event e;
  e.ph = 'X';
  e.name = name;
  e.ts = ts;
  e.dur = dur;
  e.pid = 1;
  e.tid = tid;
  return e;
}

}  // namespace

TEST_CASE("format_us keeps ns precision as decimals", "[cpu]") {
  CHECK(format_us(0) == "0");
  CHECK(format_us(12.5) == "12.5");
  CHECK(format_us(0.001) == "0.001");
  CHECK(format_us(1234567.891) == "1234567.891");
  CHECK(format_us(3600e6 + 0.007) == "3600000000.007");  // an hour in, still to the ns
  CHECK(format_us(-2.25) == "-2.25");
}

TEST_CASE("trace writer and reader round trip, plain and gzip, 1/7/127 events", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  for (const char* name : {"t.json", "t.json.gz"})
    for (int n : {1, 7, 127}) {
      const std::string path = dir + "/" + std::to_string(n) + name;
      TraceWriter w(path, {});
      w.process_name(1, "proc \"quoted\" \xff");
      for (int i = 0; i < n; ++i) {
        Event e = x("op<" + std::to_string(i) + ">\n", 1000000.0 + i * 0.001, i * 1.5 + 0.123, i + 1);
        e.args = {{"i", i}, {"grid", {i, 1, 1}}};
        w.add(e);
      }
      w.commit();
      const std::string bytes = read_file(path);
      if (std::string(name).find(".gz") != std::string::npos) {
        REQUIRE(bytes.size() > 2);
        CHECK(static_cast<unsigned char>(bytes[0]) == 0x1f);
        CHECK(static_cast<unsigned char>(bytes[1]) == 0x8b);
      } else {
        const auto j = nlohmann::json::parse(bytes);  // plain JSON, object form
        CHECK(j["traceEvents"].size() == static_cast<size_t>(n + 1));
        CHECK(j["displayTimeUnit"] == "ns");
        CHECK(j["schema"] == kTraceSchema);
      }
      const Trace t = load_trace(path);
      REQUIRE(t.events.size() == static_cast<size_t>(n + 1));
      CHECK(t.events[0].ph == 'M');
      CHECK(t.events[0].args["name"].get<std::string>().find("\"quoted\"") != std::string::npos);
      for (int i = 0; i < n; ++i) {
        const Event& e = t.events[i + 1];
        CHECK(e.name == "op<" + std::to_string(i) + ">\n");
        CHECK(std::llround(e.ts * 1000) == std::llround((1000000.0 + i * 0.001) * 1000));
        CHECK(std::llround(e.dur * 1000) == std::llround((i * 1.5 + 0.123) * 1000));
        CHECK(e.args["grid"][0] == i);
      }
      CHECK(validate(t.events).empty());
    }
}

TEST_CASE("reader: array form, optional closing bracket, string tids; truncated and bad input", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  write_file(dir + "/a.json", R"([{"name":"a","ph":"X","ts":1,"dur":2,"pid":1,"tid":"main"},{"name":"b","ph":"i","ts":3,"pid":1,"tid":"main"},)");
  const Trace a = load_trace(dir + "/a.json");
  CHECK(a.info.array_form);
  REQUIRE(a.events.size() == 2);
  CHECK(a.events[0].tid == a.events[1].tid);
  REQUIRE(a.info.string_ids.size() == 1);
  CHECK(a.info.string_ids[0].second == "main");

  auto expect_input = [&](const std::string& text, const std::string& needle) {
    write_file(dir + "/bad.json", text);
    try {
      load_trace(dir + "/bad.json");
      FAIL("no error for: " << text);
    } catch (const rtx::Error& e) {
      CHECK(e.category() == rtx::ErrorCategory::Input);
      CHECK_THAT(std::string(e.what()) + e.where(), Catch::Contains(needle));
    }
  };
  expect_input(R"({"traceEvents":[{"name":"a","ph":"X","ts":1,"dur":2},{"name":)", "truncated");
  expect_input(R"({"traceEvents":[{"name":"a","ph":"X","ts":1,"dur":2}]  )", "truncated");
  expect_input(R"({"traceEvents":[{"name":"a","ph":"X","ts":"1","dur":2}]})", "non-numeric");
  expect_input(R"({"traceEvents":[{"name":"a","ts":1}]})", "ph");
  expect_input(R"({"traceEvents":[42]})", "not an object");
  expect_input(R"("hello")", "not a trace");
  expect_input("", "empty");
}

TEST_CASE("validate reports each broken Trace Event rule", "[cpu]") {
  auto rules = [](const std::vector<Event>& ev) {
    std::multiset<std::string> r;
    for (const auto& v : validate(ev)) r.insert(v.rule);
    return r;
  };
  std::vector<Event> ok = {x("parent", 0, 10), x("child", 1, 2), x("next", 10, 1)};
  CHECK(validate(ok).empty());
  Event nodur = x("nodur", 0, -1);
  CHECK(rules({nodur}).count("x-dur") == 1);
  CHECK(rules({x("p", 0, 10), x("c", 5, 10)}).count("x-nesting") == 1);  // partial overlap
  Event b = x("b", 0, -1), e = x("", 5, -1);
  b.ph = 'B';
  e.ph = 'E';
  CHECK(rules({b, e}).empty());
  CHECK(rules({b}).count("be-nesting") == 1);        // never closed
  CHECK(rules({e}).count("be-nesting") == 1);        // closes nothing
  Event e2 = e;
  e2.name = "other";
  CHECK(rules({b, e2}).count("be-nesting") == 1);    // names another slice
  Event s = x("flow", 1, -1), f = x("flow", 2, -1);
  s.ph = 's';
  f.ph = 'f';
  s.id = f.id = "7";
  f.bp = "e";
  CHECK(rules({s, f}).empty());
  CHECK(rules({s}).count("flow-pair") == 1);
  CHECK(rules({f}).count("flow-pair") == 1);
  Event f8 = f;
  f8.id = "8";
  CHECK(rules({s, f8}).count("flow-pair") == 2);
  Event c = x("counter", 1, -1);
  c.ph = 'C';
  c.args = {{"v", "not a number"}};
  CHECK(rules({c}).count("counter") == 1);
  Event q = x("q", 1, 1);
  q.ph = 'Q';
  CHECK(rules({q}).count("phase") == 1);
  // The hand-written sample follows the rules.
  CHECK(validate(load_trace(sample()).events).empty());
}

TEST_CASE("fold the torch-style sample: CPU self time and GPU time by launching op", "[cpu]") {
  StackTrie cpu;
  const auto rc = fold_trace(sample(), cpu, 0, FoldMode::Cpu);
  CHECK(rc.mode == FoldMode::Cpu);
  const std::map<std::string, uint64_t> want_cpu = {
      {"ProfilerStep#1", 500000},
      {"ProfilerStep#1;aten::linear", 100000},
      {"ProfilerStep#1;aten::linear;aten::addmm", 190000},
      {"ProfilerStep#1;aten::linear;aten::addmm;cudaLaunchKernel", 10000},
      {"ProfilerStep#1;aten::relu", 95000},
      {"ProfilerStep#1;aten::relu;cudaLaunchKernel", 5000},
      {"ProfilerStep#1;aten::mm", 80000},
      {"ProfilerStep#1;aten::mm;cudaMemcpyAsync", 20000}};
  CHECK(folded_map(write_folded(cpu)) == want_cpu);
  CHECK(cpu.total_weight() == 1000000);  // = the top-level slice's duration
  CHECK(rc.total_ns == 1000000);

  StackTrie gpu;
  const auto rg = fold_trace(sample(), gpu);  // auto: the sample has GPU slices
  CHECK(rg.mode == FoldMode::Gpu);
  CHECK(rg.launches_linked == 3);
  const std::map<std::string, uint64_t> want_gpu = {
      {"ProfilerStep#1;aten::linear;aten::addmm;ampere_sgemm_32x32", 120000},
      {"ProfilerStep#1;aten::relu;void at::native::vectorized_elementwise_kernel<relu>", 30250},
      {"ProfilerStep#1;aten::mm;Memcpy DtoH (Device -> Pageable)", 10000}};
  CHECK(folded_map(write_folded(gpu)) == want_gpu);
  CHECK(gpu.total_weight() == 160250);  // sum of GPU slice durations
}

TEST_CASE("unbalanced B/E: left out and counted (as stats does); strict: an input error naming the event", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  // b [2,3] closes; a (never closed: a killed program) is left out; x [0,9] on thread 2 has a
  // stray E after it.
  write_file(dir + "/u.json", R"({"traceEvents":[{"name":"a","ph":"B","ts":1,"pid":1,"tid":1},{"name":"b","ph":"B","ts":2,"pid":1,"tid":1},{"ph":"E","ts":3,"pid":1,"tid":1},
    {"name":"x","ph":"X","ts":0,"dur":9,"pid":1,"tid":2},{"name":"y","ph":"E","ts":10,"pid":1,"tid":2}]})");
  StackTrie t;
  const FoldResult r = fold_trace(dir + "/u.json", t);
  CHECK(r.unclosed_b == 1);
  CHECK(r.stray_e == 1);
  CHECK(write_folded(t) == "b 1000\nx 9000\n");
  const TraceStats st = compute_stats(dir + "/u.json");
  CHECK(st.unclosed_b == 1);
  CHECK(st.unmatched == 2);
  StackTrie t1;
  CHECK_THROWS_WITH(fold_trace(dir + "/u.json", t1, 0, FoldMode::Auto, true),
                    Catch::Contains("unbalanced B/E") && (Catch::Contains("\"a\"") || Catch::Contains("event #4")));
  write_file(dir + "/u2.json", R"({"traceEvents":[{"name":"x","ph":"E","ts":3,"pid":1,"tid":1}]})");
  StackTrie t2;
  CHECK_THROWS_WITH(fold_trace(dir + "/u2.json", t2, 0, FoldMode::Auto, true), Catch::Contains("closes nothing"));
  StackTrie t3;
  CHECK(fold_trace(dir + "/u2.json", t3).stray_e == 1);
}

TEST_CASE("folded stacks round-trip and aggregate; bad counts name the line", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  write_file(dir + "/in.folded",
             "main;void run(int, float);kernel<1> 10\nmain;b 5\n\nmain;void run(int, float);kernel<1> 3\r\nmain 1\nsolo 7.6\n");
  StackTrie t;
  CHECK(read_folded(dir + "/in.folded", t).stacks == 5);
  const std::string out = write_folded(t);
  // A fractional count is kept (flamegraph.pl keeps it): weights become tenths.
  CHECK(out == "main 1\nmain;b 5\nmain;void run(int, float);kernel<1> 13\nsolo 7.6\n");
  CHECK(reread_folded(dir + "/out.folded", out) == out);
  CHECK(t.frac_digits() == 1);
  CHECK(t.total_weight() == 266);  // 26.6 in tenths
  CHECK_FALSE(looks_like_trace(dir + "/out.folded"));
  CHECK(looks_like_trace(sample()));
  // Malformed lines: skipped and counted by default (flamegraph.pl, inferno), refused with strict.
  struct Bad {
    const char* text;
    uint64_t line;
    const char* why;
  };
  for (const Bad& bad : {Bad{"main;a 1\nmain;b x\n", 2, "folded count \"x\" is not a non-negative number"},
                         Bad{"main;a\n", 1, "has no count"}, Bad{"main;a -3\n", 1, "\"-3\" is not"},
                         Bad{"main;a 1e5\n", 1, "\"1e5\" is not"}, Bad{"; 4\n", 1, "no frame before its count"}}) {
    INFO(bad.text);
    write_file(dir + "/bad.folded", bad.text);
    StackTrie lenient;
    const FoldedRead r = read_folded(dir + "/bad.folded", lenient);
    CHECK(r.bad_lines == 1);
    CHECK(r.first_bad_line == bad.line);
    CHECK_THAT(r.first_bad_reason, Catch::Contains(bad.why));
    CHECK(lenient.total_weight() == (bad.line == 2 ? 1u : 0u));
    StackTrie b;
    try {
      read_folded(dir + "/bad.folded", b, 0, FoldedOptions{true});
      FAIL("accepted: " << bad.text);
    } catch (const rtx::Error& e) {
      CHECK(e.category() == rtx::ErrorCategory::Input);
      CHECK(e.where() == dir + "/bad.folded:" + std::to_string(bad.line));
    }
  }
}

TEST_CASE("folded: fractions kept, empty frames dropped, BASE NEW lines as two columns", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  // Three 0.4 lines are 1.2, not an empty profile (the old reader rounded each to 0).
  write_file(dir + "/f.folded", "a;b 0.4\na;b 0.4\na;c 0.4\nd 2.5\ne .25\n");
  StackTrie f;
  read_folded(dir + "/f.folded", f);
  CHECK(f.frac_digits() == 2);
  CHECK(f.total_weight() == 40 + 40 + 40 + 250 + 25);  // hundredths
  CHECK(write_folded(f) == "a;b 0.8\na;c 0.4\nd 2.5\ne 0.25\n");
  CHECK(format_weight(f.total_weight(), "samples", f.frac_digits()) == "3.95 samples");
  CHECK(format_weight(100, "samples", 2) == "1 sample");
  CHECK(format_weight(1500, "ns", 3) == "1.500 ns");
  // More than 6 fractional digits are rounded at the 6th.
  write_file(dir + "/f7.folded", "a 0.0000015\n");
  StackTrie f7;
  read_folded(dir + "/f7.folded", f7);
  CHECK(f7.frac_digits() == 6);
  CHECK(f7.total_weight() == 2);
  // Empty frames ("a;;b", a trailing ';') are dropped and counted; strict refuses them.
  write_file(dir + "/e.folded", "a;;b 3\na;b; 2\n;a 1\n");
  StackTrie e;
  const FoldedRead er = read_folded(dir + "/e.folded", e);
  CHECK(er.empty_frames == 3);
  CHECK(er.bad_lines == 0);
  CHECK(write_folded(e) == "a 1\na;b 5\n");
  StackTrie es;
  CHECK_THROWS_WITH(read_folded(dir + "/e.folded", es, 0, FoldedOptions{true}), Catch::Contains("empty frame"));
  // difffolded.pl's "stack BASE NEW": BASE into column 1, NEW into column 0 (flamegraph.pl
  // draws NEW's widths and colours by NEW - BASE).
  write_file(dir + "/d.folded", "main;grew 4 6\nmain;shrank 10 2\nmain;new 0 3\nmain;gone 5 0\n");
  StackTrie d;
  const FoldedRead dr = read_folded(dir + "/d.folded", d);
  CHECK(dr.differential == 4);
  CHECK(d.total_weight(0) == 11);
  CHECK(d.total_weight(1) == 19);
  CHECK(write_folded(d, 0) == "main;grew 6\nmain;new 3\nmain;shrank 2\n");
  CHECK(write_folded(d, 1) == "main;gone 5\nmain;grew 4\nmain;shrank 10\n");
  FlameOptions o;
  o.diff = true;
  const std::string svg = render_flamegraph(d, o);
  CHECK_THAT(svg, Catch::Contains("main;grew") || Catch::Contains("grew"));
}

TEST_CASE("weights that would wrap 64 bits, and ids that do not fit, are refused (fuzz findings 7-9)", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  // A count past 2^62, and counts whose sum passes it: named by line, nothing wraps.
  write_file(dir + "/big.folded", "a 18446744073709551617\n");
  StackTrie t;
  CHECK_THROWS_WITH(read_folded(dir + "/big.folded", t), Catch::Contains("above 2^62"));
  write_file(dir + "/sum.folded", "a 4611686018427387904\nb 1\n");  // 2^62 + 1
  StackTrie t2;
  try {
    read_folded(dir + "/sum.folded", t2);
    FAIL("a sum past 2^62 was accepted");
  } catch (const rtx::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("sum past 2^62"));
    CHECK(e.where() == dir + "/sum.folded:2");
  }
  write_file(dir + "/max.folded", "a 4611686018427387904\n");  // exactly 2^62: accepted
  StackTrie t3;
  CHECK(read_folded(dir + "/max.folded", t3).stacks == 1);
  CHECK(t3.total_weight() == (uint64_t(1) << 62));
  // Trace times beyond +-4e15 us or missing are refused by the fold (int64 ns would overflow).
  for (const char* ev : {R"({"ph":"X","name":"a","ts":1e300,"dur":1,"pid":1,"tid":1})",
                         R"({"ph":"X","name":"a","ts":0,"dur":5e15,"pid":1,"tid":1})",
                         R"({"ph":"X","name":"a","ts":-4000000000000000.001,"dur":1,"pid":1,"tid":1})",
                         R"({"ph":"B","name":"a","pid":1,"tid":1})"}) {
    write_file(dir + "/t.json", std::string("[") + ev + "]");
    StackTrie f;
    CHECK_THROWS_WITH(fold_trace(dir + "/t.json", f), Catch::Contains("event #0") &&
                                                          (Catch::Contains("out of range") || Catch::Contains("no ts")));
  }
  // pid/tid: 64-bit integers (fuzz finding 9: a float tid of 1.7e69 was converted to int64).
  for (const char* ev : {R"({"ph":"X","name":"a","ts":0,"dur":1,"pid":1,"tid":1666666666666666666666666666666666666666666})",
                         R"({"ph":"X","name":"a","ts":0,"dur":1,"pid":1.5,"tid":1})",
                         R"({"ph":"X","name":"a","ts":0,"dur":1,"pid":1,"tid":18446744073709551615})",
                         R"({"ph":"X","name":"a","ts":0,"dur":1,"pid":-1e19,"tid":1})"}) {
    write_file(dir + "/id.json", std::string("[") + ev + "]");
    CHECK_THROWS_WITH(load_trace(dir + "/id.json"), Catch::Contains("not a 64-bit integer"));
  }
  write_file(dir + "/id.json", R"([{"ph":"X","name":"a","ts":0,"dur":1,"pid":-7,"tid":3.0}])");
  const Trace ok = load_trace(dir + "/id.json");
  REQUIRE(ok.events.size() == 1);
  CHECK(ok.events[0].pid == -7);
  CHECK(ok.events[0].tid == 3);
  // A frame name with trailing blanks folds without them, so the folded text reads back the
  // same (fuzz finding 12).
  write_file(dir + "/blank.json", R"([{"ph":"X","name":"step","ts":0,"dur":10,"pid":1,"tid":1},
                                      {"ph":"X","name":"leaf \t ","ts":1,"dur":5,"pid":1,"tid":1}])");
  StackTrie bl;
  fold_trace(dir + "/blank.json", bl);
  const std::string bt = write_folded(bl);
  CHECK(bt == "step 5000\nstep;leaf 5000\n");
  CHECK(reread_folded(dir + "/blank.folded", bt) == bt);
  // Many slices of one stack, each legal, whose self times sum past the int64/2^62 limits.
  std::string many = "[";
  for (int i = 0; i < 12; ++i)
    many += std::string(i ? "," : "") + R"({"ph":"X","name":"a","ts":0,"dur":9e14,"pid":1,"tid":)" + std::to_string(i) + "}";
  write_file(dir + "/many.json", many + "]");
  StackTrie m;
  CHECK_THROWS_AS(fold_trace(dir + "/many.json", m), rtx::Error);
}

TEST_CASE("flame graph SVG is well-formed XML with every frame and exact widths", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  write_file(dir + "/n.folded",
             "main;<script>&\"'x 30\nmain;bad\x01\xff utf8;leaf 20\nmain;caf\xc3\xa9 50\nother 100\n");
  StackTrie t;
  read_folded(dir + "/n.folded", t);
  for (bool icicle : {false, true}) {
    FlameOptions o;
    o.icicle = icicle;
    o.title = "A & B <title>";
    const std::string svg = render_flamegraph(t, o);
    write_file(dir + "/f.svg", svg);
    CHECK(xml_well_formed(dir + "/f.svg"));
    // 1 root + main, other + 3 children of main + leaf = 7 frames, all wider than 0.1 px.
    size_t frames = 0;
    for (size_t p = svg.find("<g class=\"f\""); p != std::string::npos; p = svg.find("<g class=\"f\"", p + 1)) ++frames;
    CHECK(frames == 7);
    CHECK(svg.find("data-n=\"&lt;script&gt;&amp;&quot;&#39;x\"") != std::string::npos);
    CHECK(svg.find("caf\xc3\xa9") != std::string::npos);
    CHECK(svg.find("data-w=\"0.5\" data-d=\"1\" data-n=\"main\"") != std::string::npos);  // 100 of 200
  }
  // minwidth drops narrow frames and their children.
  FlameOptions narrow;
  narrow.width = 200;
  narrow.minwidth = 40;  // main;leaf path frames are 20/200*180 = 18 px
  const std::string svg2 = render_flamegraph(t, narrow);
  CHECK(svg2.find("data-n=\"leaf\"") == std::string::npos);
  CHECK(svg2.find("data-n=\"other\"") != std::string::npos);
  FlameOptions bad;
  bad.colors = "rainbow";
  CHECK_THROWS_AS(render_flamegraph(t, bad), rtx::Error);
  StackTrie empty;
  CHECK_THROWS_AS(render_flamegraph(empty, FlameOptions{}), rtx::Error);
}

TEST_CASE("differential flame graph: grown frames red, shrunk blue, drawn with NEW", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  write_file(dir + "/base.folded", "a;grew 10\na;shrank 10\na;same 10\n");
  write_file(dir + "/new.folded", "a;grew 30\na;shrank 5\na;same 10\n");
  StackTrie t;
  read_folded(dir + "/base.folded", t, 1);
  read_folded(dir + "/new.folded", t, 0);
  FlameOptions o;
  o.diff = true;
  const std::string svg = render_flamegraph(t, o);
  write_file(dir + "/d.svg", svg);
  CHECK(xml_well_formed(dir + "/d.svg"));
  auto fill_of = [&](const std::string& name) {
    const size_t p = svg.find("data-n=\"" + name + "\"");
    REQUIRE(p != std::string::npos);
    const size_t f = svg.find("fill=\"", p);
    return svg.substr(f + 6, svg.find('"', f + 6) - f - 6);
  };
  CHECK(fill_of("grew") == "rgb(255,0,0)");      // largest change: full red
  CHECK(fill_of("shrank") == "rgb(191,191,255)");  // -5 of max 20: a quarter blue
  CHECK(fill_of("same") == "rgb(250,250,250)");
  CHECK(svg.find("data-w=\"0.6666666667\" data-d=\"2\" data-n=\"grew\"") != std::string::npos);  // 30 of 45 (NEW)
}

TEST_CASE("stats of the sample: per category, count/total/mean/min/max/share", "[cpu]") {
  const TraceStats s = compute_stats(sample());
  std::map<std::string, const StatGroup*> g;
  for (const auto& x : s.groups) g[x.category] = &x;
  REQUIRE(g.count("gpu_kernels"));
  REQUIRE(g.count("cuda_api"));
  REQUIRE(g.count("ops"));
  REQUIRE(g.count("gpu_memory"));
  const auto& k = *g["gpu_kernels"];
  REQUIRE(k.rows.size() == 2);
  CHECK(k.rows[0].name == "ampere_sgemm_32x32");
  CHECK(k.rows[0].total_us == Approx(120));
  CHECK(k.rows[0].share == Approx(120.0 / 150.25));
  const auto& api = *g["cuda_api"];
  REQUIRE(api.rows[0].name == "cudaMemcpyAsync");
  const StatRow& launch = api.rows[1];
  CHECK(launch.name == "cudaLaunchKernel");
  CHECK(launch.count == 2);
  CHECK(launch.total_us == Approx(15));
  CHECK(launch.mean_us == Approx(7.5));
  CHECK(launch.min_us == Approx(5));
  CHECK(launch.max_us == Approx(10));
  CHECK(launch.stddev_us == Approx(2.5));
  bool relu = false;
  for (const auto& r : g["ops"]->rows)
    if (r.name == "aten::relu") relu = r.total_us == Approx(100) && r.count == 1;  // from the B/E pair
  CHECK(relu);
  // Self times of the sample's CPU ops, by hand: ProfilerStep#1 [0,1000) holds aten::linear
  // [10,310), aten::relu [400,500), aten::mm [600,700); linear holds addmm [20,220), which holds
  // a 10 us cudaLaunchKernel; relu a 5 us launch; mm a 20 us cudaMemcpyAsync.
  std::map<std::string, double> self;
  for (const auto& r : g["ops"]->rows) self[r.name] = r.self_us;
  CHECK(self["ProfilerStep#1"] == Approx(1000 - 300 - 100 - 100));
  CHECK(self["aten::linear"] == Approx(300 - 200));
  CHECK(self["aten::addmm"] == Approx(200 - 10));
  CHECK(self["aten::relu"] == Approx(100 - 5));
  CHECK(self["aten::mm"] == Approx(100 - 20));
  CHECK(g["ops"]->total_us == Approx(1000 - 35));  // the step's time less the 35 us of CUDA API calls
  CHECK(g["ops"]->rows[0].name == "ProfilerStep#1");
  CHECK(g["ops"]->rows[0].share == Approx(500.0 / 965));
  CHECK(k.rows[0].self_us == Approx(120));  // GPU slices on their stream track: nothing nests
  const std::string csv = stats_csv(s);
  CHECK_THAT(csv, Catch::Contains("gpu_kernels,\"ampere_sgemm_32x32\",1,120000,"));
  CHECK(stats_json(s, 0)["groups"].size() == 4);
  CHECK_THAT(stats_table(s, 1), Catch::Contains("more (use --top 0)"));
}

TEST_CASE("stats: out-of-range, missing or negative times are input errors naming the event", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  struct Case {
    const char* events;
    const char* says;
  };
  const Case bad[] = {
      {R"({"name":"a","ph":"X","ts":1,"dur":1e308,"pid":1,"tid":1})", "event #0 has a duration out of range"},
      {R"({"name":"a","ph":"X","ts":-5e15,"dur":1,"pid":1,"tid":1})", "event #0 has a timestamp out of range"},
      {R"({"name":"a","ph":"X","ts":1,"dur":4000000000000000.5,"pid":1,"tid":1})", "event #0 has a duration out of range"},
      {R"({"name":"a","ph":"B","pid":1,"tid":1})", "event #0 has no ts"},
      {R"({"name":"a","ph":"X","ts":1,"dur":-5,"pid":1,"tid":1})", "has a negative \"dur\" (-5.000000 us)"},
      {R"({"name":"a","ph":"X","ts":1,"pid":1,"tid":1})", "event #0 (ph X \"a\") has no \"dur\""},
  };
  int i = 0;
  for (const auto& c : bad) {
    const std::string f = dir + "/bad" + std::to_string(i++) + ".json";
    write_file(f, std::string(R"({"traceEvents":[)") + c.events + "]}");
    INFO(c.events);
    CHECK_THROWS_WITH(compute_stats(f), Catch::Contains(c.says) && Catch::Contains(f));
  }
  // A B never closed is counted in unmatched_be and makes no row; JSON times are whole ns.
  const std::string f = dir + "/open.json";
  write_file(f, R"({"traceEvents":[{"name":"never","ph":"B","ts":1,"pid":1,"tid":1},)"
                R"({"name":"x","ph":"X","ts":1,"dur":0.3334,"pid":1,"tid":1},{"name":"x","ph":"X","ts":2,"dur":0.3333,"pid":1,"tid":1}]})");
  const TraceStats st = compute_stats(f);
  CHECK(st.unmatched == 1);
  REQUIRE(st.groups.size() == 1);
  REQUIRE(st.groups[0].rows.size() == 1);
  CHECK(st.groups[0].rows[0].name == "x");
  const nlohmann::json j = stats_json(st, 0);
  CHECK(j["groups"][0]["rows"][0]["total_ns"] == 666);  // 333 + 333: each slice to whole ns first
  CHECK(j["groups"][0]["rows"][0]["self_ns"] == 666);
  CHECK(j["groups"][0]["total_ns"] == 666);
}

TEST_CASE("merge puts each input process on its own track, flows kept paired", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  const auto r = merge_traces({sample(), sample()}, dir + "/m.json.gz");
  CHECK(r.processes == 4);
  CHECK_FALSE(r.clock_aligned);
  const Trace m = load_trace(dir + "/m.json.gz");
  std::set<int64_t> pids;
  std::map<std::string, int> pnames;
  size_t x_events = 0;
  for (const auto& e : m.events) {
    pids.insert(e.pid);
    if (e.ph == 'M' && e.name == "process_name") ++pnames[e.args["name"].get<std::string>()];
    if (e.ph == 'X') ++x_events;
  }
  CHECK(pids == std::set<int64_t>{1, 2, 3, 4});
  CHECK(pnames["python3"] == 2);
  CHECK(pnames["GPU 0"] == 2);
  CHECK(x_events == 2 * 10);
  CHECK(validate(m.events).empty());
}

TEST_CASE("stats: self time of nested slices, three levels, two threads, clipped overrun, ties", "[cpu]") {
  // pid 1. Thread 1 (all "cpu_op" but one cuda_runtime call), as intervals in us:
  //   step      [0,100)   children forward, backward, optimizer
  //   forward   [10,50)   children matmul [15,35), over [45,60) clipped to [45,50)
  //   matmul    [15,35)   child zero [20,20)
  //   zero      [20,20)   zero duration
  //   over      [45,60)   overruns forward by 10: clipped; [50,60) is then backward's
  //   backward  [50,80)   starts exactly at forward's end: forward's sibling, not its child;
  //                       children matmul [50,60) (same start, shorter) and cudaLaunchKernel [60,65)
  //   optimizer [80,90)   a B/E pair; starts where backward ends: step's child
  // Thread 2: step [5,55) and matmul [5,55), identical: step (earlier in the file) encloses.
  //   It overlaps thread 1's slices in time but never nests with them.
  // Thread 3 (a GPU stream on the same pid): kernel k [10,40.25) and [40.25,50.25), touching.
  // File order is shuffled (children before parents, as rtx's own writer emits them).
  const std::string dir = rtx::test::temp_dir();
  write_file(dir + "/n.json", R"({"traceEvents":[
    {"ph":"X","cat":"cpu_op","name":"matmul","pid":1,"tid":1,"ts":15,"dur":20},
    {"ph":"X","cat":"cpu_op","name":"step","pid":1,"tid":2,"ts":5,"dur":50},
    {"ph":"X","cat":"cpu_op","name":"zero","pid":1,"tid":1,"ts":20,"dur":0},
    {"ph":"X","cat":"kernel","name":"k","pid":1,"tid":3,"ts":40.25,"dur":10},
    {"ph":"X","cat":"cpu_op","name":"over","pid":1,"tid":1,"ts":45,"dur":15},
    {"ph":"X","cat":"cpu_op","name":"forward","pid":1,"tid":1,"ts":10,"dur":40},
    {"ph":"X","cat":"cpu_op","name":"matmul","pid":1,"tid":2,"ts":5,"dur":50},
    {"ph":"X","cat":"cpu_op","name":"matmul","pid":1,"tid":1,"ts":50,"dur":10},
    {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":60,"dur":5},
    {"ph":"X","cat":"kernel","name":"k","pid":1,"tid":3,"ts":10,"dur":30.25},
    {"ph":"X","cat":"cpu_op","name":"backward","pid":1,"tid":1,"ts":50,"dur":30},
    {"ph":"B","cat":"cpu_op","name":"optimizer","pid":1,"tid":1,"ts":80},
    {"ph":"E","pid":1,"tid":1,"ts":90},
    {"ph":"X","cat":"cpu_op","name":"step","pid":1,"tid":1,"ts":0,"dur":100}
  ]})");
  const TraceStats s = compute_stats(dir + "/n.json");
  CHECK(s.clipped == 1);  // over [45,60) inside forward [10,50)
  std::map<std::string, const StatGroup*> g;
  for (const auto& x : s.groups) g[x.category] = &x;
  REQUIRE(g.size() == 3);
  REQUIRE(g.count("ops"));
  REQUIRE(g.count("cuda_api"));
  REQUIRE(g.count("gpu_kernels"));
  std::map<std::string, const StatRow*> ops;
  for (const auto& r : g["ops"]->rows) ops[r.name] = &r;
  REQUIRE(ops.size() == 7);

  // Self, by hand from the intervals above.
  const double step_self = (100 - 40 - 30 - 10) + (50 - 50);  // thread 1 minus its 3 children; thread 2 all matmul
  const double forward_self = 40 - 20 - (50 - 45);             // minus matmul and the clipped part of over
  const double matmul_self = (20 - 0) + (10) + (50);          // zero takes nothing; the others have no children
  const double over_self = 50 - 45;                            // clipped to forward's end
  const double backward_self = 30 - 10 - 5;                    // minus matmul and cudaLaunchKernel
  const double optimizer_self = 90 - 80;
  CHECK(ops["step"]->self_us == Approx(step_self));  // 20
  CHECK(ops["forward"]->self_us == Approx(forward_self));  // 15
  CHECK(ops["matmul"]->self_us == Approx(matmul_self));  // 80
  CHECK(ops["zero"]->self_us == 0);
  CHECK(ops["over"]->self_us == Approx(over_self));  // 5
  CHECK(ops["backward"]->self_us == Approx(backward_self));  // 15
  CHECK(ops["optimizer"]->self_us == Approx(optimizer_self));  // 10

  // Inclusive totals and per-slice statistics stay the durations.
  CHECK(ops["step"]->count == 2);
  CHECK(ops["step"]->total_us == Approx(100 + 50));
  CHECK(ops["step"]->mean_us == Approx(75));
  CHECK(ops["step"]->min_us == Approx(50));
  CHECK(ops["step"]->max_us == Approx(100));
  CHECK(ops["step"]->stddev_us == Approx(25));
  CHECK(ops["matmul"]->count == 3);
  CHECK(ops["matmul"]->total_us == Approx(20 + 10 + 50));
  CHECK(ops["over"]->total_us == Approx(15));  // the unclipped duration
  CHECK(ops["zero"]->count == 1);
  CHECK(ops["optimizer"]->total_us == Approx(10));

  // The category's total is its busy time: thread 1's 100 us less the 5 us in cudaLaunchKernel,
  // plus thread 2's 50 us; the shares are of it and sum to 1.
  const double ops_busy = (100 - 5) + 50;
  CHECK(g["ops"]->total_us == Approx(ops_busy));
  CHECK(ops["step"]->share == Approx(step_self / ops_busy));  // not (100 + 50) / (sum of all durations)
  CHECK(ops["matmul"]->share == Approx(matmul_self / ops_busy));
  double share_sum = 0;
  for (const auto& r : g["ops"]->rows) share_sum += r.share;
  CHECK(share_sum == Approx(1.0));
  // Rows by self time; forward and backward tie at 15 and go by total (40 before 30).
  std::vector<std::string> order;
  for (const auto& r : g["ops"]->rows) order.push_back(r.name);
  CHECK(order == std::vector<std::string>{"matmul", "step", "forward", "backward", "optimizer", "over", "zero"});

  const StatRow& launch = g["cuda_api"]->rows.at(0);
  CHECK(launch.self_us == Approx(5));
  CHECK(g["cuda_api"]->total_us == Approx(5));
  const StatRow& k = g["gpu_kernels"]->rows.at(0);
  CHECK(k.count == 2);
  CHECK(k.self_us == Approx(30.25 + 10));  // touching kernels do not nest; thread 3 is not thread 1
  CHECK(k.share == Approx(1.0));
  // Nothing is counted twice: the categories' totals add up to the threads' busy time.
  CHECK(g["ops"]->total_us + g["cuda_api"]->total_us + g["gpu_kernels"]->total_us == Approx(100 + 50 + 40.25));

  // Outputs: self_ns as CSV's last column and a JSON field; a "self" column in the table.
  const std::string csv = stats_csv(s);
  CHECK_THAT(csv, Catch::StartsWith("category,name,count,total_ns,mean_ns,min_ns,max_ns,stddev_ns,share,self_ns\n"));
  CHECK_THAT(csv, Catch::Contains("ops,\"step\",2,150000,75000.0,50000,100000,25000.0,0.137931,20000\n"));
  CHECK_THAT(csv, Catch::Contains("gpu_kernels,\"k\",2,40250,20125.0,10000,30250,10125.0,1.000000,40250\n"));
  const auto j = stats_json(s, 0);
  CHECK(j["groups"][0]["category"] == "gpu_kernels");
  const auto& jops = j["groups"][2];
  REQUIRE(jops["category"] == "ops");
  CHECK(jops["total_ns"].get<double>() == Approx(145000));
  CHECK(jops["rows"][1]["name"] == "step");
  CHECK(jops["rows"][1]["self_ns"].get<double>() == Approx(20000));
  CHECK(jops["rows"][1]["total_ns"].get<double>() == Approx(150000));
  const std::string table = stats_table(s, 0);
  CHECK_THAT(table, Catch::Contains("== ops: 7 names, busy 145.000 us"));
  CHECK_THAT(table, Catch::Contains("  share         self        total     count"));
  CHECK_THAT(table, Catch::Contains(" 13.79%    20.000 us   150.000 us         2 "));

  // rtx-flame's CPU folding weighs each slice by the same self time (kernels left out).
  StackTrie t;
  const FoldResult f = fold_trace(dir + "/n.json", t, 0, FoldMode::Cpu);
  CHECK(f.total_ns == 145000 + 5000);
  CHECK(f.clipped == 1);
  CHECK_THAT(stats_table(s, 0), Catch::Contains("note: 1 slice(s) overran their parent on the same thread and were clipped"));
  CHECK(stats_json(s, 0)["clipped"] == 1);

  // --by path: rows per stack path; self times per path add up to the names' self times.
  StatsOptions bp;
  bp.by_path = true;
  const TraceStats p = compute_stats(dir + "/n.json", bp);
  std::map<std::string, const StatRow*> paths;
  for (const auto& x : p.groups)
    for (const auto& r : x.rows) paths[r.name] = &r;
  REQUIRE(paths.count("step;forward;matmul"));
  CHECK(paths["step;forward;matmul"]->self_us == Approx(20));
  CHECK(paths["step;backward;matmul"]->self_us == Approx(10));
  CHECK(paths["step;matmul"]->self_us == Approx(50));  // thread 2: matmul inside the identical step
  CHECK(paths["step;forward;over"]->total_us == Approx(15));
  CHECK(paths["step;backward;cudaLaunchKernel"]->self_us == Approx(5));
  CHECK(paths["step"]->count == 2);
  CHECK(paths["step"]->self_us == Approx(step_self));
  CHECK(paths["k"]->count == 2);
  double sum = 0;
  for (const auto& [n, r] : paths)
    if (n.size() >= 6 && n.compare(n.size() - 6, 6, "matmul") == 0) sum += r->self_us;
  CHECK(sum == Approx(matmul_self));
  CHECK(stats_json(p, 0)["by"] == "path");
  CHECK_THAT(stats_table(p, 0), Catch::Contains("== ops: 9 paths"));
  // --match keeps matching rows; busy and shares stay those of the whole category.
  StatsOptions m;
  m.match = "^(forward|backward)$";
  const TraceStats fm = compute_stats(dir + "/n.json", m);
  REQUIRE(fm.groups.size() == 1);
  CHECK(fm.groups[0].rows.size() == 2);
  CHECK(fm.groups[0].total_us == Approx(ops_busy));
  CHECK(fm.groups[0].rows[0].share == Approx(forward_self / ops_busy));
  CHECK(fm.filtered_out == 5 + 1 + 1);  // 5 other ops, cudaLaunchKernel, k
  m.match = "(";
  CHECK_THROWS_AS(compute_stats(dir + "/n.json", m), rtx::Error);
}

TEST_CASE("child_events_flag finds a child's own --events, up to a \"--\"", "[cpu]") {
  using rtx::trace::child_events_flag;
  CHECK(child_events_flag({"rtx-bench", "run", "p.json", "--events", "ev.jsonl"}) == "ev.jsonl");
  CHECK(child_events_flag({"rtx-bench", "--events=e2.jsonl", "run"}) == "e2.jsonl");
  CHECK(child_events_flag({"rtx-bench", "run", "p.json"}).empty());
  CHECK(child_events_flag({"--events", "x"}).empty());  // the program itself, not an argument
  CHECK(child_events_flag({"tool", "--", "--events", "x"}).empty());
  CHECK(child_events_flag({"tool", "--events"}).empty());  // no value
}

TEST_CASE("format_weight: time for ns, else the unit as a label", "[cpu]") {
  using rtx::trace::format_weight;
  CHECK(format_weight(1500000, "ns") == "1.500 ms");
  CHECK(format_weight(10766513625ULL, "counts") == "10,766,513,625 counts");
  CHECK(format_weight(1, "counts") == "1 count");
  CHECK(format_weight(2, "samples") == "2 samples");
  CHECK(rtx::trace::StackTrie().unit == "counts");
}

TEST_CASE("times: exact ns from the file's decimals; epoch timestamps; absurd ones refused", "[cpu]") {
  int64_t ns = 0;
  CHECK(decimal_us_to_ns("1733400000123456.789", ns));
  CHECK(ns == 1733400000123456789);  // a double would hold it only to 0.25 us
  CHECK(decimal_us_to_ns("12", ns));
  CHECK(ns == 12000);
  CHECK(decimal_us_to_ns("1.5e3", ns));
  CHECK(ns == 1500000);
  CHECK(decimal_us_to_ns("17334000001234567E-1", ns));
  CHECK(ns == 1733400000123456700);
  CHECK(decimal_us_to_ns("-0.0005", ns));
  CHECK(ns == -1);  // half away from zero
  CHECK(decimal_us_to_ns("0.0004999", ns));
  CHECK(ns == 0);
  CHECK(decimal_us_to_ns("0", ns));
  CHECK(ns == 0);
  CHECK_FALSE(decimal_us_to_ns("1e300", ns));
  CHECK_FALSE(decimal_us_to_ns("9223372036854775.808", ns));  // 2^63 ns
  CHECK_FALSE(decimal_us_to_ns("1.2.3", ns));
  CHECK_FALSE(decimal_us_to_ns("", ns));
  CHECK(time_ns(1.5, kNoNs, ns));
  CHECK(ns == 1500);
  CHECK(time_ns(1.5, 7, ns));
  CHECK(ns == 7);
  CHECK_FALSE(time_ns(std::nan(""), kNoNs, ns));
  CHECK_FALSE(time_ns(5e15, kNoNs, ns));
  CHECK_FALSE(time_ns(0, kMaxAbsNs + 1, ns));

  // Two slices 1 ns apart at an epoch time (2023-11-14): exact self times, nesting kept.
  const std::string dir = rtx::test::temp_dir();
  write_file(dir + "/e.json", R"({"traceEvents":[
    {"ph":"X","name":"parent","ts":1700000000000000.001,"dur":0.003,"pid":1,"tid":1},
    {"ph":"X","name":"child","ts":1700000000000000.002,"dur":0.001,"pid":1,"tid":1},
    {"ph":"B","name":"be","ts":1700000000000001,"pid":1,"tid":1},
    {"ph":"E","ts":1700000000000001.0005,"pid":1,"tid":1}]})");
  const Trace t = load_trace(dir + "/e.json");
  CHECK(t.events[0].ts_ns == 1700000000000000001);
  CHECK(t.events[0].dur_ns == 3);
  CHECK(validate(t.events).empty());
  const TraceStats st = compute_stats(dir + "/e.json");
  REQUIRE(st.groups.size() == 1);
  std::map<std::string, const StatRow*> rows;
  for (const auto& r : st.groups[0].rows) rows[r.name] = &r;
  CHECK(rows["parent"]->self_us * 1e3 == Approx(2));
  CHECK(rows["child"]->self_us * 1e3 == Approx(1));
  CHECK(rows["be"]->total_us * 1e3 == Approx(1));  // 0.5 ns rounds up to 1 ns
  StackTrie f;
  fold_trace(dir + "/e.json", f);
  CHECK(write_folded(f) == "be 1\nparent 2\nparent;child 1\n");
}

TEST_CASE("B/E out of timestamp order pair per thread after a stable sort by ts (stats, fold, validate)", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  // File order pairs E@3 with B b@5 (negative duration); by ts: a [0,3], b [5,10]. An E at the
  // same ts as the next B closes the earlier one (equal times keep file order).
  write_file(dir + "/o.json", R"({"traceEvents":[
    {"ph":"B","name":"a","ts":0,"pid":1,"tid":1},
    {"ph":"B","name":"b","ts":5,"pid":1,"tid":1},
    {"ph":"E","ts":3,"pid":1,"tid":1},
    {"ph":"E","ts":10,"pid":1,"tid":1},
    {"ph":"E","ts":20,"pid":1,"tid":2},
    {"ph":"B","name":"c","ts":12,"pid":1,"tid":2},
    {"ph":"E","name":"d","ts":30,"pid":1,"tid":2},
    {"ph":"B","name":"d","ts":20,"pid":1,"tid":2}]})");
  CHECK(validate(load_trace(dir + "/o.json").events).empty());
  const TraceStats st = compute_stats(dir + "/o.json");
  CHECK(st.unmatched == 0);
  std::map<std::string, double> total;
  for (const auto& r : st.groups.at(0).rows) total[r.name] = r.total_us;
  CHECK(total == std::map<std::string, double>{{"a", 3}, {"b", 5}, {"c", 8}, {"d", 10}});
  StackTrie f;
  const FoldResult r = fold_trace(dir + "/o.json", f);
  CHECK(r.unclosed_b + r.stray_e == 0);
  CHECK(write_folded(f) == "a 3000\nb 5000\nc 8000\nd 10000\n");
}

TEST_CASE("validate: a flow s then t without f is drawn (Perfetto): valid; s alone is not", "[cpu]") {
  Event s = x("flow", 1, -1), t = x("flow", 2, -1), f = x("flow", 3, -1);
  s.ph = 's';
  t.ph = 't';
  f.ph = 'f';
  s.id = t.id = f.id = "7";
  CHECK(validate({s, t}).empty());
  CHECK(validate({s, t, f}).empty());
  const auto v = validate({s});
  REQUIRE(v.size() == 1);
  CHECK_THAT(v[0].message, Catch::Contains("no flow step (t) or end (f)"));
}

TEST_CASE("PyTorch profiler traces (real, CPU): stats and CPU fold equal the values computed from the JSON", "[cpu]") {
  // tests/trace/data/make_torch_sample.py recorded torch_cpu_trace.json with torch.profiler and
  // computed torch_cpu_trace.expected.json from it in Python (integer ns); the _epoch variant
  // holds the same events at absolute Unix-epoch timestamps (~1.8e15 us).
  const std::string data = rtx::test::source_dir() + "/tests/trace/data/";
  const nlohmann::json want = nlohmann::json::parse(read_file(data + "torch_cpu_trace.expected.json"));
  REQUIRE(want["stats"].size() > 40);
  for (const char* name : {"torch_cpu_trace.json", "torch_cpu_trace_epoch.json"}) {
    INFO(name);
    const Trace t = load_trace(data + name);
    CHECK(t.events.size() == want["events"].get<size_t>());
    CHECK(validate(t.events).empty());
    const TraceStats st = compute_stats(data + name);
    CHECK(st.events == want["events"].get<uint64_t>());
    CHECK(st.clipped == want["clipped"].get<uint64_t>());
    CHECK(st.unmatched == 0);
    const nlohmann::json j = stats_json(st, 0);
    std::map<std::string, nlohmann::json> got;
    for (const auto& g : j["groups"])
      for (const auto& r : g["rows"]) got[r["name"].get<std::string>()] = r;
    CHECK(got.size() == want["stats"].size());
    for (const auto& [n, w] : want["stats"].items()) {
      INFO(n);
      REQUIRE(got.count(n));
      CHECK(got[n]["count"] == w["count"]);
      CHECK(got[n]["total_ns"] == w["total_ns"]);
      CHECK(got[n]["self_ns"] == w["self_ns"]);
    }
    StackTrie cpu;
    fold_trace(data + name, cpu, 0, FoldMode::Cpu);
    std::map<std::string, uint64_t> want_folded;
    for (const auto& [k, v] : want["folded_cpu"].items()) want_folded[k] = v.get<uint64_t>();
    CHECK(folded_map(write_folded(cpu)) == want_folded);
  }
}

TEST_CASE("perf script text collapses as stackcollapse-perf.pl does (real sample, Python reference)", "[cpu]") {
  // make_perf_sample.sh recorded perf_sample.txt (perf record -F 999 -g; three commands,
  // kernel frames, [unknown] frames) and collapsed it with collapse_perf_ref.py.
  const std::string data = rtx::test::source_dir() + "/tests/trace/data/";
  CHECK(looks_like_perf(data + "perf_sample.txt"));
  CHECK_FALSE(looks_like_perf(data + "perf_sample.folded"));
  CHECK_FALSE(looks_like_perf(sample()));
  CHECK_FALSE(looks_like_trace(data + "perf_sample.txt"));
  // A folded file whose first frame starts with '[' (perf's [unknown], rtx-flame's [unnamed])
  // is folded text; JSON opens with '{"', '{}', '[{' or '[]' (blanks allowed between).
  const std::string tdir = rtx::test::temp_dir();
  const std::vector<std::pair<std::string, bool>> heads = {
      {"[unknown];main 5\nfoo;bar 2\n", false}, {"[unnamed] 1000\n", false}, {"{x};y 3\n", false},
      {" [ {\"ph\":\"X\"}]", true},          {"[]", true},                  {"{ \"traceEvents\": []}", true},
      {"[", true}};
  for (size_t i = 0; i < heads.size(); ++i) {
    const std::string f = tdir + "/head" + std::to_string(i);
    std::ofstream(f, std::ios::binary) << heads[i].first;
    INFO(heads[i].first);
    CHECK(looks_like_trace(f) == heads[i].second);
  }
  StackTrie t;
  const PerfRead r = collapse_perf(data + "perf_sample.txt", t);
  CHECK(r.event == "cpu-clock:ppp");
  CHECK(r.periods);
  CHECK(t.unit == "ns");
  CHECK(r.unrecognized == 0);
  CHECK(r.samples == 114);
  CHECK(write_folded(t) == read_file(data + "perf_sample.folded"));

  // Hand-made lines for the rules the sample lacks: offsets, args, (anonymous namespace), Go
  // methods, inline chains, [unknown] with a module path, a second event type, no period.
  const std::string dir = rtx::test::temp_dir();
  write_file(dir + "/p.txt",
             "# header comment\n"
             "V8 WorkerThread 25607/25608 [001] 1.000001:  3 cycles: \n"
             "\t    7f00 foo(int, char)+0x1f (/usr/bin/app)\n"
             "\t    7f01 ns::(anonymous namespace)::bar()+0x2 (/usr/bin/app)\n"
             "\t    7f09 (deleted)+0x2 (/usr/bin/app)\n"
             "\t    7f02 net/http.(*Client).Do+0x10 (/usr/bin/app)\n"
             "\t    7f03 a->b (/usr/bin/app)\n"
             "\t    7f04 [unknown] (/usr/lib/libz.so.1)\n"
             "\t    7f05 \"quoted';x\" (/usr/bin/app)\n"
             "\n"
             "app 7 2.0: 5 instructions: \n"
             "\t    7f00 other (/usr/bin/app)\n"
             "\n"
             "app 7 3.0: cycles: \n"
             "\t    7f00 main (/usr/bin/app)\n"
             "\n"
             "garbage line\n");
  StackTrie p;
  const PerfRead pr = collapse_perf(dir + "/p.txt", p);
  CHECK(pr.samples == 2);
  CHECK(pr.other_event_samples == 1);
  CHECK(pr.unrecognized == 1);
  CHECK(pr.first_unrecognized_line == 17);
  CHECK(p.unit == "cycles");
  CHECK(write_folded(p) ==
        "V8_WorkerThread;quoted:x;[libz.so.1];a;b;net/http.(*Client).Do;ns::(anonymous namespace)::bar;foo 3\n"
        "app;main 1\n");
}

TEST_CASE("epoch timestamps survive merge exactly; an ambiguous leaf ('x 5 3 7') reads back the same", "[cpu]") {
  CHECK(format_ns_as_us(1700000000000000001) == "1700000000000000.001");
  CHECK(format_ns_as_us(-1500) == "-1.5");
  CHECK(format_ns_as_us(0) == "0");
  CHECK(format_ns_as_us(INT64_MIN) == "-9223372036854775.808");
  const std::string data = rtx::test::source_dir() + "/tests/trace/data/";
  const std::string dir = rtx::test::temp_dir();
  const Trace in = load_trace(data + "torch_cpu_trace_epoch.json");
  merge_traces({data + "torch_cpu_trace_epoch.json"}, dir + "/m.json");
  const Trace out = load_trace(dir + "/m.json");
  std::vector<int64_t> a, b;
  for (const Event& e : in.events)
    if (e.ph == 'X') a.push_back(e.ts_ns);
  for (const Event& e : out.events)
    if (e.ph == 'X') b.push_back(e.ts_ns);
  REQUIRE(a.size() > 200);
  CHECK(a == b);
  CHECK(a[0] > 1700000000000000000);

  write_file(dir + "/x.folded", "x 5 3 7\n");
  StackTrie t;
  CHECK(read_folded(dir + "/x.folded", t).differential == 1);
  CHECK(write_folded(t) == "x_5 7\n");
  CHECK(reread_folded(dir + "/x2.folded", write_folded(t)) == "x_5 7\n");
}
