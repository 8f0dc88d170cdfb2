// rtx-evolve mcp: the MCP server driven in-process (scripted JSON-RPC sessions: lifecycle, exact
// ids and error codes, each tool against the store) and one session piped through the real binary.
#include <catch2/catch.hpp>

#include <omp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "rtx/app/bench.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/printable.hpp"
#include "rtx/evolve/deploy.hpp"
#include "rtx/evolve/kg.hpp"
#include "rtx/evolve/mcp.hpp"
#include "rtx/evolve/proposers.hpp"
#include "rtx/io/artifact.hpp"
#include "rtx/kernels/registry.hpp"
#include "rtx/store/store.hpp"
#include "rtx/telemetry/hwprofile.hpp"
#include "test_util.hpp"

using nlohmann::json;
using rtx::evolve::McpServer;

namespace {

/// Feed `lines` to a server (one message per line) and return its replies, one JSON per line.
std::vector<json> session(McpServer& srv, const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  std::istringstream in(text);
  std::ostringstream out;
  const size_t n = srv.serve(in, out);
  std::vector<json> replies;
  std::istringstream rd(out.str());
  for (std::string l; std::getline(rd, l);) {
    REQUIRE(l.find('\n') == std::string::npos);
    replies.push_back(json::parse(l));
  }
  REQUIRE(replies.size() == n);
  return replies;
}

std::string req(const json& id, const std::string& method, const json& params = json::object()) {
  return json{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}}.dump();
}
std::string call(const json& id, const std::string& tool, const json& args) {
  return req(id, "tools/call", {{"name", tool}, {"arguments", args}});
}
std::string init(const json& id, const std::string& version = rtx::evolve::kMcpProtocolVersion) {
  return req(id, "initialize", {{"protocolVersion", version}, {"capabilities", json::object()},
                                {"clientInfo", {{"name", "test"}, {"version", "0"}}}});
}
const std::string kInitialized = R"({"jsonrpc":"2.0","method":"notifications/initialized"})";

/// One call on an initialized server: the reply to it.
json one(McpServer& srv, const std::string& line) {
  if (!srv.initialized()) session(srv, {init("init"), kInitialized});
  const auto r = session(srv, {line});
  REQUIRE(r.size() == 1);
  return r[0];
}
/// A successful tool result's structuredContent (checks the result's shape on the way).
json ok(const json& reply) {
  INFO(reply.dump());
  REQUIRE(reply.contains("result"));
  const json& r = reply["result"];
  REQUIRE(r["isError"] == false);
  REQUIRE(r["content"].is_array());
  REQUIRE(r["content"][0]["type"] == "text");
  CHECK(json::parse(r["content"][0]["text"].get<std::string>()) == r["structuredContent"]);
  return r["structuredContent"];
}
/// A tool execution error's text.
std::string tool_error(const json& reply) {
  INFO(reply.dump());
  REQUIRE(reply.contains("result"));
  REQUIRE(reply["result"]["isError"] == true);
  CHECK_FALSE(reply["result"].contains("structuredContent"));
  return reply["result"]["content"][0]["text"];
}
int error_code(const json& reply) {
  INFO(reply.dump());
  REQUIRE(reply.contains("error"));
  CHECK_FALSE(reply.contains("result"));
  return reply["error"]["code"];
}

struct Fixture {
  std::string dir = rtx::test::temp_dir();
  std::string db = dir + "/rtx.db";
  rtx::store::Store st{db};
  rtx::evolve::KeyPair key = rtx::evolve::generate_key(rtx::evolve::default_key_path(db), false);
  std::string sku = rtx::telemetry::sku_key("cpu");
  rtx::evolve::McpOptions opts() const {
    rtx::evolve::McpOptions o;
    o.default_pack = rtx::test::source_dir() + "/benchpacks/core.json";
    return o;
  }
};

/// An external memory-domain proposal as an agent writes it (docs/evolution.md "External proposals").
json memory_proposal(const std::string& sku, int64_t segment) {
  return {{"schema", "rtx.proposal.v1"},
          {"domain", "memory"},
          {"target", "config"},
          {"key", rtx::evolve::config_key("memory", sku)},
          {"plan", {{"why", "agent: smaller segments"}, {"workload", {{"affected", {{"steps", 10}}}}}}},
          {"actions", json::array()},
          {"changeset", {{"candidate", {{"large_round_bytes", 1 << 20}, {"small_segment_bytes", segment}}}}}};
}

}  // namespace

