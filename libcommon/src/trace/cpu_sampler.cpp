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
  enum Kind : uint8_t { Sample, Mmap, Comm, Fork } kind = Sample;
  bool exec = false;                 // Comm: the exec of a new program
  uint32_t pid = 0, tid = 0, ppid = 0;
  uint64_t time = 0;                 // CLOCK_MONOTONIC ns
  uint64_t start = 0, len = 0, pgoff = 0;  // Mmap
  std::string name;                  // Mmap file name, Comm text
  std::vector<uint64_t> ips;         // Sample: user call chain, leaf first
  std::vector<uint64_t> regs;        // Sample, DWARF: user registers (kRegsMask order)
  std::vector<char> stack;           // Sample, DWARF: copy of the user stack from sp up
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

/// A symbol's name for people: its version suffix dropped ("__libc_start_main@@GLIBC_2.34"),
/// C++ names demangled.
std::string demangle(const char* sym) {
  const std::string s(sym, std::strcspn(sym, "@"));
  int status = 0;
  char* d = abi::__cxa_demangle(s.c_str(), nullptr, nullptr, &status);
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

// x86-64 user registers sampled for DWARF unwinding (PERF_SAMPLE_REGS_USER, asm/perf_regs.h):
// AX BX CX DX SI DI BP SP IP (bits 0-8) and R8-R15 (bits 16-23), delivered in bit order.
#if defined(__x86_64__)
constexpr uint64_t kRegsMask = 0x1ffULL | (0xffULL << 16);
constexpr unsigned kNumRegs = 17;
constexpr size_t kRegSp = 7;
/// The sampled registers in DWARF numbering (x86-64 psABI: rax rdx rcx rbx rsi rdi rbp rsp
/// r8-r15, then the return address column 16 = rip).
void to_dwarf(const std::vector<uint64_t>& r, Dwarf_Word* d) {
  d[0] = r[0], d[1] = r[3], d[2] = r[2], d[3] = r[1], d[4] = r[4], d[5] = r[5], d[6] = r[6], d[7] = r[7];
  for (int i = 0; i < 8; ++i) d[8 + i] = r[9 + static_cast<size_t>(i)];
  d[16] = r[8];
}
#endif

}  // namespace

bool dwarf_unwind_supported() {
#if defined(__x86_64__)
  return true;
#else
  return false;
#endif
}

struct CpuSampler::Impl {
  struct Ring {
    int fd = -1;
    void* base = MAP_FAILED;
    size_t len = 0;
  };
  /// Per process: its mappings and, for DWARF unwinding, a Dwfl with them reported at their
  /// load addresses (rebuilt when the mappings change).
  struct Proc {
    std::vector<Mapping> maps;
    std::unordered_map<uint64_t, uint32_t> frames;  // (ip, is a return address) -> frame id
    Dwfl* dwfl = nullptr;
    bool dwfl_stale = true;
    ~Proc() {
      if (dwfl) dwfl_end(dwfl);
    }
    void changed() {
      frames.clear();
      dwfl_stale = true;
    }
  };
  std::vector<Ring> rings;
  size_t page = 4096, data_size = 0;
  unsigned hz = 0;
  bool dwarf = false;
  int64_t mono_to_unix = 0;
  std::vector<Rec> batch;
  std::vector<char> scratch;
  std::unordered_map<uint32_t, std::unique_ptr<Proc>> procs;
  std::unordered_map<std::string, std::unique_ptr<ElfFile>> elves;
  std::unordered_map<std::string, uint32_t> frame_ids;
  CpuProfile prof;
  const Rec* current = nullptr;  // the sample being unwound (DWARF callbacks)

  ~Impl() {
    procs.clear();
    for (Ring& r : rings) {
      if (r.base != MAP_FAILED) ::munmap(r.base, r.len);
      if (r.fd >= 0) ::close(r.fd);
    }
  }

