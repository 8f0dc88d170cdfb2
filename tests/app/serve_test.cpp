// app/serve: rtx-serve run's start-up policy called in-process (rtx/app/serve.hpp): flag checks,
// precedence of given flags over a tuned profile and a promoted config, the canary's engine
// profile, bind errors, and one whole run_run to a stopped server.
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "rtx/app/serve.hpp"
#include "rtx/core/error.hpp"
#include "rtx/kernels/cpu_features.hpp"
#include "rtx/kernels/registry.hpp"
#include "rtx/serve/tuning.hpp"
#include "rtx/store/store.hpp"
#include "rtx/tune/lookup.hpp"
#include "rtx/tune/records.hpp"
#include "test_util.hpp"

using namespace rtx;
using namespace rtx::app::serve;

namespace {

/// A RunCommand with the scheduler flags the tool declares, none given.
RunCommand command() {
  RunCommand c;
  c.model = "/models/tiny-model.gguf";
  for (const char* k : {"max_batch", "token_budget", "prefill_chunk", "batch_window_ms", "kv_block_tokens", "kv_blocks",
                        "kv_type", "max_queue", "request_timeout_s", "interactive_target_ms", "batch_target_ms",
                        "tpot_target_ms", "prefix_cache"}) {
    std::string flag = std::string("--") + k;
    for (auto& ch : flag)
      if (ch == '_') ch = '-';
    c.sched_flags.push_back({k, {flag, false}});
  }
  return c;
}

void give(RunCommand& c, const std::string& key) {
  for (auto& f : c.sched_flags)
    if (f.key == key) f.flag.given = true;
}

/// Runs `f`, expecting an rtx::Error of `cat` whose where() is `where`; returns its message.
template <class F>
std::string error_of(F&& f, ErrorCategory cat, const std::string& where) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.category() == cat);
    CHECK(e.where() == where);
    return e.message();
  }
  FAIL("no rtx::Error thrown (expected one at " << where << ")");
  return {};
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string p = test::temp_dir() + "/" + name;
  std::ofstream(p) << text;
  return p;
}

tune::ProfileEntry entry(const tune::TuneKey& k, const kernels::Params& p) {
  tune::ProfileEntry e;
  e.key = k.str();
  e.version = 1;
  e.params = p;
  e.measured_under = tune::measured_under(k.sku);  // this build and host: not stale
  return e;
}

tune::TuneKey scheduler_key(const std::string& model, const std::string& sku) {
  tune::TuneKey k;
  k.op = serve::kSchedulerTuneOp;
  k.variant = serve::tune_model_name(model);
  k.shape = serve::BatchWorkload{}.shape();
  k.sku = sku;
  return k;
}

}  // namespace

