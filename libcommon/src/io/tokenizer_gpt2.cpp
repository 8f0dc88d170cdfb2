// GPT-2 byte-level BPE (Radford et al. 2019; OpenAI gpt-2 src/encoder.py): the GPT-2
// pre-tokenizer regex written out by hand over ICU character classes, then BPE merges by rank.
// Encodes "<|endoftext|>" in the text as ordinary text (tiktoken's encode_ordinary).
#include <unicode/uchar.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <limits>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "rtx/core/error.hpp"
#include "rtx/io/artifact.hpp"
#include "rtx/io/tokenizer.hpp"
#include "tokenizer_internal.hpp"

namespace rtx::io {
namespace {

constexpr uint32_t kNoRank = std::numeric_limits<uint32_t>::max();

// OpenAI's bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68 bytes
// to U+0100.. in byte order, so every byte has a visible, non-space character.
std::array<uint32_t, 256> bytes_to_unicode() {
  std::array<uint32_t, 256> m{};
  std::array<bool, 256> direct{};
  for (int b = '!'; b <= '~'; ++b) direct[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) m[b] = direct[b] ? static_cast<uint32_t>(b) : next++;
  return m;
}

// Pre-tokenizer character classes: \p{L}, \p{N}, \s (Unicode White_Space, which is what
// Python's `regex` module and tiktoken's fancy-regex use for \s), anything else.
enum CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

CharClass classify(uint32_t cp) {
  if (cp < 0x80) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return kLetter;
    if (cp >= '0' && cp <= '9') return kNumber;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return kSpace;
    return kOther;
  }
  const auto c = static_cast<UChar32>(cp);
  switch (u_charType(c)) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return kLetter;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return kNumber;
    default:
      break;
  }
  return u_isUWhiteSpace(c) ? kSpace : kOther;
}

struct CacheShard {
  std::mutex mu;
  std::unordered_map<std::string, std::vector<int32_t>> map;
};

class Gpt2Tokenizer final : public Tokenizer {
 public:
  Gpt2Tokenizer(const nlohmann::json& encoder, const std::vector<std::string>& merges, const std::string& enc_where,
                const std::string& merges_where, int merge_line0)
      : encoder_json_(encoder), merges_(merges) {
    build_encoder(enc_where);
    build_merges(merges_where, merge_line0);
  }

  std::string kind() const override { return "gpt2"; }
  int vocab_size() const override { return static_cast<int>(tokens_.size()); }
  int32_t eot_id() const override { return eot_; }

