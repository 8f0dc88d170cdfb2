// register_cpu_kernels: the one place CPU ops join the registry.
#include "rtx/kernels/registry.hpp"

namespace rtx::kernels {

void register_cpu_kernels(Registry& r) { (void)r; }

}  // namespace rtx::kernels
