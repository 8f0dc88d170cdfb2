// rtx-evolve export / submit / approve / rollback / rehearse / keygen / __trial: flags only.
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "commands.hpp"
#include "rtx/app/bench.hpp"
#include "rtx/core/error.hpp"
#include "rtx/evolve/deploy.hpp"
#include "rtx/evolve/loop.hpp"
#include "rtx/evolve/trial.hpp"
#include "rtx/io/atomic_file.hpp"
#include "rtx/kernels/registry.hpp"

namespace rtx_evolve {

using nlohmann::json;

namespace {

std::string key_path(const std::string& flag, const rtx::cli::CommonOptions& common) {
  return flag.empty() ? rtx::evolve::default_key_path(rtx::store::resolve_db_path(common.db)) : flag;
}

std::string actor_or_user(const std::string& a) {
  if (!a.empty()) return a;
  const char* u = std::getenv("USER");
  return u && *u ? u : "unknown";
}

/// A proposal or spec file ("-" = stdin) through the shared reader: a directory, a missing file
/// or more than 64 MiB (e.g. /dev/zero) is an Input error naming the path.
std::string read_text(const std::string& path) {
  rtx::io::ReadLimits lim;
  lim.max_bytes = uint64_t{64} << 20;
  try {
    return rtx::io::read_text_file(path, lim);
  } catch (const rtx::Error& e) {
    if (e.category() != rtx::ErrorCategory::Environment) throw;
    rtx::throw_input("cannot read file: " + e.message(), e.where().empty() ? path : e.where());
  }
}

json parse_json(const std::string& text, const std::string& source) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    rtx::throw_input(std::string("invalid JSON: ") + e.what(), source);
  }
}

std::string vtext(const std::optional<int64_t>& v) { return v ? "v" + std::to_string(*v) : "defaults"; }

json deploy_json(const rtx::evolve::DeployResult& d) {
  return {{"proposal", d.proposal_id}, {"target", d.target}, {"key", d.key},
          {"from_version", d.from_version ? json(*d.from_version) : json(nullptr)},
          {"to_version", d.to_version ? json(*d.to_version) : json(nullptr)}, {"seconds", d.seconds}};
}

}  // namespace

Body add_export(CLI::App& app, const rtx::cli::CommonOptions& common) {
  auto id = std::make_shared<int64_t>(0);
  auto out = std::make_shared<std::string>("-");
  app.add_option("ID", *id, "Proposal id")->required();
  app.add_option("-o,--out", *out, "File (default - stdout)")->capture_default_str();
  return [&common, id, out]() {
    rtx::store::Store st(rtx::store::resolve_db_path(common.db));
    const rtx::evolve::Proposal p = rtx::evolve::load_proposal(st, *id);
    const std::string text = rtx::evolve::to_json(p).dump(2) + "\n";
    if (*out == "-") {
      std::cout << text;
    } else {
      rtx::io::AtomicFileWriter w(*out);
      w.write(text);
      w.commit();
    }
    return 0;
  };
}

Body add_submit(CLI::App& app, const rtx::cli::CommonOptions& common) {
  auto file = std::make_shared<std::string>();
  auto key = std::make_shared<std::string>();
  auto no_validate = std::make_shared<bool>(false);
  auto v = std::make_shared<rtx::evolve::ValidateOptions>();
  app.add_option("FILE", *file, "rtx.proposal.v1 document, or - for stdin")->required();
  app.add_option("--key", *key, "Signing key (default next to the store)");
  app.add_flag("--no-validate", *no_validate, "Only store it (status new)");
  app.add_option("--rounds", v->rounds, "A/B pairs")->capture_default_str()->check(CLI::Range(2, 50));
  return [&common, file, key, no_validate, v]() {
    rtx::store::Store st(rtx::store::resolve_db_path(common.db));
    const rtx::evolve::KeyPair k = rtx::evolve::load_key(key_path(*key, common));
    const std::string source = *file == "-" ? "<stdin>" : *file;
    const int64_t id = rtx::evolve::submit(st, parse_json(read_text(*file), source), source, k, rtx::app::bench::registry());
    json out = {{"id", id}, {"status", "new"}};
    if (!*no_validate) {
      v->seed = common.seed;
      if (!common.quiet) v->log = &std::cerr;
      const rtx::evolve::Validation val = rtx::evolve::validate(st, id, k, *v, 0);
      out["status"] = val.passed ? "passed" : "failed";
      out["validation"] = val.summary;
    }
    if (common.json) std::cout << out.dump(2) << "\n";
    else
      std::cerr << "proposal " << id << ": " << out["status"].get<std::string>()
                << (out["status"] == "passed" ? " (approve with: rtx-evolve approve " + std::to_string(id) + ")"
                    : out["status"] == "new"  ? " (stored and signed; validate with: rtx-evolve validate " + std::to_string(id) + ")"
                                              : "")
                << "\n";
    return out["status"] == "failed" ? 1 : 0;
  };
}

