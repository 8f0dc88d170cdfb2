// Run-time parameter lookup from tuned profiles (exact, nearest shape, default) with counters.
#include "rtx/tune/lookup.hpp"

#include <cmath>
#include <limits>

#include "rtx/core/error.hpp"
#include "rtx/telemetry/bus.hpp"
#include "rtx/telemetry/hwprofile.hpp"

namespace rtx::tune {

double shape_distance(const kernels::Shape& a, const kernels::Shape& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double d2 = 0;
  for (const auto& [dim, x] : a) {
    auto it = b.find(dim);
    if (it == b.end()) return std::numeric_limits<double>::infinity();
    const int64_t y = it->second;
    if (x <= 0 || y <= 0) {
      if (x != y) return std::numeric_limits<double>::infinity();
      continue;
    }
    const double t = std::log2(static_cast<double>(x)) - std::log2(static_cast<double>(y));
    d2 += t * t;
  }
  return std::sqrt(d2);
}

namespace {
std::string sku_or_empty(const char* backend) {
  try {
    return telemetry::sku_key(backend);
  } catch (const Error&) {
    return "";
  }
}
}  // namespace

ProfileLookup::ProfileLookup(store::Store& st) : cpu_sku_(sku_or_empty("cpu")), cuda_sku_(sku_or_empty("cuda")) {
  load(current_profiles(st));
}

ProfileLookup::ProfileLookup(std::vector<ProfileEntry> entries, std::string cpu_sku, std::string cuda_sku)
    : cpu_sku_(std::move(cpu_sku)), cuda_sku_(std::move(cuda_sku)) {
  load(std::move(entries));
}

void ProfileLookup::load(std::vector<ProfileEntry> entries) {
  for (ProfileEntry& e : entries) {
    TuneKey k;
    try {
      k = TuneKey::parse(e.key);
    } catch (const Error& err) {
      stale_.push_back({e.key, err.message()});
      continue;
    }
    if (std::string why = stale_reason(e, k); !why.empty()) {
      stale_.push_back({e.key, why});
      continue;
    }
    entries_.push_back({std::move(k), e.key, std::move(e.params)});
  }
}

ProfileLookup::Answer ProfileLookup::find(const std::string& op, const kernels::Variant* v, const kernels::Shape& s,
                                          DType dt) {
  return find_impl(op, v ? v->name : "", v ? v->backend : kernels::Backend::CPU, s, dt, v);
}

ProfileLookup::Answer ProfileLookup::find(const std::string& op, const std::string& variant, kernels::Backend backend,
                                          const kernels::Shape& s, DType dt) {
  return find_impl(op, variant, backend, s, dt, nullptr);
}

ProfileLookup::Answer ProfileLookup::find_impl(const std::string& op, const std::string& variant,
                                               kernels::Backend backend, const kernels::Shape& s, DType dt,
                                               const kernels::Variant* v) {
  Answer a;
  const std::string& sku = backend == kernels::Backend::CUDA ? cuda_sku_ : cpu_sku_;
  if (sku.empty()) return a;
  TuneKey want;
  want.op = op;
  want.variant = variant;
  want.shape = s;
  want.dtype = dt;
  want.backend = backend;
  want.sku = sku;
  const std::string exact = want.str();
  auto usable = [&](const Entry& e) {
    if (v && v->validate && !v->validate(s, e.params).empty()) {
      ++invalid_;
      return false;
    }
    return true;
  };
  for (const auto& st : stale_)
    if (st.first == exact) ++stale_count_;
  const Entry* best = nullptr;
  double best_d = std::numeric_limits<double>::infinity();
  for (const Entry& e : entries_) {
    if (e.key_text == exact) {
      if (usable(e)) {
        a.params = e.params;
        a.source = Source::Exact;
        a.key = e.key_text;
        return a;
      }
      continue;
    }
    if (e.key.op != op || e.key.variant != want.variant || e.key.dtype != dt || e.key.backend != backend ||
        e.key.sku != sku)
      continue;
    const double d = shape_distance(s, e.key.shape);
    if (!std::isfinite(d)) continue;
    if (d < best_d || (d == best_d && best && e.key_text < best->key_text)) {
      if (!usable(e)) continue;
      best = &e;
      best_d = d;
    }
  }
  if (best) {
    a.params = best->params;
    a.source = Source::Nearest;
    a.key = best->key_text;
    a.distance = best_d;
  }
  return a;
}

std::optional<Params> ProfileLookup::operator()(const std::string& op, const std::string& variant,
                                                const kernels::Shape& s, DType dt) {
  const kernels::OpDef* o = kernels::registry().find(op);
  const kernels::Variant* v = nullptr;
  if (o)
    for (const auto& x : o->variants)
      if (x.name == variant) v = &x;
  if (!v) {
    ++miss_;
    return std::nullopt;
  }
  Answer a = find(op, v, s, dt);
  switch (a.source) {
    case Source::Exact: ++exact_; break;
    case Source::Nearest: ++nearest_; break;
    case Source::Default: ++miss_; break;
  }
  return a.params;
}

LookupStats ProfileLookup::stats() const {
  LookupStats s;
  s.exact = exact_.load();
  s.nearest = nearest_.load();
  s.miss = miss_.load();
  s.stale = stale_count_.load();
  s.invalid = invalid_.load();
  return s;
}

nlohmann::json ProfileLookup::stats_json() const {
  const LookupStats s = stats();
  return {{"entries", entries_.size()},
          {"stale_entries", stale_.size()},
          {"exact", s.exact},
          {"nearest", s.nearest},
          {"miss", s.miss},
          {"stale", s.stale},
          {"invalid", s.invalid}};
}

void ProfileLookup::publish_stats() const { telemetry::publish("tune.lookup", stats_json()); }

kernels::ParamLookup param_lookup(std::shared_ptr<ProfileLookup> lookup) {
  if (!lookup) return nullptr;
  return [lookup](const std::string& op, const std::string& variant, const kernels::Shape& s, DType dt) {
    return (*lookup)(op, variant, s, dt);
  };
}

}  // namespace rtx::tune