TEST_CASE("app/serve: flag checks name the flag, in the tool's order", "[cpu][app]") {
  {
    RunCommand c = command();
    c.host = " \t";
    c.host_flag.given = true;
    c.port = -1;  // a later error: the blank --host is said first
    CHECK_THAT(error_of([&] { check_run_command(c, nullptr); }, ErrorCategory::Usage, "--host"),
               Catch::Contains("empty (or blank)"));
  }
  {
    RunCommand c = command();
    c.canary_profile = "";
    c.canary_profile_flag.given = true;
    error_of([&] { check_run_command(c, nullptr); }, ErrorCategory::Usage, "--canary-profile");
  }
  {  // not given: an empty default is fine
    RunCommand c = command();
    CHECK_NOTHROW(check_run_command(c, nullptr));
    CHECK(c.api_key.empty());
  }
  {  // RTX_API_KEY applies when --api-key is absent, and is checked under its own name
    RunCommand c = command();
    check_run_command(c, "s3cret");
    CHECK(c.api_key == "s3cret");
    RunCommand d = command();
    CHECK_THAT(error_of([&] { check_run_command(d, "has space"); }, ErrorCategory::Usage, "RTX_API_KEY"),
               Catch::Contains("whitespace"));
    RunCommand e = command();
    CHECK_THAT(error_of([&] { check_run_command(e, ""); }, ErrorCategory::Usage, "RTX_API_KEY"),
               Catch::Contains("turn authentication off"));
  }
  {  // a given --api-key beats the environment, even an invalid one there
    RunCommand c = command();
    c.api_key = "flag-key";
    c.api_key_flag.given = true;
    check_run_command(c, "bad key");
    CHECK(c.api_key == "flag-key");
    c.api_key = "tab\tkey";
    error_of([&] { check_run_command(c, nullptr); }, ErrorCategory::Usage, "--api-key");
  }
  {
    RunCommand c = command();
    c.served_name = std::string("bad\x01name");
    CHECK_THAT(error_of([&] { check_run_command(c, nullptr); }, ErrorCategory::Usage, "--model-name"),
               Catch::Contains("bad\\x01name"));
    c.served_name = std::string("\xff\xfe");
    error_of([&] { check_run_command(c, nullptr); }, ErrorCategory::Usage, "--model-name");
    c.served_name = "caf\xc3\xa9";  // valid UTF-8 passes
    CHECK_NOTHROW(check_run_command(c, nullptr));
  }
  const auto refused = [](auto set, const char* flag) {
    RunCommand c = command();
    set(c);
    return error_of([&] { check_run_command(c, nullptr); }, ErrorCategory::Usage, flag);
  };
  refused([](RunCommand& c) { c.port = 65536; }, "--port");
  refused([](RunCommand& c) { c.threads = -1; }, "--threads");
  refused([](RunCommand& c) { c.max_body = 0; }, "--max-body-bytes");
  CHECK_THAT(refused([](RunCommand& c) { c.header_timeout_s = 1e10; }, "--header-timeout"), Catch::Contains("1e+10"));
  refused([](RunCommand& c) { c.receive_timeout_s = 1e-9; }, "--receive-timeout");
  refused([](RunCommand& c) { c.shutdown_deadline_s = std::numeric_limits<double>::infinity(); }, "--shutdown-deadline");
  refused([](RunCommand& c) { c.canary_fraction = 1.5; }, "--canary-fraction");
  refused([](RunCommand& c) { c.canary_fraction = std::nan(""); }, "--canary-fraction");
  {  // --request-timeout is checked only when given (a profile's value is the scheduler's to judge)
    RunCommand c = command();
    c.sched.request_timeout_s = std::numeric_limits<double>::infinity();
    CHECK_NOTHROW(check_run_command(c, nullptr));
    give(c, "request_timeout_s");
    error_of([&] { check_run_command(c, nullptr); }, ErrorCategory::Usage, "--request-timeout");
  }
  {  // the edges pass
    RunCommand c = command();
    c.port = 0;
    c.header_timeout_s = 0.001;
    c.receive_timeout_s = 86400;
    c.canary_fraction = 1;
    CHECK_NOTHROW(check_run_command(c, nullptr));
  }
}

TEST_CASE("app/serve: the scheduler config after profiles: chunk cap, flag names, max_queue", "[cpu][app]") {
  {  // --token-budget alone caps the default prefill chunk
    RunCommand c = command();
    c.sched.token_budget = 64;
    give(c, "token_budget");
    finish_scheduler_config(c);
    CHECK(c.sched.prefill_chunk == 64);
  }
  {  // both given and contradicting: an error naming the flag, not the config key
    RunCommand c = command();
    c.sched.token_budget = 64;
    c.sched.prefill_chunk = 128;
    give(c, "token_budget");
    give(c, "prefill_chunk");
    error_of([&] { finish_scheduler_config(c); }, ErrorCategory::Usage, "--prefill-chunk");
  }
  {  // a bad value that no flag gave keeps the scheduler's own error (Input, the key)
    RunCommand c = command();
    c.sched.max_batch = 0;
    error_of([&] { finish_scheduler_config(c); }, ErrorCategory::Input, "max_batch");
    give(c, "max_batch");
    error_of([&] { finish_scheduler_config(c); }, ErrorCategory::Usage, "--max-batch");
  }
  {  // max_queue 0 would answer every request 429: refused, naming where it came from
    RunCommand c = command();
    c.sched.max_queue = 0;
    error_of([&] { finish_scheduler_config(c); }, ErrorCategory::Usage, "max_queue (from a tuned or promoted config)");
    give(c, "max_queue");
    CHECK_THAT(error_of([&] { finish_scheduler_config(c); }, ErrorCategory::Usage, "--max-queue"),
               Catch::Contains("429"));
  }
}

