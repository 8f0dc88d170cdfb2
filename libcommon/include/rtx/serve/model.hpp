// The serving model interface of rtx-serve: a model that runs one batched forward over many
// sequences whose keys and values live in a paged KV cache (vLLM's PagedAttention, Kwon et al.
// 2023, "Efficient Memory Management for Large Language Model Serving with PagedAttention").
// Implementations: GPT-2 (gpt2_serve.cpp) and Llama (models/llama.cpp); load_model() picks one.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rtx/io/tokenizer.hpp"
#include "rtx/kernels/matmul.hpp"

namespace rtx::serve {

/// What a server needs to know about a loaded model.
struct ModelInfo {
  std::string arch;       ///< "gpt2" or "llama"
  std::string name;       ///< general.name, else the file name without extension
  std::string path;       ///< the file it was loaded from
  int vocab = 0;          ///< V: logits per row (may exceed the tokenizer's tokens when padded)
  int context = 0;        ///< the most positions one sequence may hold
  int n_layer = 0;        ///< KV cache geometry: layers,
  int n_kv_head = 0;      ///< key/value heads (< query heads under grouped-query attention),
  int head_dim = 0;       ///< and floats per head
  int32_t bos = -1;       ///< begin-of-sequence id prepended to prompts, -1 = none
  int32_t eos = -1;       ///< end-of-sequence id that ends generation, -1 = none
  size_t param_bytes = 0; ///< bytes of weights held in memory (after packing)
  /// How the projection matrices are held: "f32", or e.g. "q8_0 N/M", "q4_k 40/49, q6_k 9/49"
  /// when N of the M matrices run a quantized kernel (kernels::PackedMatmulWeight q8_0/kquant).
  std::string weights = "f32";
  /// Where forward() runs: "cpu", or "cuda:N" (device N). A CUDA model keeps the KV pool on the
  /// device (KvCache::backing()), so its KvCache needs no host storage.
  std::string device = "cpu";
};

/// Element type of the KV cache pool. F32; or F16, IEEE binary16: keys and values are rounded
/// to nearest-even when stored (kv_store) and widened exactly when read, the attention math
/// stays f32. F16 halves the pool and the bytes attention reads per key (llama.cpp's default
/// cache type is f16 too); outputs then differ from an f32 cache by that rounding.
enum class KvType { F32, F16 };
/// "f32" or "f16".
const char* kv_type_name(KvType t);
/// Parses "f32" / "f16" (also "float32" / "float16"). Error(Input) naming `where` otherwise.
KvType parse_kv_type(const std::string& s, const std::string& where);
/// Bytes per element: 4 or 2.
inline size_t kv_type_bytes(KvType t) { return t == KvType::F16 ? 2 : 4; }

/// A pool of fixed-size KV blocks. One block holds `block_tokens` positions of keys and values
/// for every layer: per layer K and V each (n_kv_head, block_tokens, head_dim) elements of
/// type() (f32 or f16). A sequence
/// owns a block table (block ids in position order): position p lives in block
/// table[p / block_tokens], slot p % block_tokens. Allocation is O(1) (a free list). Not
/// thread-safe: the scheduler thread alone allocates and frees.
/// A model on another device (a CUDA model) keeps its own copy of the pool in backing(), with the
/// same block ids and layout; the host pool may then be left out (host_storage false).
class KvCache {
 public:
  /// Storage a non-CPU model attaches to the cache (its device pool); freed with the cache.
  struct Backing {
    virtual ~Backing() = default;
    /// Copies `n` floats of the device pool from float offset `src` to `dst` (the host pool's
    /// layout), complete on return. false: this backing cannot copy (nothing changed).
    virtual bool copy(size_t dst, size_t src, size_t n) {
      (void)dst, (void)src, (void)n;
      return false;
    }
  };
  /// Error(Input) naming the argument when a size is < 1 or the pool's bytes overflow size_t.
  /// `host_storage` false: no host pool is allocated (k() and v() must not be called; for models
  /// whose ModelInfo::device is not "cpu"). `type`: the pool's element type (F16 only with a
  /// host pool: a device pool is f32; Error(Input) otherwise).
  KvCache(int n_layer, int n_kv_head, int head_dim, int block_tokens, int n_blocks, bool host_storage = true,
          KvType type = KvType::F32);
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;
  /// A free block id, or -1 when the pool is exhausted.
  int alloc();
  /// Returns `block` to the pool. Error(Internal) on an id out of range or already free.
  void free(int block);
  int block_tokens() const { return block_tokens_; }
  int total_blocks() const { return n_blocks_; }
  int free_blocks() const { return static_cast<int>(free_.size()); }
  int used_blocks() const { return n_blocks_ - free_blocks(); }
  /// Copies block `src`'s keys and values (every layer) over block `dst`, in the host pool and
  /// in the attached device pool (prefix caching). false when a device pool is attached that
  /// cannot copy, or none is attached yet while there is no host pool (nothing changed).
  /// Error(Internal) on a block id out of range.
  bool copy_block(int dst, int src);
  /// Blocks needed to hold `positions` positions.
  int blocks_for(int positions) const { return (positions + block_tokens_ - 1) / block_tokens_; }
  /// Keys of `layer` in `block`: (n_kv_head, block_tokens, head_dim) f32, head-major. An f32
  /// host pool only (Error(Internal) otherwise).
  float* k(int layer, int block) { return f32() + offset(layer, block, 0); }
  /// Values of `layer` in `block`: same layout as k().
  float* v(int layer, int block) { return f32() + offset(layer, block, 1); }
  const float* k(int layer, int block) const { return const_cast<KvCache*>(this)->k(layer, block); }
  const float* v(int layer, int block) const { return const_cast<KvCache*>(this)->v(layer, block); }
  /// As k() and v(), binary16 bits, for an f16 host pool only (Error(Internal) otherwise).
  uint16_t* k16(int layer, int block) { return f16() + offset(layer, block, 0); }
  uint16_t* v16(int layer, int block) { return f16() + offset(layer, block, 1); }
  const uint16_t* k16(int layer, int block) const { return const_cast<KvCache*>(this)->k16(layer, block); }
  const uint16_t* v16(int layer, int block) const { return const_cast<KvCache*>(this)->v16(layer, block); }
  int n_layer() const { return n_layer_; }
  int n_kv_head() const { return n_kv_head_; }
  int head_dim() const { return head_dim_; }
  KvType type() const { return type_; }
  /// Bytes of the pool (all blocks), wherever it is held.
  size_t bytes() const { return n_elems_ * kv_type_bytes(type_); }
  /// Whether the pool is held in host memory (k() and v(), or k16() and v16(), are usable).
  bool host_storage() const { return data_ != nullptr || data16_ != nullptr; }
  /// The device copy a non-CPU model attached (null until its first forward).
  std::unique_ptr<Backing>& backing() { return backing_; }

