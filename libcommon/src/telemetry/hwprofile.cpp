// Hardware profile probing: /proc/cpuinfo, cpuid, sysfs caches and clocks, /proc/meminfo, uname,
// OpenMP, plus the GPU/library part (dynlibs.cpp, cuda/gpu_probe.cu). Probed once, cached.
#include "rtx/telemetry/hwprofile.hpp"

#include <cpuid.h>
#include <sched.h>
#include <sys/resource.h>
#include <omp.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "rtx/core/build_info.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/hash.hpp"
#include "telemetry/dynlibs.hpp"

namespace rtx::telemetry {
namespace {

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

/// "48K" / "2048K" / "260M" (sysfs cache size) -> bytes.
uint64_t parse_size(const std::string& s) {
  if (s.empty()) return 0;
  uint64_t v = 0;
  size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) v = v * 10 + (s[i++] - '0');
  if (i < s.size()) {
    const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(s[i])));
    if (u == 'K') v <<= 10;
    else if (u == 'M') v <<= 20;
    else if (u == 'G') v <<= 30;
  }
  return v;
}

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

/// Lower-case, keep [a-z0-9], runs of anything else become one '-'; no leading/trailing '-'.
std::string slug(const std::string& s) {
  std::string out;
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u)) out += static_cast<char>(std::tolower(u));
    else if (!out.empty() && out.back() != '-') out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out;
}

void probe_cpuid(HardwareProfile& p) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return;
  const unsigned max_leaf = a;
  char vendor[13] = {0};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  const std::string v = vendor;
  p.cpu_vendor = v == "GenuineIntel" ? "intel" : v == "AuthenticAMD" ? "amd" : slug(v);
  __get_cpuid(1, &a, &b, &c, &d);
  const unsigned fam = (a >> 8) & 0xf, model = (a >> 4) & 0xf;
  p.cpu_family = static_cast<int>(fam == 0xf ? fam + ((a >> 20) & 0xff) : fam);
  p.cpu_model_id = static_cast<int>((fam == 0x6 || fam == 0xf) ? model + (((a >> 16) & 0xf) << 4) : model);
  const bool osxsave = c & (1u << 27);
  uint64_t xcr0 = 0;
  if (osxsave) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<uint64_t>(hi) << 32) | lo;
  }
  const bool os_avx = (xcr0 & 0x6) == 0x6;          // XMM + YMM state
  const bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask + ZMM_Hi256 + Hi16_ZMM
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;  // XTILECFG + XTILEDATA
  CpuFlags& f = p.flags;
  f.sse4_2 = c & (1u << 20);
  f.avx = os_avx && (c & (1u << 28));
  f.fma = os_avx && (c & (1u << 12));
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = os_avx && (b & (1u << 5));
    f.avx512f = os_avx512 && (b & (1u << 16));
    f.avx512dq = os_avx512 && (b & (1u << 17));
    f.avx512cd = os_avx512 && (b & (1u << 28));
    f.avx512bw = os_avx512 && (b & (1u << 30));
    f.avx512vl = os_avx512 && (b & (1u << 31));
    f.avx512_vnni = os_avx512 && (c & (1u << 11));
    f.avx512_fp16 = os_avx512 && (d & (1u << 23));
    f.amx_bf16 = os_amx && (d & (1u << 22));
    f.amx_tile = os_amx && (d & (1u << 24));
    f.amx_int8 = os_amx && (d & (1u << 25));
    const unsigned subleaves = a;
    if (subleaves >= 1) {
      __cpuid_count(7, 1, a, b, c, d);
      f.avx512_bf16 = os_avx512 && (a & (1u << 5));
    }
  }
}

