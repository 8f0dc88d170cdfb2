// Polygraph IR: JSON rtx.graph.v1, text printer, Graphviz DOT.
#include "rtx/ir/serialize.hpp"

#include "rtx/core/error.hpp"
#include "rtx/core/hash.hpp"
#include "rtx/core/printable.hpp"
#include "rtx/io/artifact.hpp"

namespace rtx::ir {

using nlohmann::json;

namespace {

json dims_json(const Shape& s) {
  json a = json::array();
  for (const auto& d : s) {
    if (d.is_const()) a.push_back(d.coeff);
    else a.push_back(d.str());
  }
  return a;
}

Shape dims_from(const json& a, const std::string& where) {
  Shape s;
  for (const auto& d : a) {
    if (d.is_number_integer() && d.get<int64_t>() >= 1) s.push_back(Dim(d.get<int64_t>()));
    else if (d.is_string()) s.push_back(Dim::parse(d.get<std::string>()));
    else throw_input(where + ": a dim must be an integer >= 1 or a symbol string, got " + d.dump(), "");
  }
  return s;
}

}  // namespace

json to_json(const Graph& g) {
  json values = json::array();
  for (const Value& v : g.values()) {
    values.push_back({{"id", v.id}, {"dtype", dtype_name(v.dtype)}, {"shape", dims_json(v.shape)},
                      {"device", device_name(v.device)}, {"layout", "contiguous"}, {"name", v.name},
                      {"producer", v.producer}, {"index", v.index}});
  }
  json nodes = json::array();
  for (const Node& n : g.nodes())
    nodes.push_back({{"id", n.id}, {"kind", kind_name(n.kind)}, {"inputs", n.inputs}, {"outputs", n.outputs}, {"attrs", n.attrs}});
  return json{{"schema", io::schema_id("graph", 1)}, {"name", g.name()}, {"values", values}, {"nodes", nodes},
              {"outputs", g.outputs()}};
}

Graph from_json(const json& doc, const std::string& source) {
  using io::JsonType;
  io::check_artifact_schema(doc, source, "graph", {1});
  io::validate(doc, source,
               {{"/name", JsonType::String},
                {"/values", JsonType::Array},
                {"/values/*/id", JsonType::Integer},
                {"/values/*/dtype", JsonType::String},
                {"/values/*/shape", JsonType::Array},
                {"/values/*/device", JsonType::String},
                {"/values/*/layout", JsonType::String},
                {"/values/*/name", JsonType::String},
                {"/values/*/producer", JsonType::Integer},
                {"/values/*/index", JsonType::Integer},
                {"/nodes", JsonType::Array},
                {"/nodes/*/id", JsonType::Integer},
                {"/nodes/*/kind", JsonType::String},
                {"/nodes/*/inputs", JsonType::Array},
                {"/nodes/*/outputs", JsonType::Array},
                {"/nodes/*/attrs", JsonType::Object},
                {"/outputs", JsonType::Array}});
  const json& values = doc["values"];
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i]["id"].get<int64_t>() != static_cast<int64_t>(i))
      throw_input("field '/values/" + std::to_string(i) + "/id': expected " + std::to_string(i), source);
    if (values[i]["layout"] != "contiguous")
      throw_input("field '/values/" + std::to_string(i) + "/layout': only \"contiguous\" is supported", source);
  }
  Graph g(doc["name"].get<std::string>());
  const json& nodes = doc["nodes"];
  for (size_t i = 0; i < nodes.size(); ++i) {
    const json& n = nodes[i];
    const std::string where = "field '/nodes/" + std::to_string(i) + "'";
    if (n["id"].get<int64_t>() != static_cast<int64_t>(i)) throw_input(where + ": id must be " + std::to_string(i), source);
    const Kind kind = parse_kind(n["kind"].get<std::string>());
    std::vector<int> ins, outs;
    for (const auto& x : n["inputs"]) {
      if (!io::json_is_integer(x)) throw_input(where + ": inputs must be value ids", source);
      ins.push_back(x.get<int>());
    }
    for (const auto& x : n["outputs"]) {
      if (!io::json_is_integer(x) || x.get<int64_t>() < 0 || x.get<size_t>() >= values.size())
        throw_input(where + ": outputs must be value ids < " + std::to_string(values.size()), source);
      outs.push_back(x.get<int>());
    }
    if (kind == Kind::Input) {
      if (outs.size() != 1 || !ins.empty()) throw_input(where + ": an input node has no inputs and one output", source);
      const json& v = values[outs[0]];
      const std::string role = n["attrs"].value("role", "");
      const DType dt = parse_dtype(v["dtype"].get<std::string>());
      const Shape s = dims_from(v["shape"], where);
      V x = role == "param" ? g.param(v["name"], s, dt)
            : role == "input" ? g.input(v["name"], s, dt, parse_device(v["device"]))
                              : (throw_input(where + ": attrs.role must be input or param", source), V{});
      if (x.id != outs[0]) throw_input(where + ": output id " + std::to_string(outs[0]) + " out of order (expected " + std::to_string(x.id) + ")", source);
      continue;
    }
    std::vector<int> made;
    try {
      for (int in : ins)
        if (in < 0 || in >= static_cast<int>(g.values().size()))
          throw_input("input value " + std::to_string(in) + " is not defined before this node", "");
      made = g.add_node(kind, ins, n["attrs"], outs.empty() ? "" : values[outs[0]]["name"].get<std::string>());
    } catch (const Error& e) {
      throw_input(where + ": " + e.what(), source);
    }
    if (made != outs)
      throw_input(where + ": outputs " + n["outputs"].dump() + " do not match the kind's outputs (expected " + json(made).dump() + ")", source);
    for (int o : outs) {
      const Value& v = g.value(o);
      const json& jv = values[o];
      const Shape s = dims_from(jv["shape"], where);
      if (jv["dtype"] != dtype_name(v.dtype) || s != v.shape || jv["producer"] != v.producer || jv["index"] != v.index ||
          parse_device(jv["device"]) != v.device)
        throw_input("field '/values/" + std::to_string(o) + "': recorded " + jv["dtype"].get<std::string>() + shape_str(s) +
                        " on " + jv["device"].get<std::string>() + " as output " + jv["index"].dump() + " of node " +
                        jv["producer"].dump() + ", but node " + std::to_string(i) + " (" + kind_name(kind) + ") makes " +
                        dtype_name(v.dtype) + shape_str(v.shape) + " on " + device_name(v.device) + " as output " +
                        std::to_string(v.index),
                    source);
    }
    for (size_t k = 1; k < outs.size(); ++k)
      if (!values[outs[k]]["name"].get<std::string>().empty()) g.named(g.v(outs[k]), values[outs[k]]["name"]);
  }
  if (g.values().size() != values.size())
    throw_input("field '/values': " + std::to_string(values.size()) + " values, nodes make " + std::to_string(g.values().size()), source);
  for (const auto& o : doc["outputs"]) {
    if (!io::json_is_integer(o) || o.get<int64_t>() < 0 || o.get<size_t>() >= values.size())
      throw_input("field '/outputs': " + o.dump() + " is not a value id", source);
    g.mark_output(o.get<int>());
  }
  g.verify();
  return g;
}