  std::vector<int32_t> encode(std::string_view text) const override {
    const auto cps = detail::decode_utf8(text, "gpt2 tokenizer input");
    const size_t m = cps.size();
    std::vector<uint8_t> cls(m);
    for (size_t i = 0; i < m; ++i) cls[i] = classify(cps[i].cp);
    auto byte_at = [&](size_t i) { return i < m ? static_cast<size_t>(cps[i].byte) : text.size(); };

    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 8);
    size_t i = 0;
    while (i < m) {
      const size_t end = piece_end(cps, cls, i);
      bpe_append(text.substr(byte_at(i), byte_at(end) - byte_at(i)), out);
      i = end;
    }
    return out;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    out.reserve(ids.size() * 4);
    for (size_t i = 0; i < ids.size(); ++i) {
      check_id(ids[i], i);
      out += tokens_[static_cast<size_t>(ids[i])];
    }
    return out;
  }

  std::string token_bytes(int32_t id) const override {
    check_id(id, 0);
    return tokens_[static_cast<size_t>(id)];
  }

  nlohmann::json to_json() const override {
    return {{"kind", "gpt2"}, {"encoder", encoder_json_}, {"merges", merges_}};
  }

 private:
  // End (code point index) of the pre-token starting at i: the first alternative of
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ that matches.
  static size_t piece_end(const std::vector<detail::CodePoint>& c, const std::vector<uint8_t>& k, size_t i) {
    const size_t m = c.size();
    if (c[i].cp == '\'' && i + 1 < m) {
      const uint32_t a = c[i + 1].cp;
      if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
      if (i + 2 < m) {
        const uint32_t b = c[i + 2].cp;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
      }
    }
    size_t j = i;
    if (c[i].cp == ' ' && i + 1 < m && k[i + 1] != kSpace) j = i + 1;  // the optional leading space
    const uint8_t cl = k[j];
    if (cl != kSpace) {  // letters, numbers or "other" runs
      while (j < m && k[j] == cl) ++j;
      return j;
    }
    size_t r = i;
    while (r < m && k[r] == kSpace) ++r;
    if (r == m || r - i == 1) return r;  // \s+(?!\S) at the end, or \s+ for a single space
    return r - 1;                        // \s+(?!\S) backtracks one so the last space leads the next piece
  }

  void bpe_append(std::string_view word, std::vector<int32_t>& out) const {
    if (word.size() == 1) {
      out.push_back(byte_id_[static_cast<uint8_t>(word[0])]);
      return;
    }
    const bool cacheable = word.size() <= kMaxCachedWord;
    CacheShard* shard = nullptr;
    std::string key;
    if (cacheable) {
      key.assign(word);
      shard = &cache_[std::hash<std::string>{}(key) % kShards];
      std::lock_guard<std::mutex> lock(shard->mu);
      const auto it = shard->map.find(key);
      if (it != shard->map.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int32_t> ids = bpe(word);
    out.insert(out.end(), ids.begin(), ids.end());
    if (cacheable) {
      std::lock_guard<std::mutex> lock(shard->mu);
      if (shard->map.size() >= kMaxShardEntries) shard->map.clear();  // bounded memory
      shard->map.emplace(std::move(key), std::move(ids));
    }
  }

  uint32_t pair_rank(int32_t a, int32_t b) const {
    const auto it = ranks_.find(pair_key(a, b));
    return it == ranks_.end() ? kNoRank : it->second;
  }

  // OpenAI encoder.py bpe(): repeatedly merge every occurrence (left to right, no overlap) of
  // the adjacent pair with the lowest merge rank, until no adjacent pair has a rank.
  std::vector<int32_t> bpe(std::string_view word) const {
    std::vector<int32_t> ids(word.size());
    for (size_t i = 0; i < word.size(); ++i) ids[i] = byte_id_[static_cast<uint8_t>(word[i])];
    std::vector<uint32_t> rk(ids.size() - 1);  // rk[i]: rank of (ids[i], ids[i+1])
    for (size_t i = 0; i + 1 < ids.size(); ++i) rk[i] = pair_rank(ids[i], ids[i + 1]);
    std::vector<int32_t> nids;
    std::vector<uint32_t> nrk;
    while (ids.size() > 1) {
      uint32_t best = kNoRank;
      for (uint32_t r : rk) best = r < best ? r : best;
      if (best == kNoRank) break;
      const int32_t first = merge_a_[best], second = merge_b_[best], merged = merge_to_[best];
      nids.clear();
      for (size_t i = 0; i < ids.size();) {
        if (i + 1 < ids.size() && ids[i] == first && ids[i + 1] == second) {
          nids.push_back(merged);
          i += 2;
        } else {
          nids.push_back(ids[i]);
          i += 1;
        }
      }
      // Words are short (and cached), so every adjacent pair is simply looked up again.
      nrk.assign(nids.size() - 1, kNoRank);
      for (size_t j = 0; j + 1 < nids.size(); ++j) nrk[j] = pair_rank(nids[j], nids[j + 1]);
      ids.swap(nids);
      rk.swap(nrk);
    }
    return ids;
  }

  void check_id(int32_t id, size_t pos) const {
    if (id < 0 || static_cast<size_t>(id) >= tokens_.size())
      throw Error(ErrorCategory::Input,
                  "token id " + std::to_string(id) + " at position " + std::to_string(pos) + " is outside [0, " +
                      std::to_string(tokens_.size()) + ")",
                  "gpt2 tokenizer decode");
  }

  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  // Unicode string of encoder.json / vocab.bpe -> raw bytes via the inverse of bytes_to_unicode.
  bool to_bytes(std::string_view s, std::string& out) const {
    out.clear();
    const auto cps = detail::decode_utf8(s);
    for (const auto& c : cps) {
      if (c.cp >= byte_of_.size() || byte_of_[c.cp] < 0) return false;
      out.push_back(static_cast<char>(byte_of_[c.cp]));
    }
    return true;
  }

  void build_encoder(const std::string& where) {
    const auto b2u = bytes_to_unicode();
    byte_of_.assign(324, -1);
    for (int b = 0; b < 256; ++b) byte_of_[b2u[b]] = b;
    if (!encoder_json_.is_object() || encoder_json_.empty())
      throw Error(ErrorCategory::Input, "encoder: expected a non-empty JSON object {\"token\": id, ...}", where);
    const size_t n = encoder_json_.size();
    tokens_.assign(n, std::string());
    std::vector<bool> seen(n, false);
    std::string bytes;
    for (auto it = encoder_json_.begin(); it != encoder_json_.end(); ++it) {
      const std::string& key = it.key();
      const auto& v = it.value();
      if (!v.is_number_integer())
        throw Error(ErrorCategory::Input, "encoder: key '" + key + "': value is not an integer id", where);
      const int64_t id = v.get<int64_t>();
      if (id < 0 || id >= static_cast<int64_t>(n))
        throw Error(ErrorCategory::Input,
                    "encoder: key '" + key + "': id " + std::to_string(id) + " is outside [0, " + std::to_string(n) +
                        ") (ids must be 0..N-1 for N entries)",
                    where);
      if (seen[static_cast<size_t>(id)])
        throw Error(ErrorCategory::Input, "encoder: key '" + key + "': id " + std::to_string(id) + " is used twice",
                    where);
      if (key.empty() || !to_bytes(key, bytes))
        throw Error(ErrorCategory::Input,
                    "encoder: key '" + key + "' has a character outside GPT-2's bytes_to_unicode alphabet", where,
                    "use OpenAI's encoder.json (byte-level BPE)");
      seen[static_cast<size_t>(id)] = true;
      tokens_[static_cast<size_t>(id)] = bytes;
      if (!by_bytes_.emplace(bytes, static_cast<int32_t>(id)).second)
        throw Error(ErrorCategory::Input, "encoder: key '" + key + "' duplicates the bytes of another token", where);
    }
    for (int b = 0; b < 256; ++b) {
      const auto it = by_bytes_.find(std::string(1, static_cast<char>(b)));
      if (it == by_bytes_.end()) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02X", b);
        throw Error(ErrorCategory::Input, std::string("encoder: no single-byte token for byte ") + hex, where,
                    "a byte-level BPE vocabulary must hold all 256 bytes");
      }
      byte_id_[b] = it->second;
    }
    const auto eot = by_bytes_.find("<|endoftext|>");
    eot_ = eot == by_bytes_.end() ? -1 : eot->second;
  }

  void build_merges(const std::string& where, int line0) {
    const size_t nm = merges_.size();
    merge_a_.resize(nm);
    merge_b_.resize(nm);
    merge_to_.resize(nm);
    ranks_.reserve(nm * 2);
    std::string a, b;
    for (size_t r = 0; r < nm; ++r) {
      const std::string loc = line0 > 0 ? "line " + std::to_string(static_cast<size_t>(line0) + r)
                                        : "entry " + std::to_string(r);
      const std::string& s = merges_[r];
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 >= s.size() || s.find(' ', sp + 1) != std::string::npos)
        throw Error(ErrorCategory::Input, loc + ": expected two tokens separated by one space, got '" + s + "'", where);
      if (!to_bytes(std::string_view(s).substr(0, sp), a) || !to_bytes(std::string_view(s).substr(sp + 1), b))
        throw Error(ErrorCategory::Input, loc + ": '" + s + "' has a character outside GPT-2's bytes_to_unicode alphabet",
                    where);
      const auto ia = by_bytes_.find(a), ib = by_bytes_.find(b), iab = by_bytes_.find(a + b);
      if (ia == by_bytes_.end() || ib == by_bytes_.end() || iab == by_bytes_.end())
        throw Error(ErrorCategory::Input,
                    loc + ": merge '" + s + "': " +
                        (ia == by_bytes_.end() ? "left part" : ib == by_bytes_.end() ? "right part" : "merged token") +
                        " is not in the encoder",
                    where, "encoder.json and vocab.bpe must come from the same model");
      merge_a_[r] = ia->second;
      merge_b_[r] = ib->second;
      merge_to_[r] = iab->second;
      if (!ranks_.emplace(pair_key(ia->second, ib->second), static_cast<uint32_t>(r)).second)
        throw Error(ErrorCategory::Input, loc + ": merge '" + s + "' appears twice", where);
    }
  }

  static constexpr size_t kShards = 16;
  static constexpr size_t kMaxShardEntries = 1 << 15;
  static constexpr size_t kMaxCachedWord = 64;

  nlohmann::json encoder_json_;                       // as given (for to_json)
  std::vector<std::string> merges_;                   // "a b" in rank order (for to_json)
  std::vector<std::string> tokens_;                   // id -> raw bytes
  std::unordered_map<std::string, int32_t> by_bytes_; // raw bytes -> id
  std::vector<int> byte_of_;                          // bytes_to_unicode code point -> byte, or -1
  std::array<int32_t, 256> byte_id_{};                // byte -> id of its single-byte token
  std::unordered_map<uint64_t, uint32_t> ranks_;      // (left id, right id) -> merge rank
  std::vector<int32_t> merge_a_, merge_b_, merge_to_; // rank -> left, right, merged id
  int32_t eot_ = -1;
  mutable std::array<CacheShard, kShards> cache_;     // word -> ids, guarded per shard
};

