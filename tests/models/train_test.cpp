// Tests of the training loop: LR schedule against a float64 transcription of nanoGPT's get_lr,
// run-to-run determinism, bit-exact resume, checkpoints (round trip, corruption), learning on
// real text (tiny-shakespeare), config validation.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/io/dataset.hpp"
#include "rtx/models/checkpoint.hpp"
#include "rtx/models/train.hpp"
#include "test_util.hpp"

using namespace rtx::models;
namespace fs = std::filesystem;

namespace {

/// A char dataset of all of tiny-shakespeare, prepared once per process.
const std::string& shakespeare_dir() {
  static const std::string dir = [] {
    const std::string d = rtx::test::temp_dir() + "/shk";
    rtx::io::prepare_dataset(rtx::test::data_dir() + "/tinyshakespeare/input.txt", "char", "", d);
    return d;
  }();
  return dir;
}

/// A small, fast run: 2 layers, 32 channels, block 32, batch 4.
TrainConfig tiny_config(int steps) {
  TrainConfig c;
  c.model = Gpt2Config{2, 2, 32, 32, 65};
  c.preset.clear();
  c.steps = steps;
  c.batch = 4;
  c.lr = 3e-3f;
  c.min_lr = 3e-4f;
  c.warmup_steps = 5;
  c.eval_interval = 10;
  c.eval_iters = 3;
  c.seed = 42;
  return c;
}

struct Recorded {
  std::vector<double> loss, gnorm, val;
};
TrainCallbacks recorder(Recorded& r) {
  TrainCallbacks cb;
  cb.on_step = [&r](const StepRecord& s) {
    r.loss.push_back(s.loss);
    r.gnorm.push_back(s.grad_norm);
  };
  cb.on_eval = [&r](const EvalRecord& e) { r.val.push_back(e.val_loss); };
  return cb;
}

/// nanoGPT train.py get_lr, transcribed in float64.
double nanogpt_lr(int it, double lr, double min_lr, int warmup, int decay) {
  if (it < warmup) return lr * (it + 1) / (warmup + 1);
  if (it > decay) return min_lr;
  const double ratio = static_cast<double>(it - warmup) / (decay - warmup);
  const double coeff = 0.5 * (1.0 + std::cos(M_PI * ratio));
  return min_lr + coeff * (lr - min_lr);
}

std::string read_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
void write_bytes(const std::string& p, const std::string& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
}

}  // namespace

TEST_CASE("lr_at follows nanoGPT's warm-up and cosine schedule", "[cpu]") {
  TrainConfig c;
  c.steps = 2000;
  c.lr = 1e-3f;
  c.min_lr = 1e-4f;
  c.warmup_steps = 100;
  for (int it : {0, 1, 50, 99, 100, 101, 500, 1000, 1999, 2000, 2001, 5000}) {
    const double want = nanogpt_lr(it, 1e-3f, 1e-4f, 100, 2000);
    CHECK(std::fabs(lr_at(c, it) - want) <= 1e-6 * want);
  }
  CHECK(lr_at(c, 100) == Approx(1e-3).epsilon(1e-6));  // the peak right after warm-up
  c.lr_decay_steps = 1000;  // decay ends before the run does: min_lr afterwards
  CHECK(lr_at(c, 1500) == Approx(1e-4).epsilon(1e-6));
  CHECK(lr_at(c, 550) == Approx(nanogpt_lr(550, 1e-3f, 1e-4f, 100, 1000)).epsilon(1e-6));
}

