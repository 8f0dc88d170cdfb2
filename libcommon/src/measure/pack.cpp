// Bench packs (rtx.benchpack.v1): parsing with field-named errors, and expansion of each
// case over the registry's variants, shapes and dtypes into runnable or skipped BenchCases.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <map>
#include <regex>
#include <set>

#include "rtx/measure/measure.hpp"
#include "rtx/core/error.hpp"
#include "rtx/dist/bench_ops.hpp"
#include "rtx/io/artifact.hpp"
#include "rtx/io/atomic_file.hpp"
#include "rtx/models/bench_ops.hpp"

namespace rtx::measure {
namespace {

using nlohmann::json;

/// Error naming pack, case and field. The location goes in `where` only: Error::what()
/// composes "where: message (hint)", so repeating it in the message would print it twice.
[[noreturn]] void fail(const std::string& src, const std::string& kase, const std::string& field, const std::string& what,
                       const std::string& hint = "see docs/bench_packs.md") {
  const std::string where = src + (kase.empty() ? "" : ": case '" + kase + "'") + ": field '" + field + "'";
  throw_input(what, where, hint);
}

const char* type_of(const json& v) { return io::json_type_name(v); }

/// `s` as a JSON string literal (quotes, control characters escaped) for messages.
std::string as_literal(const std::string& s) { return json(s).dump(-1, ' ', false, json::error_handler_t::replace); }
/// `s` with control characters escaped as in JSON (no quotes added), for field names.
std::string escaped(const std::string& s) {
  for (unsigned char ch : s)
    if (ch < 0x20 || ch == 0x7f || ch == '"' || ch == '\\') {
      const std::string q = as_literal(s);
      return q.substr(1, q.size() - 2);
    }
  return s;
}

/// Reject control characters (< 0x20, 0x7f) in a name that becomes part of case ids,
/// tables and terminal output.
void check_text(const std::string& s, const std::string& src, const std::string& kase, const std::string& field) {
  for (unsigned char ch : s)
    if (ch < 0x20 || ch == 0x7f)
      fail(src, kase, field, "contains a control character: " + as_literal(s), "use printable characters only");
}

/// An integer field that must fit int64 and be >= `lo`. nlohmann stores values above
/// INT64_MAX as unsigned: get<int64_t>() would wrap 2^64-1 to -1, so check first.
int64_t get_int(const json& x, int64_t lo, const std::string& src, const std::string& kase, const std::string& field,
                const std::string& what) {
  if (!x.is_number_integer()) fail(src, kase, field, what + " must be an integer, got " + type_of(x) + " " + x.dump());
  if (x.is_number_unsigned() && x.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    fail(src, kase, field, what + " is " + x.dump() + ", outside the 64-bit signed integer range");
  const int64_t v = x.get<int64_t>();
  if (v < lo) fail(src, kase, field, what + " is " + std::to_string(v) + ", must be >= " + std::to_string(lo));
  return v;
}

std::vector<DType> parse_dtypes(const json& v, const std::string& src, const std::string& kase, const std::string& field) {
  std::vector<DType> out;
  auto one = [&](const json& e, const std::string& f) {
    if (!e.is_string()) fail(src, kase, f, std::string("expected a dtype name, got ") + type_of(e));
    try {
      out.push_back(parse_dtype(e.get<std::string>()));
    } catch (const Error&) {
      fail(src, kase, f, "unknown dtype '" + e.get<std::string>() + "'", "use f32, bf16 or f16");
    }
  };
  if (v.is_array()) {
    if (v.empty()) fail(src, kase, field, "empty dtype list");
    for (size_t i = 0; i < v.size(); ++i) one(v[i], field + "[" + std::to_string(i) + "]");
  } else {
    one(v, field);
  }
  return out;
}

std::vector<Backend> parse_backends(const json& v, const std::string& src, const std::string& kase, const std::string& field) {
  std::vector<Backend> out;
  auto one = [&](const json& e) {
    if (!e.is_string()) fail(src, kase, field, std::string("expected a backend name, got ") + type_of(e));
    const std::string s = e.get<std::string>();
    if (s == "any") return;
    if (s == "cpu") out.push_back(Backend::CPU);
    else if (s == "cuda") out.push_back(Backend::CUDA);
    else fail(src, kase, field, "unknown backend '" + escaped(s) + "'", "use cpu, cuda, any or a list");
  };
  if (v.is_array()) {
    for (const auto& e : v) one(e);
  } else {
    one(v);
  }
  return out;
}

Params parse_params(const json& v, const std::string& src, const std::string& kase, const std::string& field) {
  if (!v.is_object()) fail(src, kase, field, std::string("expected an object of integers, got ") + type_of(v));
  Params p;
  for (const auto& [k, x] : v.items()) {
    check_text(k, src, kase, field);
    p[k] = get_int(x, INT64_MIN, src, kase, field + "." + k, "value");
  }
  return p;
}

/// Check an object shape's dims are non-negative integers.
void check_shape_object(const json& s, const std::string& src, const std::string& kase, const std::string& field) {
  if (s.empty()) fail(src, kase, field, "empty shape");
  for (const auto& [k, x] : s.items()) {
    check_text(k, src, kase, field);
    get_int(x, 0, src, kase, field, "dimension " + as_literal(k));
  }
}

/// Expand one shapes entry (object, string, or {"sweep": {...}}) into concrete entries.
void add_shapes(const json& s, const std::string& src, const std::string& kase, const std::string& field,
                std::vector<json>& out) {
  if (s.is_string()) {
    if (s.get<std::string>().empty()) fail(src, kase, field, "empty shape string");
    check_text(s.get<std::string>(), src, kase, field);
    out.push_back(s);
    return;
  }
  if (!s.is_object()) fail(src, kase, field, std::string("expected a shape object, string or sweep, got ") + type_of(s));
  if (!s.contains("sweep")) {
    check_shape_object(s, src, kase, field);
    out.push_back(s);
    return;
  }
  if (s.size() != 1) fail(src, kase, field, "a sweep object has only the key 'sweep'");
  const json& sw = s["sweep"];
  if (!sw.is_object() || sw.empty()) fail(src, kase, field + ".sweep", "expected an object of dim -> list of values");
  std::vector<json> acc{json::object()};
  for (const auto& [k, vals] : sw.items()) {
    std::vector<json> list = vals.is_array() ? std::vector<json>(vals.begin(), vals.end()) : std::vector<json>{vals};
    if (list.empty()) fail(src, kase, field + ".sweep." + k, "empty value list");
    std::vector<json> next;
    for (const auto& base : acc)
      for (const auto& v : list) {
        json x = base;
        x[k] = v;
        next.push_back(x);
      }
    acc = std::move(next);
    if (acc.size() > 4096) fail(src, kase, field + ".sweep", "sweep expands to more than 4096 shapes");
  }
  for (auto& x : acc) {
    check_shape_object(x, src, kase, field + ".sweep");
    out.push_back(std::move(x));
  }
}

std::vector<json> parse_shapes(const json& c, const std::string& src, const std::string& kase) {
  std::vector<json> out;
  const bool one = c.contains("shape"), many = c.contains("shapes");
  if (one && many) fail(src, kase, "shapes", "give either 'shape' or 'shapes', not both");
  if (!one && !many) fail(src, kase, "shapes", "missing (every case needs 'shape' or 'shapes')");
  if (one) {
    add_shapes(c["shape"], src, kase, "shape", out);
  } else {
    const json& v = c["shapes"];
    if (v.is_array()) {
      if (v.empty()) fail(src, kase, "shapes", "empty list");
      for (size_t i = 0; i < v.size(); ++i) add_shapes(v[i], src, kase, "shapes[" + std::to_string(i) + "]", out);
    } else {
      add_shapes(v, src, kase, "shapes", out);
    }
  }
  return out;
}

const std::set<std::string> kCaseKeys{"name", "op", "variant", "shape", "shapes", "dtype", "dtypes", "params", "backend", "doc"};
const std::set<std::string> kDefaultKeys{"variant", "dtype",       "dtypes",      "params",     "backend",
                                         "max_time", "max_rel_ci", "min_samples", "max_samples", "warmup", "rounds"};
const std::set<std::string> kTopKeys{"schema", "name", "description", "defaults", "cases"};

std::string join(const std::set<std::string>& s) {
  std::string out;
  for (const auto& k : s) out += (out.empty() ? "" : ", ") + k;
  return out;
}

/// parse_pack without the json::exception backstop.
Pack parse_pack_checked(const json& doc, const std::string& src) {
  if (!doc.is_object()) fail(src, "", "/", std::string("a bench pack is a JSON object, got ") + type_of(doc));
  if (!doc.contains("schema")) fail(src, "", "schema", std::string("missing (expected \"") + kPackSchema + "\")");
  if (!doc["schema"].is_string() || doc["schema"].get<std::string>() != kPackSchema)
    fail(src, "", "schema", std::string("expected \"") + kPackSchema + "\", got " + doc["schema"].dump(-1, ' ', false, json::error_handler_t::replace),
         "is this a bench pack? (rtx.bench.v1 files are results: use rtx-bench show/compare)");
  for (const auto& [k, v] : doc.items())
    if (!kTopKeys.count(k)) fail(src, "", escaped(k), "unknown field (known: " + join(kTopKeys) + ")");
  Pack p;
  p.source = src;
  if (doc.contains("name")) {
    if (!doc["name"].is_string()) fail(src, "", "name", std::string("expected a string, got ") + type_of(doc["name"]));
    p.name = doc["name"].get<std::string>();
    if (p.name.empty()) fail(src, "", "name", "empty pack name", "omit 'name' to use the file name");
    check_text(p.name, src, "", "name");
  } else {
    const auto slash = src.find_last_of('/');
    p.name = src.substr(slash == std::string::npos ? 0 : slash + 1);
  }
  if (doc.contains("description")) {
    if (!doc["description"].is_string())
      fail(src, "", "description", std::string("expected a string, got ") + type_of(doc["description"]));
    p.description = doc["description"].get<std::string>();
  }

  PackCase def;
  const json d = doc.contains("defaults") ? doc["defaults"] : json::object();
  if (!d.is_object()) fail(src, "", "defaults", std::string("expected an object, got ") + type_of(d));
  for (const auto& [k, v] : d.items())
    if (!kDefaultKeys.count(k)) fail(src, "", "defaults/" + escaped(k), "unknown field (known: " + join(kDefaultKeys) + ")");
  if (d.contains("variant")) {
    if (!d["variant"].is_string() || d["variant"].get<std::string>().empty())
      fail(src, "", "defaults/variant", "expected a variant name, \"default\" or \"all\"");
    def.variant = d["variant"].get<std::string>();
    check_text(def.variant, src, "", "defaults/variant");
  }
  if (d.contains("dtype") && d.contains("dtypes")) fail(src, "", "defaults/dtypes", "give either 'dtype' or 'dtypes', not both");
  if (d.contains("dtype")) def.dtypes = parse_dtypes(d["dtype"], src, "", "defaults/dtype");
  if (d.contains("dtypes")) def.dtypes = parse_dtypes(d["dtypes"], src, "", "defaults/dtypes");
  if (d.contains("params")) def.params = parse_params(d["params"], src, "", "defaults/params");
  if (d.contains("backend")) def.backends = parse_backends(d["backend"], src, "", "defaults/backend");
  // Runner settings: the same ranges as the CLI flags (runner_option_problem).
  auto num = [&](const char* k) -> std::optional<double> {
    if (!d.contains(k)) return std::nullopt;
    const std::string field = std::string("defaults/") + k;
    if (!d[k].is_number()) fail(src, "", field, std::string("expected a number, got ") + type_of(d[k]));
    const double v = d[k].get<double>();
    const std::string why = runner_option_problem(k, v);
    if (!why.empty()) fail(src, "", field, why);
    return v;
  };
  p.run.max_time = num("max_time");
  p.run.max_rel_ci = num("max_rel_ci");
  if (auto v = num("min_samples")) p.run.min_samples = static_cast<size_t>(*v);
  if (auto v = num("max_samples")) p.run.max_samples = static_cast<size_t>(*v);
  if (auto v = num("warmup")) p.run.warmup = static_cast<size_t>(*v);
  if (auto v = num("rounds")) p.run.rounds = static_cast<size_t>(*v);
  if (p.run.min_samples && p.run.max_samples && *p.run.max_samples < *p.run.min_samples)
    fail(src, "", "defaults/max_samples",
         std::to_string(*p.run.max_samples) + " is below defaults/min_samples " + std::to_string(*p.run.min_samples));

  if (!doc.contains("cases")) fail(src, "", "cases", "missing (a list of cases)");
  const json& cases = doc["cases"];
  if (!cases.is_array()) fail(src, "", "cases", std::string("expected an array, got ") + type_of(cases));
  std::map<std::string, size_t> names;  // name -> index of the case that took it
  for (size_t i = 0; i < cases.size(); ++i) {
    const json& c = cases[i];
    const std::string at = "cases[" + std::to_string(i) + "]";
    if (!c.is_object()) fail(src, "", at, std::string("expected an object, got ") + type_of(c));
    if (!c.contains("name")) fail(src, "", at + ".name", "missing (every case needs a unique name)");
    if (!c["name"].is_string()) fail(src, "", at + ".name", std::string("expected a string, got ") + type_of(c["name"]));
    PackCase pc = def;
    pc.name = c["name"].get<std::string>();
    if (pc.name.empty()) fail(src, "", at + ".name", "empty case name");
    check_text(pc.name, src, "", at + ".name");
    if (pc.name.find('/') != std::string::npos)
      fail(src, pc.name, "name", "must not contain '/' (case ids use it as a separator)");
    const auto [prev, fresh] = names.emplace(pc.name, i);
    if (!fresh)
      fail(src, pc.name, "name",
           "duplicate case name: cases[" + std::to_string(prev->second) + "] and " + at + " are both named " + as_literal(pc.name));
    for (const auto& [k, v] : c.items())
      if (!kCaseKeys.count(k)) fail(src, pc.name, escaped(k), "unknown field (known: " + join(kCaseKeys) + ")");
    if (!c.contains("op")) fail(src, pc.name, "op", "missing (a registry op name)");
    if (!c["op"].is_string() || c["op"].get<std::string>().empty())
      fail(src, pc.name, "op", std::string("expected a non-empty op name, got ") + type_of(c["op"]));
    pc.op = c["op"].get<std::string>();
    check_text(pc.op, src, pc.name, "op");
    if (c.contains("variant")) {
      if (!c["variant"].is_string() || c["variant"].get<std::string>().empty())
        fail(src, pc.name, "variant", "expected a variant name, \"default\" or \"all\"");
      pc.variant = c["variant"].get<std::string>();
      check_text(pc.variant, src, pc.name, "variant");
    }
    if (c.contains("doc") && !c["doc"].is_string())
      fail(src, pc.name, "doc", std::string("expected a string, got ") + type_of(c["doc"]));
    if (c.contains("dtype") && c.contains("dtypes")) fail(src, pc.name, "dtypes", "give either 'dtype' or 'dtypes', not both");
    if (c.contains("dtype")) pc.dtypes = parse_dtypes(c["dtype"], src, pc.name, "dtype");
    if (c.contains("dtypes")) pc.dtypes = parse_dtypes(c["dtypes"], src, pc.name, "dtypes");
    if (c.contains("params")) {
      for (const auto& [k, v] : parse_params(c["params"], src, pc.name, "params")) pc.params[k] = v;
    }
    if (c.contains("backend")) pc.backends = parse_backends(c["backend"], src, pc.name, "backend");
    pc.shapes = parse_shapes(c, src, pc.name);
    p.cases.push_back(std::move(pc));
  }
  return p;
}

}  // namespace

Pack parse_pack(const json& doc, const std::string& src) {
  try {
    return parse_pack_checked(doc, src);
  } catch (const json::exception& e) {
    // Every field is type-checked before use; this is a backstop so a missed case still
    // reads as bad input naming the file, never as an internal error.
    throw_input(std::string("invalid bench pack: ") + e.what(), src, "see docs/bench_packs.md");
  }
}

Pack load_pack(const std::string& path) {
  if (path.empty()) throw_input("the bench pack path is empty", "<empty path>", "pass an rtx.benchpack.v1 file");
  const std::string src = path == "-" ? "<stdin>" : path;
  std::string text;
  try {
    // Pack paths come from agents too (MCP list_benchmarks): a device (/dev/zero), a FIFO or a
    // huge file must not be read without bound.
    io::ReadLimits lim;
    lim.max_bytes = kMaxPackBytes;
    lim.regular_only = true;
    text = io::read_text_file(path, lim);
  } catch (const Error& e) {
    // A pack that cannot be read (permission denied, /proc/self/mem, a directory) is bad
    // input to this command: exit 2 like a missing file (docs/tools/rtx-bench.md).
    if (e.category() != ErrorCategory::Environment) throw;
    throw Error(ErrorCategory::Input, "cannot read the bench pack: " + e.message(), e.where().empty() ? src : e.where(),
                "pass a readable rtx.benchpack.v1 file");
  }
  return parse_pack(io::parse_json(text, src), src);
}

const kernels::Registry& registry() {
  static const kernels::Registry r = [] {
    kernels::Registry x = kernels::registry();
    models::register_model_ops(x);
    dist::register_dist_ops(x);
    return x;
  }();
  return r;
}

std::vector<BenchCase> expand_pack(const Pack& pack, const kernels::Registry& reg, const ExpandOptions& o) {
  std::optional<std::regex> re;
  if (!o.filter.empty()) {
    // std::regex compiles and matches recursively: a huge pattern (thousands of nested
    // groups) overflows the stack instead of throwing, so long patterns are refused.
    if (o.filter.size() > kMaxFilterLength)
      throw_usage("the regex is " + std::to_string(o.filter.size()) + " characters long, more than " +
                      std::to_string(kMaxFilterLength),
                  "--filter", "use a shorter pattern, e.g. 'matmul|softmax'");
    try {
      // libstdc++'s default matcher backtracks: "(a*)*b" takes exponential time. Its
      // __polynomial mode matches breadth-first in O(pattern x id) (and refuses
      // back-references with a regex_error).
#if defined(__GLIBCXX__)
      re.emplace(o.filter, std::regex::ECMAScript | std::regex_constants::__polynomial);
#else
      re.emplace(o.filter, std::regex::ECMAScript);
#endif
    } catch (const std::regex_error& e) {
      throw_usage("bad regex " + as_literal(o.filter) + ": " + e.what(), "--filter",
                  "use an ECMAScript regex, e.g. 'matmul|softmax'");
    }
  }
  const double max_bytes = o.max_bytes.value_or(kernels::host_memory_bytes() / 4);
  const char* bname = kernels::backend_name(o.backend);
  std::vector<BenchCase> out;
  std::set<std::string> ids;
  auto matches = [&](const std::string& id) {
    try {
      return std::regex_search(id, *re);
    } catch (const std::regex_error& e) {  // error_complexity / error_stack while matching
      throw_usage("regex " + as_literal(o.filter) + " failed on case " + as_literal(id) + ": " + e.what(), "--filter",
                  "simplify the pattern");
    }
  };
  auto emit = [&](BenchCase bc) {
    if (re && !matches(bc.id)) return;
    if (!ids.insert(bc.id).second) return;  // two shapes spelled differently but equal
    out.push_back(std::move(bc));
  };
  std::string known_ops;
  for (const auto& op : reg.ops()) known_ops += (known_ops.empty() ? "" : ", ") + op.name;

  for (const PackCase& pc : pack.cases) {
    auto skipped = [&](const std::string& variant, const std::string& reason) {
      BenchCase bc;
      bc.id = pc.name + "/" + variant;
      bc.name = pc.name;
      bc.op = pc.op;
      bc.variant = variant;
      bc.backend = o.backend;
      bc.skip_reason = reason;
      emit(std::move(bc));
    };
    if (!pc.backends.empty() && std::find(pc.backends.begin(), pc.backends.end(), o.backend) == pc.backends.end()) {
      skipped(pc.variant, std::string("case is not for backend ") + bname);
      continue;
    }
    const kernels::OpDef* op = reg.find(pc.op);
    if (!op) {
      if (o.strict)
        fail(pack.source, pc.name, "op", "unknown op '" + pc.op + "'", "known ops: " + (known_ops.empty() ? "(none)" : known_ops));
      skipped(pc.variant, "op '" + pc.op + "' is not registered in this build (known ops: " +
                              (known_ops.empty() ? "none" : known_ops) + ")");
      continue;
    }
    // Variants on the selected backend.
    std::vector<const kernels::Variant*> vars;
    if (pc.variant == "all" || pc.variant == "default") {
      for (const auto& v : op->variants)
        if (v.backend == o.backend) vars.push_back(&v);
      if (pc.variant == "default" && vars.size() > 1) vars.resize(1);
      if (vars.empty()) {
        skipped(pc.variant, "op '" + pc.op + "' has no " + bname + " variant in this build");
        continue;
      }
    } else {
      const kernels::Variant* found = nullptr;
      for (const auto& v : op->variants)
        if (v.name == pc.variant) found = &v;
      if (found && found->backend != o.backend) {
        skipped(pc.variant, std::string("variant is for backend ") + kernels::backend_name(found->backend) + ", running " + bname);
        continue;
      }
      if (!found) {
        const std::string prefix = pc.variant.substr(0, pc.variant.find('.'));
        if ((prefix == "cpu" || prefix == "cuda") && prefix != bname) {
          skipped(pc.variant, "variant is for backend " + prefix + ", running " + bname);
          continue;
        }
        std::string vs;
        for (const auto& v : op->variants) vs += (vs.empty() ? "" : ", ") + v.name;
        fail(pack.source, pc.name, "variant", "op '" + pc.op + "' has no variant '" + pc.variant + "'",
             "variants: " + vs + " (or \"default\", \"all\")");
      }
      vars.push_back(found);
    }
    // Shapes against the op's dims.
    std::vector<Shape> shapes;
    for (size_t i = 0; i < pc.shapes.size(); ++i) {
      const std::string field = "shapes[" + std::to_string(i) + "]";
      Shape s;
      if (pc.shapes[i].is_string()) {
        try {
          s = kernels::parse_shape(pc.shapes[i].get<std::string>(), op->dims);
        } catch (const Error& e) {
          fail(pack.source, pc.name, field, e.message(), e.hint());
        }
      } else {
        for (const auto& [k, v] : pc.shapes[i].items()) s[k] = v.get<int64_t>();  // parse_pack: int64, >= 0
      }
      shapes.push_back(std::move(s));
    }
    for (const kernels::Variant* v : vars)
      for (size_t si = 0; si < shapes.size(); ++si)
        for (DType dt : pc.dtypes) {
          const Shape& s = shapes[si];
          BenchCase bc;
          bc.name = pc.name;
          bc.op = pc.op;
          bc.variant = v->name;
          bc.backend = v->backend;
          bc.shape = s;
          bc.dtype = dt;
          bc.id = pc.name + "/" + v->name + "/" + kernels::shape_to_string(s) + "/" + dtype_name(dt);
          // A shape the op cannot take (missing or unknown dim, dim < 1 or > 2^31-1, working
          // set beyond a quarter of this machine's memory) is skipped before anything looks
          // at it: validate(), resolve_params() and make() may assume a sane shape.
          const std::string problem = kernels::shape_problem(*op, s, dt, max_bytes);
          if (!problem.empty()) {
            if (o.strict)
              fail(pack.source, pc.name, "shapes[" + std::to_string(si) + "]", problem + " (" + dtype_name(dt) + ")",
                   "fix the shape, or drop --strict to skip it");
            bc.skip_reason = "bad shape: " + problem;
            emit(std::move(bc));
            continue;
          }
          if (std::find(v->dtypes.begin(), v->dtypes.end(), dt) == v->dtypes.end()) {
            bc.skip_reason = "variant '" + v->name + "' does not support " + dtype_name(dt);
            emit(std::move(bc));
            continue;
          }
          bc.params = kernels::resolve_params(*op, *v, s, dt, o.lookup);
          for (const auto& [k, val] : pc.params) {
            bool declared = false;
            for (const auto& prm : v->space.params) declared |= prm.name == k;
            if (!declared && bc.skip_reason.empty()) bc.skip_reason = "variant '" + v->name + "' has no parameter '" + k + "'";
            bc.params[k] = val;
          }
          if (bc.skip_reason.empty() && v->validate) bc.skip_reason = v->validate(s, bc.params);
          emit(std::move(bc));
        }
  }
  return out;
}

}  // namespace rtx::measure
