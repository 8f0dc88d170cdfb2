// Tokenizer tests: GPT-2 BPE against llama.cpp's test-tokenizer-0 vectors and ggml's prompt
// vectors (both produced by OpenAI/HF GPT-2 tokenizers), the char tokenizer on tiny-shakespeare,
// round trips, to_json/from_json, concurrency and malformed input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/io/tokenizer.hpp"
#include "test_util.hpp"

using rtx::Error;
using rtx::ErrorCategory;
using rtx::io::Tokenizer;
namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  REQUIRE(f);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void spit(const std::string& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f << bytes;
}

std::string gpt2_dir() { return rtx::test::data_dir() + "/gpt2_tokenizer"; }

// One tokenizer for the whole test binary (loading parses 1.2 MB of tables).
const Tokenizer& gpt2() {
  static std::unique_ptr<Tokenizer> t = rtx::io::load_gpt2_tokenizer(gpt2_dir());
  return *t;
}

std::vector<int32_t> parse_ids(const std::string& s, char sep) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) ids.push_back(std::stoi(item));
  return ids;
}

template <class F>
Error catch_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL("expected rtx::Error");
  return Error(ErrorCategory::Internal, "unreachable");
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// Random valid UTF-8 drawn from ASCII, Latin-1, Cyrillic, CJK, emoji and Unicode spaces, with
// runs of spaces/newlines and apostrophes so every branch of the pre-tokenizer is hit.
std::string random_text(uint64_t seed, size_t n_chars) {
  static const uint32_t pool[] = {'a', 'Z', 'q', '0', '7', ' ', ' ', ' ', '\n', '\t', '\r', '\'', 's', 't', 'l', 'r',
                                  'e', 'v', 'd', 'm', '!', '.', ',', '"', 0x1C, 0x0B, 0xA0, 0xE9, 0xBD, 0x430, 0x44F,
                                  0x3000, 0x2009, 0x4E2D, 0x6587, 0x0661, 0x2167, 0x1F999, 0x1F600, 0x2028, 0x85, 0x5F};
  rtx::Philox rng(seed);
  std::string s;
  for (size_t i = 0; i < n_chars; ++i) {
    const uint32_t cp = pool[rng.next_u32() % (sizeof pool / sizeof pool[0])];
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      s.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      s.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return s;
}

}  // namespace

TEST_CASE("gpt2: llama.cpp test-tokenizer-0 vectors match exactly and round-trip", "[cpu]") {
  const std::string dir = gpt2_dir();
  const std::string inp = slurp(dir + "/ggml-vocab-gpt-2.gguf.inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  size_t pos = 0;
  for (size_t at; (at = inp.find(sep, pos)) != std::string::npos; pos = at + sep.size())
    texts.push_back(inp.substr(pos, at - pos));
  REQUIRE(pos == inp.size());  // the file ends with a separator
  std::vector<std::vector<int32_t>> expected;
  std::stringstream out(slurp(dir + "/ggml-vocab-gpt-2.gguf.out"));
  for (std::string line; std::getline(out, line);) expected.push_back(parse_ids(line, ' '));
  REQUIRE(texts.size() == 46);
  REQUIRE(expected.size() == texts.size());
  int mismatches = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    INFO("case " << i << ": '" << texts[i] << "'");
    const auto ids = gpt2().encode(texts[i]);
    CHECK(ids == expected[i]);
    mismatches += ids != expected[i];
    CHECK(gpt2().decode(ids) == texts[i]);
  }
  CHECK(mismatches == 0);
}

TEST_CASE("gpt2: ggml prompt vectors match exactly and round-trip", "[cpu]") {
  std::stringstream f(slurp(gpt2_dir() + "/ggml-prompts-gpt-2.txt"));
  int n = 0;
  for (std::string line; std::getline(f, line);) {
    const size_t arrow = line.rfind(" => ");
    REQUIRE(arrow != std::string::npos);
    const std::string text = line.substr(0, arrow);
    const auto expected = parse_ids(line.substr(arrow + 4), ',');
    INFO("prompt '" << text << "'");
    const auto ids = gpt2().encode(text);
    CHECK(ids == expected);
    CHECK(gpt2().decode(ids) == text);
    ++n;
  }
  CHECK(n == 100);
}