TEST_CASE("schedule_warning names a warm-up that outlasts the run or the decay", "[cpu]") {
  TrainConfig c;
  c.lr = 1e-3f;
  c.min_lr = 1e-4f;
  c.warmup_steps = 100;
  c.steps = 101;  // the last step (index 100) is the peak: nothing to say
  CHECK(c.schedule_warning().empty());
  c.steps = 100;  // the last step is index 99: 1e-3 * 100/101 (nanoGPT's ramp)
  CHECK(c.schedule_warning() == "warmup_steps 100 >= steps 100: the learning rate is still warming up at the last "
                                "step (0.00099, not the peak lr 0.001); pass --warmup below --steps");
  c.steps = 10;  // the default warm-up with --steps 10: 1e-3 * 10/101
  CHECK(c.schedule_warning() == "warmup_steps 100 >= steps 10: the learning rate is still warming up at the last "
                                "step (9.9e-05, not the peak lr 0.001); pass --warmup below --steps");
  c.steps = 2000;
  c.lr_decay_steps = 50;  // decay over before warm-up ends: ramp to step 100, then min_lr
  CHECK(nanogpt_lr(100, 1e-3, 1e-4, 100, 50) == 1e-4);
  CHECK(c.schedule_warning() == "lr_decay_steps 50 ends before warmup_steps 100: the rate climbs to 0.00099 at step "
                                "100, then drops to min_lr 0.0001 with no cosine decay");
  c.lr_decay_steps = 5000;  // decay past the end of the run: a partial cosine, as nanoGPT allows
  CHECK(c.schedule_warning().empty());
  // The largest warm-up: warmup_steps + 1 must not wrap (it made the rate negative).
  c.lr_decay_steps = 0;
  c.warmup_steps = 2147483647;
  c.steps = 10;
  CHECK(lr_at(c, 9) > 0);
  CHECK(lr_at(c, 9) == Approx(1e-3 * 10 / 2147483648.0).epsilon(1e-6));
  CHECK_THAT(c.schedule_warning(), Catch::StartsWith("warmup_steps 2147483647 >= steps 10: the learning rate is still "
                                                     "warming up at the last step (4.66e-12,"));
  c.warmup_steps = 0;
  c.steps = 1;
  CHECK(c.schedule_warning().empty());
}

TEST_CASE("run config validation names the field", "[cpu]") {
  TrainConfig c = tiny_config(10);
  c.validate();
  auto expect_bad = [](TrainConfig x, const char* field) {
    try {
      x.validate();
      FAIL("no error for " << field);
    } catch (const rtx::Error& e) {
      CHECK(e.category() == rtx::ErrorCategory::Usage);
      CHECK(std::string(e.what()).find(field) != std::string::npos);
    }
  };
  TrainConfig x = c;
  x.steps = 0;
  expect_bad(x, "steps");
  x = c;
  x.batch = -1;
  expect_bad(x, "batch");
  x = c;
  x.seq_len = 33;
  expect_bad(x, "seq_len");
  x = c;
  x.lr = -1;
  expect_bad(x, "lr");
  x = c;
  x.min_lr = 1;
  expect_bad(x, "min_lr");
  x = c;
  x.adamw.beta2 = 1.0f;
  expect_bad(x, "beta2");
  x = c;
  x.grad_accum = 0;
  expect_bad(x, "grad_accum");

  TrainConfig j;
  CHECK_THROWS_AS(j.apply_json({{"stepz", 3}}, "cfg.json"), rtx::Error);
  CHECK_THROWS_AS(j.apply_json({{"steps", "three"}}, "cfg.json"), rtx::Error);
  CHECK_THROWS_AS(j.apply_json({{"backend", "tpu"}}, "cfg.json"), rtx::Error);
  // A float field whose value float32 cannot hold: said as such, not as "must be positive" later.
  try {
    j.apply_json({{"lr", 1e-50}}, "cfg.json");
    FAIL("1e-50 accepted");
  } catch (const rtx::Error& e) {
    CHECK_THAT(e.message(), Catch::Contains("field 'lr' must be a number float32 can hold (this one underflows to 0)"));
  }
  CHECK_NOTHROW(j.apply_json({{"weight_decay", 0.0}}, "cfg.json"));  // a real zero is fine
  j.apply_json({{"preset", "shakespeare-char-cpu"}, {"steps", 7}, {"beta2", 0.99}}, "cfg.json");
  CHECK(j.model.n_layer == 4);
  CHECK(j.model.n_embd == 128);
  CHECK(j.steps == 7);
  // to_json -> apply_json round trip
  TrainConfig k;
  k.apply_json(j.to_json(), "roundtrip");
  CHECK(k.to_json() == j.to_json());
  // Float fields print as the decimals they were given, not widened (0.0010000000474974513).
  const nlohmann::json d = nlohmann::json::parse(TrainConfig{}.to_json().dump());
  CHECK(d.at("lr").dump() == "0.001");
  CHECK(d.at("min_lr").dump() == "0.0001");
  CHECK(d.at("beta2").dump() == "0.99");
  CHECK(d.at("eps").dump() == "1e-08");
  CHECK(d.at("weight_decay").dump() == "0.1");
  TrainConfig h;
  h.apply_json({{"beta2", 0.95}}, "cfg.json");
  CHECK(h.to_json().at("beta2").dump() == "0.95");
}

