// Polygraph IR, the graph: typed values (dtype, symbolic shape, device, contiguous strides),
// nodes of a small set of kinds, a builder that reads like the model, and a verifier.
// Not an executor (exec.hpp), not autodiff (autodiff.hpp), not serialisation (serialize.hpp).
//
// A graph is a list of nodes in topological order (a node's inputs are values made by earlier
// nodes); each node makes one or more values (layernorm: y, mean, rstd; attention: out, lse).
// Value ids and node ids are indices into values() and nodes(). Shapes are lists of Dim, each a
// positive constant times a product of symbols (B, T, "3*C", "B*T"), bound at run time.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rtx/core/dtype.hpp"

namespace rtx::ir {

/// One dimension: coeff * product(syms) (syms sorted, may repeat). Dim(768) is a constant,
/// Dim::sym("B") a symbol bound at run time; products stay symbolic ("B*T").
struct Dim {
  int64_t coeff = 1;
  std::vector<std::string> syms;
  Dim() = default;
  Dim(int64_t c) : coeff(c) {}  // NOLINT: implicit, so shapes read {B, T, 768}
  /// A symbol; name must match [A-Za-z_][A-Za-z0-9_]*, else Error(Input).
  static Dim sym(const std::string& name);
  /// Parse "768", "B", "3*C", "B*T" (the form str() writes). Error(Input) naming the text.
  static Dim parse(const std::string& text);
  bool is_const() const { return syms.empty(); }
  /// "768", "B", "3*C", "2*B*T".
  std::string str() const;
  bool operator==(const Dim& o) const { return coeff == o.coeff && syms == o.syms; }
  bool operator!=(const Dim& o) const { return !(*this == o); }
};
Dim operator*(const Dim& a, const Dim& b);
/// a / b when exact (b's symbols a sub-multiset of a's, coeffs divisible); false otherwise.
bool dim_div(const Dim& a, const Dim& b, Dim& out);

using Shape = std::vector<Dim>;
/// Symbol values for one run: {"B": 4, "T": 64}.
using Bindings = std::map<std::string, int64_t>;
/// "[B,T,768]".
std::string shape_str(const Shape& s);
/// Product of the dims (1 for a scalar shape []).
Dim numel(const Shape& s);
/// A dim's value under `b`; Error(Input) naming the symbol when it is unbound or not >= 1.
int64_t eval(const Dim& d, const Bindings& b);
/// Every dim evaluated (eval).
std::vector<int64_t> eval(const Shape& s, const Bindings& b);
/// Product of eval(s, b).
int64_t eval_numel(const Shape& s, const Bindings& b);

/// Where a value lives. The executors here run CPU; CUDA is a declared placement for later.
enum class Device : uint8_t { CPU, CUDA };
const char* device_name(Device d) noexcept;
/// "cpu" | "cuda"; Error(Input) otherwise.
Device parse_device(const std::string& s);

/// A value: the output `index` of node `producer`. Layout is always contiguous row-major:
/// strides() are products of the trailing dims (in elements).
struct Value {
  int id = -1;
  DType dtype = DType::F32;  ///< f32 for tensors, i32 for indices (token ids, targets, segments)
  Shape shape;
  Device device = Device::CPU;
  std::string name;  ///< inputs: unique, how feeds find them; others: optional ("l3.attn_norm")
  int producer = -1;
  int index = 0;
  /// Row-major strides in elements ([T*C, C, 1] for [B,T,C]).
  Shape strides() const;
};

/// Node kinds. Forward kinds have a backward rule (autodiff.cpp); the *_backward / unary_grad /
/// sum_to / broadcast kinds are what those rules emit. Attributes per kind: docs/ir.md.
enum class Kind : uint8_t {
  Input,       ///< attrs {role: "input"|"param"}; no inputs; the value's name is its feed name
  Full,        ///< attrs {shape, value}: a constant tensor filled with `value`
  MatMul,      ///< (a, b[, bias [N]]), attrs {ta, tb}: op(a) [...,M,K] @ op(b) [K,N] (+ bias, made by fuse_matmul_bias); b 2-D, a 2-D when ta
  Add,         ///< (a, b) numpy broadcasting
  Sub,         ///< (a, b) numpy broadcasting
  Mul,         ///< (a, b) numpy broadcasting
  Scale,       ///< (x), attrs {alpha}: alpha * x
  Gelu,        ///< (x) GELU, tanh form
  Relu,        ///< (x)
  Silu,        ///< (x) x * sigmoid(x)
  Tanh,        ///< (x)
  Exp,         ///< (x)
  Sum,         ///< (x), attrs {axis, keepdim}
  Mean,        ///< (x), attrs {axis, keepdim}
  Reshape,     ///< (x), attrs {shape}: same element count; a view (no copy when planned in place)
  Transpose,   ///< (x), attrs {perm}: out.shape[i] = x.shape[perm[i]]
  Broadcast,   ///< (x), attrs {shape}: numpy broadcast of x to shape
  SumTo,       ///< (x), attrs {shape}: sum over the broadcast dims so the result has shape
  Softmax,     ///< (x) over the last axis
  LayerNorm,   ///< (x [...,C], w [C], b [C]) -> (y [...,C], mean [...], rstd [...]); eps 1e-5
  Attention,   ///< (qkv [B,T,3C]), attrs {NH}: causal MHA -> (out [B,T,C], lse [B,NH,T])
  Gather,      ///< (table [S,...], ids i32 [...]) -> [..., table.shape[1:]]: rows of table
  SegmentSum,  ///< (data [E,...], ids i32 [E]), attrs {segments}: out[s] = sum_{ids[e]=s} data[e]
  Encoder,     ///< (ids i32 [B,T], wte [V,C], wpe [P,C], P >= T) -> [B,T,C] = wte[ids] + wpe[t]
  CrossEntropy,           ///< (logits [...,V], targets i32 [...]) -> per-row losses [...]
  UnaryGrad,              ///< (x, dy), attrs {fn}: dy * f'(x) for fn gelu|relu|silu|tanh|exp
  SoftmaxBackward,        ///< (y, dy) -> dx = y * (dy - sum(dy * y)) over the last axis
  LayerNormBackward,      ///< (dy, x, w, mean, rstd) -> (dx, dw, db)
  AttentionBackward,      ///< (dout, qkv, out, lse), attrs {NH} -> dqkv
  EncoderBackward,        ///< (dout [B,T,C], ids [B,T]), attrs {V, P} -> (dwte [V,C], dwpe [P,C])
  CrossEntropyBackward,   ///< (dlosses [...], logits [...,V], targets [...]) -> dlogits
  // made by passes (fusion.hpp); no backward rule
  Fused,                  ///< (inputs of the chain), attrs {pattern, steps, emit}: fusion.hpp FusedProgram
};
constexpr int kNumKinds = 32;
/// The kind's name as written in JSON and text ("matmul", "layernorm_backward", ...).
const char* kind_name(Kind k) noexcept;
/// Inverse of kind_name; Error(Input) listing the known kinds.
Kind parse_kind(const std::string& name);
/// Pure elementwise kinds (unary, scale, add/sub/mul, unary_grad): the in-place candidates.
bool is_elementwise(Kind k) noexcept;

/// A node: its kind, input value ids, output value ids and attributes (a JSON object).
struct Node {
  int id = -1;
  Kind kind = Kind::Input;
  std::vector<int> inputs;
  std::vector<int> outputs;
  nlohmann::json attrs = nlohmann::json::object();
};

class Graph;
/// A handle to a value while building: the graph and the value id. Operators +, -, * (two
/// values, numpy broadcasting) and * double (scale) add nodes to the graph.
struct V {
  Graph* g = nullptr;
  int id = -1;
  const Value& value() const;
  const Shape& shape() const { return value().shape; }
};
V operator+(V a, V b);
V operator-(V a, V b);
V operator*(V a, V b);
V operator*(V a, double s);
V operator*(double s, V a);

/// Output dtypes and shapes of a node of `kind` with these inputs and attrs (the shape
/// functions). Error(Input) saying what mismatched; add_node adds the node id and kind.
std::vector<std::pair<DType, Shape>> infer(Kind kind, const std::vector<const Value*>& inputs,
                                           const nlohmann::json& attrs);

/// The graph and its builder. Every builder call checks its node at once (infer), so a graph
/// built through the API always verifies; verify() is for graphs read from JSON or rewritten.
class Graph {
 public:
  explicit Graph(std::string name = "graph") : name_(std::move(name)) {}
  const std::string& name() const { return name_; }

