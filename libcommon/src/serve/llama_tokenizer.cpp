// Llama's SentencePiece tokenizer as llama.cpp runs it (llm_tokenizer_spm in llama-vocab.cpp):
// score-ordered pair merges over characters with <0xXX> byte fallback, read from GGUF metadata.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/serve/llama.hpp"

namespace rtx::serve {

namespace {

constexpr int32_t kTypeNormal = 1, kTypeUnknown = 2, kTypeControl = 3, kTypeUserDefined = 4, kTypeUnused = 5,
                  kTypeByte = 6;
const std::string kSpaceMark = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

/// Length of the valid UTF-8 sequence at p[0..n) (RFC 3629: no overlongs, surrogates or values
/// above U+10FFFF); 0 when invalid.
int utf8_len(const unsigned char* p, size_t n) {
  const unsigned c = p[0];
  auto cont = [&](size_t k) { return k < n && (p[k] & 0xC0u) == 0x80u; };
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xE0 && p[1] < 0xA0) return 0;  // overlong
    if (c == 0xED && p[1] >= 0xA0) return 0;  // surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xF0 && p[1] < 0x90) return 0;  // overlong
    if (c == 0xF4 && p[1] >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

std::string hex_byte(unsigned b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "<0x%02X>", b & 0xFFu);
  return buf;
}

class LlamaTokenizer final : public io::Tokenizer {
 public:
  LlamaTokenizer(LlamaVocab v, const std::string& where) : v_(std::move(v)) {
    const std::string w = where.empty() ? std::string("llama tokenizer") : where;
    const size_t n = v_.tokens.size();
    if (n == 0) throw_input("llama tokenizer: the vocabulary is empty", w, "check tokenizer.ggml.tokens");
    if (n > static_cast<size_t>(INT32_MAX)) throw_input("llama tokenizer: more than 2^31-1 tokens", w);
    if (v_.scores.empty()) v_.scores.assign(n, 0.f);
    if (v_.types.empty()) v_.types.assign(n, kTypeNormal);
    if (v_.scores.size() != n || v_.types.size() != n)
      throw_input("llama tokenizer: " + std::to_string(n) + " tokens but " + std::to_string(v_.scores.size()) +
                      " scores and " + std::to_string(v_.types.size()) + " types",
                  w, "tokenizer.ggml.tokens, .scores and .token_type must have the same length");
    for (int32_t* id : {&v_.bos, &v_.eos, &v_.unk})
      if (*id < -1 || *id >= static_cast<int32_t>(n))
        throw_input("llama tokenizer: special token id " + std::to_string(*id) + " outside [0, " +
                        std::to_string(n) + ")",
                    w, "fix tokenizer.ggml.bos/eos/unknown_token_id");
    bytes_.assign(n, std::string());
    byte_id_.fill(-1);
    index_.reserve(n * 2);
    for (size_t i = 0; i < n; ++i) {
      const int32_t t = v_.types[i];
      const std::string& s = v_.tokens[i];
      if (t < kTypeNormal || t > kTypeByte)
        throw_input("llama tokenizer: token " + std::to_string(i) + " has type " + std::to_string(t) +
                        " (expected 1..6)",
                    w);
      index_.emplace(s, static_cast<int32_t>(i));  // first occurrence wins, as llama.cpp's map
      if (t == kTypeByte) {
        unsigned b = 0;
        char tail = 0;
        if (s.size() != 6 || std::sscanf(s.c_str(), "<0x%2X>%c", &b, &tail) != 1 || hex_byte(b) != s)
          throw_input("llama tokenizer: byte token " + std::to_string(i) + " '" + s + "' is not named <0xXX>", w);
        bytes_[i] = std::string(1, static_cast<char>(b));
        if (byte_id_[b] < 0) byte_id_[b] = static_cast<int32_t>(i);
      } else if (t == kTypeNormal || t == kTypeUserDefined) {
        std::string out;
        for (size_t p = 0; p < s.size();) {
          if (s.compare(p, kSpaceMark.size(), kSpaceMark) == 0) {
            out.push_back(' ');
            p += kSpaceMark.size();
          } else {
            out.push_back(s[p++]);
          }
        }
        bytes_[i] = std::move(out);
      }  // unknown, control, unused: ""
    }
  }

