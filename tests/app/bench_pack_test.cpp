// Bench packs: parse errors name pack, case and field; expansion over variants/shapes/dtypes
// with skip reasons (unregistered op, other backend, unsupported dtype, validate()); the
// shipped packs (benchpacks/smoke.json, core.json) parse and expand on the real registry.
#include <catch2/catch.hpp>

#include "rtx/app/bench.hpp"
#include "rtx/core/error.hpp"
#include "test_util.hpp"

using namespace rtx;
using namespace rtx::app::bench;
using nlohmann::json;

kernels::Registry synth_registry();  // bench_synth.cpp

namespace {

json pack_with(json cases) {
  return {{"schema", "rtx.benchpack.v1"}, {"name", "t"}, {"cases", cases}};
}

/// The message of the Error `f` throws ("" if none).
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

json spin(const std::string& name) {
  return {{"name", name}, {"op", "synth_spin"}, {"shape", {{"US", 1}, {"NOISE", 1}, {"SLOW", 0}}}};
}

}  // namespace

TEST_CASE("pack parse errors name the case and the field", "[cpu]") {
  auto msg = [](json doc) { return error_of([&] { parse_pack(doc, "p.json"); }); };
  json c = spin("mm");
  c["shape"]["US"] = -3;
  std::string m = msg(pack_with({c}));
  CHECK(m.find("p.json") != std::string::npos);
  CHECK(m.find("case 'mm'") != std::string::npos);
  CHECK(m.find("field 'shape'") != std::string::npos);
  CHECK(m.find("-3") != std::string::npos);

  c = spin("mm");
  c["shpae"] = 1;
  CHECK(msg(pack_with({c})).find("field 'shpae'") != std::string::npos);
  c = spin("mm");
  c["dtype"] = "f33";
  CHECK(msg(pack_with({c})).find("unknown dtype 'f33'") != std::string::npos);
  c = spin("mm");
  c["shape"]["US"] = "big";
  CHECK(msg(pack_with({c})).find("must be an integer") != std::string::npos);
  c = spin("mm");
  c.erase("shape");
  CHECK(msg(pack_with({c})).find("field 'shapes'") != std::string::npos);
  c = spin("mm");
  c["backend"] = "tpu";
  CHECK(msg(pack_with({c})).find("unknown backend 'tpu'") != std::string::npos);
  c = spin("mm");
  c["params"] = {{"P", 1.5}};
  CHECK(msg(pack_with({c})).find("field 'params.P'") != std::string::npos);
  CHECK(msg(pack_with({spin("a"), spin("a")})).find("duplicate") != std::string::npos);
  CHECK(msg(pack_with(json::object())).find("field 'cases'") != std::string::npos);
  CHECK(msg({{"schema", "rtx.bench.v1"}, {"cases", json::array()}}).find("field 'schema'") != std::string::npos);
  CHECK(msg(json::array()).find("JSON object") != std::string::npos);
  json d = pack_with({spin("a")});
  d["defaults"] = {{"max_time", -1}};
  CHECK(msg(d).find("defaults/max_time") != std::string::npos);
  CHECK(msg(pack_with({spin("a")})).empty());
}

TEST_CASE("shapes: objects, strings, lists and sweeps", "[cpu]") {
  json c = {{"name", "s"}, {"op", "synth_spin"},
            {"shapes", {{{"US", 1}, {"NOISE", 1}, {"SLOW", 0}}, "2x1", {{"sweep", {{"US", {3, 4}}, {"NOISE", {1, 2, 3}}, {"SLOW", 0}}}}}},
            {"dtypes", {"f32", "bf16"}}};
  const Pack p = parse_pack(pack_with({c}), "p.json");
  REQUIRE(p.cases.size() == 1);
  CHECK(p.cases[0].shapes.size() == 1 + 1 + 6);
  const auto reg = synth_registry();
  const auto cases = expand_pack(p, reg, {});
  CHECK(cases.size() == 8 * 2);
  for (const auto& x : cases) CHECK(x.skip_reason.empty());
  CHECK(cases[2].shape.at("US") == 2);  // "2x1" in dims order US,NOISE
  CHECK(cases[0].id == "s/cpu.spin/NOISE=1,SLOW=0,US=1/f32");
  CHECK(cases[0].params.at("P") == 1);  // the variant's default
  // filter
  ExpandOptions o;
  o.filter = "US=4.*bf16";
  CHECK(expand_pack(p, reg, o).size() == 3);
  o.filter = "([";
  CHECK_THROWS_AS(expand_pack(p, reg, o), Error);
  // a shape missing one of the op's dims is skipped with the reason; --strict: an input
  // error naming pack, case and field
  c["shapes"] = {{{"US", 1}, {"SLOW", 1}}};
  const auto skipped = expand_pack(parse_pack(pack_with({c}), "p.json"), reg, {});
  REQUIRE(skipped.size() == 2);
  CHECK(skipped[0].skip_reason.find("no dim NOISE") != std::string::npos);
  ExpandOptions strict;
  strict.strict = true;
  const std::string m = error_of([&] { expand_pack(parse_pack(pack_with({c}), "p.json"), reg, strict); });
  CHECK(m.find("p.json: case 's': field 'shapes[0]'") != std::string::npos);
  CHECK(m.find("NOISE") != std::string::npos);
  c["shapes"] = {"1x2x3"};
  CHECK(error_of([&] { expand_pack(parse_pack(pack_with({c}), "p.json"), reg, {}); }).find("shapes[0]") != std::string::npos);
}

