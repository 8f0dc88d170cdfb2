// rtx-doctor: placeholder until its issue lands.
#include "rtx/cli/cli.hpp"

int main(int argc, char** argv) { return rtx::cli::not_built_yet("rtx-doctor", "doctor", argc, argv); }
