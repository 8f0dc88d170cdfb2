// Tests of the Llama serving model (rtx/serve/llama.hpp) on the stories260k GGUF: greedy text vs
// llama2.c's documented sample, logits vs the float64 numpy reference (tests/reference/llama_ref.py),
// bitwise batch invariance, the SentencePiece tokenizer, f16 weights, and bad files and calls.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtx/core/dtype.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/io/gguf.hpp"
#include "rtx/serve/llama.hpp"
#include "rtx/serve/model.hpp"
#include "test_util.hpp"

using namespace rtx;
using json = nlohmann::json;

namespace {

std::string model_path() { return test::data_dir() + "/stories260k/tinyllamas-stories-260k-f32.gguf"; }

const json& golden() {
  static const json j = [] {
    const std::string path = test::source_dir() + "/tests/reference/data/llama_golden.json";
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open " + path + " (run tests/reference/llama_ref.py)");
    json d = json::parse(in);
    if (d.value("schema", "") != "rtx.llama_golden.v1") throw std::runtime_error(path + ": unexpected schema");
    return d;
  }();
  return j;
}

/// One model per options, loaded once.
const serve::Model& model(int threads = 0) {
  static std::unique_ptr<serve::Model> m0, m1;
  auto& m = threads == 1 ? m1 : m0;
  if (!m) m = serve::load_llama_gguf(model_path(), serve::LoadOptions{threads});
  return *m;
}

serve::Model& mut_model(int threads = 0) { return const_cast<serve::Model&>(model(threads)); }

std::unique_ptr<serve::KvCache> make_cache(const serve::Model& m, int block_tokens, int n_blocks) {
  const auto& i = m.info();
  return std::make_unique<serve::KvCache>(i.n_layer, i.n_kv_head, i.head_dim, block_tokens, n_blocks);
}

/// A sequence being served: its tokens so far, its block table and how many positions are cached.
struct Seq {
  std::vector<int32_t> toks;
  std::vector<int32_t> blocks;
  int pos = 0;
};

/// The part of `s` covering its next n tokens (allocating blocks as needed).
serve::SeqBatch step(Seq& s, serve::KvCache& kv, int n, bool want) {
  while (static_cast<int>(s.blocks.size()) < kv.blocks_for(s.pos + n)) {
    const int b = kv.alloc();
    if (b < 0) throw std::runtime_error("test KV pool exhausted");
    s.blocks.push_back(b);
  }
  serve::SeqBatch sb;
  sb.tokens = s.toks.data() + s.pos;
  sb.n = n;
  sb.pos = s.pos;
  sb.blocks = s.blocks.data();
  sb.n_blocks = static_cast<int>(s.blocks.size());
  sb.want_logits = want;
  return sb;
}

int32_t argmax(const float* v, int n) { return static_cast<int32_t>(std::max_element(v, v + n) - v); }

std::vector<int32_t> prompt_ids(const serve::Model& m, const std::string& text) {
  std::vector<int32_t> ids;
  if (m.info().bos >= 0) ids.push_back(m.info().bos);
  const auto t = m.tokenizer().encode(text);
  ids.insert(ids.end(), t.begin(), t.end());
  return ids;
}

/// Greedy continuation of `prompt` for `n_new` tokens (prefill in one call, then one per call).
std::vector<int32_t> greedy(serve::Model& m, const std::string& prompt, int n_new) {
  const int V = m.info().vocab;
  auto kv = make_cache(m, 16, m.info().context / 16);
  Seq s;
  s.toks = prompt_ids(m, prompt);
  std::vector<float> logits(V);
  std::vector<int32_t> out;
  int n = static_cast<int>(s.toks.size());
  for (int i = 0; i < n_new; ++i) {
    m.forward({step(s, *kv, n, true)}, *kv, logits.data());
    s.pos += n;
    const int32_t t = argmax(logits.data(), V);
    out.push_back(t);
    s.toks.push_back(t);
    n = 1;
  }
  return out;
}

template <class F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL("expected an rtx::Error");
  return Error(ErrorCategory::Internal, "unreachable");
}

/// Rewrites the stories GGUF into `path` (v3) with `edit` choosing each tensor's fate:
/// return false to drop it; it may change the type, the extents and the bytes.
struct TensorOut {
  std::string name;
  io::GgmlType type;
  std::vector<uint64_t> ne;
  std::vector<uint8_t> bytes;
};
void rewrite_gguf(const std::string& path, const std::function<bool(TensorOut&)>& edit,
                  const std::function<void(io::GgufWriter&)>& extra_kv = {},
                  const std::vector<std::string>& drop_keys = {}) {
  const auto f = io::GgufFile::open(model_path());
  io::GgufWriter w;
  for (const auto& [k, v] : f.metadata())
    if (k != "general.alignment" && std::find(drop_keys.begin(), drop_keys.end(), k) == drop_keys.end()) w.add(k, v);
  if (extra_kv) extra_kv(w);
  std::vector<TensorOut> outs;
  outs.reserve(f.tensors().size());
  for (const auto& t : f.tensors()) {
    TensorOut o{t.name, static_cast<io::GgmlType>(t.type), t.ne,
                std::vector<uint8_t>(f.tensor_data(t.name), f.tensor_data(t.name) + t.nbytes)};
    if (edit(o)) outs.push_back(std::move(o));
  }
  for (const auto& o : outs) w.add_tensor(o.name, o.type, o.ne, o.bytes.data());
  w.write(path);
}

