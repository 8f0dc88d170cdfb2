// register_cpu_kernels: the one place CPU ops join the registry (explicit, no statics).
#include "cpu_kernels.hpp"

namespace rtx::kernels {

void register_cpu_kernels(Registry& r) {
  register_cpu_matmul(r);
  register_cpu_ops(r);
  register_cpu_sparse(r);
}

}  // namespace rtx::kernels
