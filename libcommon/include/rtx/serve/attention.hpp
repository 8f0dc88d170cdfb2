// Causal attention of one query row over a sequence's keys in the paged KV cache (the decode
// and chunked-prefill attention of rtx-serve's models). Reduction order depends only on the
// sequence, never on the batch: the basis of the engine's batch invariance.
#pragma once
#include <cstdint>

#include "rtx/serve/model.hpp"

namespace rtx::serve {

/// out (head_dim) = softmax_t(scale * q . k_t) v_t over keys t = 0..n_keys-1 of KV head `kv_head`
/// in `layer`, key t at block blocks[t / block_tokens], slot t % block_tokens. Keys and values
/// are the pool's f32 or f16 elements (f16 widened exactly, by F16C where the vector paths run);
/// the arithmetic is f32 throughout;
/// the dot products use L partial sums (lane j takes elements d = j mod L) folded in a fixed
/// order: L = 16 FMA lanes on AVX-512 (head_dim a multiple of 16 up to 128), 8 on AVX2
/// (multiples of 8 up to 128), else L = 16 for head_dim >= 16, 8 or 4. The softmax subtracts the
/// max and sums exp in key order, the output accumulates weights times values in key order and
/// divides once. The order depends on head_dim and the ISA only. `scratch` holds n_keys floats.
/// Preconditions (checked by the caller): n_keys >= 1 and the table covers n_keys positions.
void paged_attention(float* out, const float* q, int n_keys, const KvCache& kv, int layer, int kv_head,
                     const int32_t* blocks, float scale, float* scratch);

/// Writes the key and value rows (head_dim floats per KV head, n_kv_head heads each, contiguous)
/// of position `pos` into the cache through the block table. An f16 pool stores each value
/// rounded to the nearest binary16 (ties to even; beyond +-65504 it becomes +-inf, which the
/// attention then carries into that row's output, as in llama.cpp's f16 cache).
void kv_store(KvCache& kv, int layer, const int32_t* blocks, int pos, const float* k_row, const float* v_row);

}  // namespace rtx::serve