TEST_CASE("training is deterministic and learns tiny-shakespeare", "[cpu]") {
  const TrainConfig c = tiny_config(40);
  Recorded a, b;
  const TrainResult ra = train(c, shakespeare_dir(), "", "", recorder(a));
  train(c, shakespeare_dir(), "", "", recorder(b));
  REQUIRE(a.loss.size() == 40);
  CHECK(a.loss == b.loss);  // bitwise
  CHECK(a.gnorm == b.gnorm);
  CHECK(a.val == b.val);
  // Uniform over 65 chars is ln 65 = 4.17; 40 steps must get clearly below (character
  // frequencies alone give about 3.3).
  CHECK(a.loss.front() > 3.9);
  CHECK(ra.final_val_loss < 3.4);
  CHECK(ra.steps_done == 40);
  // A different seed gives a different run.
  TrainConfig c2 = c;
  c2.seed = 43;
  Recorded d;
  train(c2, shakespeare_dir(), "", "", recorder(d));
  CHECK(d.loss != a.loss);
}

TEST_CASE("the graph engine trains as the direct engine: losses, grad norms, val losses, clipping", "[cpu]") {
  // K = 1: gradients written in place; K = 2: staged and accumulated with loss scale 1/2.
  const int K = GENERATE(1, 2);
  TrainConfig c = tiny_config(8);
  c.grad_accum = K;
  c.eval_interval = 4;
  c.eval_iters = 2;
  c.adamw.grad_clip = 0.5f;  // below the early grad norms: clipping is active on both paths
  Recorded d, g, g2;
  train(c, shakespeare_dir(), "", "", recorder(d));
  TrainConfig cg = c;
  cg.engine = Engine::Graph;
  train(cg, shakespeare_dir(), "", "", recorder(g));
  train(cg, shakespeare_dir(), "", "", recorder(g2));
  REQUIRE(d.loss.size() == 8);
  REQUIRE(g.loss.size() == 8);
  REQUIRE(g.val.size() == d.val.size());
  auto worst = [](const std::vector<double>& a, const std::vector<double>& b) {
    double w = 0;
    for (size_t i = 0; i < a.size(); ++i) w = std::max(w, std::fabs(a[i] - b[i]) / std::fabs(b[i]));
    return w;
  };
  const double le = worst(g.loss, d.loss), ne = worst(g.gnorm, d.gnorm), ve = worst(g.val, d.val);
  WARN("graph vs direct engine, 8 steps, K=" << K << ": losses " << le << ", grad norms " << ne << ", val losses " << ve
                                             << " (loss " << d.loss.front() << " -> " << d.loss.back() << ")");
  CHECK(d.gnorm.front() > 0.5);  // the clip took effect
  CHECK(le <= 1e-5);
  CHECK(ne <= 1e-5);
  CHECK(ve <= 1e-5);
  CHECK(g.loss == g2.loss);  // the graph engine is deterministic too (bitwise)
  CHECK(g.gnorm == g2.gnorm);
}