Body add_validate(CLI::App& app, const rtx::cli::CommonOptions& common) {
  auto id = std::make_shared<int64_t>(0);
  auto key = std::make_shared<std::string>();
  auto v = std::make_shared<rtx::evolve::ValidateOptions>();
  app.add_option("ID", *id, "Proposal id (status new, or interrupted by a killed run)")->required();
  app.add_option("--key", *key, "Signing key (default next to the store)");
  app.add_option("--rounds", v->rounds, "A/B pairs")->capture_default_str()->check(CLI::Range(2, 50));
  app.add_option("--model", v->model_path, "Serving model for the scheduler domain (default $RTX_DATA/stories260k/...f32.gguf)");
  app.add_option("--timeout", v->sandbox.timeout_s, "Wall-clock limit of one sandboxed trial, s")
      ->capture_default_str()->check(CLI::Range(1.0, 86400.0));
  auto* no_canary = app.add_flag("--no-canary", "Scheduler domain: skip the serving canary gate");
  auto* resume = app.add_flag("--resume", "Also validate a proposal left 'validating' by a killed process");
  return [&common, id, key, v, no_canary, resume]() {
    v->canary = no_canary->count() == 0;
    rtx::store::Store st(rtx::store::resolve_db_path(common.db));
    const rtx::evolve::KeyPair k = rtx::evolve::load_key(key_path(*key, common));
    const rtx::evolve::Proposal p = rtx::evolve::load_proposal(st, *id);
    // A failed proposal is not re-validated: measuring again until a noisy result passes would
    // make the gate's error rate meaningless. Submit it again (a new id) if the code changed.
    const bool resumable = p.status == "validating" && resume->count() > 0;
    if (p.status != "new" && p.status != "interrupted" && !resumable)
      rtx::throw_usage("proposal " + std::to_string(*id) + " is '" + p.status +
                           "'; only a proposal that is 'new' (submitted with --no-validate or over MCP) or "
                           "'interrupted' can be validated",
                       "ID",
                       p.status == "validating"
                           ? "if the process validating it was killed, run `rtx-evolve validate " + std::to_string(*id) +
                                 " --resume` (make sure no other rtx-evolve is validating it)"
                           : "");
    v->seed = common.seed;
    if (!common.quiet) v->log = &std::cerr;
    const rtx::evolve::Validation val = rtx::evolve::validate(st, *id, k, *v, 0);
    const json out = {{"id", *id}, {"status", val.passed ? "passed" : "failed"}, {"validation", val.summary}};
    if (common.json) std::cout << out.dump(2) << "\n";
    else
      std::cerr << "proposal " << *id << ": " << out["status"].get<std::string>()
                << (val.passed ? " (approve with: rtx-evolve approve " + std::to_string(*id) + ")" : "") << "\n";
    return val.passed ? 0 : 1;
  };
}

Body add_approve(CLI::App& app, const rtx::cli::CommonOptions& common) {
  auto id = std::make_shared<int64_t>(0);
  auto key = std::make_shared<std::string>();
  auto actor = std::make_shared<std::string>();
  app.add_option("ID", *id, "Proposal id (status passed)")->required();
  app.add_option("--key", *key, "Signing key (default next to the store)");
  app.add_option("--actor", *actor, "Who approves (default $USER)");
  return [&common, id, key, actor]() {
    rtx::store::Store st(rtx::store::resolve_db_path(common.db));
    const rtx::evolve::KeyPair k = rtx::evolve::load_key(key_path(*key, common));
    // Verify before recording the approval: a tampered envelope is refused outright.
    const rtx::evolve::Proposal p = rtx::evolve::load_proposal(st, *id);
    const std::string why = rtx::evolve::verify(p, k);
    if (!why.empty()) rtx::throw_input("refusing to approve proposal " + std::to_string(*id) + ": " + why, "ID");
    // An approved proposal whose promotion was refused earlier (baseline moved) is retried as is.
    if (p.status != "approved") rtx::evolve::approve(st, *id, actor_or_user(*actor), "manual");
    const auto d = rtx::evolve::promote(st, *id, k, actor_or_user(*actor));
    if (common.json) std::cout << deploy_json(d).dump(2) << "\n";
    else
      std::cerr << "approved and promoted proposal " << *id << ": " << d.key << " " << vtext(d.from_version) << " -> "
                << vtext(d.to_version) << "\nroll back with: rtx-evolve rollback " << *id << "\n";
    return 0;
  };
}