void probe_cpuinfo(HardwareProfile& p) {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  std::set<std::pair<int, int>> cores;
  std::set<int> sockets;
  int phys = -1;
  double mhz = 0;
  while (std::getline(f, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string k = trim(line.substr(0, colon)), v = trim(line.substr(colon + 1));
    if (k == "model name" && p.cpu_model.empty()) p.cpu_model = v;
    else if (k == "physical id") {
      phys = std::atoi(v.c_str());
      sockets.insert(phys);
    } else if (k == "core id") cores.insert({phys, std::atoi(v.c_str())});
    else if (k == "cpu MHz" && mhz == 0) mhz = std::atof(v.c_str());
  }
  p.physical_cores = static_cast<int>(cores.size());
  p.sockets = static_cast<int>(sockets.size());
  // Clocks: cpufreq (kHz) when the kernel exposes it, else the current MHz from /proc/cpuinfo.
  const std::string cf = "/sys/devices/system/cpu/cpu0/cpufreq/";
  const double base_khz = std::atof(read_line(cf + "base_frequency").c_str());
  const double max_khz = std::atof(read_line(cf + "cpuinfo_max_freq").c_str());
  if (max_khz > 0 || base_khz > 0) {
    p.clock_source = "cpufreq";
    p.max_mhz = max_khz / 1000.0;
    p.base_mhz = base_khz > 0 ? base_khz / 1000.0 : p.max_mhz;
    if (p.max_mhz == 0) p.max_mhz = p.base_mhz;
  } else if (mhz > 0) {
    p.clock_source = "cpuinfo";
    p.base_mhz = p.max_mhz = mhz;
  } else {
    p.clock_source = "none";
  }
}

void probe_caches(HardwareProfile& p) {
  for (int i = 0; i < 16; ++i) {
    const std::string d = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    const std::string level = read_line(d + "level");
    if (level.empty()) break;
    const std::string type = read_line(d + "type");
    const uint64_t sz = parse_size(read_line(d + "size"));
    if (level == "1" && type == "Data") p.l1d_bytes = sz;
    else if (level == "2") p.l2_bytes = sz;
    else if (level == "3") p.l3_bytes = sz;
  }
}

/// FMA pipes per core at the widest vector width, by microarchitecture (vendor optimisation manuals):
/// Intel Xeon with AVX-512 (Skylake-SP .. Granite Rapids Gold/Platinum): 2 x 512-bit FMA (some
/// Silver/Bronze parts have 1; we assume 2). Intel client AVX-512 (Ice/Tiger Lake): 1 x 512.
/// AMD Zen4 (family 0x19 with AVX-512): 512-bit ops double-pumped on 2 x 256-bit FMA pipes:
/// effectively 1 x 512. AMD Zen5 (family 0x1a): 2 x 512. AVX2+FMA (Haswell+, Zen1-3, unknown): 2 x 256.
/// No FMA: 1 x widest (separate mul and add pipes counted as one FMA-equivalent).
void peak_model(HardwareProfile& p) {
  const CpuFlags& f = p.flags;
  const bool xeon = p.cpu_model.find("Xeon") != std::string::npos;
  if (f.avx512f) {
    p.vector_bits = 512;
    if (p.cpu_vendor == "amd" && p.cpu_family == 0x19) {
      p.fma_units = 1;
      p.cpu_peak_note = "AMD Zen4: AVX-512 double-pumped on 2x256-bit FMA pipes = 1 x 512-bit FMA per core";
    } else if (p.cpu_vendor == "amd") {
      p.fma_units = 2;
      p.cpu_peak_note = "AMD Zen5 (or later): 2 x 512-bit FMA per core";
    } else if (xeon) {
      p.fma_units = 2;
      p.cpu_peak_note = "Intel Xeon server core with AVX-512: assumed 2 x 512-bit FMA per core (Silver/Bronze: 1)";
    } else {
      p.fma_units = 1;
      p.cpu_peak_note = "Intel client core with AVX-512: 1 x 512-bit FMA per core";
    }
  } else if (f.avx2 && f.fma) {
    p.vector_bits = 256;
    p.fma_units = 2;
    p.cpu_peak_note = "AVX2 core: assumed 2 x 256-bit FMA per core (Haswell+, Zen1-3)";
  } else {
    p.vector_bits = f.avx ? 256 : 128;
    p.fma_units = 1;
    p.cpu_peak_note = "no FMA: 1 multiply + 1 add per cycle at the widest vector width";
  }
}


}  // namespace

std::string GpuInfo::arch() const { return "sm_" + std::to_string(cc_major) + std::to_string(cc_minor); }