TEST_CASE("app/serve: a tuned scheduler profile applies under the given flags", "[cpu][app]") {
  const std::string sku = "cpu:test-sku";
  RunCommand c = command();
  c.model = "/models/Tiny Model.gguf";
  tune::ProfileLookup none({}, sku, "");
  CHECK(apply_tuned(c, none) == "none for model 'Tiny_Model' (defaults)");
  CHECK(c.sched.max_batch == serve::SchedulerConfig{}.max_batch);

  const auto key = scheduler_key(c.model, sku);
  tune::ProfileLookup lookup({entry(key, {{"max_batch", 8}, {"token_budget", 128}, {"prefill_chunk", 64}, {"threads", 3}})}, sku, "");
  SECTION("no flags given: every tuned knob and the threads") {
    const std::string said = apply_tuned(c, lookup);
    CHECK(c.sched.max_batch == 8);
    CHECK(c.sched.token_budget == 128);
    CHECK(c.sched.prefill_chunk == 64);
    CHECK(c.threads == 3);
    CHECK_THAT(said, Catch::StartsWith("max_batch=8") && Catch::Contains("from " + key.str()));
    CHECK_THAT(said, !Catch::Contains("flags kept"));
  }
  SECTION("given flags are kept and said") {
    c.sched.max_batch = 4;
    give(c, "max_batch");
    c.threads = 2;
    c.threads_flag.given = true;
    const std::string said = apply_tuned(c, lookup);
    CHECK(c.sched.max_batch == 4);
    CHECK(c.sched.token_budget == 128);
    CHECK(c.threads == 2);
    CHECK_THAT(said, Catch::EndsWith("(flags kept: max_batch threads)"));
  }
  SECTION("a profile that is not valid here is reported, not applied") {
    tune::ProfileLookup bad({entry(key, {{"max_batch", 64}, {"token_budget", 16}})}, sku, "");
    const std::string said = apply_tuned(c, bad);
    CHECK_THAT(said, Catch::StartsWith("not applied (") && Catch::Contains("token_budget"));
    CHECK(c.sched.max_batch == serve::SchedulerConfig{}.max_batch);
  }
}

TEST_CASE("app/serve: promoted configs apply over the tuned profile, under the given flags", "[cpu][app]") {
  const std::string db = test::temp_dir() + "/promoted.db";
  {
    store::Store st(db);
    st.exec(R"SQL(
      INSERT INTO evolve_configs (key, version, config_json) VALUES
        ('scheduler|cpu:t', 1, '{"max_batch": 12, "token_budget": 600}'), ('parallelism|cpu:t', 1, '{"threads": 5}'),
        ('scheduler|cpu:bad', 1, '{"max_batch": 0}'), ('scheduler|cpu:arr', 1, '[1, 2]');
      INSERT INTO evolve_config_current (key, version) VALUES
        ('scheduler|cpu:t', 1), ('parallelism|cpu:t', 1), ('scheduler|cpu:bad', 1), ('scheduler|cpu:arr', 1);
    )SQL");
  }
  {
    RunCommand c = command();
    const std::string line = apply_promoted(c, db, "cpu:t");
    CHECK(c.sched.max_batch == 12);
    CHECK(c.sched.token_budget == 600);
    CHECK(c.threads == 5);
    CHECK_THAT(line, Catch::Contains("applied") && Catch::Contains("scheduler v1"));
  }
  {  // a given flag beats the promoted value; --threads given: parallelism ignored, and said
    RunCommand c = command();
    c.sched.max_batch = 2;
    give(c, "max_batch");
    c.threads = 1;
    c.threads_flag.given = true;
    const std::string line = apply_promoted(c, db, "cpu:t");
    CHECK(c.sched.max_batch == 2);
    CHECK(c.sched.token_budget == 600);
    CHECK(c.threads == 1);
    CHECK_THAT(line, Catch::Contains("ignored parallelism v1 (--threads given)"));
  }
  for (const char* sku : {"cpu:bad", "cpu:arr"}) {  // never stops the server: ignored, with the reason
    RunCommand c = command();
    const std::string line = apply_promoted(c, db, sku);
    CHECK(c.sched.max_batch == serve::SchedulerConfig{}.max_batch);
    CHECK_THAT(line, Catch::Contains("invalid here"));
  }
}

