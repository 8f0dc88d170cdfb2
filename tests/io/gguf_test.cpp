// GGUF tests: v3 round trip of every metadata type and odd tensor shapes, the exact bytes of a
// tiny file, the shared v1/v2 files in $RTX_DATA, and refusal of lying or truncated files.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "rtx/core/dtype.hpp"
#include "rtx/core/error.hpp"
#include "rtx/io/gguf.hpp"
#include "test_util.hpp"

using rtx::Error;
using rtx::ErrorCategory;
using namespace rtx::io;

namespace {

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
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

// Little-endian byte builder for hand-made images (independent of the writer).
struct Bytes {
  std::string s;
  bool v1 = false;
  template <class T>
  Bytes& put(T v) {
    s.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  Bytes& count(uint64_t n) { return v1 ? put<uint32_t>(static_cast<uint32_t>(n)) : put<uint64_t>(n); }
  Bytes& str(const std::string& x) {
    count(x.size());
    s += x;
    return *this;
  }
  Bytes& pad(size_t a) {
    while (s.size() % a) s += '\0';
    return *this;
  }
};

// Header + n_tensors + n_kv.
Bytes header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
  Bytes b;
  b.v1 = version == 1;
  b.s = "GGUF";
  b.put<uint32_t>(version);
  b.count(n_tensors).count(n_kv);
  return b;
}

void expect_bad(const std::string& img, const std::string& needle) {
  INFO("expecting an error mentioning: " << needle);
  const Error e = catch_error([&] { GgufFile::parse(img, "mem.gguf"); });
  CHECK(e.category() == ErrorCategory::Input);
  const std::string all = std::string(e.what()) + " | " + e.where();
  INFO(all);
  CHECK(all.find(needle) != std::string::npos);
  CHECK(all.find("mem.gguf") != std::string::npos);
}

// One-KV ("a" = u8 7), one-tensor ("t", F32, ne {1}, 1.0f) file, written by hand per gguf.md.
std::string tiny_by_hand() {
  Bytes b = header(3, 1, 1);
  b.str("a").put<uint32_t>(0).put<uint8_t>(7);                                         // KV
  b.str("t").put<uint32_t>(1).put<uint64_t>(1).put<uint32_t>(0).put<uint64_t>(0);      // tensor info
  b.pad(32).put<float>(1.0f).pad(32);                                                  // data
  return b.s;
}

}  // namespace

