// Fuzz target: `rtx.profile.v1` import (rtx::tune::import_profiles, what `rtx-tune import` runs)
// on any JSON document, into an in-memory store. An accepted document's entries must be the
// store's current profiles afterwards; a refused one must leave the store unchanged.
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_util.hpp"
#include "rtx/core/error.hpp"
#include "rtx/kernels/registry.hpp"
#include "rtx/store/store.hpp"
#include "rtx/tune/records.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json doc = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return 0;
  // One in-memory store per process, replaced after every accepted import so it stays small.
  static std::unique_ptr<rtx::store::Store> st;
  if (!st) st = std::make_unique<rtx::store::Store>(":memory:");
  try {
    const rtx::tune::ImportResult r = rtx::tune::import_profiles(*st, doc, "fuzz.json", /*force=*/true);
    const auto cur = rtx::tune::current_profiles(*st);
    RTX_FUZZ_CHECK(r.imported + r.unchanged == doc.at("entries").size(), "entry count");
    std::map<std::string, rtx::kernels::Params> by_key;
    for (const auto& e : cur) by_key[e.key] = e.params;
    for (const auto& e : doc.at("entries")) {
      const std::string key = e.at("key").get<std::string>();
      auto it = by_key.find(key);
      RTX_FUZZ_CHECK(it != by_key.end(), "imported key not current: " + key);
      RTX_FUZZ_CHECK(it->second == e.at("params").get<rtx::kernels::Params>(), "params differ for " + key);
    }
    st.reset();
  } catch (const rtx::Error&) {
    RTX_FUZZ_CHECK(rtx::tune::current_profiles(*st).empty(), "a refused import wrote profiles");
  }
  return 0;
}