TEST_CASE("evolve mcp: lifecycle, JSON-RPC ids and error codes", "[cpu]") {
  Fixture f;
  McpServer srv(f.st, f.opts());
  const auto r = session(
      srv, {
               req(1, "tools/list"),                                               // before initialize: refused
               req("p0", "ping"),                                                  // ping is allowed before initialize
               R"({"jsonrpc":"2.0","method":"notifications/initialized"})",        // notification: no reply
               init(2),                                                            // initialize
               kInitialized,                                                       // no reply
               req(3, "tools/list"),                                               //
               R"({"jsonrpc": "2.0", "id": 4, "method")",                          // parse error
               req(5, "resources/list"),                                           // method not found
               call(6, "make_coffee", json::object()),                             // unknown tool
               call(7, "proposal_status", json::object()),                         // missing argument
               call(8, "proposal_status", {{"id", "seven"}}),                      // wrong type
               call(9, "proposal_status", {{"id", 1}, {"verbose", true}}),         // unknown argument
               call(10, "query_knowledge", {{"question", "astrology"}}),          // not in the enum
               R"({"jsonrpc":"2.0","method":"notifications/whatever","params":{}})",  // unknown notification: silent
               R"([{"jsonrpc":"2.0","id":11,"method":"ping"}])",                   // batch: refused
               R"({"jsonrpc":"1.0","id":12,"method":"ping"})",                     // wrong version
               R"({"jsonrpc":"2.0","id":99,"result":{}})",                         // a response: ignored
               "",                                                                 // blank line: skipped
               req(13, "initialize", {{"protocolVersion", "2025-06-18"}}),        // second initialize
               R"({"jsonrpc":"2.0","id":{"a":1},"method":"ping"})",                // id of a wrong type
               R"({"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"arguments":{}}})",  // no tool name
               R"("just a string")",                                               // not an object
               req(15, "ping") + "\r",                                             // CRLF line ending
               "{\"jsonrpc\":\"2.0\",\"id\":16,\"method\":\"ping\",\"params\":{\"x\":\"\xff\"}}",  // not UTF-8
           });
  REQUIRE(r.size() == 19);  // 24 lines: 5 notifications, responses or blank lines get no reply
  CHECK(r[0]["id"] == 1);
  CHECK(error_code(r[0]) == -32600);
  CHECK_THAT(r[0]["error"]["message"].get<std::string>(), Catch::Contains("initialize"));
  CHECK(r[1]["id"] == "p0");
  CHECK(r[1]["result"] == json::object());

  // initialize: the client's version echoed, tools capability, server info.
  CHECK(r[2]["id"] == 2);
  CHECK(r[2]["jsonrpc"] == "2.0");
  const json& ini = r[2]["result"];
  CHECK(ini["protocolVersion"] == "2025-06-18");
  CHECK(ini["capabilities"] == json{{"tools", {{"listChanged", false}}}});
  CHECK(ini["serverInfo"]["name"] == "rtx-evolve");
  CHECK(ini["serverInfo"]["version"].is_string());
  CHECK(srv.protocol_version() == "2025-06-18");

  // tools/list: the five tools, each with a JSON Schema input (required listed) and output.
  CHECK(r[3]["id"] == 3);
  const json& tools = r[3]["result"]["tools"];
  std::vector<std::string> names;
  for (const auto& t : tools) {
    names.push_back(t["name"]);
    CHECK(t["title"].is_string());
    CHECK(t["description"].get<std::string>().size() > 40);
    CHECK(t["inputSchema"]["type"] == "object");
    CHECK(t["inputSchema"]["required"].is_array());
    CHECK(t["inputSchema"]["additionalProperties"] == false);
    CHECK(t["outputSchema"]["type"] == "object");
  }
  CHECK(names == std::vector<std::string>{"list_benchmarks", "get_baseline", "submit_proposal", "proposal_status", "query_knowledge"});
  CHECK(tools[3]["inputSchema"]["required"] == json::array({"id"}));
  CHECK(tools[2]["inputSchema"]["required"] == json::array({"proposal"}));

  CHECK(r[4]["id"] == nullptr);
  CHECK(error_code(r[4]) == -32700);
  CHECK(r[5]["id"] == 5);
  CHECK(error_code(r[5]) == -32601);
  CHECK(r[6]["id"] == 6);
  CHECK(error_code(r[6]) == -32602);
  CHECK_THAT(r[6]["error"]["message"].get<std::string>(), Catch::Contains("make_coffee"));
  CHECK(r[7]["id"] == 7);
  CHECK(error_code(r[7]) == -32602);
  CHECK_THAT(r[7]["error"]["message"].get<std::string>(), Catch::Contains("missing required argument 'id'"));
  CHECK(r[8]["id"] == 8);
  CHECK(error_code(r[8]) == -32602);
  CHECK_THAT(r[8]["error"]["message"].get<std::string>(), Catch::Contains("argument 'id': expected integer, got string"));
  CHECK(r[9]["id"] == 9);
  CHECK(error_code(r[9]) == -32602);
  CHECK_THAT(r[9]["error"]["message"].get<std::string>(), Catch::Contains("unknown argument 'verbose'"));
  CHECK(r[10]["id"] == 10);
  CHECK(error_code(r[10]) == -32602);
  CHECK(r[11]["id"] == nullptr);
  CHECK(error_code(r[11]) == -32600);
  CHECK_THAT(r[11]["error"]["message"].get<std::string>(), Catch::Contains("batch"));
  CHECK(r[12]["id"] == 12);
  CHECK(error_code(r[12]) == -32600);
  CHECK(r[13]["id"] == 13);
  CHECK(error_code(r[13]) == -32600);
  CHECK(r[14]["id"] == nullptr);
  CHECK(error_code(r[14]) == -32600);
  CHECK(r[15]["id"] == 14);
  CHECK(error_code(r[15]) == -32602);
  CHECK(r[16]["id"] == nullptr);
  CHECK(error_code(r[16]) == -32600);
  CHECK(r[17]["id"] == 15);
  CHECK(r[17]["result"] == json::object());
  CHECK(r[18]["id"] == nullptr);  // (session() re-parsed the reply: it is valid UTF-8 itself)
  CHECK(error_code(r[18]) == -32700);
}