TEST_CASE("expansion skips what cannot run, with the reason", "[cpu]") {
  const auto reg = synth_registry();
  json cases = json::array();
  cases.push_back({{"name", "nope"}, {"op", "flash_attention_v9"}, {"shape", {{"N", 1}}}});
  cases.push_back({{"name", "gpu"}, {"op", "synth_cuda_only"}, {"shape", {{"N", 1}}}});
  cases.push_back({{"name", "gpuvar"}, {"op", "synth_spin"}, {"variant", "cuda.tiled"}, {"shape", {{"US", 1}, {"NOISE", 1}, {"SLOW", 0}}}});
  cases.push_back({{"name", "picky"}, {"op", "synth_picky"}, {"shapes", {{{"N", 3}}, {{"N", 4}}}}, {"dtypes", {"f32", "bf16"}}});
  cases.push_back({{"name", "param"}, {"op", "synth_spin"}, {"params", {{"Q", 3}}}, {"shape", {{"US", 1}, {"NOISE", 1}, {"SLOW", 0}}}});
  cases.push_back({{"name", "cudacase"}, {"op", "synth_spin"}, {"backend", "cuda"}, {"shape", {{"US", 1}, {"NOISE", 1}, {"SLOW", 0}}}});
  const Pack p = parse_pack(pack_with(cases), "p.json");
  const auto x = expand_pack(p, reg, {});
  REQUIRE(x.size() == 1 + 1 + 1 + 4 + 1 + 1);
  CHECK(x[0].skip_reason.find("not registered") != std::string::npos);
  CHECK(x[0].skip_reason.find("synth_spin") != std::string::npos);  // lists known ops
  CHECK(x[1].skip_reason.find("no cpu variant") != std::string::npos);
  CHECK(x[2].skip_reason.find("backend cuda") != std::string::npos);
  CHECK(x[3].skip_reason == "N must be even");                 // validate(), N=3 f32
  CHECK(x[4].skip_reason.find("does not support bf16") != std::string::npos);
  CHECK(x[5].skip_reason.empty());                              // N=4 f32 runs
  CHECK(x[7].skip_reason.find("no parameter 'Q'") != std::string::npos);
  CHECK(x[8].skip_reason.find("not for backend cpu") != std::string::npos);
  // strict: an unknown op is an error listing the known ops
  ExpandOptions o;
  o.strict = true;
  const std::string m = error_of([&] { expand_pack(p, reg, o); });
  CHECK(m.find("case 'nope'") != std::string::npos);
  CHECK(m.find("field 'op'") != std::string::npos);
  // an unknown variant of a registered op on this backend is an error naming the variants
  json bad = pack_with({{{"name", "v"}, {"op", "synth_spin"}, {"variant", "cpu.fast"}, {"shape", {{"US", 1}, {"NOISE", 1}, {"SLOW", 0}}}}});
  const std::string mv = error_of([&] { expand_pack(parse_pack(bad, "p.json"), reg, {}); });
  CHECK(mv.find("field 'variant'") != std::string::npos);
  CHECK(mv.find("cpu.fast") != std::string::npos);
}

TEST_CASE("the shipped packs parse and expand on this build's registry", "[cpu]") {
  for (const char* name : {"smoke.json", "core.json"}) {
    INFO(name);
    const Pack p = load_pack(test::source_dir() + "/benchpacks/" + name);
    CHECK(!p.cases.empty());
    const auto cases = expand_pack(p, rtx::app::bench::registry(), {});
    CHECK(cases.size() >= p.cases.size());
    for (const auto& c : cases) {
      INFO(c.id);
      if (c.skip_reason.empty()) CHECK(rtx::app::bench::registry().find(c.op) != nullptr);
    }
  }
  const Pack core = load_pack(test::source_dir() + "/benchpacks/core.json");
  bool qkv = false;
  for (const auto& c : core.cases)
    for (const auto& s : c.shapes) qkv |= c.op == "matmul_forward" && s.value("M", 0) == 4096 && s.value("N", 0) == 2304 && s.value("K", 0) == 768;
  CHECK(qkv);
  CHECK_THROWS_AS(load_pack(test::source_dir() + "/benchpacks/nonexistent.json"), Error);
}