TEST_CASE("gguf v3 round trip: every metadata type, odd shapes, alignment", "[cpu]") {
  const uint32_t alignment = GENERATE(32u, 64u);
  const std::string path = rtx::test::temp_dir() + "/rt.gguf";
  std::vector<float> t1{2.5f}, t7(7), t127(127), m(21);
  for (size_t i = 0; i < t7.size(); ++i) t7[i] = -static_cast<float>(i) / 3;
  for (size_t i = 0; i < t127.size(); ++i) t127[i] = static_cast<float>(i) * 1e-3f;
  for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<float>(i) + 0.25f;
  std::vector<uint16_t> h10(10);
  for (size_t i = 0; i < h10.size(); ++i) h10[i] = rtx::f32_to_f16(static_cast<float>(i) - 4.5f);
  std::vector<uint8_t> q8(2 * 34);
  for (size_t i = 0; i < q8.size(); ++i) q8[i] = static_cast<uint8_t>(i * 7);

  std::vector<std::pair<std::string, GgufValue>> kv = {
      {"t.u8", GgufValue::u8(255)},         {"t.i8", GgufValue::i8(-128)},
      {"t.u16", GgufValue::u16(65535)},     {"t.i16", GgufValue::i16(-32768)},
      {"t.u32", GgufValue::u32(4000000000u)}, {"t.i32", GgufValue::i32(-7)},
      {"t.f32", GgufValue::f32(1e-5f)},     {"t.bool", GgufValue::boolean(true)},
      {"t.string", GgufValue::string("caf\xc3\xa9")}, {"t.u64", GgufValue::u64(~0ULL)},
      {"t.i64", GgufValue::i64(INT64_MIN)}, {"t.f64", GgufValue::f64(3.141592653589793)},
      {"t.strings", GgufValue::string_array({"a", "", "\xc4\xa0the", std::string(300, 'x')})},
      {"t.i32s", GgufValue::i32_array({1, -2, 3})},
      {"t.f32s", GgufValue::f32_array({0.5f})},
      {"t.empty", GgufValue::string_array({})},
      {"t.nested", GgufValue::make_array(GgufType::ARRAY, {GgufValue::make_array(GgufType::U8, {GgufValue::u8(1)}),
                                                           GgufValue::make_array(GgufType::U8, {})})},
  };
  GgufWriter w(alignment);
  for (const auto& [k, v] : kv) w.add(k, v);
  w.add_tensor("t1", GgmlType::F32, {1}, t1.data());
  w.add_tensor("t7", GgmlType::F32, {7}, t7.data());
  w.add_tensor("t127", GgmlType::F32, {127}, t127.data());
  w.add_tensor("m.7x3", GgmlType::F32, {7, 3}, m.data());
  w.add_tensor("h.5x2", GgmlType::F16, {5, 2}, h10.data());
  w.add_tensor("q8", GgmlType::Q8_0, {32, 2}, q8.data());
  w.add_tensor("m4", GgmlType::F32, {1, 1, 7, 3}, m.data());
  w.write(path);

  const GgufFile f = GgufFile::open(path);
  CHECK(f.version() == 3);
  CHECK(f.alignment() == alignment);
  CHECK(f.data_offset() % alignment == 0);
  REQUIRE(f.metadata().size() == kv.size() + (alignment != 32 ? 1 : 0));
  for (const auto& [k, v] : kv) {
    INFO(k);
    REQUIRE(f.find(k) != nullptr);
    CHECK(*f.find(k) == v);
  }
  CHECK(f.get("t.f64").as_f64() == 3.141592653589793);
  CHECK(f.get("t.u32").as_u64() == 4000000000u);
  CHECK(f.get("t.i8").as_i64() == -128);
  CHECK(f.get("t.strings").as_strings()[2] == "\xc4\xa0the");
  CHECK(catch_error([&] { f.get("t.string").as_u64("t.string"); }).where() == "t.string");
  CHECK(catch_error([&] { f.get("t.i8").as_u64(); }).category() == ErrorCategory::Input);
  CHECK(catch_error([&] { f.get("absent"); }).category() == ErrorCategory::Input);

  REQUIRE(f.tensors().size() == 7);
  for (const auto& t : f.tensors()) CHECK(t.offset % alignment == 0);
  CHECK(f.tensor_f32("t1") == t1);
  CHECK(f.tensor_f32("t7") == t7);
  CHECK(f.tensor_f32("t127") == t127);
  CHECK(f.tensor("m.7x3").ne == std::vector<uint64_t>{7, 3});
  CHECK(f.tensor_f32("m.7x3") == m);
  CHECK(f.tensor("m4").ne == std::vector<uint64_t>{1, 1, 7, 3});
  const auto h = f.tensor_f32("h.5x2");
  for (size_t i = 0; i < h.size(); ++i) CHECK(h[i] == static_cast<float>(i) - 4.5f);
  CHECK(f.tensor("q8").nbytes == 68);
  CHECK(f.tensor("q8").type == 8);
  CHECK(std::memcmp(f.tensor_data("q8"), q8.data(), q8.size()) == 0);
  // Q8_0 decodes as d (f16 of the first 2 bytes) x int8 per value, block by block.
  const std::vector<float> q8f = f.tensor_f32("q8");
  REQUIRE(q8f.size() == 64);
  for (size_t b = 0; b < 2; ++b) {
    const float d = rtx::f16_to_f32(static_cast<uint16_t>(q8[b * 34] | (q8[b * 34 + 1] << 8)));
    for (size_t j = 0; j < 32; ++j) CHECK(q8f[b * 32 + j] == d * static_cast<float>(static_cast<int8_t>(q8[b * 34 + 2 + j])));
  }
  CHECK(slurp(path).size() % alignment == 0);
}