std::vector<float> as_floats(const std::vector<uint8_t>& b) {
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

}  // namespace

TEST_CASE("llama: config and info of stories260k", "[cpu]") {
  const auto f = io::GgufFile::open(model_path());
  const auto c = serve::llama_config_from_gguf(f);
  CHECK(c.n_layer == 5);
  CHECK(c.dim == 64);
  CHECK(c.n_head == 8);
  CHECK(c.n_kv_head == 4);
  CHECK(c.ffn_dim == 172);
  CHECK(c.vocab == 512);
  CHECK(c.context == 512);
  CHECK(c.n_rot == 8);
  CHECK(c.rope_theta == 10000.0f);
  CHECK(c.rms_eps == Approx(1e-5).epsilon(1e-6));
  const auto& i = model().info();
  CHECK(i.arch == "llama");
  CHECK(i.name == "tinyllamas-stories-260k");
  CHECK(i.vocab == 512);
  CHECK(i.n_layer == 5);
  CHECK(i.n_kv_head == 4);
  CHECK(i.head_dim == 8);
  CHECK(i.bos == 1);
  CHECK(i.eos == 2);
  CHECK(i.param_bytes >= 292800u * 4);
}

TEST_CASE("llama: greedy continuation matches llama2.c's stories260K sample", "[cpu]") {
  auto& m = mut_model();
  const auto ids = greedy(m, "Once upon a time", 60);
  const std::string text = "Once upon a time" + m.tokenizer().decode(ids);
  const std::string sample =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she "
      "saw a big, red ball. She wanted to play with it, but it was too high";
  INFO("generated: " << text);
  CHECK(text.compare(0, sample.size(), sample) == 0);
  // The float64 reference picks the same tokens.
  const auto want = golden()["greedy_ids"].get<std::vector<int32_t>>();
  CHECK(std::vector<int32_t>(ids.begin(), ids.begin() + 40) == std::vector<int32_t>(want.begin(), want.begin() + 40));
}

TEST_CASE("llama: logits match the float64 reference within 1e-4", "[cpu]") {
  auto& m = mut_model();
  const int V = m.info().vocab;
  const auto& g = golden();
  Seq s;
  s.toks = g["tokens"].get<std::vector<int32_t>>();
  const auto positions = g["positions"].get<std::vector<int>>();
  REQUIRE(positions.size() >= 3);
  // Block size 4: the 16 tokens span 4 blocks; calls end at each golden position (chunks 1, 1, 5, 9).
  auto kv = make_cache(m, 4, 8);
  std::vector<float> logits(V);
  double max_err = 0;
  for (size_t k = 0; k < positions.size(); ++k) {
    const int n = positions[k] + 1 - s.pos;
    REQUIRE(n >= 1);
    m.forward({step(s, *kv, n, true)}, *kv, logits.data());
    s.pos += n;
    const auto want = g["logits"][k].get<std::vector<double>>();
    REQUIRE(want.size() == static_cast<size_t>(V));
    for (int v = 0; v < V; ++v) {
      const double d = std::fabs(logits[v] - want[v]);
      max_err = std::max(max_err, d / (1.0 + std::fabs(want[v])));
      if (d > 1e-4 + 1e-4 * std::fabs(want[v])) {
        FAIL_CHECK("position " << positions[k] << " logit " << v << ": " << logits[v] << " vs " << want[v]);
        break;
      }
    }
  }
  INFO("max |diff| / (1 + |ref|) = " << max_err);
  CHECK(max_err < 1e-4);
  CHECK(max_err > 0);  // f32 vs f64: a zero would mean the comparison is not looking at anything
}

