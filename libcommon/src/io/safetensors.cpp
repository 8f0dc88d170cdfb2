// safetensors writer (streaming, atomic, SHA-256 in __metadata__) and validating mmap reader.
// Format: huggingface/safetensors README ("Format" section).
#include "rtx/io/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "io/mapped_file.hpp"
#include "rtx/core/dtype.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/hash.hpp"
#include "rtx/io/atomic_file.hpp"

namespace rtx::io {

namespace {

constexpr uint64_t kMaxHeader = 100'000'000;  // the reference implementation's MAX_HEADER_SIZE
constexpr size_t kChunk = size_t(4) << 20;

struct DTypeRow {
  StDType t;
  const char* name;
  size_t size;
};
constexpr DTypeRow kDTypes[] = {
    {StDType::BOOL, "BOOL", 1}, {StDType::U8, "U8", 1},     {StDType::I8, "I8", 1},
    {StDType::F8_E5M2, "F8_E5M2", 1}, {StDType::F8_E4M3, "F8_E4M3", 1}, {StDType::I16, "I16", 2},
    {StDType::U16, "U16", 2},   {StDType::F16, "F16", 2},   {StDType::BF16, "BF16", 2},
    {StDType::I32, "I32", 4},   {StDType::U32, "U32", 4},   {StDType::F32, "F32", 4},
    {StDType::I64, "I64", 8},   {StDType::U64, "U64", 8},   {StDType::F64, "F64", 8},
};

[[noreturn]] void bad(const std::string& where, const std::string& msg) {
  throw Error(ErrorCategory::Input, msg, where, "the file is truncated, corrupt or not a safetensors file");
}

// numel of `shape` times `elem`, or false on overflow.
bool checked_bytes(const std::vector<int64_t>& shape, size_t elem, uint64_t* out) {
  uint64_t n = elem;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  *out = n;
  return true;
}

/// 64 hex zeros: the fixed-width slot the streamed SHA-256 is patched into once the data is written.
std::string zero_digest_hex() { return std::string(64, '0'); }

}  // namespace

size_t st_dtype_size(StDType t) noexcept {
  for (const auto& r : kDTypes)
    if (r.t == t) return r.size;
  return 0;
}

const char* st_dtype_name(StDType t) noexcept {
  for (const auto& r : kDTypes)
    if (r.t == t) return r.name;
  return "?";
}

StDType parse_st_dtype(const std::string& name, const std::string& where) {
  for (const auto& r : kDTypes)
    if (name == r.name) return r.t;
  throw Error(ErrorCategory::Input, "unknown safetensors dtype \"" + name + "\"", where,
              "expected one of BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 BF16 I32 U32 F32 I64 U64 F64");
}

uint64_t SafetensorsTensorInfo::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

// ---- writer ------------------------------------------------------------------------------

void write_safetensors(const std::string& path, const std::vector<SafetensorsSource>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  if (metadata.count(kSafetensorsSha256Key))
    throw Error(ErrorCategory::Usage, std::string("metadata key \"") + kSafetensorsSha256Key + "\" is reserved", path,
                "the writer adds it itself");
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  for (const auto& [k, v] : metadata) meta[k] = v;
  meta[kSafetensorsSha256Key] = zero_digest_hex();
  header["__metadata__"] = meta;

  std::set<std::string> names;
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    const std::string where = path + ": tensor \"" + t.name + "\"";
    if (t.name.empty()) throw Error(ErrorCategory::Usage, "empty tensor name", path);
    if (t.name == "__metadata__") throw Error(ErrorCategory::Usage, "\"__metadata__\" is not a tensor name", path);
    if (!names.insert(t.name).second) throw Error(ErrorCategory::Usage, "duplicate tensor name", where);
    uint64_t nb = 0;
    if (!checked_bytes(t.shape, st_dtype_size(t.dtype), &nb))
      throw Error(ErrorCategory::Usage, "negative extent or size overflow in shape", where);
    if (nb > 0 && !t.data && !t.fill) throw Error(ErrorCategory::Usage, "no data pointer and no fill function", where);
    nlohmann::ordered_json e;
    e["dtype"] = st_dtype_name(t.dtype);
    e["shape"] = t.shape;
    e["data_offsets"] = {offset, offset + nb};
    header[t.name] = e;
    sizes.push_back(nb);
    offset += nb;
  }