void write_graph(const std::string& path, const Graph& g) { io::write_artifact(path, to_json(g)); }
Graph read_graph(const std::string& path) { return from_json(io::read_artifact(path, "graph", {1}), path); }

uint64_t graph_hash(const Graph& g) {
  json j = to_json(g);
  j.erase("name");
  const std::string s = j.dump();
  return rtx::fnv1a64(s.data(), s.size());
}

static std::string attrs_text(const json& a) {
  std::string s;
  for (auto it = a.begin(); it != a.end(); ++it) s += (s.empty() ? "" : ",") + it.key() + "=" + it.value().dump();
  return s.empty() ? s : " {" + s + "}";
}

std::string to_text(const Graph& g) {
  std::string out = "graph " + g.name() + "\n";
  for (const Node& n : g.nodes()) {
    std::string lhs, types, names;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const Value& v = g.value(n.outputs[k]);
      lhs += (k ? ", %" : "%") + std::to_string(v.id);
      types += (k ? ", " : "") + std::string(dtype_name(v.dtype)) + shape_str(v.shape);
      if (!v.name.empty()) names += (names.empty() ? "" : ", ") + v.name;
    }
    std::string args;
    for (size_t i = 0; i < n.inputs.size(); ++i) args += (i ? ", %" : "%") + std::to_string(n.inputs[i]);
    out += "  " + lhs + " = " + kind_name(n.kind) + "(" + args + ")" + attrs_text(n.attrs) + " : " + types;
    if (!names.empty()) out += "  # " + names;
    out += "\n";
  }
  out += "  outputs:";
  for (size_t i = 0; i < g.outputs().size(); ++i) out += (i ? ", %" : " %") + std::to_string(g.outputs()[i]);
  return out + "\n";
}

std::string to_dot(const Graph& g) {
  auto q = [](const std::string& s) {
    std::string r;
    for (char c : s) {
      if (c == '"' || c == '\\') r += '\\';
      r += c;
    }
    return "\"" + r + "\"";
  };
  std::vector<bool> is_out(g.values().size(), false);
  for (int o : g.outputs()) is_out[o] = true;
  std::string d = "digraph " + q(g.name()) + " {\n  rankdir=TB;\n  node [fontname=\"monospace\"];\n";
  for (const Node& n : g.nodes()) {
    std::string label = n.kind == Kind::Input ? g.value(n.outputs[0]).name : std::string(kind_name(n.kind)) + attrs_text(n.attrs);
    if (n.kind != Kind::Input && !g.value(n.outputs[0]).name.empty()) label += "\\n" + g.value(n.outputs[0]).name;
    bool out = false;
    for (int o : n.outputs) out = out || is_out[o];
    d += "  n" + std::to_string(n.id) + " [label=" + q(label) + ", shape=" + (n.kind == Kind::Input ? "ellipse" : "box") +
         (out ? ", peripheries=2" : "") + "];\n";
  }
  for (const Node& n : g.nodes())
    for (int i : n.inputs) {
      const Value& v = g.value(i);
      std::string lab = std::string(dtype_name(v.dtype)) + shape_str(v.shape);
      if (g.node(v.producer).outputs.size() > 1) lab = "#" + std::to_string(v.index) + " " + lab;
      d += "  n" + std::to_string(v.producer) + " -> n" + std::to_string(n.id) + " [label=" + q(lab) + "];\n";
    }
  return d + "}\n";
}

}  // namespace rtx::ir
