// rtx-bench: placeholder until its issue lands.
#include "rtx/cli/cli.hpp"

int main(int argc, char** argv) { return rtx::cli::not_built_yet("rtx-bench", "bench", argc, argv); }
