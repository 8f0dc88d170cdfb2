// Non-cryptographic and cryptographic hashes, one home each: FNV-1a (32 and 64 bit) for
// checksums and keys, SHA-256 (libsodium's crypto_hash_sha256) as lower-case hex.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rtx {

/// FNV-1a offset bases and primes (Fowler, Noll, Vo; draft-eastlake-fnv, section 2).
inline constexpr uint32_t kFnv1a32Basis = 2166136261u;
inline constexpr uint32_t kFnv1a32Prime = 16777619u;
inline constexpr uint64_t kFnv1a64Basis = 14695981039346656037ull;  // 0xcbf29ce484222325
inline constexpr uint64_t kFnv1a64Prime = 1099511628211ull;         // 0x100000001b3

/// FNV-1a 64-bit over `bytes` bytes at `data`: for each byte h = (h ^ byte) * prime. Pass the
/// previous result as `h` to chain several buffers (the hash of their concatenation).
uint64_t fnv1a64(const void* data, size_t bytes, uint64_t h = kFnv1a64Basis) noexcept;
/// FNV-1a 32-bit, as fnv1a64.
uint32_t fnv1a32(const void* data, size_t bytes, uint32_t h = kFnv1a32Basis) noexcept;
// (No string overloads: with the defaulted `h`, fnv1a64("text", h) would bind to the pointer
// form and read `h` bytes. Pass s.data(), s.size().)

/// SHA-256 (FIPS 180-4) of `bytes` bytes at `data`, as 64 lower-case hex digits.
std::string sha256_hex(const void* data, size_t bytes);
/// SHA-256 of the bytes of `s`, as 64 lower-case hex digits.
inline std::string sha256_hex(std::string_view s) { return sha256_hex(s.data(), s.size()); }

/// Streaming SHA-256: update() any number of times, then hex() once (the digest of everything
/// passed, as 64 lower-case hex digits). hex() a second time throws rtx::Error(Internal).
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t bytes);
  std::string hex();

 private:
  alignas(64) unsigned char state_[256];  // crypto_hash_sha256_state (checked in hash.cpp)
  bool done_ = false;
};

}  // namespace rtx
