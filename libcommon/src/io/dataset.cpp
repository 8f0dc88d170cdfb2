// Token datasets: prepare_dataset (text -> train.bin/val.bin/meta.json, nanoGPT's layout),
// Dataset (mmap + validation at open) and the stateless Philox batch sampler.
#include "rtx/io/dataset.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "rtx/core/error.hpp"
#include "rtx/core/hash.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/io/artifact.hpp"
#include "rtx/io/atomic_file.hpp"
#include "tokenizer_internal.hpp"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "rtx datasets are read by mapping little-endian uint16 files directly: a little-endian host is required"
#endif

namespace fs = std::filesystem;

namespace rtx::io {
namespace {

std::string to_uint16_le(const std::vector<int32_t>& ids) {
  std::string out(ids.size() * 2, '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto v = static_cast<uint16_t>(ids[i]);
    out[2 * i] = static_cast<char>(v & 0xFF);
    out[2 * i + 1] = static_cast<char>(v >> 8);
  }
  return out;
}

}  // namespace

PrepareResult prepare_dataset(const std::string& input, const std::string& tokenizer_kind, const std::string& gpt2_dir,
                              const std::string& out_dir) {
  if (tokenizer_kind != "char" && tokenizer_kind != "gpt2")
    throw Error(ErrorCategory::Usage, "unknown tokenizer '" + tokenizer_kind + "'", "--tokenizer",
                "use --tokenizer char or --tokenizer gpt2");
  const std::string text = read_text_file(input);
  if (text.empty())
    throw Error(ErrorCategory::Input, "the input text is empty", input, "give a non-empty UTF-8 text file");
  const auto cps = detail::decode_utf8(text, input);

  std::unique_ptr<Tokenizer> tok =
      tokenizer_kind == "char" ? make_char_tokenizer_from_text(text) : load_gpt2_tokenizer(gpt2_dir);
  if (tok->vocab_size() > 65536)
    throw Error(ErrorCategory::Input,
                "vocabulary of " + std::to_string(tok->vocab_size()) + " tokens does not fit uint16 ids (max 65536)",
                input, "use a text with fewer distinct characters or a smaller vocabulary");

  // nanoGPT: n = len(data); train = data[:int(n*0.9)], counted in characters (code points).
  const auto n = static_cast<int64_t>(cps.size());
  const auto split = static_cast<int64_t>(static_cast<double>(n) * 0.9);
  const size_t split_byte = split < n ? cps[static_cast<size_t>(split)].byte : text.size();
  const std::string_view all(text);
  const std::vector<int32_t> train = tok->encode(all.substr(0, split_byte));
  const std::vector<int32_t> val = tok->encode(all.substr(split_byte));

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec || !fs::is_directory(out_dir))
    throw Error(ErrorCategory::Environment,
                "cannot create the output directory: " + (ec ? ec.message() : std::string("not a directory")), out_dir);

  nlohmann::json meta;
  meta["schema"] = schema_id("dataset", 1);
  meta["tokenizer"] = tok->to_json();
  meta["vocab_size"] = tok->vocab_size();
  meta["train_tokens"] = static_cast<int64_t>(train.size());
  meta["val_tokens"] = static_cast<int64_t>(val.size());
  meta["dtype"] = "uint16";
  const std::string src_path = input == "-" ? std::string("-") : fs::absolute(input).lexically_normal().string();
  meta["source"] = {{"path", src_path}, {"bytes", static_cast<int64_t>(text.size())}, {"sha256", sha256_hex(text)}};

  // Remove an old meta.json first, write the splits, meta.json last: a directory with a
  // meta.json has complete, matching splits (a failure in between leaves no meta.json, and
  // Dataset refuses the directory instead of pairing new splits with old metadata).
  {
    std::error_code ec;
    std::filesystem::remove(out_dir + "/meta.json", ec);
    if (ec) throw_env("cannot remove the old meta.json: " + ec.message(), out_dir + "/meta.json");
  }
  atomic_write_file(out_dir + "/train.bin", to_uint16_le(train));
  atomic_write_file(out_dir + "/val.bin", to_uint16_le(val));
  write_artifact(out_dir + "/meta.json", meta);