HardwareProfile probe_hardware_profile() {
  HardwareProfile p;
  probe_cpuid(p);
  probe_cpuinfo(p);
  probe_caches(p);
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  p.logical_cpus = online > 0 ? static_cast<int>(online) : 1;
  if (p.physical_cores <= 0) p.physical_cores = p.logical_cpus;
  if (p.sockets <= 0) p.sockets = 1;
  {
    std::ifstream f("/proc/meminfo");
    std::string k;
    uint64_t kb = 0;
    while (f >> k >> kb) {
      if (k == "MemTotal:") {
        p.memory_bytes = kb * 1024;
        break;
      }
      f.ignore(1 << 10, '\n');
    }
  }
  p.omp_max_threads = omp_get_max_threads();
  peak_model(p);
  struct utsname u {};
  if (::uname(&u) == 0) {
    p.os = u.sysname;
    p.kernel = u.release;
    p.hostname = u.nodename;
  }
  p.rtx_sha = rtx::git_sha();
  detail::probe_gpus(p);
  p.cudnn_version = detail::cudnn_version();
  p.nccl_version = detail::nccl_version();
  p.cupti_version = detail::cupti_version();
  return p;
}

const HardwareProfile& hardware_profile() {
  static const HardwareProfile p = probe_hardware_profile();  // C++11 magic static: thread-safe once
  return p;
}

nlohmann::json to_json(const HardwareProfile& p) {
  const CpuFlags& f = p.flags;
  nlohmann::json flags = {{"sse4_2", f.sse4_2},       {"avx", f.avx},
                          {"avx2", f.avx2},           {"fma", f.fma},
                          {"avx512f", f.avx512f},     {"avx512bw", f.avx512bw},
                          {"avx512vl", f.avx512vl},   {"avx512dq", f.avx512dq},
                          {"avx512cd", f.avx512cd},   {"avx512_bf16", f.avx512_bf16},
                          {"avx512_vnni", f.avx512_vnni}, {"avx512_fp16", f.avx512_fp16},
                          {"amx_tile", f.amx_tile},   {"amx_bf16", f.amx_bf16},
                          {"amx_int8", f.amx_int8}};
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& g : p.gpus)
    gpus.push_back({{"index", g.index},
                    {"name", g.name},
                    {"arch", g.arch()},
                    {"sku", gpu_sku_key(g)},
                    {"compute_capability", std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor)},
                    {"sm_count", g.sm_count},
                    {"memory_bytes", g.memory_bytes},
                    {"clock_sm_mhz", g.clock_sm_mhz},
                    {"clock_sm_max_mhz", g.clock_sm_max_mhz},
                    {"clock_mem_mhz", g.clock_mem_mhz},
                    {"clock_mem_max_mhz", g.clock_mem_max_mhz},
                    {"ecc_enabled", g.ecc_enabled},
                    {"ecc_corrected", g.ecc_corrected},
                    {"ecc_uncorrected", g.ecc_uncorrected},
                    {"pcie_gen", g.pcie_gen},
                    {"pcie_gen_max", g.pcie_gen_max},
                    {"pcie_width", g.pcie_width},
                    {"pcie_width_max", g.pcie_width_max}});
  return {
      {"cpu",
       {{"vendor", p.cpu_vendor},
        {"model", p.cpu_model},
        {"family", p.cpu_family},
        {"model_id", p.cpu_model_id},
        {"flags", flags},
        {"physical_cores", p.physical_cores},
        {"logical_cpus", p.logical_cpus},
        {"sockets", p.sockets},
        {"l1d_bytes", p.l1d_bytes},
        {"l2_bytes", p.l2_bytes},
        {"l3_bytes", p.l3_bytes},
        {"base_mhz", p.base_mhz},
        {"max_mhz", p.max_mhz},
        {"clock_source", p.clock_source},
        {"omp_max_threads", p.omp_max_threads},
        {"vector_bits", p.vector_bits},
        {"fma_units", p.fma_units},
        {"peak_fp32_flops", cpu_peak_fp32_flops(p)},
        {"peak_note", p.cpu_peak_note},
        {"sku", cpu_sku_key(p)}}},
      {"memory_bytes", p.memory_bytes},
      {"cuda_built", p.cuda_built},
      {"cuda_unavailable", p.cuda_unavailable},
      {"gpus", gpus},
      {"driver_version", p.driver_version},
      {"runtime_version", p.runtime_version},
      {"nvml_driver", p.nvml_driver},
      {"cudnn_version", p.cudnn_version},
      {"nccl_version", p.nccl_version},
      {"cupti_version", p.cupti_version},
      {"rtx_sha", p.rtx_sha},
      {"os", p.os},
      {"kernel", p.kernel},
      {"hostname", p.hostname},
      {"digest", digest(p)},
  };
}