  std::string hdr = header.dump();
  const std::string needle = std::string("\"") + kSafetensorsSha256Key + "\":\"" + zero_digest_hex() + "\"";
  const size_t at = hdr.find(needle);
  RTX_CHECK(at != std::string::npos, "checksum slot missing from the header");
  const size_t sha_pos = 8 + at + needle.size() - 65;  // first hex digit
  hdr.append((8 - hdr.size() % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(hdr.size()) >> (8 * i));

  AtomicFileWriter out(path);
  out.write(len, 8);
  out.write(hdr);
  Sha256 st;
  std::vector<uint8_t> buf;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    for (uint64_t off = 0; off < sizes[i]; off += kChunk) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, sizes[i] - off));
      const uint8_t* p;
      if (t.fill) {
        buf.resize(kChunk);
        t.fill(off, buf.data(), n);
        p = buf.data();
      } else {
        p = static_cast<const uint8_t*>(t.data) + off;
      }
      st.update(p, n);
      out.write(p, n);
    }
  }
  const std::string digest = st.hex();
  out.write_at(sha_pos, digest.data(), digest.size());
  out.commit();
}

// ---- reader ------------------------------------------------------------------------------

SafetensorsFile SafetensorsFile::open(const std::string& path, bool verify_checksum) {
  SafetensorsFile f;
  auto m = detail::MappedBytes::map_file(path);
  f.base_ = m->data();
  f.size_ = m->size();
  f.bytes_ = m;
  f.path_ = path;
  f.init(verify_checksum);
  return f;
}

SafetensorsFile SafetensorsFile::parse(std::string bytes, const std::string& where, bool verify_checksum) {
  SafetensorsFile f;
  auto m = detail::MappedBytes::from_string(std::move(bytes));
  f.base_ = m->data();
  f.size_ = m->size();
  f.bytes_ = m;
  f.path_ = where;
  f.init(verify_checksum);
  return f;
}