TEST_CASE("llama: logits are bitwise batch invariant", "[cpu]") {
  auto& m = mut_model();
  const int V = m.info().vocab;
  auto text = [&](const std::string& s) { return prompt_ids(m, s); };
  const std::vector<int32_t> a_prompt = [&] {
    auto t = text("The cat sat on the big mat.");
    t.resize(7);
    return t;
  }();
  REQUIRE(a_prompt.size() == 7);
  constexpr int kSteps = 5;

  // A alone: prefill 7, then 5 greedy steps. Its decode tokens are then fixed for the others.
  std::vector<std::vector<float>> alone;
  std::vector<int32_t> a_full = a_prompt;
  {
    auto kv = make_cache(m, 16, 8);
    Seq a;
    a.toks = a_prompt;
    a.toks.reserve(64);
    std::vector<float> lg(V);
    m.forward({step(a, *kv, 7, true)}, *kv, lg.data());
    a.pos = 7;
    alone.push_back(lg);
    for (int i = 0; i < kSteps; ++i) {
      a.toks.push_back(argmax(lg.data(), V));
      m.forward({step(a, *kv, 1, true)}, *kv, lg.data());
      a.pos += 1;
      alone.push_back(lg);
    }
    a_full = a.toks;
  }
  REQUIRE(alone.size() == kSteps + 1);

  auto same = [&](const std::vector<std::vector<float>>& got, const char* what) {
    REQUIRE(got.size() == alone.size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO(what << ", call " << i);
      CHECK(std::memcmp(got[i].data(), alone[i].data(), sizeof(float) * V) == 0);
    }
  };

  SECTION("with three other sequences of other lengths in the same calls") {
    for (int bt : {16, 7, 1}) {
      auto kv = make_cache(m, bt, 128);
      Seq a, b, c, d;
      b.toks = text("Lily and Ben went to the park to play.");  // prefill 3, then decode
      c.toks = text("Once upon a time there was a dog named Max who liked to run and jump.");  // 11
      d.toks = text("A long time ago, in a small town, there lived an old man who had a very big garden full of "
                    "flowers.");  // chunked prefill while A decodes
      REQUIRE(d.toks.size() >= 24);
      b.toks.resize(3);
      // Others take their blocks first so A's table differs from the run alone.
      std::vector<serve::SeqBatch> batch = {step(b, *kv, 3, true), step(c, *kv, 11, false), step(d, *kv, 6, false)};
      a.toks = a_full;
      batch.insert(batch.begin() + 1, step(a, *kv, 7, true));
      std::vector<float> lg(3 * V);
      std::vector<std::vector<float>> got;
      m.forward(batch, *kv, lg.data());
      got.emplace_back(lg.begin() + V, lg.begin() + 2 * V);  // A is the second with logits
      b.pos = 3, a.pos = 7, c.pos = 11, d.pos = 6;
      b.toks.push_back(argmax(lg.data(), V));
      for (int i = 0; i < kSteps; ++i) {
        // D (prefill chunk of 3), A (1), C (1), B (1), in rotating order; all want logits but D.
        std::vector<std::pair<Seq*, int>> parts = {{&d, 3}, {&a, 1}, {&c, 1}, {&b, 1}};
        std::rotate(parts.begin(), parts.begin() + (i % 4), parts.end());
        if (c.toks.size() <= static_cast<size_t>(c.pos)) c.toks.push_back(static_cast<int32_t>(5 + i));
        if (b.toks.size() <= static_cast<size_t>(b.pos)) b.toks.push_back(static_cast<int32_t>(300 + i));
        batch.clear();
        int a_row = -1, row = 0;
        for (auto& [s, n] : parts) {
          const bool want = s != &d;
          if (s == &a) a_row = row;
          batch.push_back(step(*s, *kv, n, want));
          row += want;
        }
        m.forward(batch, *kv, lg.data());
        for (auto& [s, n] : parts) s->pos += n;
        got.emplace_back(lg.begin() + a_row * V, lg.begin() + (a_row + 1) * V);
      }
      INFO("block_tokens " << bt);
      same(got, "batched with B, C, D");
    }
  }

  SECTION("with the prompt split into chunks 3 + 4") {
    auto kv = make_cache(m, 4, 8);
    Seq a;
    a.toks = a_full;
    std::vector<float> lg(V);
    std::vector<std::vector<float>> got;
    m.forward({step(a, *kv, 3, false)}, *kv, nullptr);
    a.pos = 3;
    m.forward({step(a, *kv, 4, true)}, *kv, lg.data());
    a.pos = 7;
    got.push_back(lg);
    for (int i = 0; i < kSteps; ++i) {
      m.forward({step(a, *kv, 1, true)}, *kv, lg.data());
      a.pos += 1;
      got.push_back(lg);
    }
    same(got, "chunks 3 + 4");
  }

  SECTION("with one OpenMP thread") {
    auto& m1 = mut_model(1);
    auto kv = make_cache(m1, 16, 8);
    Seq a;
    a.toks = a_full;
    std::vector<float> lg(V);
    std::vector<std::vector<float>> got;
    m1.forward({step(a, *kv, 7, true)}, *kv, lg.data());
    a.pos = 7;
    got.push_back(lg);
    for (int i = 0; i < kSteps; ++i) {
      m1.forward({step(a, *kv, 1, true)}, *kv, lg.data());
      a.pos += 1;
      got.push_back(lg);
    }
    same(got, "threads = 1");
  }
}

