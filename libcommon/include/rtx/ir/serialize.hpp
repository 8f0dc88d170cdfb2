// Polygraph IR, the outside views of a graph: JSON rtx.graph.v1 (write, read with schema
// check; round trip exact), a text printer and Graphviz DOT. Schema: docs/ir.md.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "rtx/ir/graph.hpp"

namespace rtx::ir {

/// The graph as an rtx.graph.v1 document: {"schema","name","values":[{id,dtype,shape,device,
/// layout,name,producer,index}],"nodes":[{id,kind,inputs,outputs,attrs}],"outputs":[ids]}.
/// Dims: integers when constant, strings ("B", "3*C") when symbolic.
nlohmann::json to_json(const Graph& g);
/// Read an rtx.graph.v1 document: checks the schema tag and every field's type (io::validate,
/// naming `source` and the JSON pointer), rebuilds the graph through add_node and checks each
/// recorded value (dtype, shape, device, producer) against the shape functions. Error(Input).
Graph from_json(const nlohmann::json& doc, const std::string& source = "<graph>");
/// to_json written atomically to `path` ("-": stdout).
void write_graph(const std::string& path, const Graph& g);
/// from_json of a file ("-": stdin).
Graph read_graph(const std::string& path);
/// FNV-1a 64 of to_json(g) without the name: equal structure, equal hash.
uint64_t graph_hash(const Graph& g);

/// One line per node: "%5 = matmul(%3, %4) {ta=false,tb=true} : f32[B,T,64]  # l0.qkv";
/// multi-output nodes list all ("%6, %7, %8 = layernorm(...)"), then "outputs: %9, %12".
std::string to_text(const Graph& g);
/// Graphviz DOT: one box per node (kind and attrs), inputs as ellipses, edges labelled with
/// dtype and shape, graph outputs double-bordered.
std::string to_dot(const Graph& g);

}  // namespace rtx::ir