/// The FNV-1a 64-bit prime over a historic offset basis: 1469598103934665603 is the standard
/// basis (14695981039346656037) missing its last digit. Kept because digests written with
/// it (the hardware profile's "digest") are in existing artifacts and stores; keep them comparable.
constexpr uint64_t kProfileIdBasis = 1469598103934665603ull;

std::string digest(const HardwareProfile& p) {
  std::ostringstream s;
  s << p.cpu_vendor << '|' << p.cpu_model << '|' << p.cpu_family << '|' << p.cpu_model_id << '|'
    << p.physical_cores << '|' << p.logical_cpus << '|' << p.sockets << '|' << p.l3_bytes << '|'
    << p.memory_bytes << '|';
  const CpuFlags& f = p.flags;
  for (bool b : {f.sse4_2, f.avx, f.avx2, f.fma, f.avx512f, f.avx512bw, f.avx512vl, f.avx512dq, f.avx512cd,
                 f.avx512_bf16, f.avx512_vnni, f.avx512_fp16, f.amx_tile, f.amx_bf16, f.amx_int8})
    s << (b ? '1' : '0');
  for (const auto& g : p.gpus) s << '|' << g.name << ':' << g.arch() << ':' << g.memory_bytes;
  s << '|' << p.driver_version << '|' << p.nvml_driver << '|' << p.rtx_sha;
  const std::string text = s.str();
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx",
                static_cast<unsigned long long>(fnv1a64(text.data(), text.size(), kProfileIdBasis)));
  return buf;
}

std::string digest() {
  static const std::string d = digest(hardware_profile());
  return d;
}

std::string cpu_sku_key(const HardwareProfile& p) {
  std::string name = p.cpu_model;
  // Drop trademarks, the vendor word, "CPU"/"Processor", "NN-Core" and the "@ x.yGHz" suffix.
  if (auto at = name.find('@'); at != std::string::npos) name = name.substr(0, at);
  for (const std::string tm : {"(R)", "(r)", "(TM)", "(tm)"})
    for (size_t pos; (pos = name.find(tm)) != std::string::npos;) name.replace(pos, tm.size(), " ");
  std::istringstream in(name);
  std::string w, kept;
  while (in >> w) {
    std::string lw = slug(w);
    if (lw.empty() || lw == "r" || lw == "tm" || lw == "cpu" || lw == "processor" || lw == p.cpu_vendor ||
        lw == "intel" || lw == "amd" || lw == "genuine")
      continue;
    if (lw.size() > 5 && lw.compare(lw.size() - 5, 5, "-core") == 0) continue;
    kept += (kept.empty() ? "" : "-") + lw;
  }
  std::string s = slug(kept);
  bool has_digit = false;
  for (char c : s) has_digit |= std::isdigit(static_cast<unsigned char>(c)) != 0;
  if (s.empty()) s = "unknown";
  if (!has_digit) s += "-f" + std::to_string(p.cpu_family) + "m" + std::to_string(p.cpu_model_id);
  const CpuFlags& f = p.flags;
  const char* isa = (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq) ? "avx512"
                    : (f.avx2 && f.fma)                                 ? "avx2"
                                                                        : "scalar";
  const std::string vendor = p.cpu_vendor.empty() ? "unknown" : slug(p.cpu_vendor);
  return "cpu:" + vendor + "-" + s + ":" + isa;
}

std::string gpu_sku_key(const GpuInfo& g) {
  std::string s = slug(g.name);
  if (s.rfind("nvidia-", 0) == 0) s = s.substr(7);
  if (s.empty()) s = "unknown";
  return "gpu:" + g.arch() + ":" + s;
}

std::string sku_key(const std::string& backend) {
  const HardwareProfile& p = hardware_profile();
  if (backend == "cpu") return cpu_sku_key(p);
  if (backend == "cuda" || backend == "gpu") {
    if (p.gpus.empty())
      throw_env("no CUDA device for a GPU SKU key (" + p.cuda_unavailable + ")", "sku_key(" + backend + ")",
                "run on a machine with an NVIDIA GPU, or use backend cpu");
    return gpu_sku_key(p.gpus.front());
  }
  throw_usage("unknown backend '" + backend + "'", "sku_key", "use cpu or cuda");
}