TEST_CASE("llama tokenizer: known ids, round trips, byte fallback", "[cpu]") {
  const auto& tok = model().tokenizer();
  CHECK(tok.kind() == "llama");
  CHECK(tok.vocab_size() == 512);
  CHECK(tok.eot_id() == 2);
  // Ids from llama.cpp's llama-tokenize on a GGUF v3 copy of the model (llama_ref.py --v3),
  // which the reference script's own SPM also gives.
  CHECK(tok.encode("Once upon a time") == std::vector<int32_t>{403, 407, 261, 378});
  CHECK(tok.encode("Hello world") == std::vector<int32_t>{346, 306, 414, 263, 304, 341});
  for (const auto& e : golden()["encode"]) {
    const std::string t = e["text"].get<std::string>();
    INFO("text: " << t);
    CHECK(tok.encode(t) == e["ids"].get<std::vector<int32_t>>());
  }
  // Round trips: decode keeps the prefix space.
  for (const std::string s : {"Once upon a time, there was a little girl named Lily.", "Hello world",
                              " two  spaces\tand a tab\n", "Tom said: \"Zebra 42!\"", "caf\xC3\xA9 \xE6\xBC\xA2 \xF0\x9F\x98\x80",
                              "x"}) {
    INFO("text: " << s);
    CHECK(tok.decode(tok.encode(s)) == " " + s);
  }
  CHECK(tok.encode("").empty());
  // Byte fallback: U+6F22 is no piece; its UTF-8 bytes E6 BC A2 are tokens <0xE6> <0xBC> <0xA2> (ids 3 + byte).
  const auto ids = tok.encode("\xE6\xBC\xA2");
  REQUIRE(ids.size() == 4);
  CHECK(ids[1] == 3 + 0xE6);
  CHECK(ids[2] == 3 + 0xBC);
  CHECK(ids[3] == 3 + 0xA2);
  CHECK(tok.token_bytes(3 + 0x0A) == "\n");
  CHECK(tok.token_bytes(1).empty());  // <s>
  CHECK(tok.token_bytes(2).empty());  // </s>
  CHECK(tok.token_bytes(0).empty());  // <unk>
  CHECK(tok.token_bytes(403) == " Once");
  CHECK(error_of([&] { tok.token_bytes(512); }).category() == ErrorCategory::Input);
  CHECK(error_of([&] { tok.decode({-1}); }).category() == ErrorCategory::Input);
  const Error bad = error_of([&] { tok.encode("ok \xC3\x28"); });
  CHECK(bad.category() == ErrorCategory::Input);
  CHECK(std::string(bad.what()).find("byte 3") != std::string::npos);
  // to_json round trip.
  const auto j = tok.to_json();
  CHECK(j["kind"] == "llama");
  const auto tok2 = serve::llama_tokenizer_from_json(j, "test");
  CHECK(tok2->encode("Once upon a time, Lily \xE6\xBC\xA2") == tok.encode("Once upon a time, Lily \xE6\xBC\xA2"));
  CHECK(tok2->to_json() == j);
  CHECK(error_of([&] { serve::llama_tokenizer_from_json(json{{"kind", "llama"}}, "t"); }).category() ==
        ErrorCategory::Input);
}

TEST_CASE("llama tokenizer: merge order by score, ties leftmost, unknown characters", "[cpu]") {
  const std::string sp = "\xE2\x96\x81";
  auto vocab = [&](float score_sp_a, float score_ab) {
    serve::LlamaVocab v;
    v.tokens = {"<unk>", "<s>", "</s>", sp, "a", "b", sp + "a", "ab"};
    v.scores = {0, 0, 0, -1, -2, -3, score_sp_a, score_ab};
    v.types = {2, 3, 3, 1, 1, 1, 1, 1};
    v.bos = 1, v.eos = 2, v.unk = 0;
    return v;
  };
  // "ab" -> symbols [_ a b]; pairs "_a" and "ab" compete.
  CHECK(serve::make_llama_tokenizer(vocab(-5, -4))->encode("ab") == std::vector<int32_t>{3, 7});
  CHECK(serve::make_llama_tokenizer(vocab(-4, -5))->encode("ab") == std::vector<int32_t>{6, 5});
  CHECK(serve::make_llama_tokenizer(vocab(-4, -4))->encode("ab") == std::vector<int32_t>{6, 5});  // tie: leftmost
  // No space prefix.
  auto v = vocab(-5, -4);
  v.add_space_prefix = false;
  CHECK(serve::make_llama_tokenizer(v)->encode("ab a") == std::vector<int32_t>{7, 6});
  // "c" is no piece and there are no byte pieces: <unk> when the vocabulary names one, else an error.
  v = vocab(-5, -4);
  CHECK(serve::make_llama_tokenizer(v)->encode("c") == std::vector<int32_t>{3, 0});
  v.unk = -1;
  const Error e = error_of([&] { serve::make_llama_tokenizer(v)->encode("ac"); });
  CHECK(e.category() == ErrorCategory::Input);
  CHECK(std::string(e.what()).find("'c' at byte 1") != std::string::npos);
  // Inconsistent tables.
  v = vocab(-5, -4);
  v.scores.pop_back();
  CHECK(error_of([&] { serve::make_llama_tokenizer(v); }).category() == ErrorCategory::Input);
  v = vocab(-5, -4);
  v.types[4] = 9;
  CHECK(error_of([&] { serve::make_llama_tokenizer(v); }).category() == ErrorCategory::Input);
  v = vocab(-5, -4);
  v.types[4] = 6;  // a byte token not named <0xXX>
  CHECK(error_of([&] { serve::make_llama_tokenizer(v); }).category() == ErrorCategory::Input);
  v = vocab(-5, -4);
  v.eos = 8;
  CHECK(error_of([&] { serve::make_llama_tokenizer(v); }).category() == ErrorCategory::Input);
}