TEST_CASE("evolve mcp: the stderr log escapes what the client sent (control bytes, newlines, non-UTF-8)", "[cpu]") {
  Fixture f;
  std::ostringstream log;
  rtx::evolve::McpOptions o = f.opts();
  o.log = &log;
  McpServer srv(f.st, o);
  const std::string esc = "\x1b]0;pwned\x07\x1b[2J";  // retitle the terminal, clear the screen
  session(srv, {
                   req(1, "initialize", {{"protocolVersion", rtx::evolve::kMcpProtocolVersion},
                                         {"clientInfo", {{"name", "agent" + esc + "\nrtx-evolve mcp: forged"}}}}),
                   json{{"jsonrpc", "2.0"}, {"method", "notifications/" + esc}}.dump(),   // ignored notification
                   "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"\xff\xfe\"}",                  // not UTF-8: parse error
                   json{{"jsonrpc", "2.0"}, {"id", "r\xc3\xa9" + esc}, {"result", json::object()}}.dump(),  // a response
                   call(3, "get_baseline", {{"key", "astrology" + esc + "|" + f.sku}}),  // a tool error quoting the key
               });
  const std::string text = log.str();
  INFO(rtx::printable(text, rtx::Escape::NonAscii, "", 4000));
  // Only printable ASCII and the line ends the server writes: one line per event.
  size_t raw_bytes = 0;
  for (const char ch : text) {
    const auto u = static_cast<unsigned char>(ch);
    raw_bytes += !(ch == '\n' || (u >= 0x20 && u < 0x7f));
  }
  CHECK(raw_bytes == 0);
  std::vector<std::string> lines;
  std::istringstream rd(text);
  for (std::string l; std::getline(rd, l);) lines.push_back(l);
  REQUIRE(lines.size() == 6);  // initialize, notification, parse error, response, tool error, end of input
  for (const auto& l : lines) CHECK_THAT(l, Catch::StartsWith("rtx-evolve mcp: "));
  CHECK_THAT(lines[0], Catch::StartsWith("rtx-evolve mcp: initialized by agent\\x1B]0;pwned\\x07\\x1B[2J\\x0Artx-evolve "
                                         "mcp: forged (asked "));
  CHECK(lines[1] == "rtx-evolve mcp: ignoring notification 'notifications/\\x1B]0;pwned\\x07\\x1B[2J'");
  CHECK_THAT(lines[2], Catch::StartsWith("rtx-evolve mcp: parse error: ") && Catch::Contains("\\xFF"));
  // dump() writes the id's control bytes as \u001b; its UTF-8 'é' is escaped byte by byte.
  CHECK_THAT(lines[3], Catch::StartsWith("rtx-evolve mcp: ignoring a response to id \"r\\xC3\\xA9\\u001b]0;pwned"));
  CHECK_THAT(lines[4], Catch::StartsWith("rtx-evolve mcp: get_baseline: ") &&
                           Catch::Contains("astrology\\x1B]0;pwned\\x07\\x1B[2J"));
  CHECK(lines[5] == "rtx-evolve mcp: end of input, 3 replies");
}

TEST_CASE("evolve mcp: version negotiation and float ids", "[cpu]") {
  Fixture f;
  McpServer srv(f.st, f.opts());
  // An unsupported revision is answered with ours; the client decides whether to go on.
  const auto r = session(srv, {init(1, "1999-01-01"), req(1.5, "ping"), req(-7, "ping")});
  REQUIRE(r.size() == 3);
  CHECK(r[0]["result"]["protocolVersion"] == rtx::evolve::kMcpProtocolVersion);
  CHECK(error_code(r[1]) == -32600);  // MCP ids are strings or integers
  CHECK(r[1]["id"] == nullptr);
  CHECK(r[2]["id"] == -7);
  // Missing protocolVersion: invalid params, and the server stays uninitialized.
  McpServer s2(f.st, f.opts());
  const auto r2 = session(s2, {req(1, "initialize", {{"capabilities", json::object()}}), req(2, "tools/list")});
  CHECK(error_code(r2[0]) == -32602);
  CHECK(error_code(r2[1]) == -32600);
  CHECK_FALSE(s2.initialized());
}

TEST_CASE("evolve mcp: older revisions are echoed and served as they define", "[cpu]") {
  Fixture f;
  const json args = {{"question", "improved"}};
  // 2024-11-05 (what many clients still send): echoed; tools without title/outputSchema, tool
  // results without structuredContent (the JSON is still the text content), no batches.
  {
    McpServer srv(f.st, f.opts());
    const auto r = session(srv, {init(1, "2024-11-05"), kInitialized, req(2, "tools/list"),
                                 call(3, "query_knowledge", args), R"([{"jsonrpc":"2.0","id":4,"method":"ping"}])"});
    REQUIRE(r.size() == 4);
    CHECK(r[0]["result"]["protocolVersion"] == "2024-11-05");
    CHECK(r[0]["result"]["serverInfo"]["name"] == "rtx-evolve");
    CHECK_FALSE(r[0]["result"]["serverInfo"].contains("title"));
    const json& tools = r[1]["result"]["tools"];
    REQUIRE(tools.size() == McpServer::tool_definitions().size());
    for (size_t i = 0; i < tools.size(); ++i) {
      INFO(tools[i].dump());
      CHECK(tools[i]["name"] == McpServer::tool_definitions()[i]["name"]);
      CHECK(tools[i]["inputSchema"] == McpServer::tool_definitions()[i]["inputSchema"]);
      CHECK_FALSE(tools[i].contains("outputSchema"));
      CHECK_FALSE(tools[i].contains("title"));
    }
    INFO(r[2].dump());
    REQUIRE(r[2].contains("result"));
    const json& res = r[2]["result"];
    CHECK(res["isError"] == false);
    CHECK_FALSE(res.contains("structuredContent"));
    CHECK(json::parse(res["content"][0]["text"].get<std::string>()).contains("question"));
    CHECK(error_code(r[3]) == -32600);
    CHECK_THAT(r[3]["error"]["message"].get<std::string>(), Catch::Contains("in MCP 2024-11-05"));
  }
  // 2025-03-26: servers MUST accept batches; answers come back as one array, notifications get
  // none, a notifications-only batch gets no reply, `initialize` may not be batched.
  {
    McpServer srv(f.st, f.opts());
    const auto r = session(srv, {init(1, "2025-03-26"),
                                 R"([{"jsonrpc":"2.0","id":"a","method":"ping"},)"
                                 R"({"jsonrpc":"2.0","method":"notifications/initialized"},)"
                                 R"({"jsonrpc":"2.0","id":"b","method":"no/such"},7,)"
                                 R"({"jsonrpc":"2.0","id":"c","method":"initialize","params":{"protocolVersion":"2025-03-26"}}])",
                                 R"([{"jsonrpc":"2.0","method":"notifications/cancelled"}])", "[]",
                                 call(5, "query_knowledge", args)});
    REQUIRE(r.size() == 4);
    CHECK(r[0]["result"]["protocolVersion"] == "2025-03-26");
    const json& b = r[1];
    REQUIRE(b.is_array());
    REQUIRE(b.size() == 4);
    CHECK(b[0]["id"] == "a");
    CHECK(b[0]["result"] == json::object());
    CHECK(b[1]["id"] == "b");
    CHECK(error_code(b[1]) == -32601);
    CHECK(b[2]["id"] == nullptr);
    CHECK(error_code(b[2]) == -32600);
    CHECK(b[3]["id"] == "c");
    CHECK(error_code(b[3]) == -32600);
    CHECK(error_code(r[2]) == -32600);  // the empty batch
    REQUIRE(r[3].contains("result"));
    CHECK(r[3]["result"]["isError"] == false);
    CHECK_FALSE(r[3]["result"].contains("structuredContent"));
    CHECK(srv.protocol_version() == "2025-03-26");
    // At most kMcpMaxBatch messages; an initialize notification in a batch gets no reply.
    const auto pings = [](size_t n) {
      std::string b = "[";
      for (size_t i = 0; i < n; ++i) b += (i ? "," : "") + req(i, "ping");
      return b + "]";
    };
    const auto big = session(srv, {pings(rtx::evolve::kMcpMaxBatch + 1),
                                   R"([{"jsonrpc":"2.0","method":"initialize","params":{}}])",
                                   pings(rtx::evolve::kMcpMaxBatch)});
    INFO(big.back().dump().substr(0, 300));
    REQUIRE(big.size() == 2);
    CHECK(error_code(big[0]) == -32600);
    CHECK_THAT(big[0]["error"]["message"].get<std::string>(), Catch::Contains("a batch of 1001 messages; at most 1000"));
    REQUIRE(big[1].is_array());
    CHECK(big[1].size() == rtx::evolve::kMcpMaxBatch);
    CHECK(big[1].back()["result"] == json::object());
  }
  // The current revision keeps its additions and refuses batches.
  {
    McpServer srv(f.st, f.opts());
    const auto r = session(srv, {init(1), req(2, "tools/list"), R"([{"jsonrpc":"2.0","id":3,"method":"ping"}])"});
    REQUIRE(r.size() == 3);
    CHECK(r[1]["result"]["tools"] == McpServer::tool_definitions());
    CHECK(error_code(r[2]) == -32600);
  }
  CHECK(rtx::evolve::mcp_has_structured_output("2025-06-18"));
  CHECK_FALSE(rtx::evolve::mcp_has_structured_output("2025-03-26"));
  CHECK(rtx::evolve::mcp_accepts_batches("2025-03-26"));
  CHECK_FALSE(rtx::evolve::mcp_accepts_batches("2024-11-05"));
}