  PrepareResult r;
  r.train_tokens = static_cast<int64_t>(train.size());
  r.val_tokens = static_cast<int64_t>(val.size());
  r.vocab_size = tok->vocab_size();
  return r;
}

uint64_t sample_offset(uint64_t seed, uint64_t subseq, uint64_t row, uint64_t range) {
  if (range == 0) throw Error(ErrorCategory::Usage, "sample_offset: empty range", "range");
  if (row >> 32) throw Error(ErrorCategory::Usage, "sample_offset: row must be below 2^32", "row");
  auto word = [&](uint64_t j) { return philox_u32(seed, subseq, (j << 32) | row); };
  if (range == (uint64_t{1} << 32)) return word(0);
  if (range < (uint64_t{1} << 32)) {
    const auto r = static_cast<uint32_t>(range);
    uint64_t j = 0;
    uint64_t m = static_cast<uint64_t>(word(j++)) * r;
    if (static_cast<uint32_t>(m) < r) {
      const uint32_t t = static_cast<uint32_t>(0u - r) % r;  // (2^32 - r) mod r
      while (static_cast<uint32_t>(m) < t) m = static_cast<uint64_t>(word(j++)) * r;
    }
    return m >> 32;
  }
  uint64_t j = 0;
  auto draw64 = [&]() {
    const uint64_t hi = word(j), lo = word(j + 1);
    j += 2;
    return (hi << 32) | lo;
  };
  unsigned __int128 m = static_cast<unsigned __int128>(draw64()) * range;
  if (static_cast<uint64_t>(m) < range) {
    const uint64_t t = (uint64_t{0} - range) % range;  // (2^64 - range) mod range
    while (static_cast<uint64_t>(m) < t) m = static_cast<unsigned __int128>(draw64()) * range;
  }
  return static_cast<uint64_t>(m >> 64);
}

// ---- Dataset ------------------------------------------------------------------------------

namespace {
struct Split {
  std::string path;
  const uint16_t* tok = nullptr;  // mmap'ed, n entries
  size_t bytes = 0;
  int64_t n = 0;
};
}  // namespace

struct Dataset::Impl {
  std::string dir;
  nlohmann::json meta;
  std::unique_ptr<Tokenizer> tokenizer;
  int vocab = 0;
  Split split[2];  // train, val

  ~Impl() {
    for (auto& s : split)
      if (s.tok) ::munmap(const_cast<uint16_t*>(s.tok), s.bytes);
  }

  void map(Split& s, int64_t expect_tokens) {
    const int fd = ::open(s.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      if (err == ENOENT)
        throw Error(ErrorCategory::Input, "token file missing", s.path, "run rtx-train prepare to (re)create the dataset");
      throw Error(ErrorCategory::Environment, std::string("cannot open: ") + std::strerror(err), s.path);
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw Error(ErrorCategory::Input, "not a regular file", s.path);
    }
    s.bytes = static_cast<size_t>(st.st_size);
    if (s.bytes % 2 != 0) {
      ::close(fd);
      throw Error(ErrorCategory::Input,
                  "size " + std::to_string(s.bytes) + " B is odd: not a file of uint16 token ids (truncated?)", s.path,
                  "re-run rtx-train prepare");
    }
    s.n = static_cast<int64_t>(s.bytes / 2);
    if (s.n != expect_tokens) {
      ::close(fd);
      throw Error(ErrorCategory::Input,
                  "holds " + std::to_string(s.n) + " tokens but meta.json says " + std::to_string(expect_tokens),
                  s.path, "the dataset directory is inconsistent: re-run rtx-train prepare");
    }
    if (s.bytes > 0) {
      void* p = ::mmap(nullptr, s.bytes, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        throw Error(ErrorCategory::Environment, std::string("mmap failed: ") + std::strerror(err), s.path);
      }
      s.tok = static_cast<const uint16_t*>(p);
    }
    ::close(fd);
    for (int64_t i = 0; i < s.n; ++i)
      if (s.tok[i] >= vocab)
        throw Error(ErrorCategory::Input,
                    "token id " + std::to_string(s.tok[i]) + " at index " + std::to_string(i) +
                        " is outside the vocabulary [0, " + std::to_string(vocab) + ")",
                    s.path, "the file does not belong to this meta.json: re-run rtx-train prepare");
  }
};