TEST_CASE("llama: f16 and bf16 weights load exactly as their f32 values", "[cpu]") {
  const std::string dir = test::temp_dir();
  for (const auto ty : {io::GgmlType::F16, io::GgmlType::BF16}) {
    INFO("type " << io::ggml_type_name(static_cast<uint32_t>(ty)));
    auto to16 = [ty](float x) { return ty == io::GgmlType::F16 ? f32_to_f16(x) : f32_to_bf16(x); };
    auto from16 = [ty](uint16_t h) { return ty == io::GgmlType::F16 ? f16_to_f32(h) : bf16_to_f32(h); };
    // Same weights rounded to 16 bits: once stored as 16-bit, once as F32 holding the rounded values.
    rewrite_gguf(dir + "/w16.gguf", [&](TensorOut& t) {
      if (t.ne.size() != 2) return true;  // norms stay f32, as llama.cpp's converter keeps them
      const auto f = as_floats(t.bytes);
      t.bytes.resize(f.size() * 2);
      for (size_t i = 0; i < f.size(); ++i) {
        const uint16_t h = to16(f[i]);
        std::memcpy(&t.bytes[2 * i], &h, 2);
      }
      t.type = ty;
      return true;
    });
    rewrite_gguf(dir + "/w16as32.gguf", [&](TensorOut& t) {
      if (t.ne.size() != 2) return true;
      auto f = as_floats(t.bytes);
      for (auto& x : f) x = from16(to16(x));
      std::memcpy(t.bytes.data(), f.data(), t.bytes.size());
      return true;
    });
    auto m16 = serve::load_llama_gguf(dir + "/w16.gguf");
    auto m32 = serve::load_llama_gguf(dir + "/w16as32.gguf");
    const int V = m16->info().vocab;
    CHECK(greedy(*m16, "Once upon a time", 12) == greedy(*m32, "Once upon a time", 12));
    // Logits bitwise equal, and within 16-bit rounding of the f32 model's.
    std::vector<float> a(V), b(V), c(V);
    for (auto [mm, out] : {std::pair{m16.get(), &a}, std::pair{m32.get(), &b}, std::pair{&mut_model(), &c}}) {
      auto kv = make_cache(*mm, 16, 2);
      Seq s;
      s.toks = prompt_ids(*mm, "Once upon a time, there was");
      mm->forward({step(s, *kv, static_cast<int>(s.toks.size()), true)}, *kv, out->data());
    }
    CHECK(std::memcmp(a.data(), b.data(), sizeof(float) * V) == 0);
    double max_d = 0;
    for (int v = 0; v < V; ++v) max_d = std::max(max_d, std::fabs(static_cast<double>(a[v]) - c[v]));
    CHECK(max_d > 0);
    CHECK(max_d < (ty == io::GgmlType::F16 ? 0.03 : 0.3));
  }
}

TEST_CASE("llama: a sequence may fill the whole context, not one position more", "[cpu]") {
  auto& m = mut_model();
  const int V = m.info().vocab, T = m.info().context;
  auto kv = make_cache(m, 7, (T + 6) / 7);
  Seq s;
  for (int i = 0; i < T + 1; ++i) s.toks.push_back(static_cast<int32_t>(3 + (i * 37) % (V - 3)));
  std::vector<float> lg(V);
  m.forward({step(s, *kv, T - 1, false)}, *kv, nullptr);
  s.pos = T - 1;
  m.forward({step(s, *kv, 1, true)}, *kv, lg.data());
  s.pos = T;
  CHECK(std::all_of(lg.begin(), lg.end(), [](float x) { return std::isfinite(x); }));
  serve::SeqBatch over;
  over.tokens = s.toks.data() + T;
  over.n = 1;
  over.pos = T;
  over.blocks = s.blocks.data();
  over.n_blocks = static_cast<int>(s.blocks.size());
  const Error e = error_of([&] { m.forward({over}, *kv, lg.data()); });
  CHECK(e.category() == ErrorCategory::Input);
  CHECK(std::string(e.what()).find("context") != std::string::npos);
}

