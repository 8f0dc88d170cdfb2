// nanoGPT's character-level tokenizer (data/shakespeare_char/prepare.py): one id per distinct
// Unicode code point of the training text, ids in code-point order.
#include <algorithm>
#include <array>
#include <unordered_map>

#include "rtx/core/error.hpp"
#include "rtx/io/tokenizer.hpp"
#include "tokenizer_internal.hpp"

namespace rtx::io {
namespace {

class CharTokenizer final : public Tokenizer {
 public:
  explicit CharTokenizer(std::vector<uint32_t> cps) : cps_(std::move(cps)) {
    low_.fill(-1);
    for (size_t i = 0; i < cps_.size(); ++i) {
      if (cps_[i] < low_.size())
        low_[cps_[i]] = static_cast<int32_t>(i);
      else
        high_.emplace(cps_[i], static_cast<int32_t>(i));
      append_utf8_piece(i);
    }
  }

  std::string kind() const override { return "char"; }
  int vocab_size() const override { return static_cast<int>(cps_.size()); }

  std::vector<int32_t> encode(std::string_view text) const override {
    const auto cps = detail::decode_utf8(text, "char tokenizer input");
    std::vector<int32_t> ids;
    ids.reserve(cps.size());
    for (const auto& c : cps) {
      int32_t id = -1;
      if (c.cp < low_.size()) {
        id = low_[c.cp];
      } else {
        const auto it = high_.find(c.cp);
        if (it != high_.end()) id = it->second;
      }
      if (id < 0)
        throw Error(ErrorCategory::Input,
                    "character " + detail::describe_code_point(c.cp) + " at byte " + std::to_string(c.byte) +
                        " is not in the char vocabulary (" + std::to_string(cps_.size()) + " characters)",
                    "char tokenizer input", "prepare the dataset from a text that contains this character");
      ids.push_back(id);
    }
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    out.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      check_id(ids[i], i);
      const auto& p = pieces_[static_cast<size_t>(ids[i])];
      out += p;
    }
    return out;
  }

  std::string token_bytes(int32_t id) const override {
    check_id(id, 0);
    return pieces_[static_cast<size_t>(id)];
  }

  int32_t eot_id() const override { return -1; }

  nlohmann::json to_json() const override {
    nlohmann::json chars = nlohmann::json::array();
    for (const auto& p : pieces_) chars.push_back(p);
    return {{"kind", "char"}, {"chars", std::move(chars)}};
  }

 private:
  void append_utf8_piece(size_t i) {
    std::string s;
    detail::append_utf8(s, cps_[i]);
    pieces_.push_back(std::move(s));
  }
  void check_id(int32_t id, size_t pos) const {
    if (id < 0 || static_cast<size_t>(id) >= cps_.size())
      throw Error(ErrorCategory::Input,
                  "token id " + std::to_string(id) + " at position " + std::to_string(pos) + " is outside [0, " +
                      std::to_string(cps_.size()) + ")",
                  "char tokenizer decode");
  }

  std::vector<uint32_t> cps_;          // id -> code point, ascending
  std::vector<std::string> pieces_;    // id -> UTF-8 bytes
  std::array<int32_t, 256> low_{};     // code point < 256 -> id or -1
  std::unordered_map<uint32_t, int32_t> high_;
};

}  // namespace

namespace detail {
std::unique_ptr<Tokenizer> make_char_tokenizer(std::vector<uint32_t> cps, const std::string& where) {
  if (cps.empty()) throw Error(ErrorCategory::Input, "char tokenizer: empty vocabulary", where);
  for (size_t i = 0; i < cps.size(); ++i) {
    if (cps[i] > 0x10FFFF || (cps[i] >= 0xD800 && cps[i] <= 0xDFFF))
      throw Error(ErrorCategory::Input, "char tokenizer: entry " + std::to_string(i) + " is not a Unicode scalar value",
                  where);
    if (i > 0 && cps[i] <= cps[i - 1])
      throw Error(ErrorCategory::Input,
                  "char tokenizer: entries must be distinct and sorted by code point; entry " + std::to_string(i) +
                      " (" + describe_code_point(cps[i]) + ") is not above entry " + std::to_string(i - 1),
                  where);
  }
  return std::make_unique<CharTokenizer>(std::move(cps));
}
}  // namespace detail

std::unique_ptr<Tokenizer> make_char_tokenizer_from_text(std::string_view text) {
  if (text.empty())
    throw Error(ErrorCategory::Input, "char tokenizer: the text is empty", "char tokenizer input",
                "give a non-empty UTF-8 text to build the vocabulary from");
  const auto decoded = detail::decode_utf8(text, "char tokenizer input");
  std::vector<uint32_t> cps;
  cps.reserve(decoded.size());
  for (const auto& c : decoded) cps.push_back(c.cp);
  std::sort(cps.begin(), cps.end());
  cps.erase(std::unique(cps.begin(), cps.end()), cps.end());
  return detail::make_char_tokenizer(std::move(cps), "char tokenizer input");
}

}  // namespace rtx::io
