// Paged causal attention for one query row (rtx/serve/attention.hpp).
#include "rtx/serve/attention.hpp"

#include <cmath>
#include <cstring>

namespace rtx::serve {

namespace {

/// q . k over n floats: 16 partial sums (lane j: elements j, j+16, ...) then a fixed fold.
/// The lane loop vectorises; the order is the same for every call of the same n.
inline float dot16(const float* __restrict a, const float* __restrict b, int n) {
  float acc[16] = {};
  int d = 0;
  for (; d + 16 <= n; d += 16)
    for (int j = 0; j < 16; ++j) acc[j] += a[d + j] * b[d + j];
  for (int j = 0; d + j < n; ++j) acc[j] += a[d + j] * b[d + j];
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
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
      const float v = scale * dot16(q, kb + static_cast<size_t>(s) * HS, HS);
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