TEST_CASE("evolve mcp: list_benchmarks and get_baseline", "[cpu]") {
  Fixture f;
  McpServer srv(f.st, f.opts());
  const std::string pack = rtx::test::source_dir() + "/benchpacks/core.json";

  // The whole default pack, as expand_pack gives it.
  const json all = ok(one(srv, call(1, "list_benchmarks", json::object())));
  const auto expected = rtx::app::bench::expand_pack(rtx::app::bench::load_pack(pack), rtx::app::bench::registry(), {});
  REQUIRE(all["cases"].size() == expected.size());
  size_t skipped = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    CHECK(all["cases"][i]["id"] == expected[i].id);
    CHECK(all["cases"][i]["op"] == expected[i].op);
    CHECK(all["cases"][i]["shape"] == json(expected[i].shape));
    CHECK(all["cases"][i]["runnable"] == expected[i].skip_reason.empty());
    CHECK(all["cases"][i]["skip_reason"] == expected[i].skip_reason);
    skipped += !expected[i].skip_reason.empty();
  }
  CHECK(all["skipped"] == skipped);
  CHECK(all["runnable"] == expected.size() - skipped);
  CHECK(all["pack"] == pack);

  const json mm = ok(one(srv, call(2, "list_benchmarks", {{"pack", pack}, {"filter", "^matmul_fwd_small/.*N=65/"}})));
  REQUIRE(mm["cases"].size() >= 1);
  for (const auto& c : mm["cases"]) CHECK(c["op"] == "matmul_forward");
  CHECK_THAT(tool_error(one(srv, call(3, "list_benchmarks", {{"pack", f.dir + "/missing.json"}}))), Catch::Contains("missing.json"));
  CHECK_THAT(tool_error(one(srv, call(4, "list_benchmarks", {{"filter", "(unclosed"}}))), Catch::Contains("filter"));

  // A config key with nothing promoted: the built-in defaults.
  const std::string pkey = rtx::evolve::config_key("parallelism", f.sku);
  const json b = ok(one(srv, call(5, "get_baseline", {{"key", pkey}})));
  CHECK(b["sku"] == f.sku);
  CHECK(b["key"]["version"] == nullptr);
  CHECK(b["key"]["domain"] == "parallelism");
  CHECK(b["key"]["config"] == json{{"threads", omp_get_max_threads()}, {"dp_bucket_mb", 25.0}});

  // Two recorded bench results of a case: the later one is the baseline.
  const std::string case_id = "mm_small/cpu.blocked/K=128,M=64,N=65/f32";
  // A newer row of an evolve candidate arm is not the baseline (what runs here) and is skipped.
  for (int i = 0; i < 3; ++i) {
    const int64_t run = f.st.begin_run(i < 2 ? "rtx-bench" : "rtx-evolve", "[]", 0, "sha", f.sku, "{}");
    auto& q = f.st.prepare(
        "INSERT INTO bench_results (run_id, case_name, op, variant, backend, shape, dtype, params_json, median_s, ci_lo_s, "
        "ci_hi_s, n, created_at) VALUES (?1, ?2, 'matmul_forward', 'cpu.blocked', 'cpu', 'K=128,M=64,N=65', 'f32', ?8, ?3, ?4, ?5, ?6, ?7)");
    q.bind(1, run).bind(2, case_id).bind(3, 1e-3 * (i + 1)).bind(4, 0.9e-3 * (i + 1)).bind(5, 1.1e-3 * (i + 1)).bind(6, 10 + i);
    q.bind(7, i == 0 ? "2026-01-01T00:00:00.000Z" : i == 1 ? "2026-02-01T00:00:00.000Z" : "2026-03-01T00:00:00.000Z");
    q.bind(8, i < 2 ? "{}" : R"({"rtx_evolve": {"arm": "candidate", "proposal_id": 1}})");
    q.run();
  }
  const json c = ok(one(srv, call(6, "get_baseline", {{"case", case_id}})));
  REQUIRE(c["case"]["latest"].is_object());
  CHECK(c["case"]["results_recorded"] == 2);
  CHECK(c["case"]["latest"]["median_s"].get<double>() == Approx(2e-3));
  CHECK(c["case"]["latest"]["ci95_s"][0].get<double>() == Approx(1.8e-3));
  CHECK(c["case"]["latest"]["ci95_s"][1].get<double>() == Approx(2.2e-3));
  CHECK(c["case"]["latest"]["n"] == 11);
  CHECK(c["case"]["latest"]["when"] == "2026-02-01T00:00:00.000Z");
  CHECK(c["case"]["latest"]["source"] == "rtx-bench");
  CHECK(c["case"]["latest"]["run_id"].get<int64_t>() > 0);
  // ... and the kernel profile in force for its key here: the variant defaults.
  const auto& var = rtx::app::bench::registry().variant("matmul_forward", "cpu.blocked");
  CHECK(c["case"]["profile"]["config"] == json(var.space.defaults()));
  CHECK(c["case"]["profile"]["key"] == "matmul_forward|cpu.blocked|K=128,M=64,N=65|f32|cpu|" + f.sku);
  CHECK(c["case"]["profile"]["version"] == nullptr);

  CHECK(c["case"]["contended_skipped"] == 0);
  CHECK(c["case"]["latest"]["contended"] == false);
  CHECK(c["case"]["latest"]["contention_reason"] == "");

  // A newer rtx-bench result measured on a busy host is skipped by default and counted.
  {
    const int64_t run = f.st.begin_run("rtx-bench", "[]", 0, "sha", f.sku, "{}");
    auto& q = f.st.prepare(
        "INSERT INTO bench_results (run_id, case_name, op, variant, backend, shape, dtype, median_s, n, created_at, "
        "contended, contention_reason) VALUES (?1, ?2, 'matmul_forward', 'cpu.blocked', 'cpu', 'K=128,M=64,N=65', 'f32', "
        "9e-3, 12, '2026-04-01T00:00:00.000Z', 1, 'measuring thread ran 43% of the window')");
    q.bind(1, run).bind(2, case_id);
    q.run();
  }
  const json busy = ok(one(srv, call(12, "get_baseline", {{"case", case_id}})));
  CHECK(busy["case"]["results_recorded"] == 3);
  CHECK(busy["case"]["contended_recorded"] == 1);
  CHECK(busy["case"]["contended_skipped"] == 1);
  CHECK(busy["case"]["include_contended"] == false);
  CHECK(busy["case"]["latest"]["median_s"].get<double>() == Approx(2e-3));
  CHECK(busy["case"]["latest"]["contended"] == false);
  CHECK_THAT(busy["case"]["note"].get<std::string>(),
             Catch::Contains("skipped 1 newer busy-host result") && Catch::Contains("43% of the window"));
  // Opt in: the busy one is the latest, marked.
  const json with = ok(one(srv, call(13, "get_baseline", {{"case", case_id}, {"include_contended", true}})));
  CHECK(with["case"]["contended_skipped"] == 0);
  CHECK(with["case"]["latest"]["median_s"].get<double>() == Approx(9e-3));
  CHECK(with["case"]["latest"]["contended"] == true);
  CHECK(with["case"]["latest"]["contention_reason"] == "measuring thread ran 43% of the window");
  CHECK(error_code(one(srv, call(14, "get_baseline", {{"case", case_id}, {"include_contended", "yes"}}))) == -32602);
  // include_contended filters bench results: with only a key (a profile, no measurements) it is
  // refused by the input schema (dependentRequired), whatever its value, not silently ignored.
  for (const bool v : {true, false}) {
    const json r = one(srv, call(15, "get_baseline", {{"key", pkey}, {"include_contended", v}}));
    CHECK(error_code(r) == -32602);
    CHECK_THAT(r["error"]["message"].get<std::string>(),
               Catch::Contains("argument 'include_contended' requires argument 'case' (missing)"));
  }
  const json both = ok(one(srv, call(16, "get_baseline", {{"key", pkey}, {"case", case_id}, {"include_contended", true}})));
  CHECK(both["case"]["latest"]["contended"] == true);
  CHECK(both.contains("key"));
  {
    json in;
    for (const auto& t : McpServer::tool_definitions())
      if (t["name"] == "get_baseline") in = t["inputSchema"];
    CHECK(in["dependentRequired"] == json{{"include_contended", {"case"}}});
    CHECK_THAT(in["properties"]["include_contended"]["description"].get<std::string>(), Catch::Contains("without case is refused"));
    // The validator's keyword on its own: nested objects name the full path.
    const json dep = {{"type", "object"}, {"properties", {{"o", {{"type", "object"}, {"dependentRequired", {{"a", {"b"}}}}}}}}};
    CHECK(rtx::evolve::mcp_schema_problem(dep, {{"o", {{"a", 1}, {"b", 2}}}}) == "");
    CHECK(rtx::evolve::mcp_schema_problem(dep, {{"o", {{"b", 2}}}}) == "");
    CHECK(rtx::evolve::mcp_schema_problem(dep, {{"o", {{"a", 1}}}}) == "argument 'o.a' requires argument 'o.b' (missing)");
  }
  // The replies agree with the tool's outputSchema.
  json schema;
  for (const auto& t : McpServer::tool_definitions())
    if (t["name"] == "get_baseline") schema = t["outputSchema"];
  REQUIRE(schema.is_object());
  CHECK(rtx::evolve::mcp_schema_problem(schema, busy) == "");
  CHECK(rtx::evolve::mcp_schema_problem(schema, with) == "");
  CHECK(rtx::evolve::mcp_schema_problem(schema, c) == "");

  const json none = ok(one(srv, call(7, "get_baseline", {{"case", "nope/x/N=1/f32"}})));
  CHECK(rtx::evolve::mcp_schema_problem(schema, none) == "");
  CHECK(none["case"]["contended_skipped"] == 0);
  CHECK(none["case"]["latest"] == nullptr);
  CHECK(none["case"]["results_recorded"] == 0);
  CHECK_THAT(tool_error(one(srv, call(8, "get_baseline", {{"key", "garbage"}}))), Catch::Contains("garbage"));
  CHECK_THAT(tool_error(one(srv, call(9, "get_baseline", {{"key", "astrology|" + f.sku}}))), Catch::Contains("astrology"));
  CHECK(error_code(one(srv, call(10, "get_baseline", json::object()))) == -32602);
  CHECK(error_code(one(srv, call(11, "get_baseline", {{"key", 7}}))) == -32602);

  // A row changed outside rtx with params_json that is not JSON: a tool error naming it, not
  // -32603 with raw SQL ("malformed JSON" from json_extract).
  f.st.exec("INSERT INTO runs (tool) VALUES ('rtx-bench')");
  f.st.exec("PRAGMA ignore_check_constraints = ON");  // the schema's json_valid CHECK, as a hand-made table lacks it
  f.st.exec("INSERT INTO bench_results (run_id, case_name, op, variant, backend, shape, dtype, params_json, median_s) "
            "VALUES (last_insert_rowid(), 'bad/params', 'gelu', 'cpu.ref', 'cpu', 'N=4', 'f32', 'not json', 1e-3)");
  f.st.exec("PRAGMA ignore_check_constraints = OFF");
  CHECK_THAT(tool_error(one(srv, call(17, "get_baseline", {{"case", "bad/params"}}))),
             Catch::Contains("stored params_json is unreadable"));
}

