// rtx-train checkpoints in safetensors: weights by layout name, AdamW moments under
// "optim.m."/"optim.v.", run state in __metadata__ (schema rtx.checkpoint.v1).
#include "rtx/models/checkpoint.hpp"

#include <climits>
#include <cmath>
#include <map>

#include "rtx/core/error.hpp"
#include "rtx/io/safetensors.hpp"

namespace rtx::models {

namespace {

constexpr const char* kSchema = "rtx.checkpoint.v1";

nlohmann::json parse_meta_json(const std::map<std::string, std::string>& meta, const char* key,
                               const std::string& path, bool required) {
  auto it = meta.find(key);
  if (it == meta.end()) {
    if (required) throw_input(std::string("checkpoint metadata lacks '") + key + "'", path);
    return nullptr;
  }
  try {
    return nlohmann::json::parse(it->second);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range (number past double)
    throw_input(std::string("checkpoint metadata '") + key + "' is not valid JSON: " + e.what(), path);
  }
}

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& ck) {
  ck.model.validate();
  const std::vector<ParamTensor> layout = gpt2_param_layout(ck.model);
  const size_t n = gpt2_num_params(ck.model);
  if (ck.params.size() != n)
    throw_input("checkpoint params hold " + std::to_string(ck.params.size()) + " floats; the model has " +
                    std::to_string(n),
                path);
  const bool with_opt = !ck.m.empty() || !ck.v.empty();
  if (with_opt && (ck.m.size() != n || ck.v.size() != n))
    throw_input("checkpoint moments m/v must both hold " + std::to_string(n) + " floats", path);

  std::vector<io::SafetensorsSource> src;
  src.reserve(layout.size() * (with_opt ? 3 : 1));
  auto add = [&](const std::string& prefix, const std::vector<float>& buf) {
    for (const ParamTensor& t : layout) {
      io::SafetensorsSource s;
      s.name = prefix + t.name;
      s.dtype = io::StDType::F32;
      s.shape = t.shape;
      s.data = buf.data() + t.offset;
      src.push_back(std::move(s));
    }
  };
  add("", ck.params);
  if (with_opt) {
    add("optim.m.", ck.m);
    add("optim.v.", ck.v);
  }
  std::map<std::string, std::string> meta;
  meta["schema"] = kSchema;
  meta["format"] = "pt";  // what HF tooling expects to see for plain tensors
  meta["config"] = ck.model.to_json().dump();
  meta["run_config"] = ck.run_config.is_null() ? "{}" : ck.run_config.dump();
  if (!ck.tokenizer.is_null()) meta["tokenizer"] = ck.tokenizer.dump();
  meta["step"] = std::to_string(ck.step);
  meta["rng"] = nlohmann::json{{"seed", ck.seed}, {"train_subseq_next", ck.step}}.dump();
  meta["best_val_loss"] = nlohmann::json(ck.best_val_loss).dump();
  meta["optimizer"] = with_opt ? "adamw" : "none";
  io::write_safetensors(path, src, meta);
}

Checkpoint load_checkpoint(const std::string& path, bool with_optimizer) {
  const io::SafetensorsFile f = io::SafetensorsFile::open(path, true);
  const auto& meta = f.metadata();
  auto schema = meta.find("schema");
  if (schema == meta.end() || schema->second != kSchema)
    throw_input("not an rtx checkpoint: __metadata__.schema is " +
                    (schema == meta.end() ? std::string("missing") : "'" + schema->second + "'") + ", expected '" +
                    kSchema + "'",
                path);
  if (f.metadata().count(io::kSafetensorsSha256Key) == 0)
    throw_input("checkpoint has no checksum (__metadata__." + std::string(io::kSafetensorsSha256Key) + ")", path);
  Checkpoint ck;
  ck.model = Gpt2Config::from_json(parse_meta_json(meta, "config", path, true), path + ": __metadata__.config");
  ck.run_config = parse_meta_json(meta, "run_config", path, false);
  if (ck.run_config.is_null()) ck.run_config = nlohmann::json::object();
  ck.tokenizer = parse_meta_json(meta, "tokenizer", path, false);
  const nlohmann::json step = parse_meta_json(meta, "step", path, true);
  if (!step.is_number_integer() || step.get<long long>() < 0 || step.get<long long>() > INT_MAX)
    throw_input("__metadata__.step must be a non-negative integer below 2^31", path);
  ck.step = static_cast<int>(step.get<long long>());
  const nlohmann::json rng = parse_meta_json(meta, "rng", path, true);
  // nlohmann parses every non-negative integer as number_unsigned.
  if (!rng.is_object() || !rng.contains("seed") || !rng["seed"].is_number_unsigned())
    throw_input("__metadata__.rng.seed must be a non-negative integer", path);
  ck.seed = rng["seed"].get<uint64_t>();
  const nlohmann::json best = parse_meta_json(meta, "best_val_loss", path, false);
  if (best.is_number()) ck.best_val_loss = best.get<double>();

  // The config must fit the file before anything is sized from it (a corrupt config could ask
  // for terabytes): V*C + T*C + L*(12C^2 + 13C) + 2C floats (gpt2_param_layout), in double.
  const double C = ck.model.n_embd, need_bytes = 4.0 * (static_cast<double>(ck.model.vocab_size) * C +
                                                        static_cast<double>(ck.model.block_size) * C +
                                                        ck.model.n_layer * (12.0 * C * C + 13.0 * C) + 2.0 * C);
  if (need_bytes > static_cast<double>(f.data_size()))
    throw_input("checkpoint config needs " + nlohmann::json(need_bytes).dump() +
                    " bytes of F32 weights but the file holds " + std::to_string(f.data_size()),
                path + ": __metadata__.config");
  const std::vector<ParamTensor> layout = gpt2_param_layout(ck.model);
  const size_t n = gpt2_num_params(ck.model);
  auto read_all = [&](const std::string& prefix, std::vector<float>& buf) {
    buf.resize(n);
    for (const ParamTensor& t : layout) {
      const std::string name = prefix + t.name;
      const io::SafetensorsTensorInfo& info = f.info(name);  // throws naming the tensor when absent
      if (info.dtype != io::StDType::F32)
        throw_input("tensor '" + name + "' has dtype " + io::st_dtype_name(info.dtype) + ", expected F32", path);
      if (info.shape != t.shape) {
        std::string got, want;
        for (int64_t d : info.shape) got += (got.empty() ? "" : ",") + std::to_string(d);
        for (int64_t d : t.shape) want += (want.empty() ? "" : ",") + std::to_string(d);
        throw_input("tensor '" + name + "' has shape (" + got + "), the config needs (" + want + ")", path);
      }
      f.read_f32(name, buf.data() + t.offset, t.numel);
    }
  };
  read_all("", ck.params);
  const bool has_opt = f.contains("optim.m." + layout.front().name);
  if (with_optimizer && has_opt) {
    read_all("optim.m.", ck.m);
    read_all("optim.v.", ck.v);
  }
  for (float x : ck.params)
    if (!std::isfinite(x)) throw_input("checkpoint weights contain NaN or Inf", path);
  for (const std::vector<float>* mv : {&ck.m, &ck.v})
    for (float x : *mv)
      if (!std::isfinite(x)) throw_input("checkpoint AdamW moments contain NaN or Inf", path);
  for (float x : ck.v)
    if (x < 0) throw_input("checkpoint AdamW second moment (optim.v.*) has a negative value", path);
  return ck;
}

}  // namespace rtx::models
