// rtx-serve: OpenAI-compatible serving with continuous batching. Not built yet: --help works, anything else exits 3.
#include "rtx/cli/cli.hpp"

int main(int argc, char** argv) { return rtx::cli::not_built_yet("rtx-serve", "OpenAI-compatible serving with continuous batching", argc, argv); }
