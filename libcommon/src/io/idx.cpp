// The IDX reader (MNIST / Fashion-MNIST files), gzip through zlib.
#include "rtx/io/idx.hpp"

#include <zlib.h>

#include <memory>

#include "rtx/core/error.hpp"

namespace rtx::io {

IdxArray read_idx_u8(const std::string& path, uint64_t max_bytes) {
  std::unique_ptr<gzFile_s, int (*)(gzFile)> f(gzopen(path.c_str(), "rb"), gzclose);
  if (!f) throw_env("cannot open IDX file " + path, path, "check the path (e.g. $RTX_DATA/fashion-mnist)");
  unsigned char head[4];
  if (gzread(f.get(), head, 4) != 4) throw_input("IDX file too short for its magic", path);
  if (head[0] != 0 || head[1] != 0) throw_input("not an IDX file (magic bytes 0,0 expected)", path);
  if (head[2] != 0x08) throw_input("IDX type code " + std::to_string(head[2]) + " is not 0x08 (unsigned byte)", path);
  const int rank = head[3];
  if (rank < 1 || rank > 4) throw_input("IDX rank " + std::to_string(rank) + " outside 1..4", path);
  IdxArray a;
  uint64_t n = 1;
  for (int d = 0; d < rank; ++d) {
    unsigned char b[4];
    if (gzread(f.get(), b, 4) != 4) throw_input("IDX file too short for its dims", path);
    const uint64_t v = (uint64_t{b[0]} << 24) | (uint64_t{b[1]} << 16) | (uint64_t{b[2]} << 8) | b[3];
    a.dims.push_back(static_cast<int64_t>(v));
    n *= v;
    if (n > max_bytes) throw_input("IDX data of more than " + std::to_string(max_bytes) + " bytes", path);
  }
  a.data.resize(n);
  uint64_t got = 0;
  while (got < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<uint64_t>(n - got, 1u << 30));
    const int r = gzread(f.get(), a.data.data() + got, chunk);
    if (r <= 0) break;
    got += static_cast<uint64_t>(r);
  }
  if (got != n) throw_input("IDX data has " + std::to_string(got) + " bytes, dims say " + std::to_string(n), path);
  unsigned char extra;
  if (gzread(f.get(), &extra, 1) != 0) throw_input("IDX file has bytes after its data", path);
  return a;
}

}  // namespace rtx::io