TEST_CASE("run config engine: JSON round trip and bad values", "[cpu]") {
  TrainConfig c;
  CHECK(c.to_json()["engine"] == "direct");
  c.apply_json({{"engine", "graph"}}, "cfg.json");
  CHECK(c.engine == Engine::Graph);
  TrainConfig d;
  d.apply_json(c.to_json(), "round trip");
  CHECK(d.engine == Engine::Graph);
  CHECK_THROWS_WITH(d.apply_json({{"engine", "tensorflow"}}, "cfg.json"), Catch::Contains("engine must be"));
  CHECK_THROWS_WITH(parse_engine("fast"), Catch::Contains("unknown engine 'fast'"));
  // the graph engine is CPU-only and flash-attention-only
  Gpt2KernelParams kp;
  kp.attention.algo = rtx::kernels::AttentionParams::Algo::Naive;
  CHECK_THROWS_WITH(Gpt2(tiny_config(1).model, 1, 4, Backend::Cpu, kp, Engine::Graph), Catch::Contains("flash"));
  CHECK_THROWS_WITH(Gpt2(tiny_config(1).model, 1, 4, Backend::Cuda, {}, Engine::Graph), Catch::Contains("CPU only"));
}

TEST_CASE("resume continues bit-for-bit the uninterrupted run", "[cpu]") {
  const std::string base = rtx::test::temp_dir();
  TrainConfig full = tiny_config(20);
  full.lr_decay_steps = 20;
  Recorded whole;
  train(full, shakespeare_dir(), base + "/whole", "", recorder(whole));

  TrainConfig first = full;
  first.steps = 12;  // same schedule (lr_decay_steps fixed), stopped early
  Recorded part1, part2;
  train(first, shakespeare_dir(), base + "/split", "", recorder(part1));
  const Checkpoint ck = load_checkpoint(base + "/split/ckpt.safetensors");
  CHECK(ck.step == 12);
  CHECK(ck.seed == 42);
  CHECK(ck.m.size() == gpt2_num_params(full.model));
  train(full, shakespeare_dir(), base + "/split", base + "/split/ckpt.safetensors", recorder(part2));
  REQUIRE(part1.loss.size() == 12);
  REQUIRE(part2.loss.size() == 8);
  std::vector<double> joined = part1.loss;
  joined.insert(joined.end(), part2.loss.begin(), part2.loss.end());
  CHECK(joined == whole.loss);  // bitwise
  // The final checkpoints hold identical weights.
  const Checkpoint a = load_checkpoint(base + "/whole/ckpt.safetensors");
  const Checkpoint b = load_checkpoint(base + "/split/ckpt.safetensors");
  CHECK(a.params == b.params);
  CHECK(a.m == b.m);
  CHECK(a.v == b.v);
  CHECK(b.step == 20);

  // Resuming with another seed or another model is refused with the reason.
  TrainConfig other_seed = full;
  other_seed.seed = 7;
  CHECK_THROWS_WITH(train(other_seed, shakespeare_dir(), "", base + "/split/ckpt.safetensors"),
                    Catch::Contains("seed"));
  TrainConfig other_model = full;
  other_model.model.n_embd = 16;
  CHECK_THROWS_WITH(train(other_model, shakespeare_dir(), "", base + "/split/ckpt.safetensors"),
                    Catch::Contains("model config"));
}