  Proc& proc(uint32_t pid) {
    auto& p = procs[pid];
    if (!p) p = std::make_unique<Proc>();
    return *p;
  }

  void parse(const perf_event_header* h) {
    const char* p = reinterpret_cast<const char*>(h + 1);
    const char* end = reinterpret_cast<const char*>(h) + h->size;
    auto u32 = [&](uint32_t& v) {
      if (p + 4 <= end) std::memcpy(&v, p, 4);
      p += 4;
    };
    auto u64 = [&](uint64_t& v) {
      v = 0;
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
        nr = std::min<uint64_t>(nr, p < end ? static_cast<uint64_t>(end - p) / 8 : 0);
        r.ips.reserve(nr);
        for (uint64_t i = 0; i < nr; ++i) {
          uint64_t ip = 0;
          u64(ip);
          if (ip >= static_cast<uint64_t>(PERF_CONTEXT_MAX)) continue;  // context markers
          r.ips.push_back(ip);
        }
#if defined(__x86_64__)
        if (dwarf) {
          uint64_t abi = 0;
          u64(abi);
          if (abi != PERF_SAMPLE_REGS_ABI_NONE) {
            r.regs.resize(kNumRegs);
            for (auto& v : r.regs) u64(v);
          }
          uint64_t size = 0;
          u64(size);
          if (size && p + size + 8 <= end) {
            uint64_t dyn = 0;
            std::memcpy(&dyn, p + size, 8);
            r.stack.assign(p, p + std::min(size, dyn));
          }
        }
#endif
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
        prof.lost += n;
        return;
      }
      default:
        return;
    }
    batch.push_back(std::move(r));
  }

  /// Read every ring, then replay the batch in time order (each CPU's ring is ordered, the
  /// rings are not): forks copy the parent's mappings, an exec drops them, mmaps add, samples
  /// are unwound (DWARF) and symbolized against the mappings of their process at that time.
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
    std::stable_sort(batch.begin(), batch.end(), [](const Rec& x, const Rec& y) { return x.time < y.time; });
    for (Rec& r : batch) replay(r);
    batch.clear();
  }

  void replay(const Rec& r) {
    switch (r.kind) {
      case Rec::Fork:
        if (r.pid != r.ppid) {
          Proc& child = proc(r.pid);
          auto it = procs.find(r.ppid);
          child.maps = it != procs.end() ? it->second->maps : std::vector<Mapping>{};
          child.changed();
        }
        break;
      case Rec::Comm:
        if (r.exec) {
          Proc& pr = proc(r.pid);
          pr.maps.clear();
          pr.changed();
        }
        prof.comm[r.tid] = r.name;
        break;
      case Rec::Mmap: {
        Proc& pr = proc(r.pid);
        pr.maps.push_back({r.start, r.start + r.len, r.pgoff, r.name});
        pr.changed();
        break;
      }
      case Rec::Sample: {
        CpuProfile::Sample s;
        s.pid = r.pid;
        s.tid = r.tid;
        s.unix_ns = static_cast<int64_t>(r.time) + mono_to_unix;
        Proc& pr = proc(r.pid);
        std::vector<std::pair<uint64_t, bool>> pcs;  // (pc, is a return address), leaf first
        if (dwarf) unwind(r, pr, pcs);
        if (pcs.empty())
          for (size_t i = 0; i < r.ips.size(); ++i) pcs.emplace_back(r.ips[i], i > 0);
        s.stack.resize(pcs.size());
        for (size_t i = 0; i < pcs.size(); ++i) {
          const uint32_t f = symbolize(pr, pcs[i].first, pcs[i].second);
          if (prof.frames[f] == "[unknown]") ++prof.unknown_frames;
          s.stack[pcs.size() - 1 - i] = f;
        }
        prof.samples.push_back(std::move(s));
        break;
      }
      default:
        break;
    }
  }

  uint32_t intern(std::string name) {
    for (char& c : name)  // folded text separates frames by ';' and lines by '\n'
      if (c == ';') c = ':';
      else if (c == '\n' || c == '\r') c = ' ';
    auto it = frame_ids.find(name);
    if (it != frame_ids.end()) return it->second;
    const auto id = static_cast<uint32_t>(prof.frames.size());
    prof.frames.push_back(name);
    frame_ids.emplace(std::move(name), id);
    return id;
  }

  /// The ELF file `file` opened once with libdwfl at bias 0, with its PT_LOAD segments.
  ElfFile& elf_of(const std::string& file) {
    static const Dwfl_Callbacks callbacks = {dwfl_build_id_find_elf, dwfl_standard_find_debuginfo,
                                             dwfl_offline_section_address, nullptr};
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
  }

  static bool is_file(const Mapping& m) {
    return !m.file.empty() && m.file[0] != '[' && m.file.rfind("//anon", 0) != 0;
  }

  /// The mapping of `pid` holding `addr` (the latest one: a later mmap replaces an earlier).
  static const Mapping* find_map(const Proc& pr, uint64_t addr) {
    for (auto it = pr.maps.rbegin(); it != pr.maps.rend(); ++it)
      if (addr >= it->start && addr < it->end) return &*it;
    return nullptr;
  }

  uint32_t symbolize(Proc& pr, uint64_t ip, bool return_address) {
    const uint64_t key = ip * 2 + (return_address ? 1 : 0);
    if (auto it = pr.frames.find(key); it != pr.frames.end()) return it->second;
    const uint64_t look = return_address && ip > 0 ? ip - 1 : ip;  // the call, not the next line
    const Mapping* hit = find_map(pr, look);
    uint32_t id;
    if (!hit) {
      id = intern("[unknown]");
    } else if (!is_file(*hit)) {
      id = intern(hit->file.empty() || hit->file[0] != '[' ? "[anon]" : hit->file);
    } else {
      const uint64_t off = look - hit->start + hit->pgoff;
      ElfFile& ef = elf_of(hit->file);
      const char* sym = nullptr;
      if (ef.mod)
        for (const auto& sg : ef.segs)
          if (off >= sg.off && off < sg.off + sg.filesz) {
            sym = dwfl_module_addrname(ef.mod, sg.vaddr + (off - sg.off) + ef.bias);
            break;
          }
      char buf[32];
      std::snprintf(buf, sizeof buf, "+0x%llx", static_cast<unsigned long long>(off));
      id = intern(sym ? demangle(sym) : basename_of(hit->file) + buf);
    }
    pr.frames.emplace(key, id);
    return id;
  }

