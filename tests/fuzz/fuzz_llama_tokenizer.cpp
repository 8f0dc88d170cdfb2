// Fuzz target: the Llama SentencePiece tokenizer (rtx::serve::make_llama_tokenizer over the
// vocabulary of $RTX_DATA/stories260k/tinyllamas-stories-260k-f32.gguf) on arbitrary bytes:
// valid UTF-8 encodes (byte fallback covers every character) and decodes back to " " + text;
// invalid UTF-8 is an rtx::Error(Input); decode of arbitrary ids stays in range or throws.
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.hpp"
#include "rtx/core/error.hpp"
#include "rtx/io/gguf.hpp"
#include "rtx/serve/llama.hpp"
#include "rtx/serve/text.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<rtx::io::Tokenizer> tok = rtx::serve::make_llama_tokenizer(rtx::io::GgufFile::open(
      rtx::fuzz::env_or("RTX_DATA", RTX_FUZZ_DEFAULT_DATA) + "/stories260k/tinyllamas-stories-260k-f32.gguf"));
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const std::vector<int32_t> ids = tok->encode(text);
    RTX_FUZZ_CHECK(rtx::serve::utf8_valid(text), "invalid UTF-8 accepted");
    for (int32_t id : ids) RTX_FUZZ_CHECK(id >= 0 && id < tok->vocab_size(), "id out of range");
    // U+2581 (the SentencePiece space) in the input decodes as ' ': the round trip holds for
    // every other text.
    if (text.find("\xE2\x96\x81") == std::string_view::npos)
      RTX_FUZZ_CHECK(tok->decode(ids) == (size ? " " + std::string(text) : std::string()), "decode(encode(x)) != ' ' + x");
  } catch (const rtx::Error& e) {
    RTX_FUZZ_CHECK(e.category() == rtx::ErrorCategory::Input, "encode error category");
    RTX_FUZZ_CHECK(!rtx::serve::utf8_valid(text), std::string("valid UTF-8 refused: ") + e.what());
  }
  std::vector<int32_t> ids(size / 2);
  for (size_t i = 0; i < ids.size(); ++i) {
    int16_t v = 0;
    std::memcpy(&v, data + 2 * i, 2);
    ids[i] = v;  // negative and past-the-end ids included
  }
  try {
    (void)tok->decode(ids);
    for (int32_t id : ids) RTX_FUZZ_CHECK(id >= 0 && id < tok->vocab_size(), "decode accepted a bad id");
  } catch (const rtx::Error& e) {
    RTX_FUZZ_CHECK(e.category() == rtx::ErrorCategory::Input, "decode error category");
  }
  return 0;
}