TEST_CASE("gguf writer output matches a hand-assembled tiny file byte for byte", "[cpu]") {
  const std::string path = rtx::test::temp_dir() + "/tiny.gguf";
  const float one = 1.0f;
  GgufWriter w;
  w.add("a", GgufValue::u8(7));
  w.add_tensor("t", GgmlType::F32, {1}, &one);
  w.write(path);
  const std::string want = tiny_by_hand();
  // 24-byte header, KV 9+4+1, tensor info 9+4+8+4+8 = 71 bytes, padded to 96; 4 data bytes padded to 128.
  CHECK(want.size() == 128);
  CHECK(slurp(path) == want);
  const GgufFile f = GgufFile::parse(want, "mem.gguf");
  CHECK(f.data_offset() == 96);
  CHECK(f.get("a").as_u64() == 7);
  CHECK(f.tensor_f32("t") == std::vector<float>{1.0f});
}

TEST_CASE("gguf reader: v1 and v2 files from the shared data", "[cpu]") {
  const std::string d = rtx::test::data_dir() + "/stories260k/";
  SECTION("v1 f32 llama (32-bit counts)") {
    const GgufFile f = GgufFile::open(d + "tinyllamas-stories-260k-f32.gguf");
    CHECK(f.version() == 1);
    CHECK(f.get("general.architecture").as_string() == "llama");
    CHECK(f.get("llama.block_count").as_u64() == 5);
    CHECK(f.get("llama.embedding_length").as_u64() == 64);
    CHECK(f.get("llama.feed_forward_length").as_u64() == 172);
    CHECK(f.get("tokenizer.ggml.model").as_string() == "llama");
    const auto toks = f.get("tokenizer.ggml.tokens").as_strings();
    REQUIRE(toks.size() == 512);
    CHECK(toks[13] == "<0x0A>");  // SentencePiece byte-fallback token for '\n' (byte 10 + 3 specials)
    CHECK(f.tensors().size() == 48);
    const auto& emb = f.tensor("token_embd.weight");
    CHECK(emb.ne == std::vector<uint64_t>{64, 512});
    CHECK(emb.type == 0);
    uint64_t params = 0;
    for (const auto& t : f.tensors()) params += t.numel;
    CHECK(params == 292800);
    // SOURCES.md: output.weight is identical to token_embd.weight.
    CHECK(f.tensor_f32("output.weight") == f.tensor_f32("token_embd.weight"));
  }
  SECTION("v2 q8_0 with a row size that is not a multiple of the block: refused, naming the tensor") {
    const Error e = catch_error([&] { GgufFile::open(d + "tinyllamas-stories-260k-q8_0.gguf"); });
    CHECK(e.category() == ErrorCategory::Input);
    CHECK(e.where().find("ffn_down") != std::string::npos);
    CHECK(std::string(e.what()).find("block size 32") != std::string::npos);
  }
}

TEST_CASE("gguf reader: hand-made v1 and v2 images", "[cpu]") {
  for (uint32_t version : {1u, 2u}) {
    INFO("version " << version);
    Bytes b = header(version, 1, 2);
    b.str("general.name").put<uint32_t>(8).str("x");
    b.str("arr").put<uint32_t>(9).put<uint32_t>(8).count(2).str("p").str("qq");
    b.str("w").put<uint32_t>(2);
    if (version == 1) b.put<uint32_t>(3).put<uint32_t>(2); else b.put<uint64_t>(3).put<uint64_t>(2);
    b.put<uint32_t>(0).put<uint64_t>(0).pad(32);
    for (int i = 0; i < 6; ++i) b.put<float>(static_cast<float>(i));
    const GgufFile f = GgufFile::parse(b.s, "mem.gguf");
    CHECK(f.version() == version);
    CHECK(f.get("general.name").as_string() == "x");
    CHECK(f.get("arr").as_strings() == std::vector<std::string>{"p", "qq"});
    CHECK(f.tensor("w").ne == std::vector<uint64_t>{3, 2});
    CHECK(f.tensor_f32("w") == std::vector<float>{0, 1, 2, 3, 4, 5});
  }
}