// Ctrl-C (should_stop) at every point where it is polled in a step (before each micro-batch,
// between forward and backward, after each layer of the backward via the gradient-ready hook)
// and mid-evaluation: the run stops there, the checkpoint is that of the last finished
// optimizer step (never a half-applied one: resuming it ends bitwise where the uninterrupted
// run does), and an abandoned evaluation reports nothing.
TEST_CASE("should_stop anywhere in a step or an evaluation checkpoints the last finished step", "[cpu]") {
  const std::string base = rtx::test::temp_dir();
  TrainConfig full = tiny_config(12);
  full.lr_decay_steps = 12;
  full.grad_accum = 2;
  full.eval_interval = 6;
  Recorded whole;
  train(full, shakespeare_dir(), base + "/whole", "", recorder(whole));
  const Checkpoint end = load_checkpoint(base + "/whole/ckpt.safetensors");
  // Polls: 3 per split per evaluation (one forward each: 4 x 32 tokens is one chunk); per
  // micro-batch 1 before it, 1 after its forward, and 4 from the backward (ln_f, 2 layers,
  // the embeddings): 12 per step. Step 4 has polls 43..54: before micro-batch 1 (43), after
  // its forward (44), in its backward (45, 47), before micro-batch 2 (49), the last hook of its
  // backward (54); 55 starts step 5. 81 is inside the evaluation at step 6 (polls 79..84);
  // 1 is inside the first evaluation.
  const std::vector<int> stops = {1, 43, 44, 45, 47, 49, 54, 55, 81};
  for (int n : stops) {
    INFO("stop at poll " << n);
    const std::string dir = base + "/stop" + std::to_string(n);
    int polls = 0, last_done = 0;
    Recorded part;
    TrainCallbacks cb = recorder(part);
    cb.should_stop = [&] { return ++polls >= n; };
    cb.on_eval_progress = [&](int, int done, int total) {
      CHECK(total == 6);
      CHECK(done == last_done % 6 + 1);  // 1..6 per evaluation (train's 3 batches, then val's)
      last_done = done;
    };
    const TrainResult r = train(full, shakespeare_dir(), dir, "", cb);
    REQUIRE(r.interrupted);
    CHECK(polls == n);  // stopped at the first true
    CHECK(part.loss.size() == static_cast<size_t>(r.steps_done));
    // An evaluation cut short reports nothing; finished ones are those before the stop.
    CHECK(static_cast<size_t>(r.evals_done) == part.val.size());
    if (n == 1) {
      CHECK(r.steps_done == 0);
      CHECK(r.interrupted_in == "the evaluation at step 0");
      CHECK(r.checkpoint.empty());
      CHECK_FALSE(fs::exists(dir + "/ckpt.safetensors"));
      continue;
    }
    if (n == 81) {
      CHECK(r.steps_done == 6);
      CHECK(r.interrupted_in == "the evaluation at step 6");
      CHECK(r.evals_done == 1);  // step 0's
    } else {
      CHECK(r.steps_done == (n - 7) / 12);
      CHECK(r.interrupted_in.rfind("step " + std::to_string(r.steps_done + 1) + " (micro-batch ", 0) == 0);
    }
    const Checkpoint ck = load_checkpoint(dir + "/ckpt.safetensors");
    CHECK(ck.step == r.steps_done);
    for (size_t i = 0; i < part.loss.size(); ++i) CHECK(part.loss[i] == whole.loss[i]);
    // Resuming ends where the uninterrupted run did, bit for bit.
    Recorded rest;
    const TrainResult r2 = train(full, shakespeare_dir(), dir, dir + "/ckpt.safetensors", recorder(rest));
    CHECK_FALSE(r2.interrupted);
    REQUIRE(rest.loss.size() == static_cast<size_t>(12 - r.steps_done));
    for (size_t i = 0; i < rest.loss.size(); ++i) CHECK(rest.loss[i] == whole.loss[r.steps_done + i]);
    const Checkpoint fin = load_checkpoint(dir + "/ckpt.safetensors");
    CHECK(fin.step == 12);
    CHECK(fin.params == end.params);
    CHECK(fin.m == end.m);
    CHECK(fin.v == end.v);
  }
}