  std::string kind() const override { return "llama"; }
  bool adds_space_prefix() const override { return v_.add_space_prefix; }
  int vocab_size() const override { return static_cast<int>(v_.tokens.size()); }
  int32_t eot_id() const override { return v_.eos; }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> out;
    if (text.empty()) return out;
    // Characters of the escaped text, as (offset, length) into `s`; orig[] maps back to `text`.
    std::string s;
    s.reserve(text.size() * 2 + 3);
    std::vector<size_t> orig;  // per symbol: byte offset in `text` (npos for the prefix space)
    struct Sym {
      int prev, next;
      size_t off, len;
    };
    std::vector<Sym> sym;
    auto push_char = [&](const char* p, size_t len, size_t from) {
      const int i = static_cast<int>(sym.size());
      sym.push_back(Sym{i - 1, i + 1, s.size(), len});
      s.append(p, len);
      orig.push_back(from);
    };
    if (v_.add_space_prefix) push_char(kSpaceMark.data(), kSpaceMark.size(), std::string_view::npos);
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    for (size_t i = 0; i < text.size();) {
      const int len = utf8_len(p + i, text.size() - i);
      if (len == 0) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned>(p[i]));
        throw_input("llama tokenizer: invalid UTF-8 at byte " + std::to_string(i) + " (byte " + hex + ")",
                    "encode", "pass UTF-8 text");
      }
      if (p[i] == ' ')
        push_char(kSpaceMark.data(), kSpaceMark.size(), i);
      else
        push_char(text.data() + i, static_cast<size_t>(len), i);
      i += static_cast<size_t>(len);
    }
    sym.back().next = -1;

    // Best-scoring mergeable pair first; on equal scores the leftmost (llama.cpp's comparator).
    struct Bigram {
      int left, right;
      float score;
      size_t len;
    };
    auto worse = [](const Bigram& a, const Bigram& b) {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    };
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
    auto try_add = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      const size_t len = sym[l].len + sym[r].len;
      const auto it = index_.find(std::string(s, sym[l].off, len));
      if (it == index_.end()) return;
      queue.push(Bigram{l, r, v_.scores[it->second], len});
    };
    for (size_t i = 1; i < sym.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));
    while (!queue.empty()) {
      const Bigram b = queue.top();
      queue.pop();
      Sym& l = sym[b.left];
      Sym& r = sym[b.right];
      if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;  // stale entry
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }

    for (int i = 0; i >= 0 && i < static_cast<int>(sym.size()); i = sym[i].next) {
      const Sym& x = sym[i];
      const auto it = index_.find(std::string(s, x.off, x.len));
      if (it != index_.end()) {
        out.push_back(it->second);
        continue;
      }
      // Not a piece: only an unmerged single character gets here (merges always make pieces).
      bool all_bytes = true;
      for (size_t k = 0; k < x.len; ++k) all_bytes = all_bytes && byte_id_[static_cast<unsigned char>(s[x.off + k])] >= 0;
      if (all_bytes) {
        for (size_t k = 0; k < x.len; ++k) out.push_back(byte_id_[static_cast<unsigned char>(s[x.off + k])]);
      } else if (v_.unk >= 0) {
        out.push_back(v_.unk);
      } else {
        throw_input("llama tokenizer: character '" + std::string(s, x.off, x.len) + "' at byte " +
                        std::to_string(orig[i]) + " is not in the vocabulary, which has no byte or unknown token",
                    "encode", "remove the character or use a vocabulary with byte fallback");
      }
    }
    return out;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (int32_t id : ids) out += token_bytes(id);
    return out;
  }

  std::string token_bytes(int32_t id) const override {
    if (id < 0 || id >= vocab_size())
      throw_input("llama tokenizer: token id " + std::to_string(id) + " outside [0, " + std::to_string(vocab_size()) +
                      ")",
                  "decode");
    return bytes_[static_cast<size_t>(id)];
  }

  nlohmann::json to_json() const override {
    nlohmann::json j;
    j["kind"] = "llama";
    j["tokens"] = v_.tokens;
    j["scores"] = v_.scores;
    j["types"] = v_.types;
    j["bos"] = v_.bos;
    j["eos"] = v_.eos;
    j["unk"] = v_.unk;
    j["add_bos"] = v_.add_bos;
    j["add_space_prefix"] = v_.add_space_prefix;
    return j;
  }

 private:
  LlamaVocab v_;
  std::unordered_map<std::string, int32_t> index_;
  std::vector<std::string> bytes_;  // token_bytes per id
  std::array<int32_t, 256> byte_id_{};
};

int32_t optional_id(const io::GgufFile& f, const std::string& key, int32_t dflt) {
  const io::GgufValue* v = f.find(key);
  if (!v) return dflt;
  const int64_t id = v->as_i64(key);
  if (id < -1 || id > INT32_MAX)
    throw_input("GGUF: " + key + " = " + std::to_string(id) + " is not a token id", f.path() + ": " + key);
  return static_cast<int32_t>(id);
}

