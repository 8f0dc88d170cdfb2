// export_gpt2_gguf tests: the file reads back with our GGUF reader with llama.cpp's gpt2 names,
// ggml-order shapes, exact values and tokenizer metadata (char, GPT-2 BPE, padded vocab).
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "rtx/core/dtype.hpp"
#include "rtx/core/error.hpp"
#include "rtx/io/gguf.hpp"
#include "rtx/io/tokenizer.hpp"
#include "rtx/models/export.hpp"
#include "rtx/models/gpt2.hpp"
#include "test_util.hpp"

using rtx::Error;
using rtx::ErrorCategory;
using rtx::io::GgufFile;
using namespace rtx::models;

namespace {

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

Gpt2Config tiny_config(int vocab) {
  Gpt2Config c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.block_size = 7;
  c.vocab_size = vocab;
  return c;
}

std::vector<float> pattern(size_t n) {
  std::vector<float> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<float>(static_cast<int>(i % 2001) - 1000) * 1.37e-3f;
  return p;
}

// The GGUF names llama.cpp's gpt2 loader creates, written out independently of the exporter.
std::vector<std::string> llama_cpp_gpt2_names(int n_layer) {
  std::vector<std::string> n = {"token_embd.weight", "position_embd.weight"};
  for (int l = 0; l < n_layer; ++l)
    for (const char* s : {"attn_norm.weight", "attn_norm.bias", "attn_qkv.weight", "attn_qkv.bias",
                          "attn_output.weight", "attn_output.bias", "ffn_norm.weight", "ffn_norm.bias",
                          "ffn_up.weight", "ffn_up.bias", "ffn_down.weight", "ffn_down.bias"})
      n.push_back("blk." + std::to_string(l) + "." + s);
  n.push_back("output_norm.weight");
  n.push_back("output_norm.bias");
  return n;
}

}  // namespace

TEST_CASE("bytes_to_unicode and tensor names match GPT-2 and llama.cpp", "[cpu]") {
  CHECK(gpt2_byte_to_unicode(' ') == "\xc4\xa0");    // U+0120 'Ġ'
  CHECK(gpt2_byte_to_unicode('\n') == "\xc4\x8a");   // U+010A 'Ċ'
  CHECK(gpt2_byte_to_unicode(0x00) == "\xc4\x80");   // U+0100
  CHECK(gpt2_byte_to_unicode(0x7f) == "\xc4\xa1");   // U+0121
  CHECK(gpt2_byte_to_unicode(0xad) == "\xc5\x83");   // U+0143 (soft hyphen is not printable)
  CHECK(gpt2_byte_to_unicode('a') == "a");
  CHECK(gpt2_byte_to_unicode(0xe9) == "\xc3\xa9");   // printable Latin-1 maps to itself
  CHECK(gpt2_gguf_tensor_name("h.11.mlp.c_proj.bias") == "blk.11.ffn_down.bias");
  CHECK(gpt2_gguf_tensor_name("ln_f.weight") == "output_norm.weight");
  CHECK(catch_error([] { gpt2_gguf_tensor_name("lm_head.weight"); }).category() == ErrorCategory::Usage);
  CHECK(catch_error([] { gpt2_gguf_tensor_name("h.1.mlp.c_fc.scale"); }).category() == ErrorCategory::Usage);
}