TEST_CASE("app/serve: the tuned matmul parameters, checked against this CPU", "[cpu][app]") {
  const std::string sku = "cpu:test-sku";
  tune::TuneKey key;
  key.op = "matmul_forward";
  key.variant = "cpu.blocked";
  key.shape = {{"M", 32}, {"N", 256}, {"K", 64}};
  key.sku = sku;
  std::string said;
  tune::ProfileLookup none({}, sku, "");
  kernels::MatmulParams mp = profile_matmul(none, 32, 256, 64, said);
  CHECK(said == "none for this SKU (defaults)");
  CHECK((mp.KC == 0 && mp.NR == 0 && mp.MC == 0));
  // NR = 3 is no register tile of any ISA: the variant's validator passes the entry over.
  tune::ProfileLookup bad({entry(key, {{"NR", 3}})}, sku, "");
  mp = profile_matmul(bad, 32, 256, 64, said);
  CHECK((mp.KC == 0 && mp.NR == 0));
  CHECK(said == "none for this SKU (defaults)");
  // Another SKU's entry is not this machine's.
  tune::ProfileLookup other({entry(key, {{"KC", 128}})}, "cpu:another-sku", "");
  profile_matmul(other, 32, 256, 64, said);
  CHECK(said == "none for this SKU (defaults)");
  // A valid KC (only the cache block; the micro-tile stays the ISA's default) is used.
  const kernels::MatmulParams want{0, 0, 128, 0, 0};
  REQUIRE(kernels::matmul_params_invalid(want, kernels::cpu_isa_active()).empty());
  tune::ProfileLookup good({entry(key, {{"KC", 128}})}, sku, "");
  mp = profile_matmul(good, 32, 256, 64, said);
  CHECK(mp.KC == 128);
  CHECK(said == "KC=128 from " + key.str());
}

TEST_CASE("app/serve: the canary's engine profile file", "[cpu][app]") {
  RunCommand base = command();
  base.sched.max_batch = 6;
  base.threads = 2;
  base.dequantize = true;
  const auto p = read_engine_profile(
      write_file("canary.json", R"({"schema": "x", "scheduler": {"token_budget": 96, "prefill_chunk": 32}, "threads": 3, "matmul": {"KC": 64, "NR": 16}})"),
      base);
  CHECK(p.sched.max_batch == 6);  // from the main engine's settings
  CHECK(p.sched.token_budget == 96);
  CHECK(p.sched.prefill_chunk == 32);
  CHECK(p.load.threads == 3);
  CHECK(p.load.matmul.KC == 64);
  CHECK(p.load.matmul.NR == 16);
  CHECK_FALSE(p.load.keep_quantized);  // --dequantize carries over
  CHECK(p.load.cuda_device == -1);
  const auto bad = [&](const std::string& text, const std::string& where) {
    const std::string path = write_file("bad.json", text);
    return error_of([&] { read_engine_profile(path, base); }, ErrorCategory::Input, where == "@" ? path : where);
  };
  CHECK_THAT(bad("{\"threads\": 5000}", "threads"), Catch::Contains("[0, 4096]"));
  CHECK_THAT(bad("{\"matmul\": {\"XC\": 1}}", "XC"), Catch::Contains("unknown matmul parameter"));
  bad("{\"matmul\": {\"KC\": -1}}", "KC");
  CHECK_THAT(bad("{\"speed\": 1}", "speed"), Catch::Contains("unknown key \"speed\""));
  bad("{\"scheduler\": 3}", "scheduler");
  CHECK_THAT(bad("[1]", "@"), Catch::Contains("not a JSON object"));
  CHECK_THAT(bad("{", "@"), Catch::Contains("not valid JSON"));
  const std::string missing = test::temp_dir() + "/missing.json";
  error_of([&] { read_engine_profile(missing, base); }, ErrorCategory::Input, missing);
}

