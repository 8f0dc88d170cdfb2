// `rtx-train prepare --tokenizer char|gpt2 INPUT -o DIR` and `rtx-train presets`.
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "rtx/core/error.hpp"
#include "rtx/io/dataset.hpp"
#include "rtx/models/gpt2.hpp"

namespace rtx_train {

namespace {
struct PrepareArgs {
  std::string input, out, tokenizer = "char", gpt2_dir;
};
}  // namespace

Body add_prepare(CLI::App& s, const rtx::cli::CommonOptions& common) {
  auto a = std::make_shared<PrepareArgs>();
  s.add_option("input", a->input, "UTF-8 text file to tokenize")->required();
  s.add_option("-o,--output", a->out, "Output directory (created if missing)")->required();
  s.add_option("--tokenizer", a->tokenizer, "char (nanoGPT shakespeare_char) or gpt2 (byte-level BPE)")
      ->capture_default_str();
  s.add_option("--gpt2-dir", a->gpt2_dir, "Folder with encoder.json and vocab.bpe (default $RTX_DATA/gpt2_tokenizer)");
  return [a, &common]() {
    if (a->tokenizer != "char" && a->tokenizer != "gpt2")
      rtx::throw_usage("--tokenizer must be char or gpt2 (got '" + a->tokenizer + "')", "--tokenizer");
    const std::string gdir = a->gpt2_dir.empty() ? data_root() + "/gpt2_tokenizer" : a->gpt2_dir;
    const rtx::io::PrepareResult r = rtx::io::prepare_dataset(a->input, a->tokenizer, gdir, a->out);
    if (common.json) {
      std::cout << nlohmann::json{{"output", a->out},
                                  {"tokenizer", a->tokenizer},
                                  {"vocab_size", r.vocab_size},
                                  {"train_tokens", r.train_tokens},
                                  {"val_tokens", r.val_tokens}}
                       .dump(2)
                << "\n";
    } else if (!common.quiet) {
      std::cerr << "prepared " << a->out << ": tokenizer " << a->tokenizer << ", vocab " << r.vocab_size << ", train "
                << r.train_tokens << " tokens, val " << r.val_tokens << " tokens\n";
    }
    return 0;
  };
}

Body add_presets(CLI::App&, const rtx::cli::CommonOptions& common) {
  return [&common]() {
    nlohmann::json out = nlohmann::json::array();
    for (const std::string& name : rtx::models::Gpt2Config::preset_names()) {
      const rtx::models::Gpt2Config c = rtx::models::Gpt2Config::preset(name);
      nlohmann::json j = c.to_json();
      j["name"] = name;
      j["params"] = rtx::models::gpt2_num_params(c);
      out.push_back(j);
    }
    if (common.json) {
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    std::printf("%-22s %7s %6s %6s %6s %7s %12s\n", "preset", "layers", "heads", "embd", "block", "vocab", "params");
    for (const auto& j : out)
      std::printf("%-22s %7d %6d %6d %6d %7d %12zu\n", j["name"].get<std::string>().c_str(), j["n_layer"].get<int>(),
                  j["n_head"].get<int>(), j["n_embd"].get<int>(), j["block_size"].get<int>(),
                  j["vocab_size"].get<int>(), j["params"].get<size_t>());
    return 0;
  };
}

}  // namespace rtx_train
