// Out-of-line parts of the CPU Philox wrapper.
#include <cmath>

#include "rtx/core/philox.hpp"

namespace rtx {

float Philox::next_normal() {
  // Box-Muller; u1 in (0, 1] so log() is finite.
  const double u1 = 1.0 - next_double();
  const double u2 = next_double();
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

}  // namespace rtx
