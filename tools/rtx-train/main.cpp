// rtx-train: GPT-2 training on real text. Not built yet: --help works, anything else exits 3.
#include "rtx/cli/cli.hpp"

int main(int argc, char** argv) { return rtx::cli::not_built_yet("rtx-train", "GPT-2 training on real text", argc, argv); }