TEST_CASE("export_gpt2_gguf (char tokenizer) reads back with names, ggml shapes and values", "[cpu]") {
  const auto tok = rtx::io::make_char_tokenizer_from_text("hello world\nthe end!\tq");
  const Gpt2Config cfg = tiny_config(tok->vocab_size());
  const auto params = pattern(gpt2_num_params(cfg));
  const bool f16 = GENERATE(false, true);
  const std::string path = rtx::test::temp_dir() + "/m.gguf";
  export_gpt2_gguf(cfg, params.data(), params.size(), *tok, path, {f16, "tiny"});

  const GgufFile f = GgufFile::open(path);
  CHECK(f.version() == 3);
  CHECK(f.get("general.architecture").as_string() == "gpt2");
  CHECK(f.get("general.name").as_string() == "tiny");
  CHECK(f.get("general.file_type").as_u64() == (f16 ? 1u : 0u));
  CHECK(f.get("gpt2.context_length").as_u64() == 7);
  CHECK(f.get("gpt2.embedding_length").as_u64() == 8);
  CHECK(f.get("gpt2.feed_forward_length").as_u64() == 32);
  CHECK(f.get("gpt2.block_count").as_u64() == 2);
  CHECK(f.get("gpt2.attention.head_count").as_u64() == 2);
  CHECK(f.get("gpt2.attention.head_count").type == rtx::io::GgufType::U32);
  CHECK(f.get("gpt2.attention.layer_norm_epsilon").type == rtx::io::GgufType::F32);
  CHECK(f.get("gpt2.attention.layer_norm_epsilon").as_f64() == static_cast<double>(1e-5f));
  // No merges: llama.cpp's "rwkv" vocabulary (greedy longest match, no default BOS/EOS), not
  // its "gpt2" BPE, whose default BOS/EOS id 11 would end generation on a real character.
  CHECK(f.get("tokenizer.ggml.model").as_string() == "rwkv");
  CHECK(f.find("tokenizer.ggml.pre") == nullptr);
  CHECK(f.find("tokenizer.ggml.merges") == nullptr);
  CHECK(f.get("tokenizer.ggml.add_bos_token").as_bool() == false);
  CHECK(f.find("tokenizer.ggml.bos_token_id") == nullptr);  // the char tokenizer has no end-of-text
  CHECK(f.find("tokenizer.ggml.eos_token_id") == nullptr);

  // Sorted code points: '\t' '\n' ' ' '!' 'd' 'e' 'h' 'l' 'n' 'o' 'q' 'r' 't' 'w', escaped as
  // llama.cpp's llama_unescape_rwkv_token reads them.
  const auto toks = f.get("tokenizer.ggml.tokens").as_strings();
  const std::vector<std::string> want_toks = {"\\t", "\\n", " ", "!", "d", "e", "h",
                                              "l",   "n",   "o", "q", "r", "t", "w"};
  CHECK(toks == want_toks);
  const auto& types = f.get("tokenizer.ggml.token_type").array;
  REQUIRE(types.size() == toks.size());
  for (const auto& t : types) CHECK(t.as_i64() == 1);

  const auto names = llama_cpp_gpt2_names(cfg.n_layer);
  REQUIRE(f.tensors().size() == names.size());
  CHECK(f.find_tensor("output.weight") == nullptr);
  for (const auto& p : gpt2_param_layout(cfg)) {
    const std::string gn = gpt2_gguf_tensor_name(p.name);
    INFO(p.name << " -> " << gn);
    CHECK(std::find(names.begin(), names.end(), gn) != names.end());
    const auto& t = f.tensor(gn);
    CHECK(t.ne == std::vector<uint64_t>(p.shape.rbegin(), p.shape.rend()));
    const bool half = f16 && p.shape.size() == 2;
    CHECK(t.type == (half ? 1u : 0u));
    const auto got = f.tensor_f32(gn);
    REQUIRE(got.size() == p.numel);
    size_t bad = 0;
    for (size_t i = 0; i < p.numel; ++i) {
      const float ref = params[p.offset + i];
      const float want = half ? rtx::f16_to_f32(rtx::f32_to_f16(ref)) : ref;
      bad += got[i] != want;
    }
    CHECK(bad == 0);
  }
  // The shapes llama.cpp asks for: token_embd {C, V}, pos {C, n_ctx}, qkv {C, 3C}, up {C, 4C}, down {4C, C}.
  CHECK(f.tensor("token_embd.weight").ne == std::vector<uint64_t>{8, 14});
  CHECK(f.tensor("position_embd.weight").ne == std::vector<uint64_t>{8, 7});
  CHECK(f.tensor("blk.1.attn_qkv.weight").ne == std::vector<uint64_t>{8, 24});
  CHECK(f.tensor("blk.1.ffn_up.weight").ne == std::vector<uint64_t>{8, 32});
  CHECK(f.tensor("blk.1.ffn_down.weight").ne == std::vector<uint64_t>{32, 8});
  CHECK(f.tensor("blk.0.ffn_up.bias").ne == std::vector<uint64_t>{32});
}

TEST_CASE("export_gpt2_gguf (char tokenizer): rwkv escapes and padding rows", "[cpu]") {
  // Backslash, CR, a control byte, DEL, 2- and 3-byte UTF-8 characters, and 2 padding rows.
  const auto tok = rtx::io::make_char_tokenizer_from_text("a\\\r\x01\x7f\xc3\xa9\xe6\x97\xa5");
  REQUIRE(tok->vocab_size() == 7);
  const Gpt2Config cfg = tiny_config(9);
  const auto params = pattern(gpt2_num_params(cfg));
  const std::string path = rtx::test::temp_dir() + "/esc.gguf";
  export_gpt2_gguf(cfg, params.data(), params.size(), *tok, path);
  const GgufFile f = GgufFile::open(path);
  CHECK(f.get("tokenizer.ggml.model").as_string() == "rwkv");
  CHECK(f.get("tokenizer.ggml.tokens").as_strings() ==
        std::vector<std::string>{"\\x01", "\\r", "\\\\", "a", "\\x7f", "\xc3\xa9", "\xe6\x97\xa5",
                                 "\\xff[PAD7]", "\\xff[PAD8]"});
  std::vector<int64_t> types;
  for (const auto& t : f.get("tokenizer.ggml.token_type").array) types.push_back(t.as_i64());
  CHECK(types == std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 5, 5});
}