TEST_CASE("gpt2: vocabulary, special token and pre-tokenizer edge cases", "[cpu]") {
  const Tokenizer& t = gpt2();
  CHECK(t.kind() == "gpt2");
  CHECK(t.vocab_size() == 50257);
  CHECK(t.eot_id() == 50256);
  CHECK(t.token_bytes(50256) == "<|endoftext|>");
  CHECK(t.decode({50256}) == "<|endoftext|>");
  // encode_ordinary: the special token's text is split like any other text (tiktoken gives
  // [27, 91, 437, 1659, 5239, 91, 29] for "<|endoftext|>").
  CHECK(t.encode("<|endoftext|>") == std::vector<int32_t>{27, 91, 437, 1659, 5239, 91, 29});
  CHECK(t.encode("").empty());
  CHECK(t.encode(" ") == std::vector<int32_t>{220});
  CHECK(t.encode("Hello") == std::vector<int32_t>{15496});
  // Byte tokens: 'A' = 32 ("A" is the 33rd printable byte), "\n" = 198 (mapped to U+010A).
  CHECK(t.token_bytes(32) == "A");
  CHECK(t.token_bytes(198) == "\n");
  // Contractions are case-sensitive: "'s" is one piece, "'S" is "'" + "S".
  CHECK(t.encode("it's") == std::vector<int32_t>{270, 338});
  CHECK(t.encode("IT'S").size() == 3);
  CHECK(t.decode(t.encode("IT'S")) == "IT'S");
  // A single byte of a multi-byte character decodes to a partial sequence.
  const auto llama = t.encode("\xF0\x9F\xA6\x99");  // U+1F999
  CHECK(llama.size() > 1);
  CHECK(t.token_bytes(llama[0]).size() < 4);
}

TEST_CASE("gpt2: random Unicode texts of odd lengths round-trip and are deterministic", "[cpu]") {
  const Tokenizer& t = gpt2();
  for (size_t n : {size_t{1}, size_t{2}, size_t{7}, size_t{127}, size_t{1000}}) {
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      const std::string s = random_text(seed * 1000 + n, n);
      const auto ids = t.encode(s);
      INFO("n=" << n << " seed=" << seed);
      CHECK(t.decode(ids) == s);
      CHECK(t.encode(s) == ids);  // second time through the cache
      for (int32_t id : ids) CHECK((id >= 0 && id < 50256));
    }
  }
}

TEST_CASE("gpt2: tiny-shakespeare round-trips; concurrent encodes agree", "[cpu]") {
  const std::string text = slurp(rtx::test::data_dir() + "/tinyshakespeare/input.txt");
  const auto ids = gpt2().encode(text);
  CHECK(ids.size() == 338025);  // nanoGPT shakespeare/prepare.py: 301,966 + 36,059 (split encoded separately)
  CHECK(gpt2().decode(ids) == text);

  const std::string part = text.substr(0, 200000);
  const auto want = gpt2().encode(part);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) threads.emplace_back([&, k] { got[k] = gpt2().encode(part); });
  for (auto& th : threads) th.join();
  for (int k = 0; k < 4; ++k) CHECK(got[k] == want);
}

TEST_CASE("gpt2: to_json / tokenizer_from_json rebuilds the same tokenizer", "[cpu]") {
  const nlohmann::json j = gpt2().to_json();
  CHECK(j.at("kind") == "gpt2");
  CHECK(j.at("encoder").size() == 50257);
  CHECK(j.at("merges").size() == 50000);
  CHECK(j.at("merges")[0] == "\xC4\xA0 t");  // first line of vocab.bpe after the version: "Ġ t"
  const auto t2 = rtx::io::tokenizer_from_json(j, "test");
  const std::string s = "Hello, world! It's 2024 \xE2\x80\x94 caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87  \n\n x";
  CHECK(t2->encode(s) == gpt2().encode(s));
  CHECK(t2->vocab_size() == 50257);
  CHECK(t2->eot_id() == 50256);
}

