// CpuSampler: perf_event_open(2) task-clock sampling of a child process tree with kernel
// frame-pointer call chains, ring buffers read while it runs, addresses symbolized with
// elfutils libdwfl after it exits. Record layouts: include/uapi/linux/perf_event.h.
#include "rtx/trace/cpu_sampler.hpp"

#include <cxxabi.h>
#include <elfutils/libdwfl.h>
#include <gelf.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <unordered_map>

#include "rtx/telemetry/bus.hpp"
#include "rtx/trace/folded.hpp"

namespace rtx::trace {

unsigned max_sample_rate(const std::string& path) {
  std::ifstream in(path);
  long v = 0;
  if (in >> v && v > 0) return static_cast<unsigned>(std::min<long>(v, 1000000000L));
  return 100000;
}

void check_sample_freq(unsigned hz) {
  const unsigned mx = max_sample_rate();
  if (hz == 0 || hz > mx)
    throw_usage("--freq " + std::to_string(hz) + " is out of range: the sampling frequency must be 1.." +
                    std::to_string(mx) + " Hz (kernel.perf_event_max_sample_rate)",
                "--freq", "99 Hz (the default) keeps the overhead near 1%; 999 Hz for short programs");
}

Error perf_open_error(int err, const std::string& paranoid_path) {
  const std::string what = std::string("perf_event_open failed: ") + std::strerror(err);
  if (err == EACCES || err == EPERM) {
    std::ifstream in(paranoid_path);
    std::string level;
    if (!(in >> level)) level = "unreadable";
    char* end = nullptr;
    const long v = std::strtol(level.c_str(), &end, 10);
    if (end && *end == '\0' && !level.empty() && v <= 2)
      return Error(ErrorCategory::Environment,
                   what + "; kernel.perf_event_paranoid is " + level +
                       ", which allows sampling your own program (<= 2), so something else refuses the call",
                   "perf_event_open",
                   "a container's seccomp profile or a security module (SELinux, AppArmor) may block "
                   "perf_event_open: allow it there, or run with CAP_PERFMON");
    return Error(ErrorCategory::Environment,
                 what + "; kernel.perf_event_paranoid is " + level +
                     " and sampling your own program in user space needs it <= 2 (or CAP_PERFMON / root)",
                 "kernel.perf_event_paranoid",
                 "run `sudo sysctl kernel.perf_event_paranoid=2` (in a container the runtime's seccomp "
                 "profile must also allow perf_event_open)");
  }
  if (err == ENOENT || err == ENOSYS || err == EOPNOTSUPP || err == ENODEV)
    return Error(ErrorCategory::Environment, what + ": this kernel has no software perf events (CONFIG_PERF_EVENTS)",
                 "perf_event_open", "run on a kernel with perf events, or without --cpu-sample");
  return Error(ErrorCategory::Environment, what, "perf_event_open",
               err == EMFILE ? "raise the open file limit (ulimit -n): one counter per CPU is opened" : "");
}

namespace {

int64_t clock_ns(clockid_t id) {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

/// One record of the ring buffers, parsed.
struct Rec {
  enum Kind : uint8_t { Sample, Mmap, Comm, Fork, Exit } kind = Sample;
  bool exec = false;                 // Comm: the exec of a new program
  uint32_t pid = 0, tid = 0, ppid = 0;
  uint64_t time = 0;                 // CLOCK_MONOTONIC ns
  uint64_t start = 0, len = 0, pgoff = 0;  // Mmap
  std::string name;                  // Mmap file name, Comm text
  std::vector<uint64_t> ips;         // Sample: user call chain, leaf first
};

struct Mapping {
  uint64_t start, end, pgoff;
  std::string file;
};

/// An ELF file opened with libdwfl at bias 0 (symbols at their link-time addresses), and its
/// PT_LOAD segments to turn a file offset into such an address.
struct ElfFile {
  Dwfl* dwfl = nullptr;
  Dwfl_Module* mod = nullptr;
  GElf_Addr bias = 0;
  struct Seg { uint64_t off, filesz, vaddr; };
  std::vector<Seg> segs;
  ~ElfFile() {
    if (dwfl) dwfl_end(dwfl);
  }
};

std::string demangle(const char* s) {
  int status = 0;
  char* d = abi::__cxa_demangle(s, nullptr, nullptr, &status);
  std::string r = status == 0 && d ? d : s;
  std::free(d);
  return r;
}

std::string basename_of(const std::string& p) { return p.substr(p.find_last_of('/') + 1); }

/// Test hook: RTX_TRACE_SAMPLER_ERRNO=N makes perf_event_open fail with errno N, so the
/// error path of a kernel that refuses can be checked where the tests run as root.
int injected_errno() {
  const char* e = std::getenv("RTX_TRACE_SAMPLER_ERRNO");
  return e && *e ? std::atoi(e) : 0;
}

}  // namespace

struct CpuSampler::Impl {
  struct Ring {
    int fd = -1;
    void* base = MAP_FAILED;
    size_t len = 0;
  };
  std::vector<Ring> rings;
  size_t page = 4096, data_size = 0;
  unsigned hz = 0;
  int64_t mono_to_unix = 0;
  std::vector<Rec> recs;
  uint64_t lost = 0;
  std::vector<char> scratch;

