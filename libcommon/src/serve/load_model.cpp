// load_model (rtx/serve/model.hpp): picks the serving model by the file's contents.
#include <cstring>
#include <fstream>

#include "rtx/core/error.hpp"
#include "rtx/io/gguf.hpp"
#include "rtx/models/llama.hpp"
#include "rtx/serve/gpt2_serve.hpp"
#include "rtx/serve/model.hpp"

namespace rtx::serve {

std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& opt) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCategory::Input, "cannot open model file " + path, path, "check the path (--model)");
  char magic[4] = {};
  in.read(magic, 4);
  if (in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0) {
    in.close();
    const io::GgufFile f = io::GgufFile::open(path);
    const std::string arch = f.get("general.architecture").as_string("general.architecture");
    if (arch == "gpt2") return load_gpt2_gguf(f, opt);
    if (arch == "llama") return models::load_llama_gguf(path, opt);
    throw_input(path + ": general.architecture \"" + arch + "\" is not served (gpt2 or llama)",
                "general.architecture", "convert the model to one of those architectures");
  }
  in.close();
  // Not GGUF: an rtx checkpoint (safetensors); its reader names what is wrong otherwise.
  return load_gpt2_checkpoint(path, opt);
}

}  // namespace rtx::serve