TEST_CASE("evolve mcp: submit_proposal, proposal_status, query_knowledge", "[cpu]") {
  Fixture f;
  McpServer srv(f.st, f.opts());

  // A valid proposal is stored, re-based and signed with the store's key, status new.
  const json sub = ok(one(srv, call(1, "submit_proposal", {{"proposal", memory_proposal(f.sku, 1 << 20)}})));
  const int64_t id = sub["id"];
  CHECK(id > 0);
  CHECK(sub["status"] == "new");
  CHECK(sub["validated"] == false);
  const rtx::evolve::Proposal p = rtx::evolve::load_proposal(f.st, id);
  CHECK(rtx::evolve::verify(p, f.key).empty());
  CHECK(p.changeset["candidate"]["small_segment_bytes"] == 1 << 20);
  CHECK(p.plan["submitted_from"] == "mcp submit_proposal");

  // Read it back.
  const json reply = one(srv, call(2, "proposal_status", {{"id", id}}));
  const json st = ok(reply);
  CHECK(st["id"] == id);
  CHECK(st["status"] == "new");
  CHECK(st["domain"] == "memory");
  CHECK(st["key"] == rtx::evolve::config_key("memory", f.sku));
  CHECK(st["gates"] == json::array());
  CHECK(st["approve"] == "");
  CHECK(st["rollback"] == "");
  REQUIRE(reply["result"]["content"].size() == 2);  // JSON, then the `rtx-evolve status` lines
  CHECK_THAT(reply["result"]["content"][1]["text"].get<std::string>(), Catch::Contains("#" + std::to_string(id) + " new: [memory]"));

  // Gates recorded by a validation show with their numbers; a failed gate is what the knowledge graph reports.
  rtx::evolve::GateResult g;
  g.gate = "performance";
  g.passed = false;
  g.metric = "improvement_lo_frac";
  g.value = -0.031;
  g.threshold = 0.10;
  g.detail = {{"reason", "CI lower bound -3.1% below the 10% threshold"}};
  rtx::evolve::record_gates(f.st, id, 0, {g});
  rtx::evolve::set_status(f.st, id, "failed");
  const json st2 = ok(one(srv, call(3, "proposal_status", {{"id", id}})));
  CHECK(st2["status"] == "failed");
  REQUIRE(st2["gates"].size() == 1);
  CHECK(st2["gates"][0]["gate"] == "performance");
  CHECK(st2["gates"][0]["passed"] == false);
  CHECK(st2["gates"][0]["value"].get<double>() == Approx(-0.031));
  CHECK(st2["gates"][0]["threshold"].get<double>() == Approx(0.10));
  CHECK_THAT(st2["gates"][0]["reason"].get<std::string>(), Catch::Contains("threshold"));

  const json kq = ok(one(srv, call(4, "query_knowledge", {{"question", "failed"}, {"domain", "memory"}, {"limit", 5}})));
  const json direct = rtx::evolve::kg_query(f.st, rtx::evolve::KgQuery{"failed", "", "", "", "memory", 5});
  CHECK(kq == direct);
  REQUIRE(kq["rows"].size() == 1);
  CHECK(kq["rows"][0]["proposal_id"] == id);
  CHECK(kq["rows"][0]["gate"] == "performance");
  const json none = ok(one(srv, call(5, "query_knowledge", {{"question", "improved"}})));
  CHECK(none["rows"] == json::array());
  CHECK(error_code(one(srv, call(6, "query_knowledge", {{"question", "failed"}, {"limit", 0}}))) == -32602);
  CHECK(error_code(one(srv, call(7, "query_knowledge", {{"limit", 3}}))) == -32602);

  // Malformed proposals are tool errors naming the reason, and nothing is stored.
  CHECK_THAT(tool_error(one(srv, call(8, "submit_proposal", {{"proposal", {{"schema", "rtx.proposal.v9"}}}}))), Catch::Contains("schema"));
  json other_sku = memory_proposal(f.sku, 1 << 19);
  other_sku["key"] = "memory|cpu:some-other-host";
  CHECK_THAT(tool_error(one(srv, call(9, "submit_proposal", {{"proposal", other_sku}}))), Catch::Contains("config key must be"));
  json bad_knob = memory_proposal(f.sku, 1 << 19);
  bad_knob["changeset"]["candidate"]["warp_drive"] = 9;
  CHECK_THAT(tool_error(one(srv, call(10, "submit_proposal", {{"proposal", bad_knob}}))), Catch::Contains("warp_drive"));
  CHECK(rtx::evolve::list_proposals(f.st, "", 100).size() == 1);
  CHECK(error_code(one(srv, call(11, "submit_proposal", {{"proposal", "{}"}}))) == -32602);
  CHECK(error_code(one(srv, call(12, "submit_proposal", {{"proposal", json::object()}, {"validate", "yes"}}))) == -32602);
  CHECK(error_code(one(srv, call(13, "submit_proposal", {{"proposal", json::object()}, {"rounds", 1}}))) == -32602);

  // No proposal 99999: a tool error naming it.
  CHECK_THAT(tool_error(one(srv, call(14, "proposal_status", {{"id", 99999}}))), Catch::Contains("99999"));

  // Without a signing key, submit is a tool error that says how to make one.
  rtx::evolve::McpOptions o = f.opts();
  o.key_path = f.dir + "/no-such.key";
  McpServer nokey(f.st, o);
  CHECK_THAT(tool_error(one(nokey, call(1, "submit_proposal", {{"proposal", memory_proposal(f.sku, 1 << 18)}}))),
             Catch::Contains("keygen"));
}