  ~Impl() {
    for (Ring& r : rings) {
      if (r.base != MAP_FAILED) ::munmap(r.base, r.len);
      if (r.fd >= 0) ::close(r.fd);
    }
  }

  void parse(const perf_event_header* h) {
    const char* p = reinterpret_cast<const char*>(h + 1);
    const char* end = reinterpret_cast<const char*>(h) + h->size;
    auto u32 = [&](uint32_t& v) {
      if (p + 4 <= end) std::memcpy(&v, p, 4);
      p += 4;
    };
    auto u64 = [&](uint64_t& v) {
      if (p + 8 <= end) std::memcpy(&v, p, 8);
      p += 8;
    };
    // sample_id_all trailer of non-sample records: {u32 pid, tid; u64 time} (TID | TIME).
    auto trailer_time = [&]() -> uint64_t {
      uint64_t t = 0;
      if (h->size >= sizeof *h + 16) std::memcpy(&t, end - 8, 8);
      return t;
    };
    Rec r;
    switch (h->type) {
      case PERF_RECORD_SAMPLE: {
        u32(r.pid);
        u32(r.tid);
        u64(r.time);
        uint64_t nr = 0;
        u64(nr);
        nr = std::min<uint64_t>(nr, static_cast<uint64_t>(end - p) / 8);
        r.ips.reserve(nr);
        for (uint64_t i = 0; i < nr; ++i) {
          uint64_t ip = 0;
          u64(ip);
          if (ip >= static_cast<uint64_t>(PERF_CONTEXT_MAX)) continue;  // context markers
          r.ips.push_back(ip);
        }
        r.kind = Rec::Sample;
        break;
      }
      case PERF_RECORD_MMAP2: {
        u32(r.pid);
        u32(r.tid);
        u64(r.start);
        u64(r.len);
        u64(r.pgoff);
        p += 4 + 4 + 8 + 8 + 4 + 4;  // maj, min, ino, ino_generation, prot, flags
        if (p >= end) return;
        r.name.assign(p, strnlen(p, static_cast<size_t>(end - p)));
        r.time = trailer_time();
        r.kind = Rec::Mmap;
        break;
      }
      case PERF_RECORD_COMM: {
        u32(r.pid);
        u32(r.tid);
        if (p >= end) return;
        r.name.assign(p, strnlen(p, static_cast<size_t>(end - p)));
        r.exec = (h->misc & PERF_RECORD_MISC_COMM_EXEC) != 0;
        r.time = trailer_time();
        r.kind = Rec::Comm;
        break;
      }
      case PERF_RECORD_FORK: {
        u32(r.pid);
        u32(r.ppid);
        u32(r.tid);
        p += 4;
        u64(r.time);
        r.kind = Rec::Fork;
        break;
      }
      case PERF_RECORD_LOST: {
        uint64_t id = 0, n = 0;
        u64(id);
        u64(n);
        lost += n;
        return;
      }
      default:
        return;
    }
    recs.push_back(std::move(r));
  }