TEST_CASE("llama: bad files name the tensor or key", "[cpu]") {
  const std::string dir = test::temp_dir();
  auto load_error = [&](const std::string& file) {
    return error_of([&] { serve::load_llama_gguf(file); });
  };
  auto has = [](const Error& e, const std::string& s) { return std::string(e.what()).find(s) != std::string::npos; };

  rewrite_gguf(dir + "/missing.gguf", [](TensorOut& t) { return t.name != "blk.2.ffn_up.weight"; });
  Error e = load_error(dir + "/missing.gguf");
  CHECK(e.category() == ErrorCategory::Input);
  CHECK(has(e, "blk.2.ffn_up.weight"));
  CHECK(has(e, "missing"));

  rewrite_gguf(dir + "/shape.gguf", [](TensorOut& t) {
    if (t.name == "blk.1.attn_k.weight") t.ne = {32, 64};  // (64, 32) rows x cols, want (32, 64)
    return true;
  });
  e = load_error(dir + "/shape.gguf");
  CHECK(e.category() == ErrorCategory::Input);
  CHECK(has(e, "blk.1.attn_k.weight"));
  CHECK(has(e, "[64, 32]"));

  rewrite_gguf(dir + "/type.gguf", [](TensorOut& t) {
    if (t.name == "blk.0.attn_q.weight") {
      t.type = io::GgmlType::IQ4_NL;  // 64x64: 128 blocks of 18 bytes; a type with no decoder here
      t.bytes.assign(128 * 18, 0);
    }
    return true;
  });
  e = load_error(dir + "/type.gguf");
  CHECK(e.category() == ErrorCategory::Input);
  CHECK(has(e, "blk.0.attn_q.weight"));
  CHECK(has(e, "IQ4_NL"));

  rewrite_gguf(dir + "/arch.gguf", [](TensorOut&) { return true; },
               [](io::GgufWriter& w) { w.add("general.architecture", io::GgufValue::string("gpt2")); },
               {"general.architecture"});
  e = load_error(dir + "/arch.gguf");
  CHECK(e.category() == ErrorCategory::Input);
  CHECK(has(e, "gpt2"));

  rewrite_gguf(dir + "/nokey.gguf", [](TensorOut&) { return true; }, {}, {"llama.attention.head_count"});
  e = load_error(dir + "/nokey.gguf");
  CHECK(e.category() == ErrorCategory::Input);
  CHECK(has(e, "llama.attention.head_count"));

  rewrite_gguf(dir + "/heads.gguf", [](TensorOut&) { return true; },
               [](io::GgufWriter& w) { w.add("llama.attention.head_count_kv", io::GgufValue::u32(3)); },
               {"llama.attention.head_count_kv"});
  e = load_error(dir + "/heads.gguf");
  CHECK(e.category() == ErrorCategory::Input);
  CHECK(has(e, "n_kv_head"));

  // Tied output: without output.weight the model uses token_embd (identical in this file).
  rewrite_gguf(dir + "/tied.gguf", [](TensorOut& t) { return t.name != "output.weight"; });
  auto tied = serve::load_llama_gguf(dir + "/tied.gguf");
  CHECK(greedy(*tied, "Once upon a time", 8) == greedy(mut_model(), "Once upon a time", 8));

  // The q8_0 copy of the model: quantized tensors are refused, naming one.
  const std::string q8 = test::data_dir() + "/stories260k/tinyllamas-stories-260k-q8_0.gguf";
  e = load_error(q8);
  CHECK(e.category() == ErrorCategory::Input);
  CHECK(has(e, ".weight"));
}