TEST_CASE("gguf reader refuses bad magic, versions, truncation and lying fields", "[cpu]") {
  const std::string tiny = tiny_by_hand();
  SECTION("every truncation before the end of the tensor data fails; padding after it is optional") {
    for (size_t cut = 0; cut < 100; ++cut) {
      INFO("cut " << cut);
      const Error e = catch_error([&] { GgufFile::parse(tiny.substr(0, cut), "mem.gguf"); });
      CHECK(e.category() == ErrorCategory::Input);
    }
    CHECK_NOTHROW(GgufFile::parse(tiny.substr(0, 100), "mem.gguf"));
  }
  SECTION("magic and version") {
    expect_bad("GGML" + tiny.substr(4), "not a GGUF file");
    std::string v = tiny;
    v[4] = 0;
    expect_bad(v, "version 0");
    v[4] = 4;
    expect_bad(v, "version 4");
    v[4] = 0, v[7] = 3;
    expect_bad(v, "big-endian");
    expect_bad(std::string("FUGG") + tiny.substr(4), "big-endian");
  }
  SECTION("lying counts and lengths allocate nothing and fail") {
    expect_bad(header(3, 0, uint64_t(1) << 60).s, "metadata_kv_count");
    expect_bad(header(3, uint64_t(1) << 60, 0).s, "tensor_count");
    Bytes s = header(3, 0, 1);
    s.put<uint64_t>(uint64_t(1) << 62);
    expect_bad(s.s, "truncated");
    Bytes a = header(3, 0, 1);
    a.str("arr").put<uint32_t>(9).put<uint32_t>(4).put<uint64_t>(uint64_t(1) << 61);
    expect_bad(a.s, "array length");
    Bytes a1 = header(1, 0, 1);
    a1.str("arr").put<uint32_t>(9).put<uint32_t>(8).count(0xffffffffu);
    expect_bad(a1.s, "array length");
  }
  SECTION("bad values") {
    Bytes t = header(3, 0, 1);
    t.str("k").put<uint32_t>(13).put<uint32_t>(0);
    expect_bad(t.s, "unknown value type 13");
    Bytes b = header(3, 0, 1);
    b.str("k").put<uint32_t>(7).put<uint8_t>(2);
    expect_bad(b.s, "neither 0 nor 1");
    Bytes d = header(3, 0, 2);
    d.str("k").put<uint32_t>(0).put<uint8_t>(1).str("k").put<uint32_t>(0).put<uint8_t>(1);
    expect_bad(d.s, "duplicate metadata key");
    Bytes al = header(3, 0, 1);
    al.str("general.alignment").put<uint32_t>(4).put<uint32_t>(48);
    expect_bad(al.s, "power of two");
    Bytes al2 = header(3, 0, 1);
    al2.str("general.alignment").put<uint32_t>(5).put<int32_t>(32);
    expect_bad(al2.s, "expected u32");
    Bytes n = header(3, 0, 1);
    n.str("deep").put<uint32_t>(9);
    for (int i = 0; i < 6; ++i) n.put<uint32_t>(9).put<uint64_t>(1);
    expect_bad(n.s, "nested");
  }
  auto one_tensor = [](uint32_t ndims, std::vector<uint64_t> ne, uint32_t type, uint64_t offset, size_t data_bytes) {
    Bytes b = header(3, 1, 0);
    b.str("w").put<uint32_t>(ndims);
    for (uint64_t e : ne) b.put<uint64_t>(e);
    b.put<uint32_t>(type).put<uint64_t>(offset).pad(32);
    b.s.append(data_bytes, '\0');
    return b.s;
  };
  SECTION("bad tensor infos") {
    CHECK_NOTHROW(GgufFile::parse(one_tensor(2, {3, 2}, 0, 0, 24), "mem.gguf"));
    expect_bad(one_tensor(5, {1, 1, 1, 1, 1}, 0, 0, 4), "n_dims 5");
    expect_bad(one_tensor(1, {4}, 4, 0, 16), "unknown ggml type 4");
    expect_bad(one_tensor(1, {4}, 99, 0, 16), "unknown ggml type 99");
    expect_bad(one_tensor(1, {33}, 8, 0, 64), "block size 32");
    expect_bad(one_tensor(2, {uint64_t(1) << 40, uint64_t(1) << 40}, 0, 0, 0), "overflows");
    expect_bad(one_tensor(1, {4}, 0, 16, 48), "not a multiple of the alignment");
    expect_bad(one_tensor(1, {4}, 0, 0, 15), "runs past");
    expect_bad(one_tensor(1, {4}, 0, uint64_t(1) << 63, 16), "runs past");
    Bytes dup = header(3, 2, 0);
    dup.str("w").put<uint32_t>(1).put<uint64_t>(1).put<uint32_t>(0).put<uint64_t>(0);
    dup.str("w").put<uint32_t>(1).put<uint64_t>(1).put<uint32_t>(0).put<uint64_t>(32);
    dup.pad(32).s.append(64, '\0');
    expect_bad(dup.s, "duplicate tensor name");
    Bytes ov = header(3, 2, 0);
    ov.str("a").put<uint32_t>(1).put<uint64_t>(16).put<uint32_t>(0).put<uint64_t>(0);
    ov.str("b").put<uint32_t>(1).put<uint64_t>(1).put<uint32_t>(0).put<uint64_t>(32);
    ov.pad(32).s.append(64, '\0');
    expect_bad(ov.s, "overlaps");
  }
  SECTION("random byte corruption never crashes: each image opens or throws rtx::Error") {
    GgufWriter w;
    w.add("general.architecture", GgufValue::string("gpt2"));
    w.add("toks", GgufValue::string_array({"a", "bb", "ccc"}));
    w.add("nest", GgufValue::make_array(GgufType::ARRAY, {GgufValue::i32_array({1, 2})}));
    const std::vector<float> v(7, 1.0f);
    w.add_tensor("x", GgmlType::F32, {7}, v.data());
    const std::string path = rtx::test::temp_dir() + "/fuzz.gguf";
    w.write(path);
    const std::string good = slurp(path);
    std::mt19937 rng(1234);
    int opened = 0, refused = 0;
    for (int it = 0; it < 3000; ++it) {
      std::string img = good;
      const int flips = 1 + static_cast<int>(rng() % 3);
      for (int k = 0; k < flips; ++k) img[rng() % img.size()] = static_cast<char>(rng() & 0xff);
      if (rng() % 4 == 0) img.resize(rng() % img.size());
      try {
        const GgufFile f = GgufFile::parse(img, "fuzz");
        for (const auto& t : f.tensors()) (void)f.tensor_data(t.name);
        ++opened;
      } catch (const Error&) {
        ++refused;
      }
    }
    CHECK(opened + refused == 3000);
    CHECK(refused > 0);
  }
}