  void drain() {
    for (Ring& r : rings) {
      auto* meta = static_cast<perf_event_mmap_page*>(r.base);
      const char* data = static_cast<const char*>(r.base) + page;
      const uint64_t head = __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE);
      uint64_t tail = meta->data_tail;
      while (tail + sizeof(perf_event_header) <= head) {
        perf_event_header hdr;
        const size_t at = tail % data_size;
        // A record may wrap around the end of the buffer: copy it out in two parts.
        auto copy = [&](void* dst, size_t from, size_t n) {
          const size_t first = std::min(n, data_size - from);
          std::memcpy(dst, data + from, first);
          if (n > first) std::memcpy(static_cast<char*>(dst) + first, data, n - first);
        };
        copy(&hdr, at, sizeof hdr);
        if (hdr.size < sizeof hdr || tail + hdr.size > head) break;
        scratch.resize(hdr.size);
        copy(scratch.data(), at, hdr.size);
        parse(reinterpret_cast<const perf_event_header*>(scratch.data()));
        tail += hdr.size;
      }
      __atomic_store_n(&meta->data_tail, tail, __ATOMIC_RELEASE);
    }
  }
};

CpuSampler::CpuSampler(pid_t pid, unsigned hz, size_t ring_pages) : impl_(std::make_unique<Impl>()) {
  check_sample_freq(hz);
  if (ring_pages == 0 || (ring_pages & (ring_pages - 1)) != 0)
    throw_internal("ring buffer pages must be a power of two", "CpuSampler");
  Impl& m = *impl_;
  m.hz = hz;
  m.page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  m.data_size = ring_pages * m.page;
  m.mono_to_unix = static_cast<int64_t>(telemetry::unix_now_ns()) - clock_ns(CLOCK_MONOTONIC);
  perf_event_attr a{};
  a.size = sizeof a;
  a.type = PERF_TYPE_SOFTWARE;
  a.config = PERF_COUNT_SW_TASK_CLOCK;  // CPU time of the task: idle threads take no samples
  a.freq = 1;
  a.sample_freq = hz;
  a.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CALLCHAIN;
  a.disabled = 1;
  a.enable_on_exec = 1;
  a.inherit = 1;
  a.exclude_kernel = 1;
  a.exclude_hv = 1;
  a.exclude_callchain_kernel = 1;
  a.mmap = 1;
  a.mmap2 = 1;
  a.comm = 1;
  a.comm_exec = 1;
  a.task = 1;
  a.sample_id_all = 1;
  a.use_clockid = 1;
  a.clockid = CLOCK_MONOTONIC;
  const int fake = injected_errno();
  const long ncpu = ::sysconf(_SC_NPROCESSORS_CONF);
  for (long cpu = 0; cpu < std::max(1L, ncpu); ++cpu) {
    // An inherited per-task counter cannot be mapped with cpu = -1 (the kernel refuses one
    // buffer shared by all of a tree's threads): one counter and ring per CPU, like perf record.
    const int fd = fake ? (errno = fake, -1)
                        : static_cast<int>(::syscall(SYS_perf_event_open, &a, pid, static_cast<int>(cpu), -1,
                                                     PERF_FLAG_FD_CLOEXEC));
    if (fd < 0) {
      if (errno == ENODEV && cpu > 0) continue;  // an offline CPU
      throw perf_open_error(errno);
    }
    Impl::Ring r;
    r.fd = fd;
    r.len = (ring_pages + 1) * m.page;
    r.base = ::mmap(nullptr, r.len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (r.base == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw_env(std::string("cannot map the perf ring buffer: ") + std::strerror(err), "perf_event_open",
                "raise kernel.perf_event_mlock_kb or the locked-memory limit (ulimit -l)");
    }
    m.rings.push_back(r);
  }
}

CpuSampler::~CpuSampler() = default;

void CpuSampler::poll(int timeout_ms) {
  std::vector<pollfd> fds;
  for (const auto& r : impl_->rings) fds.push_back({r.fd, POLLIN, 0});
  ::poll(fds.data(), fds.size(), timeout_ms);  // EINTR (a forwarded signal) just drains early
  impl_->drain();
}

CpuProfile CpuSampler::finish() {
  Impl& m = *impl_;
  for (const auto& r : m.rings) ::ioctl(r.fd, PERF_EVENT_IOC_DISABLE, 0);
  m.drain();
  CpuProfile prof;
  prof.freq_hz = m.hz;
  prof.lost = m.lost;
  // Replay in time order (each CPU's ring is ordered, the rings are not): forks copy the
  // parent's mappings, an exec drops them, mmaps add, samples are resolved against them.
  std::stable_sort(m.recs.begin(), m.recs.end(), [](const Rec& x, const Rec& y) { return x.time < y.time; });
  std::unordered_map<uint32_t, std::vector<Mapping>> maps;
  std::unordered_map<std::string, std::unique_ptr<ElfFile>> elves;
  std::unordered_map<std::string, uint32_t> frame_ids;
  auto intern = [&](std::string name) -> uint32_t {
    for (char& c : name)  // folded text separates frames by ';' and lines by '\n'
      if (c == ';') c = ':';
      else if (c == '\n' || c == '\r') c = ' ';
    auto it = frame_ids.find(name);
    if (it != frame_ids.end()) return it->second;
    const auto id = static_cast<uint32_t>(prof.frames.size());
    prof.frames.push_back(name);
    frame_ids.emplace(std::move(name), id);
    return id;
  };
  static const Dwfl_Callbacks callbacks = {dwfl_build_id_find_elf, dwfl_standard_find_debuginfo,
                                           dwfl_offline_section_address, nullptr};
  auto elf_of = [&](const std::string& file) -> ElfFile& {
    auto& slot = elves[file];
    if (slot) return *slot;
    slot = std::make_unique<ElfFile>();
    ElfFile& ef = *slot;
    ef.dwfl = dwfl_begin(&callbacks);
    if (!ef.dwfl) return ef;
    dwfl_report_begin(ef.dwfl);
    ef.mod = dwfl_report_elf(ef.dwfl, basename_of(file).c_str(), file.c_str(), -1, 0, false);
    dwfl_report_end(ef.dwfl, nullptr, nullptr);
    if (!ef.mod) return ef;
    Elf* elf = dwfl_module_getelf(ef.mod, &ef.bias);
    size_t n = 0;
    if (!elf || elf_getphdrnum(elf, &n) != 0) {
      ef.mod = nullptr;
      return ef;
    }
    for (size_t i = 0; i < n; ++i) {
      GElf_Phdr ph;
      if (gelf_getphdr(elf, static_cast<int>(i), &ph) && ph.p_type == PT_LOAD)
        ef.segs.push_back({ph.p_offset, ph.p_filesz, ph.p_vaddr});
    }
    return ef;
  };
  // Per pid: (ip, is a return address) -> frame; dropped when that pid's mappings change.
  std::unordered_map<uint32_t, std::unordered_map<uint64_t, uint32_t>> frame_cache;
  auto symbolize = [&](uint32_t pid, uint64_t ip, bool return_address) -> uint32_t {
    auto& fc = frame_cache[pid];
    const uint64_t key = ip * 2 + (return_address ? 1 : 0);
    if (auto it = fc.find(key); it != fc.end()) return it->second;
    const uint64_t look = return_address && ip > 0 ? ip - 1 : ip;  // the call, not the next line
    const Mapping* hit = nullptr;
    auto mit = maps.find(pid);
    if (mit != maps.end())
      for (auto it = mit->second.rbegin(); it != mit->second.rend(); ++it)
        if (look >= it->start && look < it->end) {
          hit = &*it;
          break;
        }
    uint32_t id;
    if (!hit) {
      id = intern("[unknown]");
    } else if (hit->file.empty() || hit->file[0] == '[' || hit->file.rfind("//anon", 0) == 0) {
      id = intern(hit->file.empty() || hit->file[0] != '[' ? "[anon]" : hit->file);
    } else {
      const uint64_t off = look - hit->start + hit->pgoff;
      ElfFile& ef = elf_of(hit->file);
      const char* sym = nullptr;
      if (ef.mod)
        for (const auto& s : ef.segs)
          if (off >= s.off && off < s.off + s.filesz) {
            sym = dwfl_module_addrname(ef.mod, s.vaddr + (off - s.off) + ef.bias);
            break;
          }
      char buf[32];
      std::snprintf(buf, sizeof buf, "+0x%llx", static_cast<unsigned long long>(off));
      id = intern(sym ? demangle(sym) : basename_of(hit->file) + buf);
    }
    fc.emplace(key, id);
    return id;
  };
  for (Rec& r : m.recs) {
    switch (r.kind) {
      case Rec::Fork:
        if (r.pid != r.ppid) {
          auto it = maps.find(r.ppid);
          if (it != maps.end()) maps[r.pid] = it->second;
          frame_cache.erase(r.pid);
        }
        break;
      case Rec::Comm:
        if (r.exec) {
          maps[r.pid].clear();
          frame_cache.erase(r.pid);
        }
        prof.comm[r.tid] = r.name;
        break;
      case Rec::Mmap:
        maps[r.pid].push_back({r.start, r.start + r.len, r.pgoff, r.name});
        frame_cache.erase(r.pid);
        break;
      case Rec::Sample: {
        CpuProfile::Sample s;
        s.pid = r.pid;
        s.tid = r.tid;
        s.unix_ns = static_cast<int64_t>(r.time) + m.mono_to_unix;
        s.stack.resize(r.ips.size());
        for (size_t i = 0; i < r.ips.size(); ++i) {
          const uint32_t f = symbolize(r.pid, r.ips[i], i > 0);
          if (prof.frames[f] == "[unknown]") ++prof.unknown_frames;
          s.stack[r.ips.size() - 1 - i] = f;
        }
        prof.samples.push_back(std::move(s));
        break;
      }
      default:
        break;
    }
  }
  m.recs.clear();
  return prof;
}

std::string fold_profile(const CpuProfile& p) {
  StackTrie trie;
  for (const auto& s : p.samples) {
    auto c = p.comm.find(s.pid);
    uint32_t node = trie.child(0, trie.intern(c != p.comm.end() ? c->second : "pid " + std::to_string(s.pid)));
    for (uint32_t f : s.stack) node = trie.child(node, trie.intern(p.frames[f]));
    trie.add_self(node, 1);
  }
  return write_folded(trie);
}

}  // namespace rtx::trace
