// FNV-1a and SHA-256 (hash.hpp).
#include "rtx/core/hash.hpp"

#include <sodium.h>

#include <algorithm>

#include "rtx/core/error.hpp"

namespace rtx {

static_assert(sizeof(crypto_hash_sha256_state) <= 256, "Sha256::state_ is too small for libsodium's state");

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t h) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * kFnv1a64Prime;
  return h;
}

uint32_t fnv1a32(const void* data, size_t bytes, uint32_t h) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * kFnv1a32Prime;
  return h;
}

namespace {
std::string to_hex(const unsigned char* h, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[h[i] >> 4];
    out[2 * i + 1] = digits[h[i] & 15];
  }
  return out;
}
crypto_hash_sha256_state* state(unsigned char* raw) { return reinterpret_cast<crypto_hash_sha256_state*>(raw); }
}  // namespace

std::string sha256_hex(const void* data, size_t bytes) {
  Sha256 s;
  s.update(data, bytes);
  return s.hex();
}

Sha256::Sha256() {
  // Idempotent and thread-safe; libsodium asks for it before any other call.
  if (sodium_init() < 0) throw Error(ErrorCategory::Environment, "libsodium failed to initialise", "rtx::Sha256");
  crypto_hash_sha256_init(state(state_));
}

void Sha256::update(const void* data, size_t bytes) {
  RTX_CHECK(!done_, "Sha256::update after hex()");
  // crypto_hash_sha256_update takes any length; chunks keep each call's length in range on
  // every platform (unsigned long long is at least 64 bits, so this is a formality).
  const auto* p = static_cast<const unsigned char*>(data);
  constexpr size_t kChunk = size_t{1} << 30;
  for (size_t off = 0; off < bytes; off += kChunk)
    crypto_hash_sha256_update(state(state_), p + off, std::min(kChunk, bytes - off));
}

std::string Sha256::hex() {
  RTX_CHECK(!done_, "Sha256::hex called twice");
  done_ = true;
  unsigned char h[crypto_hash_sha256_BYTES];
  crypto_hash_sha256_final(state(state_), h);
  return to_hex(h, sizeof h);
}

}  // namespace rtx