void SafetensorsFile::init(bool verify_checksum) {
  const std::string& P = path_;
  if (size_ < 8) bad(P, "file is " + std::to_string(size_) + " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(base_[i]) << (8 * i);
  if (n > kMaxHeader) bad(P, "header length " + std::to_string(n) + " exceeds the 100 MB limit");
  if (n > size_ - 8)
    bad(P, "header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(size_) +
               " bytes): truncated");
  if (n < 2 || base_[8] != '{') bad(P, "header does not start with '{'");
  data_start_ = 8 + n;
  data_size_ = size_ - data_start_;

  // Parse with a callback that rejects duplicate top-level names (JSON objects would keep one).
  std::set<std::string> seen;
  std::string dup;
  auto cb = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    if (ev == nlohmann::json::parse_event_t::key && depth == 1) {
      const std::string k = parsed.get<std::string>();
      if (!seen.insert(k).second && dup.empty()) dup = k;
    }
    return true;
  };
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(base_ + 8, base_ + 8 + n, cb);
  } catch (const nlohmann::json::exception& e) {
    bad(P, std::string("header is not valid JSON: ") + e.what());
  }
  if (!dup.empty()) bad(P, "header names \"" + dup + "\" twice");
  if (!h.is_object()) bad(P, "header is not a JSON object");

  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const auto& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) bad(P, "__metadata__ is not an object");
      for (auto m = e.begin(); m != e.end(); ++m) {
        if (!m.value().is_string()) bad(P, "__metadata__[\"" + m.key() + "\"] is not a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = P + ": tensor \"" + name + "\"";
    if (!e.is_object()) bad(where, "entry is not an object");
    for (auto f = e.begin(); f != e.end(); ++f)
      if (f.key() != "dtype" && f.key() != "shape" && f.key() != "data_offsets") bad(where, "unknown field \"" + f.key() + "\"");
    if (!e.contains("dtype") || !e["dtype"].is_string()) bad(where, "field dtype missing or not a string");
    if (!e.contains("shape") || !e["shape"].is_array()) bad(where, "field shape missing or not an array");
    if (!e.contains("data_offsets") || !e["data_offsets"].is_array() || e["data_offsets"].size() != 2)
      bad(where, "field data_offsets missing or not a pair");
    SafetensorsTensorInfo ti;
    ti.name = name;
    ti.dtype = parse_st_dtype(e["dtype"].get<std::string>(), where + ": field dtype");
    for (const auto& d : e["shape"]) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
        bad(where, "field shape holds " + d.dump() + ", expected non-negative integers");
      const uint64_t v = d.get<uint64_t>();
      if (v > static_cast<uint64_t>(INT64_MAX)) bad(where, "field shape extent too large");
      ti.shape.push_back(static_cast<int64_t>(v));
    }
    for (int k = 0; k < 2; ++k) {
      const auto& o = e["data_offsets"][static_cast<size_t>(k)];
      if (!o.is_number_unsigned() && !(o.is_number_integer() && o.get<int64_t>() >= 0))
        bad(where, "field data_offsets holds " + o.dump() + ", expected non-negative integers");
    }
    ti.begin = e["data_offsets"][0].get<uint64_t>();
    ti.end = e["data_offsets"][1].get<uint64_t>();
    if (ti.begin > ti.end) bad(where, "data_offsets begin > end");
    if (ti.end > data_size_)
      bad(where, "data_offsets end " + std::to_string(ti.end) + " is past the data section (" +
                     std::to_string(data_size_) + " bytes): truncated");
    uint64_t nb = 0;
    if (!checked_bytes(ti.shape, st_dtype_size(ti.dtype), &nb)) bad(where, "shape size overflows");
    if (nb != ti.end - ti.begin)
      bad(where, "shape x dtype size is " + std::to_string(nb) + " bytes but data_offsets span " +
                     std::to_string(ti.end - ti.begin));
    tensors_.push_back(std::move(ti));
  }
  std::stable_sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expect = 0;
  for (const auto& t : tensors_) {
    if (t.begin != expect)
      bad(P + ": tensor \"" + t.name + "\"", t.begin < expect ? "data overlaps the previous tensor"
                                                              : "gap of " + std::to_string(t.begin - expect) +
                                                                    " bytes before this tensor's data");
    expect = t.end;
  }
  if (expect != data_size_)
    bad(P, "data section has " + std::to_string(data_size_ - expect) + " bytes not covered by any tensor");
  for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;

  auto sha = metadata_.find(kSafetensorsSha256Key);
  if (sha != metadata_.end()) {
    const std::string& want = sha->second;
    const bool hex64 = want.size() == 64 && std::all_of(want.begin(), want.end(), [](char c) {
                         return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                       });
    if (!hex64) bad(P + ": __metadata__[\"rtx.sha256\"]", "not 64 lower-case hex digits");
    if (verify_checksum) {
      const std::string got = rtx::sha256_hex(base_ + data_start_, static_cast<size_t>(data_size_));
      if (got != want)
        bad(P, "SHA-256 of the data section is " + got + " but __metadata__[\"rtx.sha256\"] says " + want +
                   ": the tensor data is corrupt");
    }
  }
}

bool SafetensorsFile::contains(const std::string& name) const { return index_.count(name) != 0; }

const SafetensorsTensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end())
    throw Error(ErrorCategory::Input, "no tensor \"" + name + "\" in the file", path_,
                "the file has " + std::to_string(tensors_.size()) + " tensors; check the name");
  return tensors_[it->second];
}

const uint8_t* SafetensorsFile::data(const std::string& name) const {
  return base_ + data_start_ + info(name).begin;
}

void SafetensorsFile::read_f32(const std::string& name, float* dst, size_t n) const {
  const auto& ti = info(name);
  const std::string where = path_ + ": tensor \"" + name + "\"";
  if (ti.numel() != n)
    throw Error(ErrorCategory::Input, "has " + std::to_string(ti.numel()) + " elements, expected " + std::to_string(n), where);
  const uint8_t* p = base_ + data_start_ + ti.begin;
  switch (ti.dtype) {
    case StDType::F32:
      if (n) std::memcpy(dst, p, n * 4);
      return;
    case StDType::F16:
    case StDType::BF16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8));
        dst[i] = ti.dtype == StDType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      return;
    default:
      throw Error(ErrorCategory::Input, std::string("dtype ") + st_dtype_name(ti.dtype) + " cannot be read as f32", where,
                  "read the raw bytes with data()");
  }
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name) const {
  std::vector<float> out(static_cast<size_t>(info(name).numel()));
  read_f32(name, out.data(), out.size());
  return out;
}

}  // namespace rtx::io
