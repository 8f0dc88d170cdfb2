// Paged causal attention for one query row (rtx/serve/attention.hpp).
#include "rtx/serve/attention.hpp"

#include <cmath>
#include <cstring>

namespace rtx::serve {

namespace {

/// q . k over n floats with L partial sums (lane j: elements j, j+L, ...) folded pairwise in a
/// fixed order. The lane loop vectorises; the order depends only on n, never on the batch.
template <int L>
inline float dot_lanes(const float* __restrict a, const float* __restrict b, int n) {
  float acc[L] = {};
  int d = 0;
  for (; d + L <= n; d += L)
    for (int j = 0; j < L; ++j) acc[j] += a[d + j] * b[d + j];
  for (int j = 0; d + j < n; ++j) acc[j] += a[d + j] * b[d + j];
  for (int w = L / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

/// 16 lanes for head sizes >= 16 (GPT-2: 64), fewer for small heads (stories260k: 8), so the
/// fold does not cost more than the products.
inline float dot_head(const float* a, const float* b, int n) {
  if (n >= 16) return dot_lanes<16>(a, b, n);
  if (n >= 8) return dot_lanes<8>(a, b, n);
  return dot_lanes<4>(a, b, n);
}

}  // namespace

void paged_attention(float* out, const float* q, int n_keys, const KvCache& kv, int layer, int kv_head,
                     const int32_t* blocks, float scale, float* scratch) {
  const int HS = kv.head_dim(), BT = kv.block_tokens();
  const size_t head_off = static_cast<size_t>(kv_head) * BT * HS;
  float mx = -INFINITY;
  for (int t0 = 0; t0 < n_keys; t0 += BT) {
    const float* kb = kv.k(layer, blocks[t0 / BT]) + head_off;
    const int nt = n_keys - t0 < BT ? n_keys - t0 : BT;
    for (int s = 0; s < nt; ++s) {
      const float v = scale * dot_head(q, kb + static_cast<size_t>(s) * HS, HS);
      scratch[t0 + s] = v;
      mx = v > mx ? v : mx;
    }
  }
  float sum = 0.f;
  for (int t = 0; t < n_keys; ++t) {
    const float e = std::exp(scratch[t] - mx);
    scratch[t] = e;
    sum += e;
  }
  std::memset(out, 0, sizeof(float) * HS);
  for (int t0 = 0; t0 < n_keys; t0 += BT) {
    const float* vb = kv.v(layer, blocks[t0 / BT]) + head_off;
    const int nt = n_keys - t0 < BT ? n_keys - t0 : BT;
    for (int s = 0; s < nt; ++s) {
      const float w = scratch[t0 + s];
      const float* vr = vb + static_cast<size_t>(s) * HS;
      for (int d = 0; d < HS; ++d) out[d] += w * vr[d];
    }
  }
  const float inv = 1.f / sum;
  for (int d = 0; d < HS; ++d) out[d] *= inv;
}

void kv_store(KvCache& kv, int layer, const int32_t* blocks, int pos, const float* k_row, const float* v_row) {
  const int HS = kv.head_dim(), BT = kv.block_tokens(), H = kv.n_kv_head();
  const int block = blocks[pos / BT], slot = pos % BT;
  float* kb = kv.k(layer, block);
  float* vb = kv.v(layer, block);
  for (int h = 0; h < H; ++h) {
    const size_t off = (static_cast<size_t>(h) * BT + slot) * HS;
    std::memcpy(kb + off, k_row + static_cast<size_t>(h) * HS, sizeof(float) * HS);
    std::memcpy(vb + off, v_row + static_cast<size_t>(h) * HS, sizeof(float) * HS);
  }
}

}  // namespace rtx::serve
