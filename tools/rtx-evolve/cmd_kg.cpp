// rtx-evolve kg query / kg export: flags only; the graph and its questions are
// rtx::evolve::kg_* in libcommon.
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "rtx/core/error.hpp"
#include "rtx/evolve/kg.hpp"
#include "rtx/io/atomic_file.hpp"

namespace rtx_evolve {

using nlohmann::json;

namespace {

Body add_kg_query(CLI::App& app, const rtx::cli::CommonOptions& common) {
  auto q = std::make_shared<rtx::evolve::KgQuery>();
  app.add_option("QUESTION", q->question,
                 "improved (what improved <op> on <SKU>?), hurt-determinism (which changes hurt determinism?), "
                 "failed (what failed which gate and why?)")
      ->required();
  app.add_option("--op", q->op, "Only proposals whose affected cases run this op (matmul, gelu, serve, alloc, ...)");
  app.add_option("--sku", q->sku, "Only proposals measured on a SKU containing this text (case-insensitive)");
  app.add_option("--domain", q->domain, "Only proposals of this domain (tuner, parallelism, scheduler, memory, fusion)");
  app.add_option("--gate", q->gate, "failed: only this gate (determinism, performance, heldout, memory, safety, ...)");
  app.add_option("--limit", q->limit, "Most rows")->capture_default_str()->check(CLI::Range(1, 100000));
  return [&common, q]() {
    rtx::store::Store st(rtx::store::resolve_db_path(common.db));
    const json answer = rtx::evolve::kg_query(st, *q);
    std::cout << (common.json ? answer.dump(2) + "\n" : rtx::evolve::kg_format_text(answer)) << std::flush;
    return 0;
  };
}

Body add_kg_export(CLI::App& app, const rtx::cli::CommonOptions& common) {
  struct Opts {
    std::string format = "dot", out = "-";
    rtx::evolve::KgExportFilter f;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("--format", o->format, "dot (Graphviz), svg (laid out with libgvc) or json")->capture_default_str();
  app.add_option("-o,--out", o->out, "File, written atomically (default - stdout)")->capture_default_str();
  app.add_option("--proposal", o->f.proposal, "Only this proposal's neighbourhood (its gates, deltas, cases, SKU, deployments)");
  app.add_option("--sku", o->f.sku, "Only proposals measured on a SKU containing this text (case-insensitive)");
  app.add_option("--op", o->f.op, "Only proposals whose affected cases run this op");
  app.add_option("--domain", o->f.domain, "Only proposals of this domain");
  return [&common, o]() {
    // Check the format before syncing (kg_render would, after the work).
    if (o->format != "dot" && o->format != "svg" && o->format != "json")
      rtx::throw_input("unknown export format '" + o->format + "'", "kg export --format", "one of dot, svg, json");
    rtx::store::Store st(rtx::store::resolve_db_path(common.db));
    const json graph = rtx::evolve::kg_graph(st, o->f);
    const std::string text = rtx::evolve::kg_render(graph, o->format);
    if (o->out == "-") {
      rtx::io::write_text_output("-", text);
      return 0;
    }
    rtx::io::atomic_write_file(o->out, text);
    const json done = {{"written", o->out}, {"format", o->format}, {"bytes", text.size()},
                       {"nodes", graph["nodes"].size()}, {"edges", graph["edges"].size()}};
    if (common.json) std::cout << done.dump(2) << "\n";
    else if (!common.quiet)
      std::cerr << "rtx-evolve kg export: wrote " << o->out << " (" << o->format << ", " << graph["nodes"].size() << " nodes, "
                << graph["edges"].size() << " edges)\n";
    return 0;
  };
}

}  // namespace

Body add_kg(CLI::App& app, const rtx::cli::CommonOptions& common) {
  auto subs = std::make_shared<rtx::cli::Subcommands>(app);
  subs->add("query", "Ask the knowledge graph: improved | hurt-determinism | failed (with --op --sku --domain --gate)",
            [&](CLI::App& s) { return add_kg_query(s, common); });
  subs->add("export", "Write the knowledge graph as dot, svg or json (filters: --proposal --sku --op --domain)",
            [&](CLI::App& s) { return add_kg_export(s, common); });
  return [subs]() { return subs->run(); };
}

}  // namespace rtx_evolve
