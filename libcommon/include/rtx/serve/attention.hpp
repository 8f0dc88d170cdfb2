// Causal attention of query rows over a sequence's keys in the paged KV cache (the decode
// and chunked-prefill attention of rtx-serve's models). Reduction order depends only on the
// sequence, never on the batch: the basis of the engine's batch invariance.
#pragma once
#include <cstdint>
#include <vector>

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

/// paged_attention for `n_heads` consecutive query heads of one row at once: query head h0 + i
/// (i < n_heads) takes q + i * head_dim and writes out + i * head_dim, over KV head
/// (h0 + i) / q_per_kv (1 for multi-head attention; n_head / n_kv_head for grouped-query
/// attention). Each head's result is bit for bit paged_attention's: the same operations in the
/// same order, only interleaved across heads. The walk goes block by block, and inside a block
/// head by head, so the heads' slots of one (block, layer), one contiguous run of the pool, are
/// read together instead of as n_heads separate runs of block_tokens x head_dim elements: more
/// of DRAM's bandwidth (docs/perf-history.md, "paged attention: all heads of a block per call").
/// `scratch` holds min(n_heads, 64) * n_keys floats. Preconditions as paged_attention's, and
/// n_heads, q_per_kv >= 1.
void paged_attention_heads(float* out, const float* q, int n_keys, const KvCache& kv, int layer, int h0, int n_heads,
                           int q_per_kv, const int32_t* blocks, float scale, float* scratch);

/// paged_attention_heads for `n_rows` consecutive query rows of one sequence (a prompt chunk):
/// row r (< n_rows) has n_keys + r keys (causal: it sits at position n_keys + r - 1), its query
/// heads at q + r * q_stride and its outputs at out + r * out_stride (floats). Same bits per
/// (row, head) as paged_attention. The walk takes a head's rows one after the other inside each
/// block, so the block's keys and values come from L1 for all but the first row. `scratch` holds
/// min(n_rows * n_heads, 64) * (n_keys + n_rows - 1) floats. Preconditions: n_keys, n_rows,
/// n_heads, q_per_kv >= 1; the table covers n_keys + n_rows - 1 positions; `out` overlaps no
/// row's queries (over 64 lanes the first lanes' outputs are written before the next lanes'
/// queries are read).
void paged_attention_tile(float* out, size_t out_stride, const float* q, size_t q_stride, int n_rows, int n_keys,
                          const KvCache& kv, int layer, int h0, int n_heads, int q_per_kv, const int32_t* blocks,
                          float scale, float* scratch);

/// How many query heads each attention call of a forward pass should take, for `units` row
/// tiles (a decode row, or up to kAttentionRowTile rows of a prompt chunk) of `n_heads` heads on
/// `threads` threads: all of a tile's heads when there are enough tiles to keep every thread busy
/// (4 calls per thread), else fewer, so that the calls still spread over the threads. Any
/// answer gives the same bits; this only sets speed.
int attention_heads_per_call(int units, int n_heads, int threads);

/// The most rows of one sequence an attention call takes (paged_attention_tile).
constexpr int kAttentionRowTile = 4;

/// One attention call of a layer: rows [row, row + n_rows) of the forward pass (one sequence's,
/// consecutive positions), query heads [h0, h0 + n_heads).
struct AttentionCall {
  int row = 0, n_rows = 1, h0 = 0, n_heads = 1;
};

/// The calls of one layer's attention over `batch` (the rows of sequence s follow those of
/// s - 1) for `n_heads` query heads on `threads` threads, in the order to hand them out: each
/// sequence's rows in tiles of up to kAttentionRowTile, each tile's heads in calls of
/// attention_heads_per_call(tiles, n_heads, threads). Every head of every row appears once; the
/// plan changes no bits. Returns the most scratch floats per thread that a call needs
/// (paged_attention_tile: its lanes, at most 64, times its last row's keys, pos + rows, at most
/// `context`).
size_t plan_attention_calls(std::vector<AttentionCall>& calls, const std::vector<SeqBatch>& batch, int n_heads,
                            int threads, int context);

/// Writes the key and value rows (head_dim floats per KV head, n_kv_head heads each, contiguous)
/// of position `pos` into the cache through the block table. An f16 pool stores each value
/// rounded to the nearest binary16 (ties to even; beyond +-65504 it becomes +-inf, which the
/// attention then carries into that row's output, as in llama.cpp's f16 cache).
void kv_store(KvCache& kv, int layer, const int32_t* blocks, int pos, const float* k_row, const float* v_row);

}  // namespace rtx::serve