TEST_CASE("app/serve: model path, load options and the server config from the flags", "[cpu][app]") {
  const std::string dir = test::temp_dir();
  CHECK_THAT(error_of([&] { check_model_path(dir); }, ErrorCategory::Input, dir), Catch::Contains("directory"));
  error_of([] { check_model_path("/dev/null"); }, ErrorCategory::Input, "/dev/null");
  CHECK_NOTHROW(check_model_path(dir + "/absent.gguf"));  // the loader says it cannot open it

  RunCommand c = command();
  c.threads = 4;
  c.f32_activations = true;
  c.device = "cuda:1";
  const auto lo = load_options(c);
  CHECK(lo.threads == 4);
  CHECK_FALSE(lo.int8_activations);
  CHECK(lo.keep_quantized);
  CHECK(lo.cuda_device == 1);

  c.host = "::1";
  c.port = 0;
  c.api_key = "k";
  c.served_name = "tiny";
  c.chat_template = "chatml";
  c.canary_fraction = 0.25;
  auto sc = server_config(c, stderr);
  CHECK(sc.host == "::1");
  CHECK(sc.port == 0);
  CHECK(sc.api_key == "k");
  CHECK(sc.model_name == "tiny");
  CHECK(sc.canary_fraction == 0.25);
  CHECK(sc.access_log == nullptr);  // only with --log-requests
  c.log_requests = true;
  CHECK(server_config(c, stderr).access_log == stderr);
  c.chat_template = dir + "/no-template.json";
  CHECK_THROWS_AS(server_config(c, stderr), Error);
}

TEST_CASE("app/serve: a bind failure says why and which flag to change", "[cpu][app]") {
  test::LoopbackListener held;
  const Error fallback(ErrorCategory::Environment, "bind failed", "--port");
  CHECK_THAT(error_of([&] { throw_bind_error("127.0.0.1", held.port(), fallback); }, ErrorCategory::Environment, "--port"),
             Catch::Contains("127.0.0.1:" + std::to_string(held.port())) && Catch::Contains("another process listens there"));
  // 192.0.2.1 (TEST-NET-1) is no address of this machine.
  CHECK_THAT(error_of([&] { throw_bind_error("192.0.2.1", 8080, fallback); }, ErrorCategory::Environment, "--host"),
             Catch::Contains("not an address of this machine"));
  // The probe binds (the address is free now): the server's own error is rethrown.
  CHECK_THAT(error_of([&] { throw_bind_error("127.0.0.1", 0, fallback); }, ErrorCategory::Environment, "--port"),
             Catch::Equals("bind failed"));
}

TEST_CASE("app/serve: run_run serves a model and stops when told", "[cpu][app]") {
  const std::string model = test::data_dir() + "/stories260k/tinyllamas-stories-260k-f32.gguf";
  RunCommand c = command();
  c.model = model;
  c.port = 0;
  c.threads = 1;
  c.json = true;
  c.db = test::temp_dir() + "/absent/rtx.db";
  c.sched.max_batch = 4;
  give(c, "max_batch");
  std::ostringstream out, err;
  bool listening = false;
  RunHooks hooks;
  hooks.on_listening = [&] { listening = true; };
  hooks.should_stop = [&] { return listening; };
  REQUIRE(run_run(c, out, err, hooks) == 0);
  CHECK(listening);
  const auto j = nlohmann::json::parse(out.str());
  CHECK(j["host"] == "127.0.0.1");
  CHECK(j["port"].get<int>() > 0);
  CHECK(j["model"].get<std::string>().size() > 0);
  const std::string e = err.str();
  INFO(e);
  CHECK_THAT(e, Catch::Contains("rtx-serve: no store at " + c.db));
  CHECK_THAT(e, Catch::Contains("max_batch 4,") && Catch::Contains("on http://127.0.0.1:" + std::to_string(j["port"].get<int>())));
  CHECK_THAT(e, Catch::EndsWith("rtx-serve: stopped\n"));
  // --canary-fraction without --canary-profile is refused before anything loads.
  RunCommand d = command();
  d.model = model;
  d.canary_fraction = 0.5;
  d.no_profile = true;
  error_of([&] { run_run(d, out, err, hooks); }, ErrorCategory::Usage, "--canary-fraction");
}