TEST_CASE("checkpoints round-trip and corrupt ones are refused", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  Checkpoint ck;
  ck.model = Gpt2Config{1, 1, 8, 7, 11};
  const size_t n = gpt2_num_params(ck.model);
  for (size_t i = 0; i < n; ++i) {
    ck.params.push_back(0.001f * static_cast<float>(i) - 0.5f);
    ck.m.push_back(static_cast<float>(i % 13));
    ck.v.push_back(static_cast<float>(i % 7) * 1e-3f);
  }
  ck.step = 123;
  ck.seed = 99;
  ck.best_val_loss = 1.5;
  ck.run_config = {{"steps", 200}};
  ck.tokenizer = {{"kind", "char"}};
  const std::string p = dir + "/ck.safetensors";
  save_checkpoint(p, ck);
  const Checkpoint r = load_checkpoint(p);
  CHECK(r.model == ck.model);
  CHECK(r.params == ck.params);
  CHECK(r.m == ck.m);
  CHECK(r.v == ck.v);
  CHECK(r.step == 123);
  CHECK(r.seed == 99);
  CHECK(r.best_val_loss == 1.5);
  CHECK(r.run_config == ck.run_config);
  CHECK(r.tokenizer == ck.tokenizer);
  const Checkpoint w = load_checkpoint(p, false);
  CHECK(w.m.empty());
  CHECK(w.params == ck.params);

  // Wrong sizes are refused before anything is written.
  Checkpoint bad = ck;
  bad.params.pop_back();
  CHECK_THROWS_AS(save_checkpoint(dir + "/bad.safetensors", bad), rtx::Error);
  CHECK_FALSE(fs::exists(dir + "/bad.safetensors"));

  const std::string good = read_bytes(p);
  auto expect_refused = [&](const std::string& bytes, const char* what) {
    const std::string q = dir + "/corrupt.safetensors";
    write_bytes(q, bytes);
    try {
      load_checkpoint(q);
      FAIL("accepted a corrupt checkpoint: " << what);
    } catch (const rtx::Error& e) {
      CHECK(e.category() == rtx::ErrorCategory::Input);
      CHECK(std::string(e.what()).find("corrupt.safetensors") != std::string::npos);
    }
  };
  for (size_t cut : {size_t(0), size_t(5), size_t(100), good.size() / 2, good.size() - 1})
    expect_refused(good.substr(0, cut), "truncated");
  std::string flipped = good;
  flipped[flipped.size() - 10] ^= 0x40;  // inside the data section: the checksum catches it
  expect_refused(flipped, "bit flip");
  CHECK_THROWS_AS(load_checkpoint(dir + "/missing.safetensors"), rtx::Error);
}

TEST_CASE("checkpoint regressions from fuzzing: a config bigger than the file, a step past int", "[cpu]") {
  // tests/fuzz/corpus/checkpoint/: a valid tiny checkpoint whose __metadata__.config says
  // n_layer 2^31-1 (load_checkpoint sized its buffers from it: a multi-terabyte allocation and
  // std::bad_alloc), and one whose step is 2^32-1 (read back as -1).
  const std::string corpus = rtx::test::source_dir() + "/tests/fuzz/corpus/checkpoint/";
  CHECK(load_checkpoint(corpus + "valid-tiny").step == 3);
  for (const char* name : {"config-huge-layers", "config-huge-vocab", "step-above-int"}) {
    INFO(name);
    try {
      load_checkpoint(corpus + name);
      FAIL("accepted");
    } catch (const rtx::Error& e) {
      CHECK(e.category() == rtx::ErrorCategory::Input);
      CHECK(std::string(e.what()).find(name[0] == 's' ? "step" : "config") != std::string::npos);
    }
  }
}

