// rtx-train as a subprocess: prepare -> run -> resume -> sample -> export on tiny-shakespeare
// with a tiny model; --json outputs; exit codes for bad flags, bad data and corrupt checkpoints.
#include <catch2/catch.hpp>
#include <vector>
#include <thread>
#include <atomic>
#include <chrono>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "rtx/io/gguf.hpp"
#include "rtx/io/tokenizer.hpp"
#include "rtx/models/checkpoint.hpp"
#include "rtx/models/infer.hpp"
#include "rtx/serve/generate.hpp"
#include "rtx/serve/gpt2_serve.hpp"
#include "test_util.hpp"

using rtx::test::run;
using rtx::test::tool_path;

namespace {

std::string train() { return tool_path("rtx-train"); }
std::string shk_input() { return rtx::test::data_dir() + "/tinyshakespeare/input.txt"; }

void write_file(const std::string& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
}

std::vector<nlohmann::json> read_jsonl(const std::string& p) {
  std::ifstream f(p);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(f, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

/// A prepared char dataset (once per process).
const std::string& dataset() {
  static const std::string dir = [] {
    const std::string d = rtx::test::temp_dir() + "/data";
    const auto p = run(train() + " prepare --tokenizer char " + shk_input() + " -o " + d + " --json");
    INFO(p.err);
    REQUIRE(p.exit_code == 0);
    const auto j = nlohmann::json::parse(p.out);
    CHECK(j["vocab_size"] == 65);
    CHECK(j["train_tokens"] == 1003854);
    CHECK(j["val_tokens"] == 111540);
    return d;
  }();
  return dir;
}

const char* kTinyCfg = R"({"model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32, "vocab_size": 65},
  "batch": 4, "lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 3, "eval_interval": 10, "eval_iters": 2})";

}  // namespace

TEST_CASE("rtx-train run under a busy loop warns that its tok/s is not comparable", "[cpu][cli]") {
  const std::string dir = rtx::test::temp_dir();
  write_file(dir + "/cfg.json", kTinyCfg);
  rtx::test::BusyHost busy;
  const auto p = run("env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT " + train() + " run --data " + dataset() +
                     " --config " + dir + "/cfg.json --threads 2 --steps 30 --eval-iters 0 --out " + dir + "/busy --json");
  // With a wait policy chosen, the spin-wait hint is not repeated.
  const auto passive = run("OMP_WAIT_POLICY=passive " + train() + " run --data " + dataset() + " --config " + dir +
                           "/cfg.json --threads 2 --steps 30 --eval-iters 0 --out " + dir + "/busy2 --json");
  busy.stop();
  INFO(p.err);
  REQUIRE(p.exit_code == 0);
  const auto r = nlohmann::json::parse(p.out);
  INFO(r["host"].dump());
  // 2 OpenMP threads against >= 4 spinners: the training thread gets about a third of the time
  // (recorded); the verdict comes from PSI stall and preemptions (a training run blocks on
  // checkpoint writes by design, so its CPU share is not judged).
  CHECK(r["host"]["cpu_share"].get<double>() < 0.8);
  CHECK(r["host"]["contended"] == true);
  CHECK(r["host"]["judged_on"] == "run");
  CHECK_THAT(r["host"]["reason"].get<std::string>(), !Catch::Contains("measuring thread ran"));
  CHECK_THAT(p.err, Catch::Contains("rtx-train: warning: other work competed with this run (") &&
                        Catch::Contains("): its tok/s is not comparable"));
  CHECK_THAT(p.err, Catch::Contains("rtx-train: hint: OpenMP threads spin-wait by default") &&
                        Catch::Contains("run with OMP_WAIT_POLICY=passive or fewer --threads"));
  INFO(passive.err);
  REQUIRE(passive.exit_code == 0);
  if (nlohmann::json::parse(passive.out)["host"]["contended"] == true)
    CHECK_THAT(passive.err, Catch::Contains("warning: other work competed") && !Catch::Contains("rtx-train: hint:"));
}

TEST_CASE("rtx-train run --steps 1 reports the one (cold) step's tok/s, not 0", "[cpu][cli]") {
  const std::string dir = rtx::test::temp_dir();
  write_file(dir + "/cfg.json", kTinyCfg);
  const auto p = run(train() + " run --data " + dataset() + " --config " + dir +
                     "/cfg.json --threads 1 --steps 1 --eval-iters 0 --out " + dir + "/one --json");
  INFO(p.err);
  REQUIRE(p.exit_code == 0);
  const auto r = nlohmann::json::parse(p.out);
  CHECK(r["steps"] == 1);
  CHECK(r["tokens_per_s_cold"] == true);
  // The reference: the step record in log.jsonl, B * T tokens over that step's own time.
  std::ifstream log(dir + "/one/log.jsonl");
  std::string line;
  double step_rate = -1, step_ms = -1;
  while (std::getline(log, line)) {
    const auto rec = nlohmann::json::parse(line);
    if (rec["event"] == "step") step_rate = rec["tokens_per_s"].get<double>(), step_ms = rec["ms"].get<double>();
  }
  REQUIRE(step_ms > 0);
  CHECK(step_rate == Approx(4.0 * 32 / (step_ms * 1e-3)).epsilon(1e-6));  // batch 4, block 32
  CHECK(r["tokens_per_s"].get<double>() == Approx(step_rate).epsilon(1e-9));
  // The human summary still reaches stderr under --json; the config's floats print as given.
  CHECK_THAT(p.err, Catch::Contains("done: 1 step in "));
  CHECK(r["config"]["lr"].dump() == "0.003");
  CHECK(r["config"]["min_lr"].dump() == "0.0003");
  // warmup 3 over 1 step: lr at step 0 = 3e-3 * 1/4 (nanoGPT's ramp), never the peak.
  CHECK_THAT(p.err, Catch::Contains("rtx-train: warning: warmup_steps 3 >= steps 1: the learning rate is still "
                                    "warming up at the last step (0.00075, not the peak lr 0.003)"));
}

TEST_CASE("rtx-train run, resume, sample and export end to end", "[cpu][cli]") {
  const std::string dir = rtx::test::temp_dir();
  write_file(dir + "/cfg.json", kTinyCfg);
  const std::string base = train() + " run --data " + dataset() + " --config " + dir + "/cfg.json --threads 2";

  const auto full = run(base + " --steps 16 --lr-decay-steps 16 --out " + dir + "/full --json");
  INFO(full.err);
  REQUIRE(full.exit_code == 0);
  const auto r = nlohmann::json::parse(full.out);
  CHECK(r["steps"] == 16);
  CHECK(r["final_val_loss"].get<double>() < 4.0);
  CHECK(r["tokens_per_s"].get<double>() > 0);
  CHECK(r["config"]["model"]["n_embd"] == 32);
  // Host contention over the whole run (rtx-bench's fields): the window covers the training.
  INFO(r["host"].dump());
  CHECK(r["host"]["threads"] == 2);
  CHECK(r["host"]["window_s"].get<double>() >= 0.9 * r["wall_s"].get<double>());
  CHECK(r["host"]["contended"].is_boolean());
  CHECK(r["host"]["contended"] == (full.err.find("other work competed with this run") != std::string::npos));
  // The whole run's window, not an rtx-bench case; a run under 50 ms is not judged.
  CHECK(r["host"]["judged_on"] == (r["host"]["window_s"].get<double>() >= 0.05 ? "run" : "none"));
  CHECK(r["tokens_per_s_cold"] == false);
  CHECK_THAT(full.err, !Catch::Contains("warning: warmup_steps"));

  // The same run in two processes: 10 steps, then --resume to 16.
  REQUIRE(run(base + " --steps 10 --lr-decay-steps 16 --out " + dir + "/split -q").exit_code == 0);
  const auto res = run(base + " --steps 16 --lr-decay-steps 16 --out " + dir + "/split --resume " + dir +
                       "/split/ckpt.safetensors -q");
  INFO(res.err);
  REQUIRE(res.exit_code == 0);
  std::vector<double> a, b;
  for (const auto& j : read_jsonl(dir + "/full/log.jsonl"))
    if (j["event"] == "step") a.push_back(j["loss"].get<double>());
  for (const auto& j : read_jsonl(dir + "/split/log.jsonl"))
    if (j["event"] == "step") b.push_back(j["loss"].get<double>());
  REQUIRE(a.size() == 16);
  CHECK(a == b);  // bitwise, through the JSON text (17 significant digits)
  const auto log = read_jsonl(dir + "/full/log.jsonl");
  CHECK(log.front()["event"] == "start");
  CHECK(log.back()["event"] == "end");
  for (const char* k : {"loss", "lr", "grad_norm", "ms", "tokens_per_s", "memory_bytes"}) CHECK(log[2].contains(k));

  // Greedy sampling is deterministic and uses the checkpoint's tokenizer.
  const std::string ck = dir + "/full/ckpt.safetensors";
  const auto s1 = run(train() + " sample --ckpt " + ck + " --prompt ROMEO: --max-tokens 20 --temperature 0 --json");
  const auto s2 = run(train() + " sample --ckpt " + ck + " --prompt ROMEO: --max-tokens 20 --temperature 0 --json");
  INFO(s1.err);
  REQUIRE(s1.exit_code == 0);
  const auto j1 = nlohmann::json::parse(s1.out), j2 = nlohmann::json::parse(s2.out);
  CHECK(j1["completion"] == j2["completion"]);
  CHECK(j1["prompt_tokens"] == 6);
  CHECK(j1["completion_tokens"] == 20);
  // Streaming text mode prints the prompt then the completion.
  const auto st = run(train() + " sample --ckpt " + ck + " --prompt ROMEO: --max-tokens 20 --temperature 0 -q");
  CHECK(st.out == "ROMEO:" + j1["completion"].get<std::string>() + "\n");
  // Penalties reach the sampler: the serving engine in-process with the same settings gives the
  // same tokens, and they differ from the plain greedy ones.
  const std::string pen_flags = " --frequency-penalty 1.5 --presence-penalty 0.5 --repetition-penalty 1.2";
  const auto pen = run(train() + " sample --ckpt " + ck + " --prompt ROMEO: --max-tokens 20 --temperature 0" +
                       pen_flags + " --json");
  INFO(pen.err);
  REQUIRE(pen.exit_code == 0);
  {
    const rtx::models::Checkpoint c = rtx::models::load_checkpoint(ck, false);
    const auto tk = rtx::io::tokenizer_from_json(c.tokenizer, ck);
    auto model = rtx::serve::make_gpt2_model(c.model, c.params, rtx::io::tokenizer_from_json(c.tokenizer, ck),
                                             rtx::serve::ModelInfo{});
    rtx::serve::SequenceRunner runner(*model);
    rtx::models::SamplerConfig sc;
    sc.temperature = 0;
    sc.frequency_penalty = 1.5f;
    sc.presence_penalty = 0.5f;
    sc.repetition_penalty = 1.2f;
    sc.vocab_limit = tk->vocab_size();
    rtx::models::Sampler sampler(sc);
    const std::vector<int32_t> prompt = tk->encode("ROMEO:");
    sampler.begin_sequence(prompt);
    const auto r = rtx::models::generate(runner, prompt, 20, sampler, tk->eot_id());
    CHECK(nlohmann::json::parse(pen.out)["completion"] == tk->decode(r.tokens));
  }
  CHECK(nlohmann::json::parse(pen.out)["completion"] != j1["completion"]);
  const auto badpen = run(train() + " sample --ckpt " + ck + " --frequency-penalty 2.5");
  CHECK(badpen.exit_code == 2);
  CHECK(badpen.err.find("frequency_penalty") != std::string::npos);
  // A prompt character outside the vocabulary is an input error naming it.
  const auto badp = run(train() + " sample --ckpt " + ck + " --prompt 'caf\xc3\xa9'");
  CHECK(badp.exit_code == 2);

  // Export never overwrites its own input.
  const auto self = run(train() + " export --ckpt " + ck + " -o " + ck);
  CHECK(self.exit_code == 2);
  CHECK(rtx::test::run(train() + " sample --ckpt " + ck + " --max-tokens 1 -q").exit_code == 0);
  // Resuming at the end of the run, or on another dataset's tokenizer, is refused.
  CHECK(run(base + " --steps 16 --lr-decay-steps 16 --resume " + ck).exit_code == 2);
  write_file(dir + "/other.txt", "abcdefghij klmnopqrstuvwxyz\n" + std::string(200, 'q') + "\nABCDEFGHIJKLMNOPQRSTUVWXYZ .,;:!?\n");
  REQUIRE(run(train() + " prepare --tokenizer char " + dir + "/other.txt -o " + dir + "/other -q").exit_code == 0);
  const auto wrongtok = run(train() + " run --data " + dir + "/other --config " + dir + "/cfg.json --seq-len 8 --steps 20 --resume " + ck);
  CHECK(wrongtok.exit_code == 2);
  CHECK(wrongtok.err.find("tokenizer") != std::string::npos);

  // Export reads back as GGUF gpt2 with every tensor.
  const auto ex = run(train() + " export --ckpt " + ck + " --format gguf -o " + dir + "/m.gguf --json");
  INFO(ex.err);
  REQUIRE(ex.exit_code == 0);
  const rtx::io::GgufFile g = rtx::io::GgufFile::open(dir + "/m.gguf");
  CHECK(g.get("general.architecture").as_string() == "gpt2");
  CHECK(g.tensors().size() == 2 + 2 * 12 + 2);
}

TEST_CASE("rtx-train run stops on SIGINT with a checkpoint and exit 130", "[cpu][cli]") {
  const std::string dir = rtx::test::temp_dir();
  write_file(dir + "/cfg.json", kTinyCfg);
  // The run would take minutes; SIGINT after a second stops it before the next micro-batch.
  const auto p = run("timeout --preserve-status -s INT 1 " + train() + " run --data " + dataset() + " --config " + dir +
                     "/cfg.json --steps 1000000 --eval-iters 0 --out " + dir + "/r --json");
  INFO(p.err);
  CHECK(p.exit_code == 130);
  const auto j = nlohmann::json::parse(p.out);
  CHECK(j["interrupted"] == true);
  CHECK(j["final_val_loss"].is_null());
  const int steps = j["steps"].get<int>();
  CHECK(steps >= 1);
  // The checkpoint holds exactly the steps reported (the last finished optimizer step).
  const rtx::models::Checkpoint ck = rtx::models::load_checkpoint(dir + "/r/ckpt.safetensors", true);
  CHECK(ck.step == steps);
  CHECK(p.err.find("checkpoint of step " + std::to_string(steps) + " written") != std::string::npos);
  const auto s = run(train() + " sample --ckpt " + dir + "/r/ckpt.safetensors --max-tokens 3 -q");
  CHECK(s.exit_code == 0);
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

/// A run signalled at a known point: `cmd` runs in the background (stdout, stderr to files in
/// `dir`); once its stderr has a line starting with `line`, the shell runs `signals` (with $pid)
/// and waits. Progress-based, not time-based, so a slow or busy host changes nothing but the wait.
struct Signalled {
  int exit_code = -1;
  double after_signal_s = -1;  ///< from the first signal to the exit
  std::string out, err;
};
Signalled signal_at(const std::string& dir, const std::string& cmd, const std::string& line, const std::string& signals) {
  write_file(dir + "/sig.sh", cmd + " >" + dir + "/out.txt 2>" + dir + "/err.txt &\n"
             "pid=$!\n"
             "while kill -0 $pid 2>/dev/null && ! grep -q '^" + line + "' " + dir + "/err.txt; do sleep 0.01; done\n"
             "t0=$(date +%s.%N)\n" + signals + "\n"
             "wait $pid; rc=$?\n"
             "t1=$(date +%s.%N)\n"
             "echo $rc $(awk \"BEGIN { print $t1 - $t0 }\")\n");
  const auto p = run("timeout 300 sh " + dir + "/sig.sh");
  Signalled r;
  std::istringstream in(p.out);
  in >> r.exit_code >> r.after_signal_s;
  r.out = read_file(dir + "/out.txt");
  r.err = read_file(dir + "/err.txt");
  return r;
}

}  // namespace

// Issue 37: with the shakespeare-char preset the first evaluation (200 batches of 64x256 per
// split) kept a SIGTERM waiting for minutes. The evaluation is abandoned before its next
// forward (at most 4096 tokens).
TEST_CASE("rtx-train run --preset shakespeare-char: SIGTERM in the first evaluation exits 130 in seconds",
          "[cpu][cli]") {
  const std::string dir = rtx::test::temp_dir();
  const auto t0 = std::chrono::steady_clock::now();
  const auto p = run("timeout --preserve-status -s TERM 5 " + train() + " run --preset shakespeare-char --data " +
                     dataset() + " --out " + dir + "/r --json");
  const double wall = seconds_since(t0);
  INFO(p.err);
  CHECK(p.exit_code == 130);
  CHECK(wall < 7.0);
  CHECK(p.err.find("interrupted during the evaluation at step 0: no step finished; no checkpoint written") !=
        std::string::npos);
  const auto j = nlohmann::json::parse(p.out);
  CHECK(j["interrupted"] == true);
  CHECK(j["interrupted_during"] == "the evaluation at step 0");
  CHECK(j["steps"] == 0);
  CHECK(j["checkpoint"] == "");
  CHECK(j["final_val_loss"].is_null());  // the partial evaluation is no loss
  CHECK_FALSE(std::ifstream(dir + "/r/ckpt.safetensors").good());
  const auto log = read_jsonl(dir + "/r/log.jsonl");
  REQUIRE(log.size() == 2);
  CHECK(log[0]["event"] == "start");
  CHECK(log[1]["event"] == "interrupted");
  CHECK(log[1]["steps"] == 0);
  CHECK(log[1]["val_loss"].is_null());
}

// SIGTERM between micro-batches, then mid-evaluation after a resumed step: the checkpoint is
// the last finished optimizer step, and resuming from it continues the run. Passive OpenMP
// waits keep a busy host (ctest -j) from slowing the small batches by an order of magnitude.
TEST_CASE("rtx-train run --preset shakespeare-char: SIGTERM mid-run checkpoints the last finished step; resume continues",
          "[cpu][cli]") {
  const std::string dir = rtx::test::temp_dir();
  const std::string base = "OMP_WAIT_POLICY=passive " + train() + " run --preset shakespeare-char --data " + dataset() +
                           " --batch 4 --seq-len 64 --log-interval 1 --json ";
  // 1) No evaluation; 8 micro-batches of 4 x 64 per step: SIGTERM once step 2 is done.
  auto s = signal_at(dir, base + "--grad-accum 8 --eval-iters 0 --out " + dir + "/a", "step 2/", "kill -TERM $pid");
  INFO(s.err);
  REQUIRE(s.exit_code == 130);
  CHECK(s.after_signal_s < 2.0);
  auto j = nlohmann::json::parse(s.out);
  const int steps = j["steps"].get<int>();
  CHECK(steps >= 2);
  CHECK(j["interrupted_during"].get<std::string>().rfind("step " + std::to_string(steps + 1) + " (micro-batch ", 0) == 0);
  const std::string ck_path = dir + "/a/ckpt.safetensors";
  rtx::models::Checkpoint ck = rtx::models::load_checkpoint(ck_path, true);
  CHECK(ck.step == steps);
  CHECK(ck.m.size() == ck.params.size());
  CHECK(j["checkpoint"] == ck_path);
  CHECK(s.err.find("checkpoint of step " + std::to_string(steps) + " written") != std::string::npos);

  // 2) Resume with an evaluation after one step that would take minutes: that step finishes,
  //    the evaluation is abandoned, the checkpoint is of the step after the resumed one.
  const std::string next = std::to_string(steps + 1);
  s = signal_at(dir, base + "--eval-interval 1 --eval-iters 1000000 --resume " + ck_path + " --out " + dir + "/b",
                "step " + next + "/", "kill -TERM $pid");
  INFO(s.err);
  REQUIRE(s.exit_code == 130);
  CHECK(s.after_signal_s < 2.0);
  j = nlohmann::json::parse(s.out);
  CHECK(j["steps"] == steps + 1);
  CHECK(j["interrupted_during"] == "the evaluation at step " + next);
  CHECK(j["final_val_loss"].is_null());
  ck = rtx::models::load_checkpoint(dir + "/b/ckpt.safetensors", true);
  CHECK(ck.step == steps + 1);
  for (const auto& rec : read_jsonl(dir + "/b/log.jsonl")) CHECK(rec["event"] != "eval");

  // 3) Resuming that checkpoint finishes the run: two more steps, then the final evaluation.
  const auto p = run(base + "--eval-iters 2 --steps " + std::to_string(steps + 3) + " --resume " + dir +
                     "/b/ckpt.safetensors --out " + dir + "/c");
  INFO(p.err);
  REQUIRE(p.exit_code == 0);
  j = nlohmann::json::parse(p.out);
  CHECK(j["interrupted"] == false);
  CHECK(j["steps"] == steps + 3);
  CHECK(j["final_val_loss"].get<double>() > 0);
  const auto log = read_jsonl(dir + "/c/log.jsonl");
  REQUIRE(!log.empty());
  CHECK(log[0]["event"] == "resume");
  CHECK(log[0]["step"] == steps + 1);
  CHECK(rtx::models::load_checkpoint(dir + "/c/ckpt.safetensors", true).step == steps + 3);
}

// A second signal does not wait for the forward in flight: the process exits 130 from the
// handler, and the checkpoint already in --out (the one resumed from) stays whole. The first
// signal is sent when step 3's line is printed, as step 4's forward (16 x 256 tokens, which
// cannot be cut short) starts; the second 0.1 s later (a repeat within 50 ms would count as
// the same request, as coreutils timeout sends it twice).
TEST_CASE("rtx-train run: a second signal exits 130 at once and leaves the previous checkpoint whole", "[cpu][cli]") {
  const std::string dir = rtx::test::temp_dir();
  const std::string base = "OMP_WAIT_POLICY=passive " + train() + " run --preset shakespeare-char --data " + dataset() +
                           " --eval-iters 0 ";
  auto p = run(base + "--batch 2 --seq-len 32 --steps 2 --out " + dir + "/r -q");
  REQUIRE(p.exit_code == 0);
  const std::string ck_path = dir + "/r/ckpt.safetensors";
  REQUIRE(rtx::models::load_checkpoint(ck_path, true).step == 2);
  const auto s = signal_at(dir, base + "--batch 16 --steps 1000 --log-interval 1 --resume " + ck_path + " --out " + dir + "/r",
                           "step 3/", "kill -INT $pid; sleep 0.1; kill -TERM $pid");
  INFO(s.err);
  CHECK(s.exit_code == 130);
  CHECK(s.err.find("Ctrl-C again quits at once") != std::string::npos);
  CHECK(s.err.find("rtx-train: interrupted during") == std::string::npos);  // quit from the handler
  CHECK(rtx::models::load_checkpoint(ck_path, true).step == 2);
  // The next run removes any temp file a cut-short write left, and resumes.
  p = run(base + "--batch 2 --seq-len 32 --steps 3 --resume " + ck_path + " --out " + dir + "/r -q");
  CHECK(p.exit_code == 0);
  CHECK(rtx::models::load_checkpoint(ck_path, true).step == 3);
}

TEST_CASE("rtx-train bad input exits 2 with a message", "[cpu][cli]") {
  const std::string dir = rtx::test::temp_dir();
  auto expect = [](const rtx::test::Proc& p, int code, const std::string& needle) {
    INFO(p.err);
    CHECK(p.exit_code == code);
    CHECK(p.err.find(needle) != std::string::npos);
  };
  expect(run(train() + " run --data " + dir + "/nope --steps 1"), 2, "nope");
  expect(run(train() + " run --data " + dataset() + " --preset gpt5"), 2, "gpt5");
  expect(run(train() + " run --data " + dataset() + " --matmul fast"), 2, "--matmul");
  expect(run(train() + " run --data " + dataset() + " --steps 0"), 2, "steps");
  write_file(dir + "/bad.json", R"({"stepz": 3})");
  expect(run(train() + " run --data " + dataset() + " --config " + dir + "/bad.json"), 2, "stepz");
  write_file(dir + "/notjson.json", "{steps: 3");
  expect(run(train() + " run --data " + dataset() + " --config " + dir + "/notjson.json"), 2, "notjson.json");
  // A model whose vocabulary is smaller than the dataset's.
  write_file(dir + "/small.json",
             R"({"model": {"n_layer": 1, "n_head": 1, "n_embd": 8, "block_size": 8, "vocab_size": 10}, "steps": 1})");
  expect(run(train() + " run --data " + dataset() + " --config " + dir + "/small.json"), 2, "vocab");
  expect(run(train() + " prepare --tokenizer bpe " + shk_input() + " -o " + dir + "/x"), 2, "--tokenizer");
  expect(run(train() + " prepare " + dir + "/missing.txt -o " + dir + "/x"), 2, "missing.txt");
  // Corrupt checkpoints are refused by sample, export and --resume.
  write_file(dir + "/junk.safetensors", std::string(64, 'x'));
  expect(run(train() + " sample --ckpt " + dir + "/junk.safetensors"), 2, "junk.safetensors");
  expect(run(train() + " export --ckpt " + dir + "/junk.safetensors -o " + dir + "/o.gguf"), 2, "junk.safetensors");
  expect(run(train() + " run --data " + dataset() + " --resume " + dir + "/junk.safetensors"), 2,
         "junk.safetensors");
  std::ifstream none(dir + "/o.gguf");
  CHECK_FALSE(none.good());  // nothing half-written
  expect(run(train() + " export --ckpt " + dir + "/junk.safetensors --format onnx -o " + dir + "/o.onnx"), 2,
         "--format");
  // Found by the break-it review: each of these used to crash, wrap or be accepted silently.
  expect(run(train() + " run --data " + dataset() + " --threads 100000"), 2, "--threads");
  write_file(dir + "/huge.json", R"({"lr": 1e400})");
  expect(run(train() + " run --data " + dataset() + " --config " + dir + "/huge.json"), 2, "huge.json");
  write_file(dir + "/wrap.json", R"({"steps": 4294967299})");
  expect(run(train() + " run --data " + dataset() + " --config " + dir + "/wrap.json"), 2, "steps");
  write_file(dir + "/frac.json", R"({"batch": 3.5})");
  expect(run(train() + " run --data " + dataset() + " --config " + dir + "/frac.json"), 2, "batch");
  write_file(dir + "/extra.json", R"({"model": {"n_layer": 1, "n_head": 1, "n_embd": 8, "block_size": 8,
      "vocab_size": 65, "dropout": 0.1}})");
  expect(run(train() + " run --data " + dataset() + " --config " + dir + "/extra.json"), 2, "dropout");
  expect(run(train() + " run --data " + dataset() + " --seed -1 --steps 1"), 2, "seed");
  // Under --json, a command-line error is also a JSON document on stdout.
  const auto pj = run(train() + " --json run --data " + dataset() + " --steps abc");
  CHECK(pj.exit_code == 2);
  nlohmann::json ej;
  REQUIRE_NOTHROW(ej = nlohmann::json::parse(pj.out));
  CHECK(ej["error"]["category"] == "usage");
  CHECK(ej["error"]["exit_code"] == 2);
  if (!rtx::test::have_gpu()) {
    const auto p = run(train() + " run --data " + dataset() + " --backend cuda --steps 1");
    CHECK(p.exit_code == 3);
  }
}