TEST_CASE("llama: bad forward calls are Error(Input) and leave the cache alone", "[cpu]") {
  auto& m = mut_model();
  const int V = m.info().vocab;
  auto kv = make_cache(m, 4, 16);
  Seq a, b;
  a.toks = {1, 403, 407, 261, 378};
  b.toks = {1, 403, 407};
  std::vector<float> lg(2 * V);
  auto category = [&](std::vector<serve::SeqBatch> batch, float* out) {
    return error_of([&] { m.forward(batch, *kv, out); }).category();
  };
  serve::SeqBatch good = step(a, *kv, 5, true);
  const std::vector<float> before(kv->k(0, a.blocks[0]), kv->k(0, a.blocks[0]) + 4 * 4 * 8);

  b.toks[1] = 512;
  CHECK(category({good, step(b, *kv, 3, true)}, lg.data()) == ErrorCategory::Input);
  b.toks[1] = -1;
  CHECK(category({good, step(b, *kv, 3, true)}, lg.data()) == ErrorCategory::Input);
  b.toks[1] = 403;
  serve::SeqBatch short_table = step(b, *kv, 3, true);
  short_table.pos = 2;  // positions [2, 5) need 2 blocks of 4; the table has 1
  CHECK(category({good, short_table}, lg.data()) == ErrorCategory::Input);
  serve::SeqBatch bad_block = step(b, *kv, 3, true);
  int32_t bogus = 16;
  bad_block.blocks = &bogus;
  CHECK(category({good, bad_block}, lg.data()) == ErrorCategory::Input);
  serve::SeqBatch zero = step(b, *kv, 3, true);
  zero.n = 0;
  CHECK(category({good, zero}, lg.data()) == ErrorCategory::Input);
  serve::SeqBatch past = step(b, *kv, 3, true);
  past.pos = 510;
  CHECK(category({past}, lg.data()) == ErrorCategory::Input);
  CHECK(category({good}, nullptr) == ErrorCategory::Input);  // wants logits, no buffer
  // Nothing of A was written by the failed calls.
  CHECK(std::equal(before.begin(), before.end(), kv->k(0, a.blocks[0])));
  // A cache of the wrong geometry.
  serve::KvCache wrong(5, 8, 8, 4, 4);
  Seq c;
  c.toks = {1};
  CHECK(error_of([&] { m.forward({step(c, wrong, 1, true)}, wrong, lg.data()); }).category() ==
        ErrorCategory::Input);
  // The good call still works, and an empty batch is a no-op.
  m.forward({good}, *kv, lg.data());
  CHECK(argmax(lg.data(), V) == 432);  // ","
  m.forward({}, *kv, nullptr);
}

