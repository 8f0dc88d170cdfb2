// Tools fed hostile input through the shared CLI plumbing: invalid UTF-8 in arguments and files
// under --json (exit 2 with a valid JSON error, never an abort), an unreadable proposals row,
// and directories or devices given as input files.
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>

#include "rtx/evolve/proposers.hpp"
#include "rtx/store/store.hpp"
#include "rtx/telemetry/hwprofile.hpp"
#include "test_util.hpp"

using nlohmann::json;
using rtx::test::run;

namespace {

std::string evolve() { return rtx::test::tool_path("rtx-evolve"); }
std::string bench() { return rtx::test::tool_path("rtx-bench"); }
const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

/// The {"error": {...}} document a failed --json run printed; checks it is one valid JSON
/// document (strict parse: no invalid UTF-8 got through).
json error_doc(const rtx::test::Proc& p) {
  INFO("stdout: " << p.out << "\nstderr: " << p.err);
  json doc;
  REQUIRE_NOTHROW(doc = json::parse(p.out));
  REQUIRE(doc.contains("error"));
  CHECK(doc["error"]["exit_code"] == p.exit_code);
  return doc["error"];
}

}  // namespace

TEST_CASE("--json with invalid UTF-8 in arguments and files: exit 2, valid JSON, no abort", "[cpu][cli]") {
  const std::string dir = rtx::test::temp_dir(), common = " --db " + dir + "/rtx.db ";

  // A positional argument that reaches an error message (unknown question '\xff').
  auto q = run(evolve() + common + "--json kg query $(printf '\\377')");
  CHECK(q.exit_code == 2);
  json e = error_doc(q);
  CHECK(e["category"] == "input");
  CHECK_THAT(e["message"].get<std::string>(), Catch::Contains(kReplacement));

  // A filter echoed into the result document (kg_query's "filters"): the dump of the answer
  // fails on it, which is bad input (2), not an internal error (4).
  auto f = run(evolve() + common + "--json kg query failed --domain $(printf '\\377')");
  CHECK(f.exit_code == 2);
  e = error_doc(f);
  CHECK(e["category"] == "input");
  CHECK_THAT(e["message"].get<std::string>(), Catch::Contains("not valid UTF-8"));

  // An unknown argument: CLI11's parse error quotes it.
  auto u = run(evolve() + common + "--json status $(printf 'x\\377y')");
  CHECK(u.exit_code == 2);
  e = error_doc(u);
  CHECK(e["category"] == "usage");
  CHECK_THAT(e["message"].get<std::string>(), Catch::Contains("x" + kReplacement + "y"));

  // A file whose JSON parser error quotes the bad bytes (the finding's submit repro).
  { std::ofstream(dir + "/bad.json") << "{\"schema\":\"rtx.proposal.v1\",\"domain\":\"f\xff\"}"; }
  REQUIRE(run(evolve() + common + "keygen").exit_code == 0);
  auto s = run(evolve() + common + "--json submit --no-validate " + dir + "/bad.json");
  CHECK(s.exit_code == 2);
  CHECK(error_doc(s)["category"] == "input");

  // A path with invalid UTF-8 in another tool (rtx-bench reads the pack through the same reader).
  auto b = run(bench() + " --json run " + dir + "/$(printf '\\377').json --no-store");
  CHECK(b.exit_code == 2);
  e = error_doc(b);
  CHECK_THAT(e["message"].get<std::string>() + e["where"].get<std::string>(), Catch::Contains(kReplacement));
}

TEST_CASE("input files that are directories, devices or too large are Input errors naming the path", "[cpu][cli]") {
  const std::string dir = rtx::test::temp_dir(), common = " --db " + dir + "/rtx.db ";
  REQUIRE(run(evolve() + common + "keygen").exit_code == 0);
  auto d = run(evolve() + common + "--json submit --no-validate " + dir);
  CHECK(d.exit_code == 2);
  json e = error_doc(d);
  CHECK_THAT(e["message"].get<std::string>(), Catch::Contains("is a directory"));
  CHECK(e["where"] == dir);
  // /dev/zero as a proposal: read up to 64 MiB, then refused (it used to be read without bound).
  auto z = run(evolve() + common + "--json submit --no-validate /dev/zero");
  CHECK(z.exit_code == 2);
  CHECK_THAT(error_doc(z)["message"].get<std::string>(), Catch::Contains("larger than 64 MiB"));
  // As a bench pack it is refused without reading: not a regular file.
  auto p = run(bench() + " --json run /dev/zero --no-store");
  CHECK(p.exit_code == 2);
  e = error_doc(p);
  CHECK_THAT(e["message"].get<std::string>(), Catch::Contains("not a regular file"));
  CHECK(e["where"] == "/dev/zero");
}