TEST_CASE("evolve mcp: a session through the rtx-evolve binary, with a validated proposal", "[cpu]") {
  Fixture f;
  const std::string sess = f.dir + "/session.jsonl";
  {
    std::ofstream s(sess);
    s << init(1) << "\n" << kInitialized << "\n" << req(2, "tools/list") << "\n"
      << call(3, "submit_proposal", {{"proposal", memory_proposal(f.sku, 1 << 20)}, {"validate", true}, {"rounds", 2}}) << "\n"
      << call(4, "proposal_status", {{"id", 1}}) << "\n"
      << call(5, "get_baseline", {{"key", rtx::evolve::config_key("memory", f.sku)}}) << "\n"
      << "not json\n"
      << req(6, "no/such/method") << "\n";
  }
  // The subshell's own redirection feeds the session (run() gives the command </dev/null).
  auto r = rtx::test::run("(" + rtx::test::tool_path("rtx-evolve") + " --db " + f.db + " mcp --timeout 60 < " + sess + ")");
  INFO(r.out << "\n--- stderr ---\n" << r.err);
  REQUIRE(r.exit_code == 0);  // end of input ends the server cleanly
  CHECK_THAT(r.err, Catch::Contains("serving"));
  // stdout carries protocol messages only: every line a JSON-RPC 2.0 reply, in order.
  std::vector<json> replies;
  std::istringstream rd(r.out);
  for (std::string l; std::getline(rd, l);) {
    const json j = json::parse(l);
    CHECK(j["jsonrpc"] == "2.0");
    replies.push_back(j);
  }
  REQUIRE(replies.size() == 7);
  CHECK(replies[0]["id"] == 1);
  CHECK(replies[0]["result"]["serverInfo"]["name"] == "rtx-evolve");
  CHECK(replies[1]["result"]["tools"].size() == 5);
  const json sub = ok(replies[2]);
  CHECK(sub["id"] == 1);
  CHECK(sub["validated"] == true);
  CHECK((sub["status"] == "passed" || sub["status"] == "failed"));
  std::vector<std::string> gates;
  for (const auto& g : sub["gates"]) gates.push_back(g["gate"]);
  for (const char* want : {"safety", "determinism", "performance", "memory"})
    CHECK(std::find(gates.begin(), gates.end(), want) != gates.end());
  const json st = ok(replies[3]);
  CHECK(st["status"] == sub["status"]);
  CHECK(st["gates"].size() == sub["gates"].size());
  CHECK(st["approve"] == (sub["status"] == "passed" ? "rtx-evolve approve 1" : ""));
  CHECK(ok(replies[4])["key"]["domain"] == "memory");
  CHECK(replies[5]["id"] == nullptr);
  CHECK(error_code(replies[5]) == -32700);
  CHECK(replies[6]["id"] == 6);
  CHECK(error_code(replies[6]) == -32601);
}

