// Fuzz target: GGUF v1-v3 metadata and tensor infos (rtx::io::GgufFile::parse) on arbitrary
// bytes. Accepted files must keep every tensor inside the file, aligned and non-overlapping, and
// every tensor of a decodable type (quantized ones included) must decode to numel floats.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_util.hpp"
#include "rtx/core/error.hpp"
#include "rtx/io/gguf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using rtx::io::GgufFile;
  try {
    const GgufFile f = GgufFile::parse(std::string(reinterpret_cast<const char*>(data), size), "fuzz.gguf");
    RTX_FUZZ_CHECK(f.version() >= 1 && f.version() <= 3, "version " + std::to_string(f.version()));
    const uint32_t a = f.alignment();
    RTX_FUZZ_CHECK(a != 0 && (a & (a - 1)) == 0, "alignment not a power of two");
    RTX_FUZZ_CHECK(f.data_offset() <= size, "data section starts past the end");
    for (const auto& [key, value] : f.metadata()) RTX_FUZZ_CHECK(f.find(key) == &value, "metadata index: " + key);
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (const auto& t : f.tensors()) {
      RTX_FUZZ_CHECK(!t.ne.empty() && t.ne.size() <= 4, "dims of " + t.name);
      const auto [block, bytes] = rtx::io::ggml_type_block(t.type);
      RTX_FUZZ_CHECK(block > 0 && bytes > 0, "unknown type accepted: " + t.name);
      RTX_FUZZ_CHECK(t.ne[0] % block == 0, "ne[0] not a multiple of the block: " + t.name);
      unsigned __int128 numel = 1;
      for (uint64_t d : t.ne) numel *= d;
      RTX_FUZZ_CHECK(numel == t.numel, "numel of " + t.name);
      RTX_FUZZ_CHECK(numel / block * bytes == t.nbytes, "nbytes of " + t.name);
      RTX_FUZZ_CHECK(t.offset % a == 0, "unaligned tensor " + t.name);
      const unsigned __int128 end = static_cast<unsigned __int128>(f.data_offset()) + t.offset + t.nbytes;
      RTX_FUZZ_CHECK(end <= size, "tensor data past the end of the file: " + t.name);
      RTX_FUZZ_CHECK(f.find_tensor(t.name) == &t, "tensor index: " + t.name);
      if (t.nbytes > 0) ranges.emplace_back(t.offset, t.offset + t.nbytes);
      // Every decodable type (F32, F16, BF16, Q4_0..Q8_0, Q4_K..Q6_K): the decoders read exactly
      // nbytes of blocks (ASan sees any overread); bounded so a huge tensor does not exhaust memory.
      if (rtx::io::ggml_can_dequantize(t.type) && t.numel <= (uint64_t{1} << 22)) {
        const std::vector<float> v = f.tensor_f32(t.name);
        RTX_FUZZ_CHECK(v.size() == t.numel, "tensor_f32 size of " + t.name);
      }
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i)
      RTX_FUZZ_CHECK(ranges[i].first >= ranges[i - 1].second, "overlapping tensors");
  } catch (const rtx::Error&) {
  }
  return 0;
}
