// Polygraph IR passes: objects with a name, a legality check and a rewrite; the pass list is
// data (JSON), so rtx-evolve can toggle passes and issue 39's fusion passes slot in by name.
// Each pass run publishes a `compiler.pass` event (nodes before/after, legal, changed).
#pragma once
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rtx/ir/graph.hpp"

namespace rtx::ir {

/// A graph rewrite. Implementations must keep the graph's meaning: same inputs (names), same
/// outputs in the same order, same values at every output.
class Pass {
 public:
  virtual ~Pass() = default;
  /// Stable name used in pass lists and events ("dce", "cse").
  virtual std::string name() const = 0;
  /// Why the pass must not run on `g` ("" when it may). A refused pass is recorded, not run.
  virtual std::string illegal(const Graph& g) const = 0;
  /// Rewrite `g` in place; true when it changed.
  virtual bool run(Graph& g) const = 0;
  /// What the last run() did, pass-specific (fusion: the groups made and every refusal with its
  /// node and reason); published in the `compiler.pass` event as "details". {} by default.
  virtual nlohmann::json details() const { return nlohmann::json::object(); }
};

/// Dead-code elimination: drops nodes none of whose outputs reach a graph output (input nodes
/// stay: they are the graph's interface). Illegal on a graph without outputs.
std::unique_ptr<Pass> make_dce_pass();
/// Common-subexpression elimination: a node with the same kind, inputs and attributes as an
/// earlier one is replaced by it (every kind here is pure; inputs are never merged).
std::unique_ptr<Pass> make_cse_pass();

/// Makes a pass from its options (the list entry's "options" object, {} when absent).
using PassFactory = std::function<std::unique_ptr<Pass>(const nlohmann::json& options)>;
/// Add a pass by name (how fusion passes join); Error(Internal) when the name exists.
/// dce and cse are always known. Not thread-safe against concurrent run_passes.
void register_pass(const std::string& name, PassFactory factory);
/// Known pass names, sorted.
std::vector<std::string> pass_names();

/// One pass's outcome.
struct PassRecord {
  std::string name;
  bool enabled = true;
  bool legal = true;
  bool changed = false;
  std::string reason;  ///< why it was refused ("" when it ran) or "disabled"
  nlohmann::json details = nlohmann::json::object();  ///< Pass::details() after the run
  size_t nodes_before = 0, nodes_after = 0;
  double seconds = 0;
};

/// The default pass list: {"schema":"rtx.passes.v1","passes":[{"name":"cse"},{"name":"dce"}]}.
nlohmann::json default_pass_config();
/// Run the passes of `config` in order on `g` ({"schema":"rtx.passes.v1","passes":[{"name":
/// str, "enabled": bool (default true), "options": object}]}). Checks the schema and fields
/// (Error(Input) naming `source` and the field; an unknown pass name lists the known ones),
/// then for each enabled pass checks legality, runs it, verifies the graph and publishes
/// `compiler.pass` {pass, graph, enabled, legal, reason, changed, nodes_before, nodes_after, seconds, details}.
/// Known passes: dce, cse, fuse_elementwise, fuse_matmul_bias (fusion.hpp), and registered ones.
std::vector<PassRecord> run_passes(Graph& g, const nlohmann::json& config, const std::string& source = "<passes>");

}  // namespace rtx::ir
