// Polygraph IR passes: DCE, CSE, the pass registry and the data-driven pass list.
#include "rtx/ir/passes.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <unordered_map>

#include "rtx/core/error.hpp"
#include "rtx/ir/fusion.hpp"
#include "rtx/io/artifact.hpp"
#include "rtx/telemetry/bus.hpp"

namespace rtx::ir {

using nlohmann::json;

namespace {

class Dce : public Pass {
 public:
  std::string name() const override { return "dce"; }
  std::string illegal(const Graph& g) const override {
    return g.outputs().empty() ? "the graph has no outputs: every node would be dead" : "";
  }
  bool run(Graph& g) const override {
    std::vector<bool> live_v(g.values().size(), false), keep(g.nodes().size(), false);
    for (int o : g.outputs()) live_v[o] = true;
    for (size_t k = g.nodes().size(); k-- > 0;) {
      const Node& n = g.node(static_cast<int>(k));
      bool live = n.kind == Kind::Input;
      for (int o : n.outputs) live = live || live_v[o];
      if (!live) continue;
      keep[k] = true;
      for (int i : n.inputs) live_v[i] = true;
    }
    if (std::all_of(keep.begin(), keep.end(), [](bool b) { return b; })) return false;
    g = rebuild(g, keep, {});
    return true;
  }
};

class Cse : public Pass {
 public:
  std::string name() const override { return "cse"; }
  std::string illegal(const Graph&) const override { return ""; }
  bool run(Graph& g) const override {
    std::unordered_map<std::string, int> seen;  // key -> node id
    std::map<int, int> replace;
    std::vector<bool> keep(g.nodes().size(), true);
    for (const Node& n : g.nodes()) {
      if (n.kind == Kind::Input) continue;
      std::string key = std::string(kind_name(n.kind)) + "(";
      for (int i : n.inputs) {
        auto it = replace.find(i);
        key += std::to_string(it == replace.end() ? i : it->second) + ",";
      }
      key += ")" + n.attrs.dump();
      auto [it, fresh] = seen.emplace(key, n.id);
      if (fresh) continue;
      const Node& first = g.node(it->second);
      for (size_t k = 0; k < n.outputs.size(); ++k) replace[n.outputs[k]] = first.outputs[k];
      keep[n.id] = false;
    }
    if (replace.empty()) return false;
    g = rebuild(g, keep, replace);
    return true;
  }
};

std::mutex& reg_mu() {
  static std::mutex m;
  return m;
}
std::map<std::string, PassFactory>& reg() {
  static std::map<std::string, PassFactory> r = [] {
    std::map<std::string, PassFactory> m;
    m["dce"] = [](const json&) { return make_dce_pass(); };
    m["cse"] = [](const json&) { return make_cse_pass(); };
    m["fuse_elementwise"] = [](const json& o) { return make_fuse_elementwise_pass(o); };
    m["fuse_matmul_bias"] = [](const json&) { return make_fuse_matmul_bias_pass(); };
    return m;
  }();
  return r;
}

}  // namespace

std::unique_ptr<Pass> make_dce_pass() { return std::make_unique<Dce>(); }
std::unique_ptr<Pass> make_cse_pass() { return std::make_unique<Cse>(); }

void register_pass(const std::string& name, PassFactory factory) {
  std::lock_guard<std::mutex> lk(reg_mu());
  if (!reg().emplace(name, std::move(factory)).second) throw_internal("pass '" + name + "' is already registered", "ir passes");
}

std::vector<std::string> pass_names() {
  std::lock_guard<std::mutex> lk(reg_mu());
  std::vector<std::string> r;
  for (const auto& [k, _] : reg()) r.push_back(k);
  return r;
}

json default_pass_config() {
  return json{{"schema", io::schema_id("passes", 1)}, {"passes", json::array({json{{"name", "cse"}}, json{{"name", "dce"}}})}};
}

std::vector<PassRecord> run_passes(Graph& g, const json& config, const std::string& source) {
  using io::JsonType;
  io::check_artifact_schema(config, source, "passes", {1});
  io::validate(config, source,
               {{"/passes", JsonType::Array},
                {"/passes/*/name", JsonType::String},
                {"/passes/*/enabled", JsonType::Boolean, false},
                {"/passes/*/options", JsonType::Object, false}});
  // build every pass first, so a bad list fails before anything changes
  std::vector<std::unique_ptr<Pass>> passes;
  std::vector<bool> enabled;
  for (size_t i = 0; i < config["passes"].size(); ++i) {
    const json& e = config["passes"][i];
    const std::string name = e["name"];
    PassFactory f;
    {
      std::lock_guard<std::mutex> lk(reg_mu());
      auto it = reg().find(name);
      if (it != reg().end()) f = it->second;
    }
    if (!f) {
      std::string known;
      for (const auto& k : pass_names()) known += (known.empty() ? "" : ", ") + k;
      throw_input("field '/passes/" + std::to_string(i) + "/name': unknown pass '" + name + "'", source, "known passes: " + known);
    }
    passes.push_back(f(e.value("options", json::object())));
    enabled.push_back(e.value("enabled", true));
  }
  std::vector<PassRecord> out;
  for (size_t i = 0; i < passes.size(); ++i) {
    PassRecord r;
    r.name = passes[i]->name();
    r.enabled = enabled[i];
    r.nodes_before = r.nodes_after = g.nodes().size();
    const auto t0 = std::chrono::steady_clock::now();
    if (!r.enabled) {
      r.reason = "disabled";
    } else {
      r.reason = passes[i]->illegal(g);
      r.legal = r.reason.empty();
      if (r.legal) {
        r.changed = passes[i]->run(g);
        r.details = passes[i]->details();
        g.verify();
        r.nodes_after = g.nodes().size();
      }
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    RTX_PUBLISH(telemetry::topic::compiler_pass,
                json{{"pass", r.name}, {"graph", g.name()}, {"enabled", r.enabled}, {"legal", r.legal}, {"reason", r.reason},
                     {"changed", r.changed}, {"nodes_before", r.nodes_before}, {"nodes_after", r.nodes_after}, {"seconds", r.seconds},
                     {"details", r.details}});
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace rtx::ir