nlohmann::json identity_json() {
  const HardwareProfile& p = hardware_profile();
  std::string driver = p.nvml_driver;
  if (driver.empty() && p.driver_version > 0)
    driver = std::to_string(p.driver_version / 1000) + "." + std::to_string((p.driver_version % 1000) / 10);
  return {{"arch", p.gpus.empty() ? cpu_sku_key(p) : gpu_sku_key(p.gpus.front())},
          {"driver", driver},
          {"rtx_sha", p.rtx_sha},
          {"digest", digest()}};
}

double load_average_1m() {
  double load1 = 0;
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load1) != 1) load1 = 0;
    std::fclose(f);
  }
  return load1;
}

std::string busy_host_verdict(const CpuPressure& before, const CpuPressure& after, double look_s, double load1,
                              int logical_cpus) {
  char load[96];
  std::snprintf(load, sizeof load, "1-minute load average %.2f on %d CPUs", load1, logical_cpus);
  if (const auto stall = psi_stall_share(before, after, look_s)) {
    const double share = *stall;
    if (!(share > kBusyPsiStallShare)) return "";
    char buf[192];
    std::snprintf(buf, sizeof buf, "PSI cpu stall %.1f%% of a %.2f s look (> %.0f%%; %s): other work competes with measurements",
                  100 * share, look_s, 100 * kBusyPsiStallShare, load);
    return buf;
  }
  if (!(load1 > 0.5 * logical_cpus)) return "";
  return std::string(load) + " (no PSI to look with): other work competes with measurements";
}

std::optional<double> psi_stall_share(const CpuPressure& before, const CpuPressure& after, double look_s) {
  if (!before.valid || !after.valid || !(look_s > 0) || after.some_total_us < before.some_total_us) return std::nullopt;
  return std::min(1.0, 1e-6 * static_cast<double>(after.some_total_us - before.some_total_us) / look_s);
}


namespace {
/// This process's CPU time (getrusage RUSAGE_SELF user + system), s; 0 when unreadable.
double self_cpu_s() {
  rusage u{};
  if (::getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}
}  // namespace

CpuBusy parse_cpu_busy(const std::string& proc_stat, const std::vector<int>& cpus, double tick_s) {
  CpuBusy b;
  if (cpus.empty() || !(tick_s > 0)) return b;
  std::vector<bool> want;
  for (int c : cpus) {
    if (c < 0 || c > 65535) return b;
    if (static_cast<size_t>(c) >= want.size()) want.resize(static_cast<size_t>(c) + 1, false);
    want[static_cast<size_t>(c)] = true;
  }
  std::istringstream in(proc_stat);
  std::string line;
  unsigned long long ticks = 0;
  int found = 0;
  while (std::getline(in, line)) {
    if (line.size() < 4 || line.compare(0, 3, "cpu") != 0 || !std::isdigit(static_cast<unsigned char>(line[3]))) continue;
    // cpuN user nice system idle iowait irq softirq steal [guest guest_nice] (proc(5)); guest
    // time is already counted in user.
    int n = -1;
    unsigned long long v[8] = {};
    if (std::sscanf(line.c_str(), "cpu%d %llu %llu %llu %llu %llu %llu %llu %llu", &n, &v[0], &v[1], &v[2], &v[3], &v[4],
                    &v[5], &v[6], &v[7]) != 9)
      return {};
    if (n < 0 || static_cast<size_t>(n) >= want.size() || !want[static_cast<size_t>(n)]) continue;
    want[static_cast<size_t>(n)] = false;
    ticks += v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    ++found;
  }
  for (bool w : want)
    if (w) return {};  // a CPU asked for had no line
  b.valid = true;
  b.cpus = found;
  b.tick_s = tick_s;
  b.busy_s = static_cast<double>(ticks) * tick_s;
  return b;
}

CpuBusy read_cpu_busy() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) return {};
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  const long hz = ::sysconf(_SC_CLK_TCK);
  std::ifstream f("/proc/stat");
  if (!f || hz <= 0) return {};
  std::ostringstream text;
  text << f.rdbuf();
  return parse_cpu_busy(text.str(), cpus, 1.0 / static_cast<double>(hz));
}