TEST_CASE("gguf writer refuses bad requests", "[cpu]") {
  const float x = 0;
  GgufWriter w;
  w.add("a", GgufValue::u8(1));
  CHECK(catch_error([&] { w.add("a", GgufValue::u8(1)); }).category() == ErrorCategory::Usage);
  CHECK(catch_error([&] { w.add("", GgufValue::u8(1)); }).category() == ErrorCategory::Usage);
  CHECK(catch_error([&] { w.add("general.alignment", GgufValue::u32(64)); }).category() == ErrorCategory::Usage);
  CHECK(catch_error([&] { w.add("m", GgufValue::make_array(GgufType::I32, {GgufValue::u8(1)})); }).category() ==
        ErrorCategory::Usage);
  w.add_tensor("t", GgmlType::F32, {1}, &x);
  CHECK(catch_error([&] { w.add_tensor("t", GgmlType::F32, {1}, &x); }).category() == ErrorCategory::Usage);
  CHECK(catch_error([&] { w.add_tensor(std::string(64, 'n'), GgmlType::F32, {1}, &x); }).category() == ErrorCategory::Usage);
  CHECK(catch_error([&] { w.add_tensor("u", GgmlType::F32, {}, &x); }).category() == ErrorCategory::Usage);
  CHECK(catch_error([&] { w.add_tensor("u", GgmlType::F32, {1, 1, 1, 1, 1}, &x); }).category() == ErrorCategory::Usage);
  CHECK(catch_error([&] { w.add_tensor("u", GgmlType::Q4_0, {31}, &x); }).category() == ErrorCategory::Usage);
  CHECK(catch_error([&] { w.add_tensor("u", GgmlType::F32, {1}, static_cast<const void*>(nullptr)); }).category() ==
        ErrorCategory::Usage);
  CHECK(catch_error([] { GgufWriter bad(48); }).category() == ErrorCategory::Usage);
  CHECK(ggml_type_block(12) == std::pair<uint32_t, uint32_t>{256, 144});  // Q4_K: 2+2+QK_K/2+12
  CHECK(ggml_type_block(4) == std::pair<uint32_t, uint32_t>{0, 0});
}

