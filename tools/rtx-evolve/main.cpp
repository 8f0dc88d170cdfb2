// rtx-evolve: propose, validate, gate, promote and roll back improvements. Not built yet: --help works, anything else exits 3.
#include "rtx/cli/cli.hpp"

int main(int argc, char** argv) { return rtx::cli::not_built_yet("rtx-evolve", "propose, validate, gate, promote and roll back improvements", argc, argv); }
