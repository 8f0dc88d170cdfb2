// Fuzz target: bench packs (rtx.benchpack.v1): rtx::app::bench::parse_pack on any JSON document,
// then expand_pack over this build's op registry (lenient and strict). Bytes that are not JSON
// are nlohmann's to reject (load_pack maps that to Error(Input)); they end the input here.
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_util.hpp"
#include "rtx/app/bench.hpp"
#include "rtx/core/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace bench = rtx::app::bench;
  const nlohmann::json doc = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return 0;
  try {
    const bench::Pack pack = bench::parse_pack(doc, "fuzz.json");
    std::set<std::string> names;
    for (const auto& c : pack.cases) {
      RTX_FUZZ_CHECK(!c.name.empty(), "empty case name accepted");
      RTX_FUZZ_CHECK(names.insert(c.name).second, "duplicate case name accepted: " + c.name);
      for (unsigned char ch : c.name) RTX_FUZZ_CHECK(ch >= 0x20 && ch != 0x7f && ch != '/', "bad name char");
      RTX_FUZZ_CHECK(!c.dtypes.empty(), "case without dtypes: " + c.name);
    }
    if (pack.run.rounds) RTX_FUZZ_CHECK(*pack.run.rounds >= 1 && *pack.run.rounds <= rtx::app::bench::kMaxRounds, "rounds out of range");
    for (bool strict : {false, true}) {
      bench::ExpandOptions o;
      o.strict = strict;
      o.max_bytes = 64.0 * 1024 * 1024;  // expansion only: nothing is allocated or run
      try {
        const auto cases = bench::expand_pack(pack, rtx::app::bench::registry(), o);
        std::set<std::string> ids;
        for (const auto& bc : cases) RTX_FUZZ_CHECK(ids.insert(bc.id).second, "duplicate case id " + bc.id);
      } catch (const rtx::Error&) {
      }
    }
  } catch (const rtx::Error&) {
  }
  return 0;
}