TEST_CASE("vocab_warning: a model vocabulary far larger than the dataset's names the presets that fit", "[cpu]") {
  Gpt2Config m = Gpt2Config::preset("gpt2-tiny");
  CHECK(vocab_warning(m, 65) ==
        "the model's vocab_size 50257 is 773x the dataset's 65 token ids: most of the output head is for ids the data "
        "never holds (compute and memory for nothing); use a preset sized for this dataset (--preset shakespeare-char "
        "or shakespeare-char-cpu) or a --config whose \"model\" has \"vocab_size\": 65");
  CHECK(vocab_warning(m, 50257).empty());  // a GPT-2 BPE dataset
  m.vocab_size = 50304;                    // nanoGPT's padded GPT-2 vocabulary
  CHECK(vocab_warning(m, 50257).empty());
  m.vocab_size = 128;  // 65 padded to a multiple of 64: under the ratio
  CHECK(vocab_warning(m, 65).empty());
  m.vocab_size = 65;
  CHECK(vocab_warning(m, 65).empty());
  m.vocab_size = 4 * 65;  // at the ratio
  CHECK_THAT(vocab_warning(m, 65), Catch::StartsWith("the model's vocab_size 260 is 4.0x the dataset's 65 token ids"));
  m.vocab_size = 50257;  // no preset within 4x of 1000 ids: only the config field is named
  CHECK_THAT(vocab_warning(m, 1000),
             Catch::EndsWith("(compute and memory for nothing); use a --config whose \"model\" has \"vocab_size\": 1000"));
  CHECK(vocab_warning(m, 0).empty());
}

TEST_CASE("train warns before the first step on a vocabulary far larger than the dataset's, refuses a smaller one",
          "[cpu]") {
  TrainConfig c = tiny_config(1);
  c.model.vocab_size = 50257;  // gpt2-tiny's head on a 65-char dataset
  c.eval_iters = 0;
  std::vector<std::string> events;
  TrainCallbacks cb;
  cb.on_warning = [&](const std::string& w) { events.push_back("warning: " + w); };
  cb.on_step = [&](const StepRecord& s) { events.push_back("step " + std::to_string(s.step)); };
  train(c, shakespeare_dir(), "", "", cb);
  REQUIRE(events.size() == 2);
  CHECK_THAT(events[0], Catch::StartsWith("warning: the model's vocab_size 50257 is 773x the dataset's 65 token ids"));
  CHECK(events[1] == "step 1");
  // Sized for the data: no warning.
  events.clear();
  c.model.vocab_size = 65;
  train(c, shakespeare_dir(), "", "", cb);
  CHECK(events == std::vector<std::string>{"step 1"});
  // A model with fewer ids than the dataset holds (ids 32..64 would have no row): input error.
  c.model.vocab_size = 32;
  try {
    train(c, shakespeare_dir(), "", "", cb);
    FAIL("a 32-token model trained on 65 token ids");
  } catch (const rtx::Error& e) {
    CHECK(e.category() == rtx::ErrorCategory::Input);
    CHECK_THAT(std::string(e.what()), Catch::Contains("the dataset's vocabulary (65 tokens) is larger than the model's "
                                                      "vocab_size (32)") &&
                                          Catch::Contains("meta.json"));
  }
}

TEST_CASE("rtx-train run --preset gpt2-tiny on a char dataset warns on stderr before the first step", "[cpu]") {
  const std::string home = rtx::test::temp_dir();
  const std::string run = rtx::test::tool_path("rtx-train") + " run --data " + shakespeare_dir() +
                          " --steps 1 --batch 1 --eval-iters 0 --no-promoted --log-interval 1 --preset ";
  const auto tiny = rtx::test::run(run + "gpt2-tiny", "RTX_HOME=" + home);
  INFO(tiny.err);
  CHECK(tiny.exit_code == 0);
  const size_t warn = tiny.err.find(
      "rtx-train: warning: the model's vocab_size 50257 is 773x the dataset's 65 token ids: most of the output head is "
      "for ids the data never holds (compute and memory for nothing); use a preset sized for this dataset (--preset "
      "shakespeare-char or shakespeare-char-cpu) or a --config whose \"model\" has \"vocab_size\": 65\n");
  REQUIRE(warn != std::string::npos);
  CHECK(warn < tiny.err.find("step 1/1"));
  const auto sized = rtx::test::run(run + "shakespeare-char-cpu", "RTX_HOME=" + home);
  INFO(sized.err);
  CHECK(sized.exit_code == 0);
  CHECK(sized.err.find("vocab_size") == std::string::npos);
}