  /// Append a node: checks the input ids (existing, earlier), infers its outputs, names the
  /// first output `name` (if given). Returns the output value ids. Error(Input)
  /// "node 7 (matmul): inner dims differ: a [3,5] K=5, b [4,2] K=4".
  std::vector<int> add_node(Kind kind, const std::vector<int>& inputs, nlohmann::json attrs = nlohmann::json::object(),
                            const std::string& name = "");

  // ---- the builder (each returns the node's first output) ----
  /// A run-time input; `name` unique among inputs (Error(Input) on a duplicate).
  V input(const std::string& name, Shape shape, DType dt = DType::F32, Device dev = Device::CPU);
  /// A trainable parameter (an input with role "param").
  V param(const std::string& name, Shape shape, DType dt = DType::F32);
  V full(Shape shape, double value);
  V matmul(V a, V b, bool ta = false, bool tb = false);
  V add(V a, V b);
  V sub(V a, V b);
  V mul(V a, V b);
  V scale(V x, double alpha);
  V gelu(V x);
  V relu(V x);
  V silu(V x);
  V tanh(V x);
  V exp(V x);
  /// Sum / mean over `axis` (negative counts from the end).
  V sum(V x, int axis, bool keepdim = false);
  V mean(V x, int axis, bool keepdim = false);
  V reshape(V x, Shape shape);
  /// General permutation.
  V transpose(V x, std::vector<int> perm);
  /// Swap two axes.
  V transpose(V x, int a, int b);
  V broadcast(V x, Shape shape);
  V sum_to(V x, Shape shape);
  V softmax(V x);
  /// y of layernorm (mean and rstd are the node's outputs 1 and 2).
  V layernorm(V x, V w, V b);
  /// out of causal attention over qkv [B,T,3C] with NH heads (lse is output 1).
  V attention(V qkv, int NH);
  V gather(V table, V ids);
  V segment_sum(V data, V ids, Dim segments);
  V encoder(V ids, V wte, V wpe);
  V cross_entropy(V logits, V targets);
  /// x @ w^T + b (torch.nn.Linear; w [OC,C], b [OC] or none when b.g == nullptr).
  V linear(V x, V w, V b = {});

