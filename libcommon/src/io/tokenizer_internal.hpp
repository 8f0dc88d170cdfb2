// Private helpers shared by the tokenizer sources (UTF-8 decoding, the concrete factories).
// Not a public header: tools and other modules use rtx/io/tokenizer.hpp.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtx/io/tokenizer.hpp"

namespace rtx::io::detail {

/// One decoded code point and where its bytes start in the text.
struct CodePoint {
  uint32_t cp;     ///< Unicode scalar value (never a surrogate, <= 0x10FFFF)
  uint32_t byte;   ///< byte offset of its first byte
};

/// Strict UTF-8 decode (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF).
/// Throws Error(Input) "invalid UTF-8 at byte N" naming `where` (may be empty).
std::vector<CodePoint> decode_utf8(std::string_view text, const std::string& where = {});
/// Offset of the byte after the first invalid UTF-8 sequence, or npos when `text` is valid.
size_t find_invalid_utf8(std::string_view text);
/// Append the UTF-8 bytes of code point `cp` (must be a scalar value).
void append_utf8(std::string& out, uint32_t cp);
/// "U+00E9 'é'" for messages (the character itself omitted for control characters).
std::string describe_code_point(uint32_t cp);

/// The char tokenizer over an explicit, sorted, duplicate-free list of code points.
/// Throws Error(Input) naming `where` for an unsorted/duplicate/invalid list.
std::unique_ptr<Tokenizer> make_char_tokenizer(std::vector<uint32_t> code_points, const std::string& where);
/// GPT-2 BPE from an encoder mapping (bytes_to_unicode strings -> ids) and merge lines
/// ("a b", rank order). `enc_where`/`merges_where` name the sources in errors;
/// `merge_line0` is the 1-based line of merges[0] in its file (0: report indices instead).
std::unique_ptr<Tokenizer> make_gpt2_tokenizer(const nlohmann::json& encoder, const std::vector<std::string>& merges,
                                               const std::string& enc_where, const std::string& merges_where,
                                               int merge_line0);

}  // namespace rtx::io::detail
