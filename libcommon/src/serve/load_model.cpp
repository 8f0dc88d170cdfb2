// load_model (rtx/serve/model.hpp): picks the serving model by the file's contents.
#include <algorithm>
#include <cstring>
#include <fstream>

#include "rtx/core/error.hpp"
#include "rtx/io/gguf.hpp"
#include "rtx/serve/llama.hpp"
#include "rtx/serve/gpt2_serve.hpp"
#include "rtx/serve/model.hpp"

namespace rtx::serve {

int parse_device(const std::string& s) {
  if (s == "cpu") return -1;
  if (s == "cuda") return 0;
  if (s.size() > 5 && s.compare(0, 5, "cuda:") == 0 && s.size() <= 9 &&
      std::all_of(s.begin() + 5, s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::stoi(s.substr(5));
  std::string shown;  // control characters would split the error line
  for (char c : s) shown += (static_cast<unsigned char>(c) < 32 || c == 127) ? '?' : c;
  throw_usage("\"" + shown + "\" is not a device: cpu, cuda or cuda:N", "--device", "e.g. --device cuda:0");
}

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
    if (arch == "llama") return serve::load_llama_gguf(path, opt);
    throw_input(path + ": general.architecture \"" + arch + "\" is not served (gpt2 or llama)",
                "general.architecture", "convert the model to one of those architectures");
  }
  in.close();
  // A file named .gguf without the magic: say so, rather than what the safetensors reader
  // would make of it.
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0) {
    std::string got;
    for (char c : std::string(magic, static_cast<size_t>(std::max<std::streamsize>(0, in.gcount()))))
      got += (c >= 32 && c < 127) ? std::string(1, c) : "\\x" + std::string(1, "0123456789abcdef"[(c >> 4) & 15]) +
                                                             std::string(1, "0123456789abcdef"[c & 15]);
    throw_input("named .gguf but not a GGUF file (its first bytes are \"" + got +
                    "\", not \"GGUF\")", path, "check the file (a truncated download or another format)");
  }
  // Not GGUF: an rtx checkpoint (safetensors); its reader names what is wrong otherwise, and
  // the hint says that both formats were tried.
  try {
    return load_gpt2_checkpoint(path, opt);
  } catch (const Error& e) {
    if (e.category() != ErrorCategory::Input) throw;
    throw_input(e.message() + " (read as an rtx checkpoint: the file has no GGUF magic)", e.where(),
                "give a GGUF file (gpt2 or llama) or an rtx-train checkpoint (.safetensors)");
  }
}

}  // namespace rtx::serve