bool optional_bool(const io::GgufFile& f, const std::string& key, bool dflt) {
  const io::GgufValue* v = f.find(key);
  return v ? v->as_bool(key) : dflt;
}

}  // namespace

LlamaVocab llama_vocab_from_gguf(const io::GgufFile& f) {
  const std::string model = f.get("tokenizer.ggml.model").as_string("tokenizer.ggml.model");
  if (model != "llama")
    throw_input("GGUF: tokenizer.ggml.model is '" + model + "', the Llama loader reads only 'llama' (SentencePiece)",
                f.path() + ": tokenizer.ggml.model", "use a GGUF with a SentencePiece vocabulary");
  LlamaVocab v;
  v.tokens = f.get("tokenizer.ggml.tokens").as_strings("tokenizer.ggml.tokens");
  if (const io::GgufValue* sc = f.find("tokenizer.ggml.scores")) {
    if (sc->type != io::GgufType::ARRAY) throw_input("GGUF: tokenizer.ggml.scores is not an array", f.path());
    v.scores.reserve(sc->array.size());
    for (const auto& e : sc->array) v.scores.push_back(static_cast<float>(e.as_f64("tokenizer.ggml.scores")));
  }
  if (const io::GgufValue* ty = f.find("tokenizer.ggml.token_type")) {
    if (ty->type != io::GgufType::ARRAY) throw_input("GGUF: tokenizer.ggml.token_type is not an array", f.path());
    v.types.reserve(ty->array.size());
    for (const auto& e : ty->array) {
      const int64_t t = e.as_i64("tokenizer.ggml.token_type");
      v.types.push_back(t < INT32_MIN || t > INT32_MAX ? 0 : static_cast<int32_t>(t));
    }
  }
  // llama.cpp's SPM defaults when a key is absent: <unk> 0, <s> 1, </s> 2 (if the vocabulary has them).
  const int32_t n = static_cast<int32_t>(std::min<size_t>(v.tokens.size(), INT32_MAX));
  v.bos = optional_id(f, "tokenizer.ggml.bos_token_id", n > 1 ? 1 : -1);
  v.eos = optional_id(f, "tokenizer.ggml.eos_token_id", n > 2 ? 2 : -1);
  v.unk = optional_id(f, "tokenizer.ggml.unknown_token_id", n > 0 ? 0 : -1);
  v.add_bos = optional_bool(f, "tokenizer.ggml.add_bos_token", true);
  v.add_space_prefix = optional_bool(f, "tokenizer.ggml.add_space_prefix", true);
  return v;
}

std::unique_ptr<io::Tokenizer> make_llama_tokenizer(LlamaVocab v, const std::string& where) {
  return std::make_unique<LlamaTokenizer>(std::move(v), where);
}

std::unique_ptr<io::Tokenizer> make_llama_tokenizer(const io::GgufFile& f) {
  return make_llama_tokenizer(llama_vocab_from_gguf(f), f.path() + ": tokenizer.ggml.*");
}

std::unique_ptr<io::Tokenizer> llama_tokenizer_from_json(const nlohmann::json& j, const std::string& where_in) {
  const std::string where = where_in.empty() ? std::string("tokenizer") : where_in;
  auto field = [&](const char* name) -> const nlohmann::json& {
    if (!j.is_object() || !j.contains(name))
      throw_input(std::string("llama tokenizer document: field '") + name + "' missing", where);
    return j.at(name);
  };
  try {
    if (field("kind") != "llama") throw_input("llama tokenizer document: 'kind' is not \"llama\"", where);
    LlamaVocab v;
    v.tokens = field("tokens").get<std::vector<std::string>>();
    v.scores = field("scores").get<std::vector<float>>();
    v.types = field("types").get<std::vector<int32_t>>();
    v.bos = field("bos").get<int32_t>();
    v.eos = field("eos").get<int32_t>();
    if (j.contains("unk")) v.unk = j.at("unk").get<int32_t>();
    if (j.contains("add_bos")) v.add_bos = j.at("add_bos").get<bool>();
    if (j.contains("add_space_prefix")) v.add_space_prefix = j.at("add_space_prefix").get<bool>();
    return make_llama_tokenizer(std::move(v), where);
  } catch (const nlohmann::json::exception& e) {
    throw_input(std::string("llama tokenizer document: a field has the wrong type (") + e.what() + ")", where);
  }
}

}  // namespace rtx::serve
