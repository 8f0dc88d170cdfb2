// Dataset tests: nanoGPT's tiny-shakespeare split counts (char and GPT-2), the on-disk layout,
// validation at open (odd/short/foreign .bin files, meta.json mismatches) and the batch sampler
// (determinism, targets shifted by one, offsets in range, uniformity, 64-bit ranges).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/io/dataset.hpp"
#include "rtx/io/tokenizer.hpp"
#include "test_util.hpp"

using rtx::Error;
using rtx::ErrorCategory;
using rtx::io::Dataset;
namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
void spit(const std::string& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << bytes;
}
std::string shakespeare() { return rtx::test::data_dir() + "/tinyshakespeare/input.txt"; }
std::string gpt2_dir() { return rtx::test::data_dir() + "/gpt2_tokenizer"; }

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

std::vector<uint16_t> read_u16(const std::string& path) {
  const std::string b = slurp(path);
  std::vector<uint16_t> v(b.size() / 2);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<uint16_t>(static_cast<unsigned char>(b[2 * i]) | (static_cast<unsigned char>(b[2 * i + 1]) << 8));
  return v;
}

// A text of n distinct code points U+4E00.. (3 UTF-8 bytes each) in ascending order: with the char tokenizer,
// token i of the train split is exactly i, so a sampled window reveals its offset.
std::string counting_text(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    const uint32_t cp = 0x4E00 + static_cast<uint32_t>(i);
    s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

std::string prepared_counting_dir(int n) {
  const std::string d = rtx::test::temp_dir();
  spit(d + "/in.txt", counting_text(n));
  rtx::io::prepare_dataset(d + "/in.txt", "char", "", d + "/ds");
  return d + "/ds";
}

}  // namespace

TEST_CASE("prepare char: nanoGPT shakespeare_char counts, layout and meta.json", "[cpu]") {
  const std::string out = rtx::test::temp_dir() + "/shakespeare_char";
  const auto r = rtx::io::prepare_dataset(shakespeare(), "char", "", out);
  CHECK(r.vocab_size == 65);
  CHECK(r.train_tokens == 1003854);
  CHECK(r.val_tokens == 111540);
  CHECK(fs::file_size(out + "/train.bin") == 2 * 1003854);
  CHECK(fs::file_size(out + "/val.bin") == 2 * 111540);

  const Dataset ds(out);
  CHECK(ds.vocab_size() == 65);
  CHECK(ds.tokens(false) == 1003854);
  CHECK(ds.tokens(true) == 111540);
  const auto& m = ds.meta();
  CHECK(m.at("schema") == "rtx.dataset.v1");
  CHECK(m.at("dtype") == "uint16");
  CHECK(m.at("tokenizer").at("kind") == "char");
  CHECK(m.at("source").at("bytes") == 1115394);
  // sha256 of input.txt as recorded in shared/data/SOURCES.md
  CHECK(m.at("source").at("sha256") == "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed");

  // The two files, decoded with the rebuilt tokenizer, are the text split at character 1,003,854.
  const std::string text = slurp(shakespeare());
  auto decode_file = [&](const std::string& p) {
    const auto u = read_u16(p);
    return ds.tokenizer().decode(std::vector<int32_t>(u.begin(), u.end()));
  };
  CHECK(decode_file(out + "/train.bin") + decode_file(out + "/val.bin") == text);
  CHECK(decode_file(out + "/val.bin") == text.substr(1003854));  // ASCII text: characters == bytes
  // No temp files left behind by the atomic writes.
  std::set<std::string> names;
  for (auto& e : fs::directory_iterator(out)) names.insert(e.path().filename().string());
  CHECK(names == std::set<std::string>{"meta.json", "train.bin", "val.bin"});
}

TEST_CASE("prepare gpt2: nanoGPT shakespeare counts (301,966 / 36,059)", "[cpu]") {
  const std::string out = rtx::test::temp_dir() + "/shakespeare";
  const auto r = rtx::io::prepare_dataset(shakespeare(), "gpt2", gpt2_dir(), out);
  CHECK(r.vocab_size == 50257);
  CHECK(r.train_tokens == 301966);
  CHECK(r.val_tokens == 36059);
  const Dataset ds(out);
  CHECK(ds.tokenizer().kind() == "gpt2");
  CHECK(ds.tokenizer().eot_id() == 50256);
  const auto val = read_u16(out + "/val.bin");
  CHECK(ds.tokenizer().decode(std::vector<int32_t>(val.begin(), val.end())) == slurp(shakespeare()).substr(1003854));
}