  /// Name a value (for text, DOT and telemetry); returns it.
  V named(V v, const std::string& name);
  /// Declare graph outputs (kept by passes, live to the end of a run).
  void mark_output(V v);
  void mark_output(int value_id);
  void set_outputs(std::vector<int> ids) { outputs_ = std::move(ids); }
  const std::vector<int>& outputs() const { return outputs_; }

  const std::vector<Value>& values() const { return values_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const Value& value(int id) const;
  const Node& node(int id) const;
  /// The node that makes value `id`.
  const Node& producer(int value_id) const { return node(value(value_id).producer); }
  V v(int id) { return V{this, id}; }
  /// Value id of the input named `name`, -1 when none.
  int find_input(const std::string& name) const;
  /// Input value ids in node order.
  std::vector<int> inputs() const;

  /// Check the whole graph: ids, topological order, unique input names, every node's outputs
  /// against its shape function, outputs exist. Error(Input) naming the node id, kind and what
  /// mismatched.
  void verify() const;

 private:
  std::string name_;
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<int> outputs_;
};

/// Rebuild `g` keeping nodes where keep[node] is true, with `replace` mapping old value ids to
/// old value ids that stand for them (applied before the kept nodes' inputs are mapped). Used
/// by passes. Returns the new graph and, per old value id, the new id (-1 when dropped).
Graph rebuild(const Graph& g, const std::vector<bool>& keep, const std::map<int, int>& replace,
              std::vector<int>* new_id_of = nullptr);

}  // namespace rtx::ir