 private:
  size_t offset(int layer, int block, int kv) const {
    return ((static_cast<size_t>(block) * n_layer_ + layer) * 2 + kv) * block_floats_;
  }
  [[noreturn]] void wrong_pool(const char* want) const;
  float* f32() {
    if (!data_) wrong_pool("an f32 host pool (k(), v())");
    return data_.get();
  }
  uint16_t* f16() {
    if (!data16_) wrong_pool("an f16 host pool (k16(), v16())");
    return data16_.get();
  }
  int n_layer_, n_kv_head_, head_dim_, block_tokens_, n_blocks_;
  KvType type_ = KvType::F32;
  size_t block_floats_ = 0;  // elements of one (layer, block, K or V) slab
  size_t n_elems_ = 0;
  std::unique_ptr<float[]> data_;       // the f32 host pool
  std::unique_ptr<uint16_t[]> data16_;  // the f16 host pool
  std::vector<int> free_;
  std::vector<unsigned char> is_free_;
  std::unique_ptr<Backing> backing_;
};

/// One sequence's part of a batched forward: `n` new tokens at positions [pos, pos + n).
struct SeqBatch {
  const int32_t* tokens = nullptr;  ///< n ids in [0, V)
  int n = 0;                        ///< >= 1
  int pos = 0;                      ///< positions already in the cache for this sequence
  const int32_t* blocks = nullptr;  ///< block table covering positions [0, pos + n)
  int n_blocks = 0;
  bool want_logits = false;         ///< return the logits of the last of the n tokens
};

/// A model served by rtx-serve. forward() is called from one thread at a time; it may use
/// OpenMP inside.
class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  /// The model's own tokenizer (from the GGUF metadata or the checkpoint).
  virtual const io::Tokenizer& tokenizer() const = 0;
  /// Runs the tokens of every sequence in `batch` through the model (all sequences' rows in one
  /// matmul per projection), writes their keys and values into `kv` at their positions, and
  /// writes the logits (V floats) of each sequence with want_logits, in batch order, into
  /// `logits` (rows = number of sequences with want_logits; may be null when none).
  /// Batch invariance: a sequence's logits are bitwise identical whatever else is in the batch
  /// and however its tokens were split across calls (every reduction runs in an order fixed by
  /// the sequence alone). Error(Input) when a token id is out of range, n < 1, pos + n >
  /// context, or the block table is too short; the cache is then unchanged for that sequence.
  /// An empty batch does nothing.
  virtual void forward(const std::vector<SeqBatch>& batch, KvCache& kv, float* logits) = 0;
  /// Readies `kv` for forward() ahead of the first request (a CUDA model allocates the device
  /// pool there, so an out-of-memory error comes at start, not on a request); forward() does it
  /// itself when it was not called. Error(Environment/Internal) from the device; a CPU model has
  /// nothing to do.
  virtual void attach(KvCache& kv) { (void)kv; }
};

