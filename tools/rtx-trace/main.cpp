// rtx-trace: tracing rtx tools and CUDA programs. Not built yet: --help works, anything else exits 3.
#include "rtx/cli/cli.hpp"

int main(int argc, char** argv) { return rtx::cli::not_built_yet("rtx-trace", "tracing rtx tools and CUDA programs", argc, argv); }
