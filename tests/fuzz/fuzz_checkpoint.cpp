// Fuzz target: rtx-train checkpoints (rtx::models::load_checkpoint) on arbitrary bytes. The
// reader takes a path, so the bytes are served from an in-memory file (memfd), not from disk.
// An accepted checkpoint must match its config's layout and hold finite values.
#include <cmath>
#include <string>

#include "fuzz_util.hpp"
#include "rtx/core/error.hpp"
#include "rtx/models/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const rtx::fuzz::MemFile file(data, size);
  for (bool with_opt : {true, false}) {
    try {
      const rtx::models::Checkpoint ck = rtx::models::load_checkpoint(file.path(), with_opt);
      ck.model.validate();
      const size_t n = rtx::models::gpt2_num_params(ck.model);
      RTX_FUZZ_CHECK(ck.params.size() == n, "params size != the config's parameter count");
      RTX_FUZZ_CHECK(n * sizeof(float) <= size, "more parameters than the file holds");
      RTX_FUZZ_CHECK(ck.m.size() == ck.v.size() && (ck.m.empty() || ck.m.size() == n), "moment sizes");
      RTX_FUZZ_CHECK(with_opt || ck.m.empty(), "moments read without with_optimizer");
      RTX_FUZZ_CHECK(ck.step >= 0, "negative step " + std::to_string(ck.step));
      for (float x : ck.params) RTX_FUZZ_CHECK(std::isfinite(x), "non-finite weight");
      for (float x : ck.v) RTX_FUZZ_CHECK(x >= 0, "negative second moment");
    } catch (const rtx::Error&) {
    }
  }
  return 0;
}
