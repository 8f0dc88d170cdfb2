// rtx-flame: flamegraphs from traces and folded stacks. Not built yet: --help works, anything else exits 3.
#include "rtx/cli/cli.hpp"

int main(int argc, char** argv) { return rtx::cli::not_built_yet("rtx-flame", "flamegraphs from traces and folded stacks", argc, argv); }