TEST_CASE("evolve mcp: pack paths from an agent are bounded (devices, FIFOs, huge files, empty path)", "[cpu]") {
  Fixture f;
  McpServer srv(f.st, f.opts());
  auto refused = [&](const std::string& pack) { return tool_error(one(srv, call(1, "list_benchmarks", {{"pack", pack}}))); };
  // /dev/zero used to be read without bound (10 GB RSS): refused without reading.
  std::string e = refused("/dev/zero");
  CHECK_THAT(e, Catch::Contains("/dev/zero") && Catch::Contains("not a regular file"));
  // A FIFO without a writer: refused at once, not waited on.
  const std::string fifo = f.dir + "/pack.fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THAT(refused(fifo), Catch::Contains(fifo) && Catch::Contains("not a regular file"));
  // A regular file over 64 MiB (sparse: no disk used) is refused by its size; 64 MiB exactly is
  // read (then fails as JSON: it is all zero bytes).
  const std::string big = f.dir + "/big.json";
  { std::ofstream create(big); }
  REQUIRE(::truncate(big.c_str(), (off_t{64} << 20) + 1) == 0);
  CHECK_THAT(refused(big), Catch::Contains(big) && Catch::Contains("larger than 64 MiB"));
  REQUIRE(::truncate(big.c_str(), off_t{64} << 20) == 0);
  e = refused(big);
  CHECK_THAT(e, Catch::Contains(big));
  CHECK_THAT(e, !Catch::Contains("larger than"));
  CHECK_THAT(refused(""), Catch::Contains("path is empty"));
  CHECK_THAT(refused(f.dir), Catch::Contains("is a directory"));
  // A regular pack still lists.
  CHECK(ok(one(srv, call(2, "list_benchmarks", {{"pack", rtx::test::source_dir() + "/benchpacks/smoke.json"}})))["cases"].size() >= 1);
}