TEST_CASE("gguf regression from fuzzing: a tensor with 0 dims is refused", "[cpu]") {
  // tests/fuzz/corpus/gguf/regress-zero-dims: n_dims 0 was accepted (the doc says 1..4 dims).
  std::ifstream f(rtx::test::source_dir() + "/tests/fuzz/corpus/gguf/regress-zero-dims", std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  REQUIRE(!ss.str().empty());
  try {
    GgufFile::parse(ss.str(), "regress-zero-dims");
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::Input);
    CHECK(std::string(e.what()).find("n_dims 0") != std::string::npos);
  }
}

TEST_CASE("gguf regression from fuzzing: a data section past the end of the file", "[cpu]") {
  const auto read = [](const std::string& name) {
    std::ifstream f(rtx::test::source_dir() + "/tests/fuzz/corpus/gguf/" + name, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    REQUIRE(!ss.str().empty());
    return ss.str();
  };
  // No tensors and no alignment padding after the metadata: accepted, the (empty) data
  // section starts at the end of the file instead of past it.
  const std::string a = read("regress-no-tensors-no-padding");
  const GgufFile f = GgufFile::parse(a, "regress-no-tensors-no-padding");
  CHECK(f.tensors().empty());
  CHECK(f.data_offset() == a.size());
  // One tensor, but the file ends before the aligned data section: truncated.
  try {
    GgufFile::parse(read("regress-no-padding-2"), "regress-no-padding-2");
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::Input);
  }
}

TEST_CASE("gguf dequantization matches gguf-py on every readable quantized type", "[cpu]") {
  // tests/reference/gguf_quants_golden.py: each type T as tensor "T" and gguf-py's f32 decoding
  // of it as "T.ref" (3 rows of 256).
  const GgufFile f = GgufFile::open(rtx::test::source_dir() + "/tests/reference/data/quants_golden.gguf");
  for (const char* name : {"F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"}) {
    INFO(name);
    const auto& t = f.tensor(name);
    CHECK(std::string(ggml_type_name(t.type)) == name);
    CHECK(ggml_can_dequantize(t.type));
    const std::vector<float> got = f.tensor_f32(name), ref = f.tensor_f32(std::string(name) + ".ref");
    REQUIRE(got.size() == 768);
    REQUIRE(ref.size() == 768);
    double scale = 0, err = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      scale = std::max(scale, std::fabs(static_cast<double>(ref[i])));
      err = std::max(err, std::fabs(static_cast<double>(got[i]) - ref[i]));
    }
    CHECK(scale > 0);
    CHECK(err <= 1e-6 * scale);  // the same arithmetic up to float rounding order
  }
  // Types without a decoder are refused by name; a block count that does not divide is refused.
  CHECK_FALSE(ggml_can_dequantize(static_cast<uint32_t>(GgmlType::Q2_K)));
  std::vector<uint8_t> raw(34, 0);
  std::vector<float> out(40);
  const Error e = catch_error([&] { ggml_dequantize(static_cast<uint32_t>(GgmlType::Q8_0), raw.data(), out.data(), 40); });
  CHECK(e.category() == ErrorCategory::Input);
  CHECK_THAT(std::string(e.what()), Catch::Contains("not a whole number of Q8_0 blocks of 32"));
  const Error e2 = catch_error([&] { ggml_dequantize(static_cast<uint32_t>(GgmlType::IQ2_XXS), raw.data(), out.data(), 256); });
  CHECK_THAT(std::string(e2.what()), Catch::Contains("IQ2_XXS cannot be dequantized"));
}