TEST_CASE("gpt2: invalid UTF-8 and bad ids are input errors naming the offset", "[cpu]") {
  const Tokenizer& t = gpt2();
  struct Bad {
    std::string text;
    size_t offset;
  };
  const std::vector<Bad> bad = {{"ab\xFF", 2},          {"\xC3", 0},           {"x\xC0\xAF", 1},
                                {"ok \xED\xA0\x80", 3}, {"\xF4\x90\x80\x80", 0}, {"caf\xC3\xA9\x80", 5}};
  for (const auto& b : bad) {
    const Error e = catch_error([&] { t.encode(b.text); });
    CHECK(e.category() == ErrorCategory::Input);
    CHECK(contains(e.what(), "invalid UTF-8 at byte " + std::to_string(b.offset)));
  }
  CHECK(catch_error([&] { t.decode({15496, 50257}); }).category() == ErrorCategory::Input);
  CHECK(catch_error([&] { t.decode({-1}); }).category() == ErrorCategory::Input);
  CHECK(catch_error([&] { t.token_bytes(99999); }).category() == ErrorCategory::Input);
}

TEST_CASE("gpt2: missing or malformed tokenizer files are input errors naming the file", "[cpu]") {
  const std::string src = gpt2_dir();
  const std::string good_bpe = slurp(src + "/vocab.bpe");
  const std::string good_enc = slurp(src + "/encoder.json");
  auto make_dir = [&](const std::string& enc, const std::string& bpe) {
    const std::string d = rtx::test::temp_dir();
    if (!enc.empty()) spit(d + "/encoder.json", enc);
    if (!bpe.empty()) spit(d + "/vocab.bpe", bpe);
    return d;
  };
  auto load_error = [&](const std::string& d) { return catch_error([&] { rtx::io::load_gpt2_tokenizer(d); }); };

  SECTION("missing files") {
    const Error e1 = load_error(make_dir("", good_bpe));
    CHECK(e1.category() == ErrorCategory::Input);
    CHECK(contains(e1.what(), "encoder.json"));
    const Error e2 = load_error(make_dir(good_enc, ""));
    CHECK(e2.category() == ErrorCategory::Input);
    CHECK(contains(e2.what(), "vocab.bpe"));
  }
  SECTION("encoder.json: invalid JSON, wrong types, bad ids, foreign characters") {
    for (const std::string& enc : {std::string("{\"a\": 0,"), std::string("[1, 2]"), std::string("{\"!\": \"0\"}"),
                                  std::string("{\"!\": 0, \"\\\"\": 5}"), std::string("{\"!\": 0, \"\\\"\": 0}"),
                                  std::string("{\" \": 0}"), std::string("{\"!\": 0}")}) {
      INFO(enc);
      const Error e = load_error(make_dir(enc, "#version: 0.2\n"));
      CHECK(e.category() == ErrorCategory::Input);
      CHECK(contains(e.what(), "encoder.json"));
    }
  }
  SECTION("vocab.bpe: a line without two parts, a token not in the encoder") {
    const Error e1 = load_error(make_dir(good_enc, "#version: 0.2\n\xC4\xA0 t\nabc\n"));
    CHECK(e1.category() == ErrorCategory::Input);
    CHECK(contains(e1.what(), "vocab.bpe"));
    CHECK(contains(e1.what(), "line 3"));
    const Error e2 = load_error(make_dir(good_enc, "#version: 0.2\n\xC4\xA0 t\n\xE4\xB8\xAD x\n"));
    CHECK(e2.category() == ErrorCategory::Input);
    CHECK(contains(e2.what(), "line 3"));
  }
  SECTION("tokenizer_from_json: bad documents") {
    using nlohmann::json;
    for (const json& j : {json(5), json{{"kind", "bpe"}}, json{{"kind", "gpt2"}, {"encoder", json::array()}},
                          json{{"kind", "gpt2"}, {"encoder", json::object({{"!", 0}})}, {"merges", json::array({3})}},
                          json{{"kind", "char"}}, json{{"kind", "char"}, {"chars", json::array({"b", "a"})}},
                          json{{"kind", "char"}, {"chars", json::array({"ab"})}}}) {
      INFO(j.dump());
      CHECK(catch_error([&] { rtx::io::tokenizer_from_json(j, "meta.json"); }).category() == ErrorCategory::Input);
    }
  }
}

