// Fuzz target: the rtx.proposal.v1 envelope (rtx::evolve::from_json, what `rtx-evolve submit`
// and MCP submit_proposal parse first) on any JSON document. An accepted envelope must survive
// to_json -> from_json with the same signed content, and its Ed25519 signature must verify
// until any signed field changes.
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_util.hpp"
#include "rtx/core/error.hpp"
#include "rtx/evolve/proposal.hpp"

namespace {

const rtx::evolve::KeyPair& key() {
  static const rtx::evolve::KeyPair k = [] {
    char tmpl[] = "/tmp/rtx-fuzz-proposal-XXXXXX";
    RTX_FUZZ_CHECK(::mkdtemp(tmpl) != nullptr, "mkdtemp failed");
    return rtx::evolve::generate_key(std::string(tmpl) + "/evolve_ed25519.key", /*overwrite=*/true);
  }();
  return k;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json doc = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return 0;
  rtx::evolve::Proposal p;
  try {
    p = rtx::evolve::from_json(doc, "fuzz.json");
  } catch (const rtx::Error&) {
    return 0;  // refused with a message: fine
  }
  (void)rtx::evolve::missing_fields(p);
  // Round trip: the envelope it writes parses back to the same signed content.
  const std::string bytes = rtx::evolve::content_bytes(p);
  const rtx::evolve::Proposal q = rtx::evolve::from_json(rtx::evolve::to_json(p), "round trip");
  RTX_FUZZ_CHECK(rtx::evolve::content_bytes(q) == bytes, "content changed in a to_json/from_json round trip");
  // Signing: a fresh signature verifies; editing a signed field breaks it; editing the status does not.
  rtx::evolve::sign(p, key());
  RTX_FUZZ_CHECK(rtx::evolve::verify(p, key()).empty(), "a fresh signature does not verify");
  rtx::evolve::Proposal t = p;
  t.status = "promoted";
  RTX_FUZZ_CHECK(rtx::evolve::verify(t, key()).empty(), "the status is not signed, yet changing it broke the signature");
  t.plan["why"] = t.plan.value("why", std::string()) + " (edited)";
  RTX_FUZZ_CHECK(!rtx::evolve::verify(t, key()).empty(), "an edited plan still verifies");
  return 0;
}