Dataset::Dataset(const std::string& dir) : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  d.dir = dir;
  const std::string meta_path = dir + "/meta.json";
  d.meta = read_artifact(meta_path, "dataset", {1});
  validate(d.meta, meta_path,
           {{"/tokenizer", JsonType::Object},
            {"/vocab_size", JsonType::Integer},
            {"/train_tokens", JsonType::Integer},
            {"/val_tokens", JsonType::Integer},
            {"/dtype", JsonType::String}});
  if (d.meta["dtype"] != "uint16")
    throw Error(ErrorCategory::Input, "field 'dtype': expected \"uint16\", got " + d.meta["dtype"].dump(), meta_path);
  d.tokenizer = tokenizer_from_json(d.meta["tokenizer"], meta_path + ": field 'tokenizer'");
  const int64_t vocab = d.meta["vocab_size"].get<int64_t>();
  if (vocab != d.tokenizer->vocab_size())
    throw Error(ErrorCategory::Input,
                "field 'vocab_size' is " + std::to_string(vocab) + " but the tokenizer has " +
                    std::to_string(d.tokenizer->vocab_size()) + " tokens",
                meta_path);
  if (vocab > 65536)
    throw Error(ErrorCategory::Input, "field 'vocab_size' " + std::to_string(vocab) + " does not fit uint16 ids",
                meta_path);
  d.vocab = static_cast<int>(vocab);
  const char* names[2] = {"train", "val"};
  for (int k = 0; k < 2; ++k) {
    const std::string field = std::string(names[k]) + "_tokens";
    const int64_t expect = d.meta[field].get<int64_t>();
    if (expect < 0)
      throw Error(ErrorCategory::Input, "field '" + field + "' is negative", meta_path);
    d.split[k].path = dir + "/" + names[k] + ".bin";
    d.map(d.split[k], expect);
  }
}

Dataset::~Dataset() = default;

const Tokenizer& Dataset::tokenizer() const { return *impl_->tokenizer; }
int Dataset::vocab_size() const { return impl_->vocab; }
int64_t Dataset::tokens(bool val) const { return impl_->split[val ? 1 : 0].n; }
const nlohmann::json& Dataset::meta() const { return impl_->meta; }

void Dataset::sample_batch(bool val, int B, int T, uint64_t seed, uint64_t subseq, int32_t* ids,
                           int32_t* targets) const {
  if (B < 1 || T < 1)
    throw Error(ErrorCategory::Usage,
                "batch shape B=" + std::to_string(B) + ", T=" + std::to_string(T) + ": both must be >= 1",
                "sample_batch");
  if (!ids || !targets) throw Error(ErrorCategory::Usage, "null output buffer", "sample_batch");
  const Split& s = impl_->split[val ? 1 : 0];
  if (s.n < static_cast<int64_t>(T) + 1)
    throw Error(ErrorCategory::Input,
                std::string(val ? "val" : "train") + " split has " + std::to_string(s.n) +
                    " tokens; a batch with T=" + std::to_string(T) + " needs at least " + std::to_string(T + 1),
                s.path, "use a shorter sequence length or a larger text");
  const auto range = static_cast<uint64_t>(s.n - T);
  for (int b = 0; b < B; ++b) {
    const uint64_t off = sample_offset(seed, subseq, static_cast<uint64_t>(b), range);
    const uint16_t* src = s.tok + off;
    int32_t* x = ids + static_cast<size_t>(b) * static_cast<size_t>(T);
    int32_t* y = targets + static_cast<size_t>(b) * static_cast<size_t>(T);
    for (int t = 0; t < T; ++t) {
      x[t] = src[t];
      y[t] = src[t + 1];
    }
  }
}

}  // namespace rtx::io
