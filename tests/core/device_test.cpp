// Device discovery: the driver probe (dlopen of libcuda.so.1, any build) against the CUDA
// runtime's own count (CUDA builds), and its reasons when no device is seen.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <string>

#include "rtx/core/device.hpp"

TEST_CASE("the driver probe says why it sees no device, and agrees with the runtime", "[cpu]") {
  std::string why;
  const int n = rtx::cuda_driver_device_count(why);
  INFO("driver devices " << n << ", why: " << why);
  REQUIRE(n >= 0);
  CHECK((n == 0) == !why.empty());
  // Where the runtime sees devices (a CUDA build on a GPU machine), the driver sees the same.
  if (rtx::cuda_device_count() > 0) CHECK(n == rtx::cuda_device_count());
  // Where no driver can be loaded (this CI machine), the reason says so.
  void* h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    CHECK(n == 0);
    CHECK(why == "no NVIDIA driver (libcuda.so.1 cannot be loaded)");
  }
}