#if defined(__x86_64__)
  // libdwfl thread callbacks: one "thread", the sample being unwound; memory = its stack copy.
  static pid_t next_thread(Dwfl*, void*, void**) { return 0; }
  static bool get_thread(Dwfl*, pid_t, void* arg, void** thread_arg) {
    *thread_arg = arg;
    return true;
  }
  static bool memory_read(Dwfl*, Dwarf_Addr addr, Dwarf_Word* result, void* arg) {
    const Rec* r = static_cast<Impl*>(arg)->current;
    const uint64_t sp = r->regs[kRegSp];
    if (addr < sp || addr - sp + 8 > r->stack.size()) return false;
    std::memcpy(result, r->stack.data() + (addr - sp), 8);
    return true;
  }
  static bool set_initial_registers(Dwfl_Thread* thread, void* arg) {
    const Rec* r = static_cast<Impl*>(arg)->current;
    Dwarf_Word d[kNumRegs];
    to_dwarf(r->regs, d);
    return dwfl_thread_state_registers(thread, 0, kNumRegs, d);
  }
  static int frame_cb(Dwfl_Frame* frame, void* arg) {
    auto* out = static_cast<std::vector<std::pair<uint64_t, bool>>*>(arg);
    Dwarf_Addr pc = 0;
    bool activation = false;
    if (!dwfl_frame_pc(frame, &pc, &activation) || pc == 0) return DWARF_CB_ABORT;
    out->emplace_back(pc, !activation);
    return out->size() >= 256 ? DWARF_CB_ABORT : DWARF_CB_OK;
  }

  /// A Dwfl for the process with each mapped ELF file reported at its load address.
  void rebuild_dwfl(Proc& pr, uint32_t pid) {
    static const Dwfl_Callbacks callbacks = {dwfl_build_id_find_elf, dwfl_standard_find_debuginfo, nullptr, nullptr};
    static const Dwfl_Thread_Callbacks thread_callbacks = {next_thread, get_thread, memory_read,
                                                           set_initial_registers, nullptr, nullptr};
    if (pr.dwfl) dwfl_end(pr.dwfl);
    pr.dwfl_stale = false;
    pr.dwfl = dwfl_begin(&callbacks);
    if (!pr.dwfl) return;
    dwfl_report_begin(pr.dwfl);
    std::unordered_map<std::string, bool> done;
    for (const Mapping& m : pr.maps) {
      if (!is_file(m) || done[m.file]) continue;
      ElfFile& ef = elf_of(m.file);
      for (const auto& sg : ef.segs)
        if (m.pgoff >= (sg.off & ~uint64_t(0xfff)) && m.pgoff < sg.off + sg.filesz) {
          // Where the file's address 0 lies: the mapping start minus the address of pgoff.
          const uint64_t bias = m.start - (sg.vaddr + m.pgoff - sg.off);
          dwfl_report_elf(pr.dwfl, basename_of(m.file).c_str(), m.file.c_str(), -1, bias, false);
          done[m.file] = true;
          break;
        }
    }
    dwfl_report_end(pr.dwfl, nullptr, nullptr);
    if (!dwfl_attach_state(pr.dwfl, nullptr, static_cast<pid_t>(pid), &thread_callbacks, this)) {
      dwfl_end(pr.dwfl);
      pr.dwfl = nullptr;
    }
  }

  /// DWARF call-frame unwinding of one sample from its registers and stack copy (CFI from
  /// .eh_frame / .debug_frame); empty when it cannot start (then the kernel's chain is used).
  void unwind(const Rec& r, Proc& pr, std::vector<std::pair<uint64_t, bool>>& pcs) {
    if (r.regs.size() != kNumRegs || r.stack.empty()) return;
    if (pr.dwfl_stale) rebuild_dwfl(pr, r.pid);
    if (!pr.dwfl) return;
    current = &r;
    dwfl_getthread_frames(pr.dwfl, static_cast<pid_t>(r.tid), frame_cb, &pcs);
    current = nullptr;
    if (!pcs.empty()) pcs.front().second = false;  // the sampled pc itself
  }
