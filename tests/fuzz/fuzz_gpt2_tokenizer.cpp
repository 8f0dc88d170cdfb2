// Fuzz target: GPT-2 byte-level BPE (rtx::io::load_gpt2_tokenizer over $RTX_DATA/gpt2_tokenizer)
// on arbitrary bytes: encode must accept any valid UTF-8 and round-trip exactly, reject invalid
// UTF-8 with rtx::Error; decode of arbitrary ids must stay in range or throw rtx::Error.
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.hpp"
#include "rtx/core/error.hpp"
#include "rtx/io/tokenizer.hpp"
#include "rtx/serve/text.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<rtx::io::Tokenizer> tok = rtx::io::load_gpt2_tokenizer(
      rtx::fuzz::env_or("RTX_DATA", RTX_FUZZ_DEFAULT_DATA) + "/gpt2_tokenizer");
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const std::vector<int32_t> ids = tok->encode(text);
    RTX_FUZZ_CHECK(rtx::serve::utf8_valid(text), "invalid UTF-8 accepted");
    for (int32_t id : ids) RTX_FUZZ_CHECK(id >= 0 && id < tok->vocab_size(), "id out of range");
    RTX_FUZZ_CHECK(ids.size() <= size, "more tokens than bytes");
    RTX_FUZZ_CHECK(tok->decode(ids) == text, "decode(encode(x)) != x");
  } catch (const rtx::Error& e) {
    RTX_FUZZ_CHECK(e.category() == rtx::ErrorCategory::Input, "encode error category");
    RTX_FUZZ_CHECK(!rtx::serve::utf8_valid(text), std::string("valid UTF-8 refused: ") + e.what());
  }
  // The same bytes as little-endian u16 ids (some past the vocabulary).
  std::vector<int32_t> ids(size / 2);
  for (size_t i = 0; i < ids.size(); ++i) {
    uint16_t v = 0;
    std::memcpy(&v, data + 2 * i, 2);
    ids[i] = v;
  }
  try {
    const std::string s = tok->decode(ids);
    for (int32_t id : ids) RTX_FUZZ_CHECK(id < tok->vocab_size(), "decode accepted an id past the vocabulary");
    (void)s;
  } catch (const rtx::Error& e) {
    RTX_FUZZ_CHECK(e.category() == rtx::ErrorCategory::Input, "decode error category");
  }
  return 0;
}
