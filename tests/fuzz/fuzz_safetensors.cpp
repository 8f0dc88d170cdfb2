// Fuzz target: safetensors header and offsets (rtx::io::SafetensorsFile::parse) on arbitrary
// bytes. Accepted files must satisfy the format's invariants; rejections must be rtx::Error.
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "rtx/core/error.hpp"
#include "rtx/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using rtx::io::SafetensorsFile;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  // Checksum verification on for most inputs, off for some (both paths are reachable).
  for (bool verify : {true, false}) {
    try {
      const SafetensorsFile f = SafetensorsFile::parse(bytes, "fuzz.safetensors", verify);
      RTX_FUZZ_CHECK(size >= 8, "accepted a file shorter than its length prefix");
      uint64_t n = 0;
      std::memcpy(&n, data, 8);  // little-endian host (x86-64)
      RTX_FUZZ_CHECK(n <= size - 8 && n <= 100u * 1000 * 1000, "header length out of bounds");
      RTX_FUZZ_CHECK(f.data_size() == size - 8 - n, "data section is not the rest of the file");
      uint64_t at = 0;
      for (const auto& t : f.tensors()) {
        RTX_FUZZ_CHECK(t.begin == at, "gap or overlap before " + t.name);
        RTX_FUZZ_CHECK(t.begin <= t.end && t.end <= f.data_size(), "range outside data: " + t.name);
        uint64_t numel = 1;
        for (int64_t d : t.shape) {
          RTX_FUZZ_CHECK(d >= 0, "negative extent in " + t.name);
          numel *= static_cast<uint64_t>(d);  // cannot overflow: checked against the byte range
        }
        RTX_FUZZ_CHECK(numel == t.numel(), "numel mismatch in " + t.name);
        RTX_FUZZ_CHECK(numel * rtx::io::st_dtype_size(t.dtype) == t.nbytes(), "shape x dtype != range: " + t.name);
        RTX_FUZZ_CHECK(f.contains(t.name) && &f.info(t.name) != nullptr, "index misses " + t.name);
        if (t.dtype == rtx::io::StDType::F32 || t.dtype == rtx::io::StDType::F16 ||
            t.dtype == rtx::io::StDType::BF16) {
          const std::vector<float> v = f.read_f32(t.name);
          RTX_FUZZ_CHECK(v.size() == numel, "read_f32 size for " + t.name);
          if (t.dtype == rtx::io::StDType::F32 && numel > 0)
            RTX_FUZZ_CHECK(std::memcmp(v.data(), f.data(t.name), t.nbytes()) == 0, "F32 bytes differ: " + t.name);
        }
        at = t.end;
      }
      RTX_FUZZ_CHECK(at == f.data_size(), "tensors do not cover the data section");
    } catch (const rtx::Error&) {
    }
  }
  return 0;
}