HostVerdict judge_host_window(const CpuWindow& w) {
  HostVerdict v;
  if (!(w.wall_s > 0)) return v;
  if (w.psi_valid) v.psi_share = std::clamp(w.psi_stall_s / w.wall_s, 0.0, 1.0);
  const bool other = w.other_valid && w.cpus > 0;
  if (other) v.other_share = std::max(0.0, w.other_cpu_s - w.tick_slack_s) / (w.wall_s * w.cpus);
  if (w.wall_s < kMinJudgedWindowS || (!other && !w.psi_valid)) return v;
  v.judged = true;
  char buf[224];
  if (other) {
    v.basis = "other_cpu";
    v.busy = v.other_share > kMaxOtherCpuShare;
    if (v.busy) {
      std::snprintf(buf, sizeof buf, "other processes took %.2f CPU-s of %d CPU%s x %.2f s (%.0f%%, > %.0f%%)", w.other_cpu_s,
                    w.cpus, w.cpus == 1 ? "" : "s", w.wall_s, 100 * v.other_share, 100 * kMaxOtherCpuShare);
      v.reason = buf;
    }
    return v;
  }
  v.basis = "psi";
  v.busy = v.psi_share > kBusyPsiStallShare;
  if (v.busy) {
    std::snprintf(buf, sizeof buf, "PSI cpu stall %.1f%% of the window's %.2f s (> %.0f%%; no /proc/stat to tell other processes from ours)",
                  100 * v.psi_share, w.wall_s, 100 * kBusyPsiStallShare);
    v.reason = buf;
  }
  return v;
}

BusyLook look_at_host(const HardwareProfile& p, double look_s) {
  const CpuPressure before = read_cpu_pressure();
  const CpuBusy busy0 = read_cpu_busy();
  const double self0 = self_cpu_s();
  const auto t0 = std::chrono::steady_clock::now();
  if ((before.valid || busy0.valid) && look_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(look_s));
  const CpuPressure after = read_cpu_pressure();
  const CpuBusy busy1 = read_cpu_busy();
  const double self1 = self_cpu_s();
  BusyLook l;
  l.look_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  l.load1 = load_average_1m();
  l.logical_cpus = p.logical_cpus;
  l.stall_share = psi_stall_share(before, after, l.look_s);
  if (busy0.valid && busy1.valid && busy0.cpus == busy1.cpus) {
    // The rule (judge_host_window): this process sleeps in the look, but its other threads may not.
    CpuWindow w;
    w.wall_s = l.look_s;
    w.cpus = busy1.cpus;
    w.other_valid = true;
    w.other_cpu_s = (busy1.busy_s - busy0.busy_s) - std::max(0.0, self1 - self0);
    w.tick_slack_s = 2 * busy1.tick_s * busy1.cpus;
    const HostVerdict v = judge_host_window(w);
    l.other_share = v.other_share;
    l.other_valid = true;
    if (v.busy) {
      char load[96];
      std::snprintf(load, sizeof load, "; 1-minute load average %.2f on %d CPUs", l.load1, l.logical_cpus);
      l.warning = v.reason + " in a look" + load + ": other work competes with measurements";
    }
    return l;
  }
  l.warning = busy_host_verdict(before, after, l.look_s, l.load1, l.logical_cpus);
  return l;
}

std::string busy_host_warning(const HardwareProfile& p, double look_s) { return look_at_host(p, look_s).warning; }

CpuPressure parse_cpu_pressure(const std::string& text) {
  CpuPressure p;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("some ", 0) != 0) continue;
    double a10 = 0, a60 = 0, a300 = 0;
    unsigned long long total = 0;
    if (std::sscanf(line.c_str(), "some avg10=%lf avg60=%lf avg300=%lf total=%llu", &a10, &a60, &a300, &total) == 4 &&
        a10 >= 0 && a60 >= 0) {
      p.valid = true;
      p.some_avg10 = a10;
      p.some_avg60 = a60;
      p.some_total_us = total;
    }
    break;
  }
  return p;
}

CpuPressure read_cpu_pressure(const char* path) {
  std::FILE* f = std::fopen(path, "r");
  if (!f) return {};
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  return parse_cpu_pressure(std::string(buf, n));
}

double cpu_peak_fp32_flops(const HardwareProfile& p) {
  const double mhz = p.max_mhz > 0 ? p.max_mhz : p.base_mhz;
  return static_cast<double>(p.physical_cores) * p.fma_units * (p.vector_bits / 32.0) * 2.0 * mhz * 1e6;
}

}  // namespace rtx::telemetry