Body add_rollback(CLI::App& app, const rtx::cli::CommonOptions& common) {
  auto id = std::make_shared<int64_t>(0);
  auto key = std::make_shared<std::string>();
  auto actor = std::make_shared<std::string>();
  app.add_option("ID", *id, "Promoted proposal id")->required();
  app.add_option("--key", *key, "Signing key (default next to the store)");
  app.add_option("--actor", *actor, "Who rolls back (default $USER)");
  return [&common, id, key, actor]() {
    rtx::store::Store st(rtx::store::resolve_db_path(common.db));
    const auto d = rtx::evolve::rollback(st, *id, rtx::evolve::load_key(key_path(*key, common)), actor_or_user(*actor));
    if (common.json) std::cout << deploy_json(d).dump(2) << "\n";
    else
      std::cerr << "rolled back proposal " << *id << ": " << d.key << " " << vtext(d.from_version) << " -> " << vtext(d.to_version)
                << " in " << d.seconds * 1e3 << " ms\n";
    return 0;
  };
}

Body add_rehearse(CLI::App& app, const rtx::cli::CommonOptions& common) {
  auto id = std::make_shared<int64_t>(0);
  auto key = std::make_shared<std::string>();
  app.add_option("ID", *id, "Promoted proposal id (default: the latest promotion)");
  app.add_option("--key", *key, "Signing key (default next to the store)");
  return [&common, id, key]() {
    rtx::store::Store st(rtx::store::resolve_db_path(common.db));
    int64_t pid = *id;
    if (pid == 0) {
      const auto latest = rtx::evolve::latest_promoted(st);
      if (!latest) rtx::throw_usage("no promoted proposal to rehearse in " + st.path(), "ID", "promote one first (rtx-evolve approve ID)");
      pid = *latest;
    }
    const auto r = rtx::evolve::rehearse(st, pid, rtx::evolve::load_key(key_path(*key, common)), actor_or_user(""));
    const bool ok = r.seconds < 1.0;
    if (common.json)
      std::cout << json{{"proposal", pid}, {"rollback", deploy_json(r.back)}, {"rollforward", deploy_json(r.forward)},
                        {"seconds", r.seconds}, {"goal_s", 1.0}, {"within_goal", ok}}.dump(2) << "\n";
    else
      std::cerr << "rehearsed proposal " << pid << " (" << r.back.key << "): rolled back in " << r.back.seconds * 1e3
                << " ms, forward in " << r.forward.seconds * 1e3 << " ms, " << r.seconds * 1e3 << " ms in all (goal < 1 s: "
                << (ok ? "met" : "MISSED") << ")\n";
    return ok ? 0 : 1;
  };
}

Body add_keygen(CLI::App& app, const rtx::cli::CommonOptions& common) {
  auto key = std::make_shared<std::string>();
  auto force = std::make_shared<bool>(false);
  app.add_option("--key", *key, "Key file (default evolve_ed25519.key next to the store)");
  app.add_flag("--force", *force, "Replace an existing key (its proposals then fail verification)");
  return [&common, key, force]() {
    const std::string path = key_path(*key, common);
    // The store's folder ($RTX_HOME) is created by opening the store.
    rtx::store::Store st(rtx::store::resolve_db_path(common.db));
    const auto k = rtx::evolve::generate_key(path, *force);
    if (common.json) std::cout << json{{"key", path}, {"public_key", k.public_hex()}}.dump(2) << "\n";
    else std::cerr << "wrote " << path << " (mode 0600); public key " << k.public_hex() << "\n";
    return 0;
  };
}

Body add_trial(CLI::App& app) {
  app.group("");  // hidden: the sandbox runs it
  auto spec = std::make_shared<std::string>();
  app.add_option("--spec", *spec, "Trial spec file (rtx.evolve.trial_spec.v1)")->required();
  return [spec]() {
    const json s = parse_json(read_text(*spec), *spec);
    json out = {{"schema", rtx::evolve::kTrialResultSchema}, {"parts", json::array()}};
    if (!s.contains("parts") || !s["parts"].is_array()) rtx::throw_input("trial spec needs 'parts'", *spec);
    for (const json& part : s["parts"]) out["parts"].push_back(rtx::evolve::run_trial(part));
    size_t peak = 0;
    for (const auto& p : out["parts"]) peak = std::max(peak, p.value("peak_rss_bytes", size_t(0)));
    out["peak_rss_bytes"] = peak;
    std::cout << out.dump() << "\n";
    return 0;
  };
}

}  // namespace rtx_evolve
