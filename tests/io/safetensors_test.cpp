// safetensors writer/reader tests: round trips (odd shapes, dtypes, metadata), the exact bytes of
// a tiny file, every corruption the reader must refuse, and the streaming AtomicFileWriter.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "rtx/core/dtype.hpp"
#include "rtx/core/error.hpp"
#include "rtx/io/atomic_file.hpp"
#include "rtx/io/safetensors.hpp"
#include "test_util.hpp"

using rtx::Error;
using rtx::ErrorCategory;
using namespace rtx::io;
namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  for (auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
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

// A file image: u64 LE header length, header, data.
std::string image(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

// The reader's error for an image, which must be Input and mention `needle` in what/where.
void expect_bad(const std::string& img, const std::string& needle) {
  INFO("expecting an error mentioning: " << needle);
  const Error e = catch_error([&] { SafetensorsFile::parse(img, "mem.safetensors"); });
  CHECK(e.category() == ErrorCategory::Input);
  const std::string all = std::string(e.what()) + " | " + e.where();
  INFO(all);
  CHECK(all.find(needle) != std::string::npos);
  CHECK(all.find("mem.safetensors") != std::string::npos);
}

}  // namespace

TEST_CASE("safetensors round trip: odd shapes, dtypes and metadata", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  const std::string path = dir + "/ckpt.safetensors";

  std::vector<float> a1{3.5f}, a7(7), a127(127), m35(15);
  for (size_t i = 0; i < a7.size(); ++i) a7[i] = static_cast<float>(i) * -0.25f;
  for (size_t i = 0; i < a127.size(); ++i) a127[i] = std::sin(static_cast<float>(i));
  for (size_t i = 0; i < m35.size(); ++i) m35[i] = static_cast<float>(i * i);
  std::vector<uint16_t> h7(7), b7(7), u16(127);
  for (size_t i = 0; i < 7; ++i) h7[i] = rtx::f32_to_f16(a7[i] + 0.1f), b7[i] = rtx::f32_to_bf16(a7[i] - 3.3f);
  for (size_t i = 0; i < u16.size(); ++i) u16[i] = static_cast<uint16_t>(i * 517);
  std::vector<int32_t> i32{-1, 2147483647, -2147483647 - 1};
  std::vector<int64_t> i64{1234567890123LL};
  std::vector<uint8_t> u8{0, 255, 7};
  const float scalar = 42.0f;

  std::vector<SafetensorsSource> src = {
      {"a1", StDType::F32, {1}, a1.data(), {}},
      {"a7", StDType::F32, {7}, a7.data(), {}},
      {"a127", StDType::F32, {127}, a127.data(), {}},
      {"m.3x5", StDType::F32, {3, 5}, m35.data(), {}},
      {"h7", StDType::F16, {7}, h7.data(), {}},
      {"b7", StDType::BF16, {1, 7}, b7.data(), {}},
      {"u16", StDType::U16, {127}, u16.data(), {}},
      {"i32", StDType::I32, {3}, i32.data(), {}},
      {"i64", StDType::I64, {1}, i64.data(), {}},
      {"u8", StDType::U8, {3}, u8.data(), {}},
      {"scalar", StDType::F32, {}, &scalar, {}},
      {"empty", StDType::F32, {0, 4}, nullptr, {}},
  };
  const std::map<std::string, std::string> meta = {
      {"step", "1234"}, {"config", R"({"n_layer":2,"quote":"\"x\""})"}, {"unicode", "caf\xc3\xa9 \xe2\x9c\x93"}, {"empty", ""}};
  write_safetensors(path, src, meta);
  CHECK(entries(dir) == std::vector<std::string>{"ckpt.safetensors"});

  const SafetensorsFile f = SafetensorsFile::open(path);
  for (const auto& [k, v] : meta) CHECK(f.metadata().at(k) == v);
  CHECK(f.metadata().at(kSafetensorsSha256Key).size() == 64);
  CHECK(f.metadata().size() == meta.size() + 1);
  REQUIRE(f.tensors().size() == src.size());
  // Tensors come back in data order, which is the write order.
  for (size_t i = 0; i < src.size(); ++i) {
    const auto& t = f.tensors()[i];
    CHECK(t.name == src[i].name);
    CHECK(t.dtype == src[i].dtype);
    CHECK(t.shape == src[i].shape);
    const size_t nb = static_cast<size_t>(t.nbytes());
    if (nb) CHECK(std::memcmp(f.data(t.name), src[i].data, nb) == 0);
  }
  CHECK(f.info("scalar").numel() == 1);
  CHECK(f.info("empty").nbytes() == 0);
  CHECK(f.read_f32("a127") == a127);
  CHECK(f.read_f32("m.3x5") == m35);
  const auto h = f.read_f32("h7");
  const auto b = f.read_f32("b7");
  for (size_t i = 0; i < 7; ++i) {
    CHECK(h[i] == rtx::f16_to_f32(h7[i]));
    CHECK(std::fabs(h[i] - (a7[i] + 0.1f)) <= 1e-3f * (1 + std::fabs(a7[i])));
    CHECK(b[i] == rtx::bf16_to_f32(b7[i]));
  }
  float one[1];
  CHECK(catch_error([&] { f.read_f32("a7", one, 1); }).category() == ErrorCategory::Input);
  const Error ei = catch_error([&] { f.read_f32("i32"); });
  CHECK(std::string(ei.what()).find("I32") != std::string::npos);
  const Error missing = catch_error([&] { f.info("nope"); });
  CHECK(std::string(missing.what()).find("nope") != std::string::npos);
  CHECK(missing.where() == path);
}

TEST_CASE("safetensors streams tensors through fill callbacks larger than one chunk", "[cpu]") {
  const std::string path = rtx::test::temp_dir() + "/big.safetensors";
  const size_t n = (size_t(5) << 20) / 4 + 3;  // > 4 MiB chunk, not a multiple of it
  std::vector<float> ref(n);
  for (size_t i = 0; i < n; ++i) ref[i] = static_cast<float>(i % 1000) * 0.5f;
  size_t calls = 0;
  SafetensorsSource s{"big", StDType::F32, {static_cast<int64_t>(n)}, nullptr,
                      [&](uint64_t off, void* dst, size_t bytes) {
                        ++calls;
                        std::memcpy(dst, reinterpret_cast<const char*>(ref.data()) + off, bytes);
                      }};
  write_safetensors(path, {s, {"tail", StDType::F32, {1}, ref.data(), {}}});
  CHECK(calls == 2);
  const auto f = SafetensorsFile::open(path);
  CHECK(f.read_f32("big") == ref);
  CHECK(f.read_f32("tail")[0] == ref[0]);
}

TEST_CASE("safetensors bytes of a tiny file match the spec by hand", "[cpu]") {
  const std::string path = rtx::test::temp_dir() + "/tiny.safetensors";
  const float one = 1.0f;
  write_safetensors(path, {{"a", StDType::F32, {1}, &one, {}}});
  // SHA-256 of the 4 data bytes 00 00 80 3f (hashlib), header padded with spaces to 8 bytes.
  std::string hdr =
      R"({"__metadata__":{"rtx.sha256":"e00e5eb9444182f352323374ef4e08ebcb784725fdd4fd612d7730540b3e0c8c"},)"
      R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  while (hdr.size() % 8) hdr += ' ';
  const std::string want = image(hdr, std::string("\x00\x00\x80\x3f", 4));
  const std::string got = slurp(path);
  CHECK(got.size() == want.size());
  CHECK(got == want);
  CHECK(static_cast<unsigned char>(got[0]) == hdr.size());  // header length, LE
}

TEST_CASE("safetensors reader refuses truncated and corrupt files", "[cpu]") {
  const std::string path = rtx::test::temp_dir() + "/ok.safetensors";
  std::vector<float> v(127);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) + 0.5f;
  write_safetensors(path, {{"w", StDType::F32, {127}, v.data(), {}}, {"b", StDType::F32, {7}, v.data(), {}}},
                    {{"k", "v"}});
  const std::string good = slurp(path);
  REQUIRE_NOTHROW(SafetensorsFile::parse(good, "mem.safetensors"));
  uint64_t hn = 0;
  for (int i = 0; i < 8; ++i) hn |= static_cast<uint64_t>(static_cast<unsigned char>(good[static_cast<size_t>(i)])) << (8 * i);

  SECTION("truncated at several points") {
    for (size_t cut : {size_t(0), size_t(5), size_t(8), size_t(8 + hn / 2), size_t(8 + hn), size_t(8 + hn + 100),
                       good.size() - 1}) {
      INFO("cut at " << cut);
      const Error e = catch_error([&] { SafetensorsFile::parse(good.substr(0, cut), "mem.safetensors"); });
      CHECK(e.category() == ErrorCategory::Input);
      CHECK(e.where().find("mem.safetensors") != std::string::npos);
    }
  }
  SECTION("a flipped data byte fails the checksum, unless verification is off") {
    std::string bad = good;
    bad[bad.size() - 3] ^= 0x10;
    expect_bad(bad, "SHA-256");
    CHECK_NOTHROW(SafetensorsFile::parse(bad, "mem.safetensors", false));
  }
  SECTION("a malformed checksum field") {
    std::string bad = good;
    const size_t at = bad.find("rtx.sha256\":\"") + 13;
    bad[at] = 'X';
    expect_bad(bad, "hex");
  }
  SECTION("header length lies") {
    std::string bad = good;
    bad[0] = static_cast<char>(0xff), bad[1] = static_cast<char>(0xff), bad[2] = static_cast<char>(0xff);
    expect_bad(bad, "past the end");
    bad[5] = 0x10;  // > 100 MB
    expect_bad(bad, "100 MB");
  }
  // Hand-written headers, 12 bytes of data.
  const std::string data12(12, '\0');
  SECTION("header shape and JSON") {
    expect_bad(image("[1,2]", data12), "start with '{'");
    expect_bad(image("{\"a\":", data12), "not valid JSON");
    expect_bad(image("{\"a\":{\"dtype\":\"F33\",\"shape\":[3],\"data_offsets\":[0,12]}}", data12), "F33");
    expect_bad(image("{\"a\":{\"dtype\":\"F32\",\"shape\":[-3],\"data_offsets\":[0,12]}}", data12), "non-negative");
    expect_bad(image("{\"a\":{\"dtype\":\"F32\",\"shape\":[3.0],\"data_offsets\":[0,12]}}", data12), "non-negative");
    expect_bad(image("{\"a\":{\"dtype\":\"F32\",\"shape\":[3]}}", data12), "data_offsets");
    expect_bad(image("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12],\"x\":1}}", data12), "unknown field");
    expect_bad(image("{\"a\":7}", data12), "\"a\"");
    expect_bad(image("{\"__metadata__\":{\"k\":1},\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}", data12),
               "__metadata__[\"k\"]");
  }
  SECTION("offsets: span, bounds, order, coverage, duplicates") {
    expect_bad(image("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}}", data12), "span");
    expect_bad(image("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", data12), "past the data section");
    expect_bad(image("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", data12), "begin > end");
    expect_bad(image("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                     data12),
               "overlaps");
    expect_bad(image("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                     data12),
               "gap");
    expect_bad(image("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data12), "not covered");
    expect_bad(image("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
                     "\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}",
                     data12),
               "twice");
    expect_bad(image("{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,12]}}", data12),
               "overflow");
    // Out-of-order entries in the header are fine when the offsets tile the data.
    const auto ok = SafetensorsFile::parse(image("{\"b\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[8,12]},"
                                                 "\"a\":{\"dtype\":\"U8\",\"shape\":[2,4],\"data_offsets\":[0,8]}}",
                                                 data12),
                                           "mem");
    CHECK(ok.tensors()[0].name == "a");
    CHECK(ok.tensors()[1].name == "b");
  }
  SECTION("missing file") {
    CHECK(catch_error([] { SafetensorsFile::open("/nonexistent/x.safetensors"); }).category() == ErrorCategory::Input);
  }
}

TEST_CASE("write_safetensors refuses bad requests and leaves the target untouched", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  const std::string path = dir + "/keep.safetensors";
  rtx::io::atomic_write_file(path, "old");
  const float x = 1;
  auto usage = [&](std::vector<SafetensorsSource> s, std::map<std::string, std::string> m = {}) {
    CHECK(catch_error([&] { write_safetensors(path, s, m); }).category() == ErrorCategory::Usage);
  };
  usage({{"a", StDType::F32, {1}, &x, {}}, {"a", StDType::F32, {1}, &x, {}}});
  usage({{"", StDType::F32, {1}, &x, {}}});
  usage({{"__metadata__", StDType::F32, {1}, &x, {}}});
  usage({{"a", StDType::F32, {-1}, &x, {}}});
  usage({{"a", StDType::F32, {1}, nullptr, {}}});
  usage({{"a", StDType::F32, {1}, &x, {}}}, {{kSafetensorsSha256Key, "x"}});
  // A fill callback that throws midway: the old file stays, no temp file is left.
  SafetensorsSource boom{"a", StDType::F32, {1 << 22}, nullptr, [](uint64_t off, void*, size_t) {
                           if (off > 0) throw Error(ErrorCategory::Environment, "device copy failed");
                         }};
  CHECK_THROWS_AS(write_safetensors(path, {boom}), Error);
  CHECK(slurp(path) == "old");
  CHECK(entries(dir) == std::vector<std::string>{"keep.safetensors"});
}

TEST_CASE("AtomicFileWriter streams, patches and cleans up", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  const std::string path = dir + "/out.bin";
  rtx::io::atomic_write_file(path, "before");
  {
    AtomicFileWriter w(path);
    w.write("hello ", 6);
    w.write(std::string_view("world"));
    CHECK(w.bytes_written() == 11);
    CHECK(slurp(path) == "before");  // not visible before commit
    w.write_at(0, "J", 1);
    CHECK(catch_error([&] { w.write_at(10, "xy", 2); }).category() == ErrorCategory::Usage);
    w.commit();
    CHECK(catch_error([&] { w.commit(); }).category() == ErrorCategory::Usage);
    CHECK(catch_error([&] { w.write("x", 1); }).category() == ErrorCategory::Usage);
  }
  CHECK(slurp(path) == "Jello world");
  CHECK(entries(dir) == std::vector<std::string>{"out.bin"});
  {
    AtomicFileWriter w(path);
    w.write("abandoned", 9);
    CHECK(entries(dir).size() == 2);  // the temp file exists meanwhile
  }
  CHECK(slurp(path) == "Jello world");
  CHECK(entries(dir) == std::vector<std::string>{"out.bin"});
  CHECK(catch_error([&] { AtomicFileWriter w(dir); }).category() == ErrorCategory::Usage);
  CHECK(catch_error([&] { AtomicFileWriter w(dir + "/missing/x"); }).category() == ErrorCategory::Environment);
  // Non-regular targets are written in place.
  AtomicFileWriter devnull("/dev/null");
  devnull.write("x", 1);
  devnull.commit();
}