TEST_CASE("llama: K-quant and Q8_0 matrices at dim 256 with grouped-query attention match the dequantized model", "[cpu]") {
  // stories260k's tokenizer and norms layout, but dim 256 (whole K-quant super-blocks), 4 heads
  // of 64 over 2 KV heads, FFN 512, 2 layers, random weights: every matrix a random Q4_K, Q5_K,
  // Q6_K (cycling) or, in the second file, Q8_0 block set. Loaded as is (8-bit activations, the
  // default), with f32 activations (exact weights) and dequantized to f32 at load; the fused
  // q/k/v and gate/up projections stay quantized since their parts share a type.
  const std::string dir = test::temp_dir();
  const int C = 256, H = 4, KVH = 2, F = 512, L = 2;
  const auto src = io::GgufFile::open(model_path());
  const int V = static_cast<int>(src.tensor("token_embd.weight").ne[1]);
  for (const bool q8 : {false, true}) {
    INFO((q8 ? "Q8_0" : "K-quants"));
    io::GgufWriter w;
    const std::vector<std::string> dims = {"llama.block_count", "llama.embedding_length", "llama.attention.head_count",
                                           "llama.attention.head_count_kv", "llama.feed_forward_length",
                                           "llama.rope.dimension_count", "general.alignment"};
    for (const auto& [k, v] : src.metadata())
      if (std::find(dims.begin(), dims.end(), k) == dims.end()) w.add(k, v);
    w.add("llama.block_count", io::GgufValue::u32(L));
    w.add("llama.embedding_length", io::GgufValue::u32(C));
    w.add("llama.attention.head_count", io::GgufValue::u32(H));
    w.add("llama.attention.head_count_kv", io::GgufValue::u32(KVH));
    w.add("llama.feed_forward_length", io::GgufValue::u32(F));
    w.add("llama.rope.dimension_count", io::GgufValue::u32(C / H));
    Philox rng(q8 ? 91 : 90, 1);
    auto uniform = [&](size_t n, float a) {
      std::vector<float> v(n);
      for (auto& x : v) x = a * (static_cast<float>(rng.next_u32() % 2001) / 1000.0f - 1.0f);
      return v;
    };
    std::vector<std::vector<uint8_t>> keep;
    keep.reserve(64);
    int next = 0;
    auto matrix = [&](const std::string& name, int K, int N) {
      if (q8) {
        const auto b = test::quantize_q8_0(uniform(static_cast<size_t>(K) * N, 0.08f));
        keep.push_back(b);
        w.add_tensor(name, io::GgmlType::Q8_0, {static_cast<uint64_t>(K), static_cast<uint64_t>(N)}, keep.back().data());
        return;
      }
      // One type per layer-matrix kind so that fused parts (q, k, v; gate, up) share it.
      const uint32_t types[] = {12, 13, 14};
      const size_t bytes[] = {144, 176, 210};
      const int ty = name.find("attn_q") != std::string::npos || name.find("attn_k") != std::string::npos ||
                             name.find("attn_v") != std::string::npos
                         ? 0
                     : name.find("ffn_gate") != std::string::npos || name.find("ffn_up") != std::string::npos ? 1
                                                                                                              : (next++ % 2 ? 2 : 0);
      const size_t nsb = static_cast<size_t>(K) / 256 * N;
      std::vector<uint8_t> b(nsb * bytes[ty]);
      for (auto& x : b) x = static_cast<uint8_t>(rng.next_u32());
      for (size_t sb = 0; sb < nsb; ++sb)
        for (size_t at : ty == 2 ? std::vector<size_t>{208} : std::vector<size_t>{0, 2}) {
          const uint16_t h = f32_to_f16(static_cast<float>(1e-4 * (1 + rng.next_u32() % 100)));
          b[sb * bytes[ty] + at] = static_cast<uint8_t>(h & 0xFF);
          b[sb * bytes[ty] + at + 1] = static_cast<uint8_t>(h >> 8);
        }
      keep.push_back(std::move(b));
      w.add_tensor(name, static_cast<io::GgmlType>(types[ty]), {static_cast<uint64_t>(K), static_cast<uint64_t>(N)},
                   keep.back().data());
    };
    std::vector<std::vector<float>> floats;
    floats.reserve(16);
    auto vec = [&](const std::string& name, std::vector<float> v, std::vector<uint64_t> ne) {
      floats.push_back(std::move(v));
      w.add_tensor(name, io::GgmlType::F32, ne, floats.back().data());
    };
    vec("token_embd.weight", uniform(static_cast<size_t>(C) * V, 1.0f), {static_cast<uint64_t>(C), static_cast<uint64_t>(V)});
    vec("output_norm.weight", std::vector<float>(C, 1.0f), {static_cast<uint64_t>(C)});
    matrix("output.weight", C, V);
    for (int l = 0; l < L; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      vec(p + "attn_norm.weight", std::vector<float>(C, 1.0f), {static_cast<uint64_t>(C)});
      vec(p + "ffn_norm.weight", std::vector<float>(C, 1.0f), {static_cast<uint64_t>(C)});
      matrix(p + "attn_q.weight", C, C);
      matrix(p + "attn_k.weight", C, C / H * KVH);
      matrix(p + "attn_v.weight", C, C / H * KVH);
      matrix(p + "attn_output.weight", C, C);
      matrix(p + "ffn_gate.weight", C, F);
      matrix(p + "ffn_up.weight", C, F);
      matrix(p + "ffn_down.weight", F, C);
    }
    const std::string path = dir + (q8 ? "/q8.gguf" : "/kq.gguf");
    w.write(path);

    auto m8 = serve::load_llama_gguf(path);
    serve::LoadOptions f32;
    f32.int8_activations = false;
    auto mq = serve::load_llama_gguf(path, f32);
    serve::LoadOptions deq;
    deq.keep_quantized = false;
    auto md = serve::load_llama_gguf(path, deq);
    INFO(m8->info().weights);
    CHECK(md->info().weights == "f32");
    CHECK(m8->info().weights != "f32");
    if (q8) CHECK(m8->info().weights.rfind("q8_0 9/9, ", 0) == 0);  // fused qkv, output, fused gate+up, down per layer; the head
    else CHECK_THAT(m8->info().weights, Catch::EndsWith(", 8-bit activations"));
    CHECK_THAT(mq->info().weights, Catch::EndsWith(", f32 activations"));
    std::vector<std::vector<float>> logits[3];
    serve::Model* models3[3] = {m8.get(), mq.get(), md.get()};
    for (int k = 0; k < 3; ++k) {
      auto kv = make_cache(*models3[k], 16, 4);
      Seq s;
      for (int i = 0; i < 12; ++i) s.toks.push_back(static_cast<int32_t>(3 + (i * 37) % (V - 3)));
      std::vector<float> lg(V);
      models3[k]->forward({step(s, *kv, 9, true)}, *kv, lg.data());  // a prefill chunk, then single tokens
      s.pos = 9;
      logits[k].push_back(lg);
      for (int t = 0; t < 3; ++t, ++s.pos) {
        models3[k]->forward({step(s, *kv, 1, true)}, *kv, lg.data());
        logits[k].push_back(lg);
      }
    }
    for (size_t i = 0; i < logits[2].size(); ++i) {
      double err = 0, scale = 0, d2 = 0, n2 = 0;
      for (int v = 0; v < V; ++v) {
        const double ref = logits[2][i][v];
        REQUIRE(std::isfinite(logits[0][i][v]));
        err = std::max(err, std::fabs(logits[1][i][v] - ref));
        scale = std::max(scale, std::fabs(ref));
        d2 += (logits[0][i][v] - ref) * (logits[0][i][v] - ref);
        n2 += ref * ref;
      }
      INFO("call " << i << " f32-activation err " << err << " scale " << scale << ", 8-bit L2 relative " << std::sqrt(d2 / n2));
      CHECK(scale > 0);
      CHECK(err <= 1e-4 * scale);         // exact weights: summation order only
      CHECK(d2 > 0);                      // the 8-bit path really ran
      CHECK(std::sqrt(d2 / n2) <= 0.03);  // 8-bit inputs on random weights: measured 0.3-1%
    }
  }
}