namespace {
// A stand-in byte-level tokenizer with an end-of-text token, independent of the BPE loader.
class FakeBpe : public rtx::io::Tokenizer {
 public:
  std::string kind() const override { return "gpt2"; }
  int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  std::vector<int32_t> encode(std::string_view) const override { return {}; }
  std::string decode(const std::vector<int32_t>&) const override { return {}; }
  std::string token_bytes(int32_t id) const override { return pieces_.at(static_cast<size_t>(id)); }
  int32_t eot_id() const override { return eot_; }
  nlohmann::json to_json() const override {
    return {{"kind", "gpt2"}, {"encoder", nlohmann::json::object()}, {"merges", {"\xc4\xa0 t", {"h", "e"}}}};
  }
  std::vector<std::string> pieces_ = {"h", "e", " t", "he", "<|endoftext|>"};
  int32_t eot_ = 4;
};
}  // namespace

TEST_CASE("export_gpt2_gguf: end-of-text, merges and a padded vocabulary", "[cpu]") {
  FakeBpe tok;
  const Gpt2Config cfg = tiny_config(8);  // 5 real tokens + 3 padding rows
  const auto params = pattern(gpt2_num_params(cfg));
  const std::string path = rtx::test::temp_dir() + "/pad.gguf";
  export_gpt2_gguf(cfg, params.data(), params.size(), tok, path);
  const GgufFile f = GgufFile::open(path);
  CHECK(f.get("tokenizer.ggml.tokens").as_strings() ==
        std::vector<std::string>{"h", "e", "\xc4\xa0t", "he", "<|endoftext|>", "[PAD5]", "[PAD6]", "[PAD7]"});
  std::vector<int64_t> types;
  for (const auto& t : f.get("tokenizer.ggml.token_type").array) types.push_back(t.as_i64());
  CHECK(types == std::vector<int64_t>{1, 1, 1, 1, 3, 5, 5, 5});
  CHECK(f.get("tokenizer.ggml.merges").as_strings() == std::vector<std::string>{"\xc4\xa0 t", "h e"});
  CHECK(f.get("tokenizer.ggml.bos_token_id").as_u64() == 4);
  CHECK(f.get("tokenizer.ggml.eos_token_id").as_u64() == 4);
  CHECK(f.tensor("token_embd.weight").ne == std::vector<uint64_t>{8, 8});

  SECTION("bad input") {
    CHECK(catch_error([&] { export_gpt2_gguf(cfg, params.data(), params.size() - 1, tok, path); }).category() ==
          ErrorCategory::Usage);
    const Gpt2Config small = tiny_config(4);
    const auto p4 = pattern(gpt2_num_params(small));
    CHECK(catch_error([&] { export_gpt2_gguf(small, p4.data(), p4.size(), tok, path); }).category() ==
          ErrorCategory::Usage);
    Gpt2Config broken = cfg;
    broken.n_head = 3;
    CHECK(catch_error([&] { export_gpt2_gguf(broken, params.data(), params.size(), tok, path); }).category() ==
          ErrorCategory::Input);
    FakeBpe dup;
    dup.pieces_[1] = "h";
    CHECK(catch_error([&] { export_gpt2_gguf(cfg, params.data(), params.size(), dup, path); }).category() ==
          ErrorCategory::Input);
    FakeBpe no_eot;  // llama.cpp's BPE would take id 11 as end-of-generation
    no_eot.eot_ = -1;
    CHECK(catch_error([&] { export_gpt2_gguf(cfg, params.data(), params.size(), no_eot, path); }).category() ==
          ErrorCategory::Input);
  }
}

TEST_CASE("export_gpt2_gguf with GPT-2's BPE tokenizer writes encoder.json's strings and vocab.bpe's merges", "[cpu]") {
  const std::string dir = rtx::test::data_dir() + "/gpt2_tokenizer";
  const auto tok = rtx::io::load_gpt2_tokenizer(dir);
  Gpt2Config cfg = tiny_config(50257);
  cfg.n_layer = 1;
  const auto params = pattern(gpt2_num_params(cfg));
  const std::string path = rtx::test::temp_dir() + "/bpe.gguf";
  export_gpt2_gguf(cfg, params.data(), params.size(), *tok, path);
  const GgufFile f = GgufFile::open(path);
  const auto toks = f.get("tokenizer.ggml.tokens").as_strings();
  REQUIRE(toks.size() == 50257);
  // Every token string equals its key in encoder.json.
  std::ifstream in(dir + "/encoder.json");
  const nlohmann::json enc = nlohmann::json::parse(in);
  size_t mismatches = 0;
  for (auto it = enc.begin(); it != enc.end(); ++it) mismatches += toks.at(it.value().get<size_t>()) != it.key();
  CHECK(mismatches == 0);
  CHECK(toks[220] == "\xc4\xa0");
  CHECK(toks[50256] == "<|endoftext|>");
  CHECK(f.get("tokenizer.ggml.token_type").array[50256].as_i64() == 3);
  CHECK(f.get("tokenizer.ggml.eos_token_id").as_u64() == 50256);
  const auto merges = f.get("tokenizer.ggml.merges").as_strings();
  REQUIRE(merges.size() == 50000);
  CHECK(merges[0] == "\xc4\xa0 t");  // first line after "#version: 0.2" in vocab.bpe
  CHECK(f.tensor("token_embd.weight").ne == std::vector<uint64_t>{8, 50257});
}
