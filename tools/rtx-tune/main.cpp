// rtx-tune: auto-tuning kernel parameters into per-hardware profiles. Not built yet: --help works, anything else exits 3.
#include "rtx/cli/cli.hpp"

int main(int argc, char** argv) { return rtx::cli::not_built_yet("rtx-tune", "auto-tuning kernel parameters into per-hardware profiles", argc, argv); }