std::string slurp_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw Error(ErrorCategory::Input, "cannot open file", path,
                "pass the directory holding OpenAI's GPT-2 encoder.json and vocab.bpe");
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw Error(ErrorCategory::Environment, "read error", path);
  return ss.str();
}

}  // namespace

namespace detail {
std::unique_ptr<Tokenizer> make_gpt2_tokenizer(const nlohmann::json& encoder, const std::vector<std::string>& merges,
                                               const std::string& enc_where, const std::string& merges_where,
                                               int merge_line0) {
  return std::make_unique<Gpt2Tokenizer>(encoder, merges, enc_where, merges_where, merge_line0);
}
}  // namespace detail

std::unique_ptr<Tokenizer> load_gpt2_tokenizer(const std::string& dir) {
  const std::string enc_path = dir + "/encoder.json", bpe_path = dir + "/vocab.bpe";
  const nlohmann::json encoder = parse_json(slurp_file(enc_path), enc_path);
  const std::string bpe = slurp_file(bpe_path);
  std::vector<std::string> merges;
  int line_no = 0, first_merge_line = 0;
  size_t pos = 0;
  while (pos < bpe.size()) {
    size_t nl = bpe.find('\n', pos);
    if (nl == std::string::npos) nl = bpe.size();
    std::string line = bpe.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line_no == 1 && line.rfind("#version", 0) == 0) continue;  // "#version: 0.2"
    if (line.empty()) {
      if (pos >= bpe.size()) break;  // the trailing newline
      throw Error(ErrorCategory::Input, "line " + std::to_string(line_no) + ": empty line inside the merge list",
                  bpe_path);
    }
    const size_t bad = detail::find_invalid_utf8(line);
    if (bad != std::string::npos)
      throw Error(ErrorCategory::Input,
                  "line " + std::to_string(line_no) + ": invalid UTF-8 at byte " + std::to_string(bad) + " of the line",
                  bpe_path);
    if (first_merge_line == 0) first_merge_line = line_no;
    merges.push_back(std::move(line));
  }
  auto tok = detail::make_gpt2_tokenizer(encoder, merges, enc_path, bpe_path, first_merge_line);  // validates lines
  // Byte-level BPE: every token is one of the 256 byte tokens, a special token ("<|...|>") or
  // the result of exactly one merge. A count that disagrees means a truncated or foreign file.
  if (encoder.is_object()) {
    size_t special = 0;
    for (auto it = encoder.begin(); it != encoder.end(); ++it) {
      const std::string& k = it.key();
      if (k.size() > 4 && k.rfind("<|", 0) == 0 && k.compare(k.size() - 2, 2, "|>") == 0) ++special;
    }
    const size_t need = encoder.size() >= 256 + special ? encoder.size() - 256 - special : 0;
    if (merges.size() != need)
      throw Error(ErrorCategory::Input,
                  "has " + std::to_string(merges.size()) + " merges; encoder.json's " + std::to_string(encoder.size()) +
                      " tokens (256 bytes + " + std::to_string(special) + " special) need " + std::to_string(need),
                  bpe_path, "the file is truncated or belongs to another tokenizer");
  }
  return tok;
}

}  // namespace rtx::io
