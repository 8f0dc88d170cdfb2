// rtx-train: GPT-2 training on real text: prepare a dataset, run (train, evaluate,
// checkpoint, resume), sample with a KV cache, export to GGUF. Flags only; logic in libcommon.
#include <cstdlib>
#include <vector>

#include "commands.hpp"
#include "rtx/app/bench.hpp"

namespace rtx_train {

std::string data_root() {
  const char* d = std::getenv("RTX_DATA");
  return d && *d ? d : "../shared/data";
}

bool seed_given(const CLI::App& sub) {
  const CLI::App* parent = sub.get_parent();
  const CLI::Option* o = parent ? parent->get_option_no_throw("--seed") : nullptr;
  return o && o->count() > 0;
}

uint64_t parsed_seed(const CLI::App& sub, uint64_t fallback) {
  const CLI::App* parent = sub.get_parent();
  const CLI::Option* o = parent ? parent->get_option_no_throw("--seed") : nullptr;
  uint64_t v = fallback;
  if (o)
    for (const std::string& text : o->results()) v = rtx::app::bench::parse_seed(text);
  return v;
}

}  // namespace rtx_train

int main(int argc, char** argv) {
  CLI::App app{"rtx-train: GPT-2 trained on real text (CPU and CUDA)", "rtx-train"};
  rtx::cli::CommonOptions common;
  rtx::cli::add_common_options(app, common);
  rtx::cli::Subcommands subs(app);
  subs.add("prepare", "Tokenize a text file into train.bin/val.bin/meta.json (90/10 split)",
      [&](CLI::App& s) { return rtx_train::add_prepare(s, common); });
  subs.add("run", "Train GPT-2 on a prepared dataset (AdamW, warm-up + cosine LR, eval, checkpoints)",
      [&](CLI::App& s) { return rtx_train::add_run(s, common); });
  subs.add("sample", "Generate text from a checkpoint (KV cache; temperature, top-k, top-p)",
      [&](CLI::App& s) { return rtx_train::add_sample(s, common); });
  subs.add("export", "Export a checkpoint as GGUF (architecture gpt2, with its tokenizer)",
      [&](CLI::App& s) { return rtx_train::add_export(s, common); });
  subs.add("rl", "Reinforcement learning on the batched simulators: --algo ppo --env CartPole-v1 (CleanRL's defaults)",
      [&](CLI::App& s) { return rtx_train::add_rl(s, common); });
  subs.add("presets", "List the model presets", [&](CLI::App& s) { return rtx_train::add_presets(s, common); });
  app.footer("Data: RTX_DATA (default ../shared/data) holds tinyshakespeare/ and gpt2_tokenizer/.\n"
             "Exit codes: 0 ok; 2 usage or input error (bad flag, corrupt checkpoint, bad dataset);\n"
             "3 environment missing (e.g. --backend cuda without a GPU, disk full); 4 internal error.");
  return rtx::cli::run_tool(app, argc, argv, common, [&]() { return subs.run(); });
}
