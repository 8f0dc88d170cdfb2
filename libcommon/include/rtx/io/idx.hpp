// IDX files (LeCun's MNIST format, also Fashion-MNIST), plain or gzip-compressed: u8 images and
// labels. Not here: any normalisation or dataset splits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rtx::io {

/// An IDX u8 array: dims (big-endian in the file), row-major data.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};

/// Read an IDX file of unsigned bytes (type code 0x08), gzip or plain (zlib's gzread reads both).
/// Throws Error(Input) naming the file for a bad magic, type or rank, a size that does not match
/// the dims, or more than `max_bytes` of data; Error(Environment) when it cannot be opened.
IdxArray read_idx_u8(const std::string& path, uint64_t max_bytes = 1ull << 31);

}  // namespace rtx::io