TEST_CASE("evolve mcp: proposal ids outside int64 or below 1 are invalid params", "[cpu]") {
  Fixture f;
  McpServer srv(f.st, f.opts());
  for (const char* id : {"18446744073709551615", "9223372036854775808", "0", "-1", "-9223372036854775808", "1e30", "0.5"}) {
    INFO(id);
    const json r = one(srv, std::string(R"({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"proposal_status","arguments":{"id":)") +
                                id + "}}}");
    CHECK(r["id"] == 7);
    CHECK(error_code(r) == -32602);
  }
  const json big = one(srv, R"({"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"proposal_status","arguments":{"id":18446744073709551615}}})");
  CHECK_THAT(big["error"]["message"].get<std::string>(), Catch::Contains("signed 64-bit"));
  // The largest int64 passes the schema: a tool error (no such proposal), not a protocol error.
  CHECK_THAT(tool_error(one(srv, call(9, "proposal_status", {{"id", INT64_MAX}}))), Catch::Contains("9223372036854775807"));
}

TEST_CASE("evolve mcp: long and deeply nested messages are refused without exhausting memory", "[cpu]") {
  Fixture f;
  rtx::evolve::McpOptions o = f.opts();
  // The default cap: a 16 MiB + 1 line is refused and skipped; the next message is answered.
  {
    McpServer srv(f.st, o);
    const std::string huge = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"x\":\"" +
                             std::string((size_t{16} << 20) - 40, 'a') + "\"}}";
    REQUIRE(huge.size() > (size_t{16} << 20));
    const auto r = session(srv, {huge, req(2, "ping")});
    REQUIRE(r.size() == 2);
    CHECK(r[0]["id"] == nullptr);
    CHECK(error_code(r[0]) == -32600);
    CHECK_THAT(r[0]["error"]["message"].get<std::string>(), Catch::Contains("message longer than 16 MiB"));
    CHECK(r[1]["id"] == 2);
    CHECK(r[1]["result"] == json::object());
  }
  o.max_message_bytes = 64;
  McpServer srv(f.st, o);
  const std::string at_limit = req(3, "ping");  // 46 bytes
  REQUIRE(at_limit.size() <= 64);
  const auto r = session(srv, {std::string(65, ' ') + at_limit, at_limit, "", std::string(1000, '['), req(4, "ping")});
  REQUIRE(r.size() == 4);
  CHECK(error_code(r[0]) == -32600);
  CHECK_THAT(r[0]["error"]["message"].get<std::string>(), Catch::Contains("longer than 64 bytes"));
  CHECK(r[1]["id"] == 3);
  CHECK(error_code(r[2]) == -32600);
  CHECK(r[3]["id"] == 4);

  // Nesting: 5 M deep used ~400 MB; now refused as a parse error before parsing. 512 levels
  // are accepted; brackets inside strings (with escaped quotes) do not count.
  McpServer deep(f.st, f.opts());
  session(deep, {init("init"), kInitialized});
  auto nested = [](size_t n) { return std::string(n, '[') + std::string(n, ']'); };
  const auto d = session(deep, {std::string(5'000'000, '['),
                                R"({"jsonrpc":"2.0","id":5,"method":"ping","params":{"x":)" + nested(510) + "}}",
                                R"({"jsonrpc":"2.0","id":6,"method":"ping","params":{"x":)" + nested(511) + "}}",
                                R"({"jsonrpc":"2.0","id":7,"method":"ping","params":{"x":"\"[)" + std::string(100000, '[') + "\"}}"});
  REQUIRE(d.size() == 4);
  CHECK(error_code(d[0]) == -32700);
  CHECK_THAT(d[0]["error"]["message"].get<std::string>(), Catch::Contains("deeper than 512"));
  CHECK(d[1]["id"] == 5);  // 1 + 1 + 510 = 512 levels
  CHECK(d[1]["result"] == json::object());
  CHECK(error_code(d[2]) == -32700);  // 513 levels
  CHECK(d[3]["id"] == 7);
  CHECK(d[3]["result"] == json::object());
}

TEST_CASE("evolve mcp: a closed stdout ends the server with exit 3, not SIGPIPE", "[cpu]") {
  Fixture f;
  // In process: a reply that cannot be written is an Environment error.
  {
    McpServer srv(f.st, f.opts());
    std::istringstream in(req(1, "ping") + "\n");
    std::ostringstream out;
    out.setstate(std::ios::badbit);
    try {
      srv.serve(in, out);
      FAIL("serve did not throw");
    } catch (const rtx::Error& e) {
      CHECK(e.category() == rtx::ErrorCategory::Environment);
      CHECK_THAT(std::string(e.what()), Catch::Contains("stdout closed"));
    }
  }
  // The binary: the reader of its stdout exits before the reply is written (EPIPE).
  const std::string rc = f.dir + "/rc";
  auto r = rtx::test::run("( (sleep 0.5; echo '" + req(1, "ping") + "') | { " + rtx::test::tool_path("rtx-evolve") + " --db " +
                          f.db + " mcp; echo $? > " + rc + "; } | true )");
  std::ifstream in(rc);
  int code = -1;
  in >> code;
  INFO(r.err);
  CHECK(code == 3);
  CHECK_THAT(r.err, Catch::Contains("stdout closed"));
}

TEST_CASE("evolve mcp: the schema checker and io::validate agree on JSON Schema's integer", "[cpu]") {
  // One rule (io::json_is_integer): 3 and 3.0 are integers (JSON Schema draft 6+), 3.5 is not;
  // the MCP checker adds only the tool bodies' int64 bound.
  const json schema = {{"type", "integer"}};
  for (const json& v : {json(3), json(3.0), json(-0.0), json(1e2), json(3.5), json("3"), json(nullptr)}) {
    INFO(v.dump());
    const bool io_ok = rtx::io::json_type_matches(v, rtx::io::JsonType::Integer);
    CHECK(io_ok == (rtx::evolve::mcp_schema_problem(schema, v, "n") == ""));
  }
  CHECK(rtx::evolve::mcp_schema_problem(schema, json(3.0), "n") == "");
  CHECK(rtx::evolve::mcp_schema_problem(schema, json(3.5), "n") == "argument 'n': expected integer, got number");
  CHECK(rtx::evolve::mcp_schema_problem(schema, json(1e19), "n") == "argument 'n': expected integer, got number");
}