#else
  void unwind(const Rec&, Proc&, std::vector<std::pair<uint64_t, bool>>&) {}
#endif
};

CpuSampler::CpuSampler(pid_t pid, unsigned hz, CallGraph cg, size_t ring_pages) : impl_(std::make_unique<Impl>()) {
  check_sample_freq(hz);
  if (ring_pages == 0 || (ring_pages & (ring_pages - 1)) != 0)
    throw_internal("ring buffer pages must be a power of two", "CpuSampler");
  if (cg == CallGraph::Dwarf && !dwarf_unwind_supported())
    throw_usage("--call-graph dwarf is supported on x86-64 only", "--call-graph", "use --call-graph fp");
  Impl& m = *impl_;
  m.hz = hz;
  m.dwarf = cg == CallGraph::Dwarf;
  m.prof.freq_hz = hz;
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
#if defined(__x86_64__)
  if (m.dwarf) {
    a.sample_type |= PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
    a.sample_regs_user = kRegsMask;
    a.sample_stack_user = kDwarfStackBytes;
  }
#endif
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
  a.watermark = 1;  // poll() wakes when a ring is a quarter full (or after its timeout)
  a.wakeup_watermark = static_cast<uint32_t>(m.data_size / 4);
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
  return std::move(m.prof);
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
