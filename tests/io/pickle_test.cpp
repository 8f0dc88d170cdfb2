// Tests of the bounded pickle reader (io/pickle.hpp): values built by hand-written opcodes (as
// CPython's pickle.dumps(..., protocol=2) writes them), the numpy/scipy interpretations, and
// rejection of what it must not read (unknown GLOBALs, truncation, bad memo, trailing bytes).
#include <catch2/catch.hpp>

#include <string>

#include "rtx/core/error.hpp"
#include "rtx/io/pickle.hpp"

using namespace rtx;
namespace pk = rtx::io::pickle;

namespace {
std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s.push_back(static_cast<char>(c));
  return s;
}
void expect_reject(const std::string& p, const std::string& what) {
  try {
    pk::parse(p, "t.pkl");
    FAIL("accepted; expected an error containing '" << what << "'");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.category() == ErrorCategory::Input);
    CHECK(std::string(e.what()).find("t.pkl") != std::string::npos);
    CHECK(std::string(e.what()).find(what) != std::string::npos);
  }
}
}  // namespace

TEST_CASE("pickle: ints, strings, tuples, lists, dict and memo as protocol 2 writes them", "[cpu]") {
  // pickle.dumps({1: [300, 70000], 2: (None, True)}, 2) written out by hand, plus a memo round trip.
  const std::string p = bytes({0x80, 2, '}', 'q', 0, '(', 'K', 1, ']', 'q', 1, '(', 'M', 0x2c, 0x01, 'J', 0x70, 0x11,
                               0x01, 0x00, 'e', 'K', 2, 'N', 0x88, 0x86, 'q', 2, 'u', '.'});
  const pk::Document d = pk::parse(p, "t.pkl");
  // Key 2 holds a tuple, not a list: the int-list dict reader refuses it.
  CHECK_THROWS_AS(pk::as_int_list_dict(d, d.root, "t.pkl"), Error);
  const pk::Value& root = d.at(d.root);
  REQUIRE(root.kind == pk::Kind::Dict);
  REQUIRE(root.items.size() == 4);
  const pk::Value& l = d.at(root.items[1]);
  REQUIRE(l.kind == pk::Kind::List);
  CHECK(d.at(l.items[0]).i == 300);
  CHECK(d.at(l.items[1]).i == 70000);
  CHECK(d.at(d.at(root.items[3]).items[1]).i == 1);
}

TEST_CASE("pickle: defaultdict(list) of int lists, later keys replace earlier ones", "[cpu]") {
  std::string p = bytes({0x80, 2, 'c'}) + "collections\ndefaultdict\n" + bytes({'c'}) + "__builtin__\nlist\n" +
                  bytes({0x85, 'R', '(', 'K', 0, ']', '(', 'K', 5, 'K', 6, 'e', 'K', 3, ']', 'K', 0, ']', 'K', 9, 'a',
                         'u', '.'});
  const pk::Document d = pk::parse(p, "t.pkl");
  const auto g = pk::as_int_list_dict(d, d.root, "t.pkl");
  REQUIRE(g.size() == 2);
  CHECK(g[0].first == 0);
  CHECK(g[0].second == std::vector<int64_t>{9});
  CHECK(g[1].first == 3);
  CHECK(g[1].second.empty());
}

TEST_CASE("pickle: a numpy int32 array through _reconstruct and BUILD", "[cpu]") {
  const std::string data = bytes({1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff});  // [1, -1] little-endian i4
  std::string p = bytes({0x80, 2, 'c'}) + "numpy.core.multiarray\n_reconstruct\n" + bytes({'c'}) + "numpy\nndarray\n" +
                  bytes({'K', 0, 0x85, 'U', 1, 'b', 0x87, 'R', '(', 'K', 1, 'K', 2, 0x85, 'c'}) + "numpy\ndtype\n" +
                  bytes({'U', 2, 'i', '4', 'K', 0, 'K', 1, 0x87, 'R', '(', 'K', 3, 'U', 1, '<', 'N', 'N', 'N', 'J', 0xff,
                         0xff, 0xff, 0xff, 'J', 0xff, 0xff, 0xff, 0xff, 'K', 0, 't', 'b', 0x89, 'U', 8}) +
                  data + bytes({'t', 'b', '.'});
  const pk::Document d = pk::parse(p, "t.pkl");
  const pk::NdArray a = pk::as_ndarray(d, d.root, "t.pkl");
  CHECK(a.dtype == "i4");
  CHECK(a.shape == std::vector<int64_t>{2});
  CHECK(a.to_i64() == std::vector<int64_t>{1, -1});
  // The same array claiming 3 elements: the byte count no longer matches.
  std::string bad = p;
  bad[bad.find(bytes({'K', 2, 0x85}))+1] = 3;
  try {
    const pk::Document d2 = pk::parse(bad, "t.pkl");
    pk::as_ndarray(d2, d2.root, "t.pkl");
    FAIL("accepted a short data buffer");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("holds 8 bytes") != std::string::npos);
  }
}

TEST_CASE("pickle: refuses what it must not read", "[cpu]") {
  expect_reject(bytes({0x80, 2, 'c'}) + "os\nsystem\n" + bytes({'.'}), "GLOBAL 'os system'");
  expect_reject(bytes({0x80, 2, 'K'}), "truncated");
  expect_reject(bytes({0x80, 2, 'h', 7, '.'}), "memo index 7 was never put");
  expect_reject(bytes({0x80, 2, 'N', '.', 'N'}), "1 bytes after STOP");
  expect_reject(bytes({0x80, 2, 'N', 'N', '.'}), "STOP with 2 values");
  expect_reject(bytes({0x80, 2, 'a', '.'}), "stack underflow");
  expect_reject(bytes({0x80, 2, 'K', 1, 'K', 2, 'a', '.'}), "not a list");
  expect_reject(bytes({0x80, 4, 'N', '.'}), "protocol 4");
  expect_reject(bytes({0x80, 2, 'X', 0, 0, 0, 0, '.'}), "opcode 0x58 is not supported");
  expect_reject(bytes({0x80, 2, 'T', 0xff, 0xff, 0xff, 0xff, '.'}), "negative string length");
  expect_reject(bytes({0x80, 2, 't', '.'}), "no MARK");
  expect_reject(bytes({0x80, 2}), "file ends before STOP");
  pk::Limits small;
  small.max_values = 3;
  try {
    pk::parse(bytes({0x80, 2, ']', 'N', 'a', 'N', 'a', 'N', 'a', '.'}), "t.pkl", small);
    FAIL("limit not enforced");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("more than 3 values") != std::string::npos);
  }
}