TEST_CASE("char: tiny-shakespeare gives nanoGPT's 65-character vocabulary", "[cpu]") {
  const std::string text = slurp(rtx::test::data_dir() + "/tinyshakespeare/input.txt");
  const auto t = rtx::io::make_char_tokenizer_from_text(text);
  CHECK(t->kind() == "char");
  CHECK(t->vocab_size() == 65);
  CHECK(t->eot_id() == -1);
  // nanoGPT's chars: "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
  std::string all;
  for (int32_t i = 0; i < 65; ++i) all += t->token_bytes(i);
  CHECK(all == "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz");
  const auto ids = t->encode(text);
  CHECK(ids.size() == 1115394);
  CHECK(t->decode(ids) == text);
  CHECK(t->encode("hii there") == std::vector<int32_t>{46, 47, 47, 1, 58, 46, 43, 56, 43});  // nanoGPT's example
}

TEST_CASE("char: code points, not bytes, sorted by value; errors name character and offset", "[cpu]") {
  // "é" U+00E9, "☃" U+2603, "🦙" U+1F999, "a", " "
  const std::string text = "\xF0\x9F\xA6\x99 a\xE2\x98\x83\xC3\xA9 a";
  const auto t = rtx::io::make_char_tokenizer_from_text(text);
  REQUIRE(t->vocab_size() == 5);
  CHECK(t->token_bytes(0) == " ");
  CHECK(t->token_bytes(1) == "a");
  CHECK(t->token_bytes(2) == "\xC3\xA9");
  CHECK(t->token_bytes(3) == "\xE2\x98\x83");
  CHECK(t->token_bytes(4) == "\xF0\x9F\xA6\x99");
  CHECK(t->encode(text) == std::vector<int32_t>{4, 0, 1, 3, 2, 0, 1});
  CHECK(t->decode({2, 2, 1}) == "\xC3\xA9\xC3\xA9" "a");
  CHECK(t->encode("a").size() == 1);

  const Error e = catch_error([&] { t->encode("a a b"); });
  CHECK(e.category() == ErrorCategory::Input);
  CHECK(contains(e.what(), "U+0062 'b'"));
  CHECK(contains(e.what(), "at byte 4"));
  CHECK(catch_error([&] { t->encode("a\xE9"); }).category() == ErrorCategory::Input);
  CHECK(catch_error([&] { t->decode({5}); }).category() == ErrorCategory::Input);
  CHECK(catch_error([&] { t->token_bytes(-1); }).category() == ErrorCategory::Input);
  CHECK(catch_error([] { rtx::io::make_char_tokenizer_from_text(""); }).category() == ErrorCategory::Input);
  const Error e2 = catch_error([] { rtx::io::make_char_tokenizer_from_text("abc\x80"); });
  CHECK(contains(e2.what(), "invalid UTF-8 at byte 3"));

  // to_json round trip
  const nlohmann::json j = t->to_json();
  CHECK(j.at("chars").size() == 5);
  const auto t2 = rtx::io::tokenizer_from_json(j);
  CHECK(t2->encode(text) == t->encode(text));
}

TEST_CASE("gpt2: a truncated vocab.bpe is refused (merge count vs encoder size)", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  std::filesystem::copy_file(gpt2_dir() + "/encoder.json", dir + "/encoder.json");
  std::ifstream in(gpt2_dir() + "/vocab.bpe");
  std::ofstream out(dir + "/vocab.bpe");
  std::string line;
  for (int i = 0; i < 1000 && std::getline(in, line); ++i) out << line << "\n";
  out.close();
  try {
    rtx::io::load_gpt2_tokenizer(dir);
    FAIL("a vocab.bpe cut at 1000 lines was accepted");
  } catch (const rtx::Error& e) {
    CHECK(e.category() == rtx::ErrorCategory::Input);
    CHECK(std::string(e.what()).find("999 merges") != std::string::npos);
    CHECK(std::string(e.what()).find("need 50000") != std::string::npos);
  }
}
