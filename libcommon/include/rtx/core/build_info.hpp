// Facts baked into the build (version, compiler at configure time; git sha at build time).
#pragma once

namespace rtx {
/// Short git sha of the source tree at the last build ("-dirty" if tracked files were modified,
/// "unknown" without git or outside a git checkout).
const char* git_sha();
/// rtx semantic version, e.g. "0.1.0".
const char* version();
/// CMAKE_BUILD_TYPE the library was built with ("Release", "Debug", ...).
const char* build_type();
/// C++ compiler id and version, e.g. "GNU 12.2.0".
const char* compiler_id();
/// nvcc version when the CUDA backend is built, else "".
const char* cuda_compiler_version();
/// True when the CUDA backend was compiled in (RTX_HAVE_CUDA).
bool built_with_cuda();
}  // namespace rtx