TEST_CASE("prepare: the split counts characters, not bytes", "[cpu]") {
  // 10 characters, 3 bytes each: 90% = 9 characters to train, 1 to val.
  const std::string d = prepared_counting_dir(10);
  const Dataset ds(d);
  CHECK(ds.tokens(false) == 9);
  CHECK(ds.tokens(true) == 1);
  CHECK(read_u16(d + "/val.bin") == std::vector<uint16_t>{9});
  // A single character: int(1 * 0.9) = 0, so train is empty and val holds it.
  const std::string d1 = prepared_counting_dir(1);
  const Dataset ds1(d1);
  CHECK(ds1.tokens(false) == 0);
  CHECK(ds1.tokens(true) == 1);
  int32_t x[1], y[1];
  CHECK(catch_error([&] { ds1.sample_batch(false, 1, 1, 0, 0, x, y); }).category() == ErrorCategory::Input);
}

TEST_CASE("prepare: bad input", "[cpu]") {
  const std::string d = rtx::test::temp_dir();
  const Error missing = catch_error([&] { rtx::io::prepare_dataset(d + "/nope.txt", "char", "", d + "/o"); });
  CHECK(missing.category() == ErrorCategory::Input);
  CHECK(contains(missing.what(), "nope.txt"));
  spit(d + "/empty.txt", "");
  CHECK(catch_error([&] { rtx::io::prepare_dataset(d + "/empty.txt", "char", "", d + "/o"); }).category() ==
        ErrorCategory::Input);
  spit(d + "/latin1.txt", "caf\xE9\n");
  const Error utf = catch_error([&] { rtx::io::prepare_dataset(d + "/latin1.txt", "char", "", d + "/o"); });
  CHECK(utf.category() == ErrorCategory::Input);
  CHECK(contains(utf.what(), "byte 3"));
  spit(d + "/ok.txt", "hello");
  CHECK(catch_error([&] { rtx::io::prepare_dataset(d + "/ok.txt", "bpe", "", d + "/o"); }).category() ==
        ErrorCategory::Usage);
  CHECK(catch_error([&] { rtx::io::prepare_dataset(d + "/ok.txt", "gpt2", d + "/no-such-dir", d + "/o"); })
            .category() == ErrorCategory::Input);
  // More than 65536 distinct characters cannot be stored as uint16.
  std::string big;
  for (uint32_t cp = 0x10000; cp < 0x10000 + 65537; ++cp) {
    big.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    big.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    big.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    big.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  spit(d + "/big.txt", big);
  const Error v = catch_error([&] { rtx::io::prepare_dataset(d + "/big.txt", "char", "", d + "/o"); });
  CHECK(v.category() == ErrorCategory::Input);
  CHECK(contains(v.what(), "65537"));
  CHECK_FALSE(fs::exists(d + "/o/meta.json"));
}

TEST_CASE("Dataset: validation at open names the file", "[cpu]") {
  const std::string src = prepared_counting_dir(200);  // train 180 tokens, val 20, vocab 200
  auto copy = [&] {
    const std::string d = rtx::test::temp_dir() + "/ds";
    fs::copy(src, d);
    return d;
  };
  auto open_error = [](const std::string& d) { return catch_error([&] { Dataset ds(d); }); };

  SECTION("missing directory or meta.json") {
    const Error e = open_error(rtx::test::temp_dir() + "/absent");
    CHECK(e.category() == ErrorCategory::Input);
    CHECK(contains(e.what(), "meta.json"));
  }
  SECTION("missing split") {
    const std::string d = copy();
    fs::remove(d + "/val.bin");
    const Error e = open_error(d);
    CHECK(e.category() == ErrorCategory::Input);
    CHECK(contains(e.what(), "val.bin"));
  }
  SECTION("odd size (truncated by one byte)") {
    const std::string d = copy();
    fs::resize_file(d + "/train.bin", 359);
    const Error e = open_error(d);
    CHECK(e.category() == ErrorCategory::Input);
    CHECK(contains(e.what(), "train.bin"));
    CHECK(contains(e.what(), "odd"));
  }
  SECTION("size disagrees with meta.json") {
    const std::string d = copy();
    fs::resize_file(d + "/train.bin", 358);
    const Error e = open_error(d);
    CHECK(e.category() == ErrorCategory::Input);
    CHECK(contains(e.what(), "train.bin"));
    CHECK(contains(e.what(), "179 tokens"));
  }
  SECTION("token id out of range") {
    const std::string d = copy();
    std::string b = slurp(d + "/val.bin");
    b[2 * 7] = static_cast<char>(0xC8);  // id 200 == vocab_size
    b[2 * 7 + 1] = 0;
    spit(d + "/val.bin", b);
    const Error e = open_error(d);
    CHECK(e.category() == ErrorCategory::Input);
    CHECK(contains(e.what(), "val.bin"));
    CHECK(contains(e.what(), "token id 200 at index 7"));
  }
  SECTION("meta.json: wrong schema, missing field, vocab mismatch, bad tokenizer") {
    auto with_meta = [&](const std::function<void(nlohmann::json&)>& edit) {
      const std::string d = copy();
      nlohmann::json m = nlohmann::json::parse(slurp(d + "/meta.json"));
      edit(m);
      spit(d + "/meta.json", m.dump());
      return open_error(d);
    };
    for (const Error& e : {with_meta([](nlohmann::json& m) { m["schema"] = "rtx.dataset.v9"; }),
                           with_meta([](nlohmann::json& m) { m.erase("train_tokens"); }),
                           with_meta([](nlohmann::json& m) { m["vocab_size"] = 300; }),
                           with_meta([](nlohmann::json& m) { m["dtype"] = "uint32"; }),
                           with_meta([](nlohmann::json& m) { m["tokenizer"]["kind"] = "sentencepiece"; }),
                           with_meta([](nlohmann::json& m) { m["val_tokens"] = 21; })}) {
      CHECK(e.category() == ErrorCategory::Input);
      CHECK((contains(e.what(), "meta.json") || contains(e.what(), "val.bin")));
    }
    const std::string bad = copy();
    spit(bad + "/meta.json", "{not json");
    const Error e = open_error(bad);
    CHECK(e.category() == ErrorCategory::Input);
    CHECK(contains(e.what(), "meta.json"));
  }
}

TEST_CASE("Dataset::sample_batch: windows, determinism, range and bad arguments", "[cpu]") {
  const std::string d = prepared_counting_dir(1000);  // train: tok[i] = i, n = 900; val: 900..999
  const Dataset ds(d);
  REQUIRE(ds.tokens(false) == 900);
  for (int T : {1, 7, 127}) {
    for (int B : {1, 3, 16}) {
      std::vector<int32_t> x(static_cast<size_t>(B * T)), y(x.size()), x2(x.size()), y2(x.size());
      ds.sample_batch(false, B, T, 1234, 5, x.data(), y.data());
      ds.sample_batch(false, B, T, 1234, 5, x2.data(), y2.data());
      CHECK(x == x2);
      CHECK(y == y2);
      for (int b = 0; b < B; ++b) {
        const int32_t off = x[static_cast<size_t>(b * T)];
        CHECK(off >= 0);
        CHECK(off <= 900 - T - 1);
        for (int t = 0; t < T; ++t) {
          CHECK(x[static_cast<size_t>(b * T + t)] == off + t);
          CHECK(y[static_cast<size_t>(b * T + t)] == off + t + 1);
        }
        // The row's offset does not depend on B (stateless per row).
        CHECK(static_cast<uint64_t>(off) == rtx::io::sample_offset(1234, 5, static_cast<uint64_t>(b), 900 - T));
      }
    }
  }
  std::vector<int32_t> a(64 * 8), b(a.size()), t(a.size());
  ds.sample_batch(false, 64, 8, 1234, 5, a.data(), t.data());
  ds.sample_batch(false, 64, 8, 1234, 6, b.data(), t.data());
  CHECK(a != b);  // another subsequence, another batch
  ds.sample_batch(false, 64, 8, 1235, 5, b.data(), t.data());
  CHECK(a != b);  // another seed, another batch
  ds.sample_batch(true, 4, 99, 1, 1, a.data(), t.data());  // val: 100 tokens, T = 99 -> one window
  CHECK(a[0] == 900);
  CHECK(t[98] == 999);
  CHECK(catch_error([&] { ds.sample_batch(true, 1, 100, 1, 1, a.data(), t.data()); }).category() ==
        ErrorCategory::Input);
  CHECK(catch_error([&] { ds.sample_batch(false, 0, 8, 1, 1, a.data(), t.data()); }).category() ==
        ErrorCategory::Usage);
  CHECK(catch_error([&] { ds.sample_batch(false, 1, 0, 1, 1, a.data(), t.data()); }).category() ==
        ErrorCategory::Usage);
  CHECK(catch_error([&] { ds.sample_batch(false, 1, 8, 1, 1, nullptr, t.data()); }).category() ==
        ErrorCategory::Usage);
}

TEST_CASE("Dataset::sample_batch: offsets are uniform (chi-square)", "[cpu]") {
  // train n = 900, T = 850: 50 possible offsets; 20,000 draws, 400 expected per offset.
  const std::string d = prepared_counting_dir(1000);
  const Dataset ds(d);
  const int B = 100, T = 850, rounds = 200;
  std::vector<int32_t> x(static_cast<size_t>(B * T)), y(x.size());
  std::vector<double> count(50, 0.0);
  for (int s = 0; s < rounds; ++s) {
    ds.sample_batch(false, B, T, 42, static_cast<uint64_t>(s), x.data(), y.data());
    for (int b = 0; b < B; ++b) count.at(static_cast<size_t>(x[static_cast<size_t>(b * T)])) += 1.0;
  }
  const double expect = double(B) * rounds / 50.0;
  double chi2 = 0.0;
  for (double c : count) chi2 += (c - expect) * (c - expect) / expect;
  // 49 degrees of freedom: mean 49, sd ~9.9; P(chi2 > 95) < 1e-4. Every offset is hit.
  CHECK(chi2 < 95.0);
  CHECK(*std::min_element(count.begin(), count.end()) > 0.0);
}

TEST_CASE("sample_offset: unbiased reduction on 32- and 64-bit ranges", "[cpu]") {
  CHECK(rtx::io::sample_offset(7, 0, 0, 1) == 0);
  CHECK(catch_error([] { rtx::io::sample_offset(7, 0, 0, 0); }).category() == ErrorCategory::Usage);
  CHECK(catch_error([] { rtx::io::sample_offset(7, 0, uint64_t{1} << 32, 10); }).category() == ErrorCategory::Usage);
  // Row 0, first try, 32-bit: high 32 bits of philox_u32(seed, subseq, 0) * range.
  const uint32_t w = rtx::philox_u32(9, 3, 0);
  CHECK(rtx::io::sample_offset(9, 3, 0, 1000) == (uint64_t{w} * 1000) >> 32);
  CHECK(rtx::io::sample_offset(9, 3, 0, uint64_t{1} << 32) == w);
  // A range just under 2^32 rejects almost half the draws: the result stays in range and
  // its mean is ~range/2.
  for (uint64_t range : {(uint64_t{1} << 31) + 1, (uint64_t{1} << 40) + 7, (uint64_t{1} << 63) + 12345}) {
    double mean = 0.0;
    const int n = 4000;
    for (int i = 0; i < n; ++i) {
      const uint64_t v = rtx::io::sample_offset(11, 0, static_cast<uint64_t>(i), range);
      REQUIRE(v < range);
      mean += static_cast<double>(v) / static_cast<double>(range);
    }
    mean /= n;
    // uniform on [0,1): sd of the mean = sqrt(1/12/n) ~ 0.0046; allow 5 sd.
    CHECK(std::fabs(mean - 0.5) < 0.023);
  }
  // 64-bit range: the top bits are uniform too (8 buckets of v >> 60 over [0, 2^63 + 12345)).
  std::vector<double> top(8, 0.0);
  for (int i = 0; i < 8000; ++i) top.at(rtx::io::sample_offset(5, 1, static_cast<uint64_t>(i), (uint64_t{1} << 63) + 12345) >> 60) += 1;
  double chi2 = 0.0;
  for (double c : top) chi2 += (c - 1000.0) * (c - 1000.0) / 1000.0;
  CHECK(chi2 < 30.0);  // 7 dof: P(chi2 > 30) < 1e-4
}