TEST_CASE("a proposals row edited into invalid UTF-8: status and export exit 2 naming the row", "[cpu][cli]") {
  const std::string dir = rtx::test::temp_dir(), db = dir + "/rtx.db", common = " --db " + db + " ";
  REQUIRE(run(evolve() + common + "keygen").exit_code == 0);
  const std::string sku = rtx::telemetry::sku_key("cpu");
  const json prop = {{"schema", "rtx.proposal.v1"},
                     {"domain", "memory"},
                     {"target", "config"},
                     {"key", rtx::evolve::config_key("memory", sku)},
                     {"plan", {{"why", "test"}, {"workload", {{"affected", {{"steps", 10}}}}}}},
                     {"actions", json::array()},
                     {"changeset", {{"candidate", {{"large_round_bytes", 1 << 20}, {"small_segment_bytes", 1 << 18}}}}}};
  { std::ofstream(dir + "/p.json") << prop.dump(); }
  auto sub = run(evolve() + common + "--json submit --no-validate " + dir + "/p.json");
  INFO(sub.out << sub.err);
  REQUIRE(sub.exit_code == 0);
  const int64_t id = json::parse(sub.out)["id"];
  REQUIRE(run(evolve() + common + "--json status").exit_code == 0);
  {
    rtx::store::Store st(db);
    st.exec("UPDATE proposals SET json = json_set(json, '$.plan.why', CAST(X'41FF42' AS TEXT)) WHERE id = " +
            std::to_string(id));
  }
  for (const std::string& cmd : std::vector<std::string>{"status", "export " + std::to_string(id)}) {
    INFO(cmd);
    auto r = run(evolve() + common + "--json " + cmd);
    CHECK(r.exit_code == 2);
    const json e = error_doc(r);
    CHECK(e["category"] == "input");
    CHECK_THAT(e["message"].get<std::string>(),
               Catch::Contains("proposal " + std::to_string(id) + " in ") && Catch::Contains("stored JSON is unreadable"));
  }
}

TEST_CASE("an empty value for a numeric flag is a usage error naming it, not 0", "[cpu][cli]") {
  const std::string serve = rtx::test::tool_path("rtx-serve");
  // CLI11 alone would read "" as 0: --port "" would bind any free port, --tpot-target-ms "" turn it off.
  for (const std::string flag : {"--port", "--tpot-target-ms", "--max-batch", "--canary-fraction"}) {
    const auto p = run(serve + " run --model /nonexistent.gguf " + flag + " ''");
    INFO(flag << " stderr: " << p.err);
    CHECK(p.exit_code == 2);
    CHECK_THAT(p.err, Catch::Contains(flag) && Catch::Contains("empty value"));
  }
  // Flags with their own range check: the empty check runs first (it used to be CLI11's
  // "Value  not in range 1 to 4096", or a 300-digit upper bound for rtx-tune's samples).
  const std::vector<std::pair<std::string, std::string>> ranged = {
      {serve + " bench -c ''", "--concurrency"},
      {serve + " bench -n ''", "--num-requests"},
      {evolve() + " run --budget ''", "--budget"},
      {evolve() + " history --limit ''", "--limit"},
      {rtx::test::tool_path("rtx-tune") + " run --min-samples ''", "--min-samples"}};
  for (const auto& [cmd, flag] : ranged) {
    const auto p = run(cmd);
    INFO(cmd << " stderr: " << p.err);
    CHECK(p.exit_code == 2);
    CHECK_THAT(p.err, Catch::Contains(flag + ": empty value") && !Catch::Contains("not in range"));
  }
  // The range check itself still runs, after the empty check.
  const auto r = run(evolve() + " run --budget 0");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--budget: Value 0 not in range 1 to 1000"));
  const auto b = run(bench() + " run --help");
  CHECK(b.exit_code == 0);  // the check adds nothing to --help
  CHECK_THAT(b.out, !Catch::Contains("NONEMPTY"));
  const auto h = run(evolve() + " run --help");
  CHECK_THAT(h.out, Catch::Contains("--budget UINT:INT in [1 - 1000]") && !Catch::Contains("NONEMPTY"));
}

TEST_CASE("a subcommand's --help lists the tool's common options after its own footer", "[cpu][cli]") {
  // CLI11 alone shows only the subcommand's options, though --json etc. are accepted there too.
  const auto h = run(evolve() + " mcp --help");
  CHECK(h.exit_code == 0);
  const size_t own = h.out.find("Speaks MCP"), common = h.out.find("Common options of rtx-evolve");
  REQUIRE(own != std::string::npos);
  REQUIRE(common != std::string::npos);
  CHECK(own < common);
  CHECK_THAT(h.out.substr(common), Catch::Contains("\n  --json ") && Catch::Contains("\n  --db TEXT "));
  const auto top = run(evolve() + " --help");  // the tool's own help is unchanged
  CHECK_THAT(top.out, !Catch::Contains("Common options of"));
}

TEST_CASE("a missing or unknown subcommand is named with the tool's subcommands", "[cpu][cli]") {
  // CLI11 alone said "A subcommand is required" for both, naming neither the word nor the choices.
  auto p = run(bench() + " frob");
  CHECK(p.exit_code == 2);
  CHECK_THAT(p.err, Catch::Contains("rtx-bench: error: unknown subcommand 'frob'; the subcommands are: run, compare, list, show"));
  // An option's value is not taken for the subcommand; a flag takes none.
  p = run(bench() + " --db x.db --json frob");
  CHECK(p.exit_code == 2);
  CHECK_THAT(p.err, Catch::Contains("unknown subcommand 'frob'"));
  CHECK(error_doc(p)["message"] == "unknown subcommand 'frob'; the subcommands are: run, compare, list, show");
  // None given; a hidden subcommand (rtx-evolve's __trial, for the sandbox) is not offered.
  p = run(evolve());
  CHECK(p.exit_code == 2);
  CHECK_THAT(p.err, Catch::Contains("rtx-evolve: error: a subcommand is required: run, status,") && !Catch::Contains("__trial"));
  // Control bytes in the word are escaped.
  p = run(bench() + " $(printf 'a\\033b')");
  CHECK_THAT(p.err, Catch::Contains("unknown subcommand 'a\\x1Bb'"));
}