/// The checks every Model::forward runs before writing anything (so a failed call leaves the
/// cache unchanged): the cache's geometry matches `info`; per sequence n >= 1 with tokens,
/// positions [pos, pos+n) inside the context, ids in [0, vocab), a block table covering pos+n
/// with ids of the pool; `logits` non-null when a sequence wants logits. `model` names the
/// caller in messages ("GPT-2 forward"). Returns the total row count. Error(Input) naming the
/// sequence and field.
int check_forward(const std::vector<SeqBatch>& batch, const KvCache& kv, const ModelInfo& info, const float* logits,
                  const std::string& model);

/// Options of load_model().
struct LoadOptions {
  /// Threads for forward() (OpenMP); 0 = OpenMP's default.
  int threads = 0;
  /// Blocked-matmul parameters of the packed weights (0 fields = the ISA's defaults); rtx-serve
  /// fills them from the promoted tuning profile of this machine's SKU. Only KC and NR change
  /// how weights are packed; MR is chosen per row group.
  kernels::MatmulParams matmul{};
  /// Keep a GGUF's Q8_0 and K-quant (Q4_K, Q5_K, Q6_K) matrices quantized and run them with
  /// the quantized kernels (kernels::PackedMatmulWeight::q8_0 / kquant: ~1.06 and 0.59-0.83
  /// bytes per weight read per token instead of 4). false: dequantize them to f32 at load, as every other
  /// quantized type is.
  bool keep_quantized = true;
  /// K-quant and Q8_0 matrices: quantize activations to 8 bits per 32 values and take integer
  /// dot products (true, the default, as llama.cpp does; relative error of order 1e-3; Q8_0 needs
  /// AVX2, else it stays W8A32), or false: f32 activations against
  /// weights widened to f32 (exactly ggml's values), about 1.4-1.7x slower at one stream on the
  /// dev VM (docs/perf-history.md). See kernels::PackedMatmulWeight::kquant and q8_0.
  bool int8_activations = true;
  /// -1: run on the CPU. N >= 0: run on CUDA device N (GPT-2 and Llama; every matrix in f32,
  /// quantized files dequantized at load; `threads`, `matmul` and the quantized-kernel options
  /// do not apply). Error(Environment) from load_model when rtx was built without CUDA or the
  /// device does not exist.
  int cuda_device = -1;
};

/// LoadOptions::cuda_device from a --device value: "cpu" -> -1, "cuda" -> 0, "cuda:N" -> N.
/// Error(Usage) naming the value otherwise.
int parse_device(const std::string& s);

/// Loads a model for serving by its contents: a GGUF file (v1 to v3; architecture "gpt2" or
/// "llama"; f32 or f16 tensors) or an rtx safetensors checkpoint (rtx.checkpoint.v1, GPT-2).
/// Error(Input) naming the file and what is wrong (missing tensor, wrong shape, unsupported
/// architecture or tensor type).
std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& opt = {});

}  // namespace rtx::serve
