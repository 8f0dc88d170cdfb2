// rtx-doctor: host, store and GPU checks with fix hints, the performance probes, the
// rtx.doctor.v1 report (JSON and flutter-doctor style text) and measured peaks for rtx-bench.
#include "rtx/app/doctor.hpp"

#include <strings.h>

#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <type_traits>

#include "app/doctor/gpu_probes.hpp"
#include "rtx/core/build_info.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/time.hpp"
#include "rtx/kernels/cpu_features.hpp"
#include "rtx/store/store.hpp"
#include "rtx/telemetry/hwprofile.hpp"
#include "telemetry/dynlibs.hpp"

namespace rtx::app::doctor {
namespace tel = rtx::telemetry;

namespace {

/// printf of numbers into a string of any length (a fixed buffer had cut long texts).
template <typename... Args>
std::string fmt(const char* f, Args... v) {
  static_assert((std::is_arithmetic_v<Args> && ...), "fmt formats numbers only");
  const int n = std::snprintf(nullptr, 0, f, v...);
  if (n <= 0) return {};
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), f, v...);
  out.resize(static_cast<size_t>(n));
  return out;
}
/// Machine identity for measured peaks: the CPU SKU plus every GPU's SKU (no rtx sha, so peaks
/// survive a rebuild of rtx on the same hardware).
std::string machine_key(const tel::HardwareProfile& hw) {
  std::string k = tel::cpu_sku_key(hw);
  for (const auto& g : hw.gpus) k += "|" + tel::gpu_sku_key(g);
  return k;
}

std::string gib(uint64_t b) { return fmt("%.1f GiB", static_cast<double>(b) / (1ull << 30)); }

uint64_t mem_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string k;
  uint64_t kb = 0;
  while (f >> k >> kb) {
    if (k == "MemAvailable:") return kb * 1024;
    f.ignore(1 << 10, '\n');
  }
  return 0;
}

bool cpuinfo_has_flag(const std::string& flag) {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("flags", 0) == 0) return (line + " ").find(" " + flag + " ") != std::string::npos;
  return false;
}

struct Builder {
  std::vector<Check>& out;
  std::string group;
  Check& add(const std::string& name, Status s, std::string detail, std::string hint = {},
             nlohmann::json value = nullptr, std::string unit = {}) {
    out.push_back(Check{group, name, s, std::move(detail), std::move(hint), std::move(value), std::move(unit)});
    return out.back();
  }
};

// ---- host --------------------------------------------------------------------------------
void host_checks(std::vector<Check>& checks, const tel::HardwareProfile& hw) {
  Builder b{checks, "Host"};
  namespace k = rtx::kernels;
  const k::Isa sup = k::cpu_isa_supported(), act = k::cpu_isa_active();
#if defined(__AVX512F__)
  const char* baseline = "compiled with AVX-512 baseline (-march)";
#elif defined(__AVX2__)
  const char* baseline = "compiled with AVX2 baseline (-march)";
#else
  const char* baseline = "compiled for baseline x86-64, vector paths chosen at run time";
#endif
  const char* env_isa = std::getenv("RTX_ISA");
  const std::string env = env_isa ? env_isa : "";
  const bool env_known = env.empty() || env == "scalar" || env == "avx2" || env == "avx512";
  std::string detail = std::string("CPU supports ") + k::isa_name(sup) + ", kernels use " + k::isa_name(act) + "; " +
                       baseline;
  if (!env_known)
    b.add("host.isa", Status::Warn, detail + "; RTX_ISA='" + env + "' is not a known level and is ignored",
          "set RTX_ISA to scalar, avx2 or avx512, or unset it", k::isa_name(act));
  else if (act != sup)
    b.add("host.isa", Status::Warn, detail + " (limited by RTX_ISA=" + env + ")",
          "unset RTX_ISA to use the best kernels this CPU supports", k::isa_name(act));
  else if (sup == k::Isa::Scalar)
    b.add("host.isa", Status::Warn, detail + ": no AVX2+FMA, kernels run scalar",
          "measure on a CPU with AVX2/AVX-512 for representative numbers", k::isa_name(act));
  else
    b.add("host.isa", Status::Pass, detail, "", k::isa_name(act));

  b.add("host.cpu", Status::Pass,
        hw.cpu_model + ", " + std::to_string(hw.physical_cores) + " cores / " + std::to_string(hw.logical_cpus) +
            " logical CPUs / " + std::to_string(hw.sockets) + " socket(s), L3 " +
            std::to_string(hw.l3_bytes >> 20) + " MiB, SKU " + tel::cpu_sku_key(hw),
        "", tel::cpu_sku_key(hw));

  const double peak = tel::cpu_peak_fp32_flops(hw);
  std::string pd = fmt("%.1f GFLOP/s fp32 = ", peak / 1e9) + std::to_string(hw.physical_cores) + " cores x " +
                   std::to_string(hw.fma_units) + " FMA x " + std::to_string(hw.vector_bits / 32) + " lanes x 2 x " +
                   fmt("%.0f MHz", hw.max_mhz > 0 ? hw.max_mhz : hw.base_mhz) + " (clock from " + hw.clock_source +
                   "); " + hw.cpu_peak_note;
  if (peak <= 0)
    b.add("host.peak", Status::Warn, "CPU clock unknown: no theoretical peak", "check /proc/cpuinfo and cpufreq sysfs",
          nullptr, "FLOP/s");
  else
    b.add("host.peak", Status::Pass, pd, "", peak, "FLOP/s");

  const std::string gov = [] {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor");
    std::string s;
    std::getline(f, s);
    return s;
  }();
  if (!gov.empty() && gov != "performance")
    b.add("host.governor", Status::Warn, "CPU frequency governor is '" + gov + "': clocks vary between runs",
          "sudo cpupower frequency-set -g performance", gov);
  else
    b.add("host.governor", Status::Pass,
          gov.empty() ? "no cpufreq control exposed (fixed clock or VM); clock source: " + hw.clock_source
                      : "governor 'performance'",
          "", gov.empty() ? nlohmann::json(nullptr) : nlohmann::json(gov));

  if (cpuinfo_has_flag("hypervisor"))
    b.add("host.virtualized", Status::Warn, "running under a hypervisor: vCPUs may share physical cores, timings are noisier",
          "pin the VM's vCPUs or measure on bare metal for final numbers", true);
  else
    b.add("host.virtualized", Status::Pass, "bare metal (no hypervisor flag)", "", false);

  // The value is what decides: the PSI stall share of the look (unit "share", 0..1), or the
  // load average where there is no PSI.
  const telemetry::BusyLook look = telemetry::look_at_host(hw);
  // With /proc/stat, the share of the look's CPU time other processes took (the rule,
  // telemetry::judge_host_window).
  const double value = look.other_valid ? look.other_share : look.stall_share ? *look.stall_share : look.load1;
  const char* unit = look.other_valid || look.stall_share ? "share" : "";
  if (!look.warning.empty())
    b.add("host.load", Status::Warn, look.warning, "stop other jobs before measuring (see top)", value, unit);
  else
    b.add("host.load", Status::Pass,
          look.other_valid
              ? fmt("other processes took %.1f%% of the CPUs' time in a %.2f s look (<= %.0f%%)", 100 * look.other_share,
                    look.look_s, 100 * telemetry::kMaxOtherCpuShare) +
                    fmt("; 1-minute load average %.2f", look.load1)
          : look.stall_share ? fmt("PSI cpu stall %.1f%% of a %.2f s look (<= %.0f%%); 1-minute load average %.2f",
                                 100 * *look.stall_share, look.look_s, 100 * telemetry::kBusyPsiStallShare, look.load1)
                           : fmt("1-minute load average %.2f on %d CPUs (no PSI)", look.load1, look.logical_cpus),
          "", value, unit);

  const uint64_t avail = mem_available_bytes();
  const std::string md = gib(hw.memory_bytes) + " total, " + gib(avail) + " available";
  if (hw.memory_bytes < (8ull << 30))
    b.add("host.memory", Status::Warn, md + ": under 8 GiB limits model and probe sizes",
          "use a machine with more memory for model runs", static_cast<double>(hw.memory_bytes), "B");
  else if (avail < hw.memory_bytes / 4)
    b.add("host.memory", Status::Warn, md + ": under a quarter is free", "stop memory-heavy processes",
          static_cast<double>(hw.memory_bytes), "B");
  else
    b.add("host.memory", Status::Pass, md, "", static_cast<double>(hw.memory_bytes), "B");

  const int threads = omp_get_max_threads();
  const char* omp_env = std::getenv("OMP_NUM_THREADS");
  const std::string src = omp_env && *omp_env ? std::string("OMP_NUM_THREADS=") + omp_env : "OpenMP default";
  const std::string td = std::to_string(threads) + " threads (" + src + ") on " + std::to_string(hw.physical_cores) +
                         " physical cores";
  bool omp_env_valid = true;
  if (omp_env && *omp_env) {
    // OpenMP reads a comma list of positive integers; anything else is ignored (with a libgomp
    // message) and the default applies.
    const std::string v = omp_env;
    omp_env_valid = v.find_first_not_of("0123456789,") == std::string::npos && v[0] != '0' && v[0] != ',';
  }
  if (!omp_env_valid)
    b.add("host.openmp", Status::Warn,
          td + ": OMP_NUM_THREADS='" + omp_env + "' is not a positive integer, so OpenMP ignores it",
          "export OMP_NUM_THREADS=" + std::to_string(hw.physical_cores) + " or unset it", threads, "threads");
  else if (threads > hw.physical_cores)
    b.add("host.openmp", Status::Warn, td + ": more threads than cores (SMT siblings or oversubscription)",
          "export OMP_NUM_THREADS=" + std::to_string(hw.physical_cores) + " for stable timings", threads, "threads");
  else if (threads < hw.physical_cores)
    b.add("host.openmp", Status::Warn, td + ": not all cores are used",
          "export OMP_NUM_THREADS=" + std::to_string(hw.physical_cores) + " (or unset it) to use every core",
          threads, "threads");
  else
    b.add("host.openmp", Status::Pass, td, "", threads, "threads");

  const std::string cfg = openblas_get_config();
  const std::string core = openblas_get_corename();
  const int blas_threads = openblas_get_num_threads();
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  const std::string bd = "OpenBLAS kernel " + core + ", " + std::to_string(blas_threads) + " threads (" + cfg + ")";
  // OpenBLAS cores without AVX/FMA kernels: DYNAMIC_ARCH falls back to one of these for CPUs it
  // does not recognise (OpenBLAS 0.3.21 picks Prescott on Emerald Rapids, model 207).
  static const char* const kSseOnly[] = {"Prescott", "Core2",  "Penryn",     "Dunnington", "Nehalem",
                                         "Atom",     "Katmai", "Coppermine", "Northwood",  "Banias",
                                         "Opteron",  "Barcelona", "Nano",    "Bobcat",     "Generic"};
  bool sse_only = false;
  for (const char* c : kSseOnly) sse_only |= core == c;
  const std::string best_core = hw.flags.avx512f ? (hw.flags.avx512_bf16 ? "Cooperlake" : "SkylakeX") : "Haswell";
  if (coretype && *coretype)
    b.add("host.blas", Status::Warn,
          bd + "; OPENBLAS_CORETYPE=" + coretype + " pins the kernel instead of auto-detection" +
              (strcasecmp(coretype, core.c_str()) == 0 ? "" : " (OpenBLAS runs " + core + ": the value was not accepted as given)"),
          "unset OPENBLAS_CORETYPE unless you mean to pin the BLAS kernel", core);
  else if (sse_only && hw.flags.avx2 && hw.flags.fma)
    b.add("host.blas", Status::Warn,
          bd + ": OpenBLAS did not recognise this CPU and runs SSE kernels, far below its AVX peak",
          "export OPENBLAS_CORETYPE=" + best_core + " (or upgrade OpenBLAS)", core);
  else
    b.add("host.blas", Status::Pass, bd + "; kernel auto-detected (OPENBLAS_CORETYPE unset)", "", core);
}

// ---- store -------------------------------------------------------------------------------
void store_checks(std::vector<Check>& checks, rtx::store::Store& st) {
  Builder b{checks, "Store"};
  const int v = st.schema_version(), latest = rtx::store::Store::latest_schema_version();
  const std::vector<std::string> ic = st.integrity_check();
  const bool ok = ic.size() == 1 && ic[0] == "ok";
  const std::string where = st.path() + ": schema v" + std::to_string(v) + " (this rtx knows v" +
                            std::to_string(latest) + ")";
  if (!ok) {
    std::string first = ic.empty() ? "no result" : ic.front();
    b.add("store.integrity", Status::Fail, where + ", integrity check failed: " + first,
          "move " + st.path() + " aside (rtx recreates it) or restore a backup", static_cast<int>(ic.size()), "problems");
  } else if (v != latest) {
    b.add("store.schema", Status::Fail, where + ": schema version mismatch after migrations",
          "upgrade rtx or use another --db", v, "");
  } else {
    b.add("store.schema", Status::Pass, where + ", writable, integrity ok", "", v, "");
  }
}

// ---- GPU ---------------------------------------------------------------------------------
std::string cuda_ver(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

void gpu_checks(std::vector<Check>& checks, const tel::HardwareProfile& hw) {
  Builder b{checks, "GPU"};
  if (!hw.cuda_built) {
    b.add("gpu.backend", Status::Warn, "this rtx build has no CUDA backend: GPU checks and probes skipped",
          "rebuild with the CUDA toolkit (cmake -DRTX_CUDA=ON) on a GPU machine");
    return;
  }
  if (hw.driver_version == 0)
    b.add("gpu.driver", Status::Warn,
          "no NVIDIA driver installed (libcuda.so.1 not found): this build's CUDA " + cuda_ver(hw.runtime_version) +
              " runtime cannot reach a GPU",
          "install the NVIDIA driver and check it with nvidia-smi", 0, "");
  else if (hw.driver_version < hw.runtime_version)
    b.add("gpu.driver", Status::Fail,
          "driver supports CUDA " + cuda_ver(hw.driver_version) + " but this build's runtime is CUDA " +
              cuda_ver(hw.runtime_version),
          "upgrade the NVIDIA driver to one supporting CUDA " + cuda_ver(hw.runtime_version), hw.driver_version, "");
  else
    b.add("gpu.driver", Status::Pass,
          "driver " + (hw.nvml_driver.empty() ? std::string("?") : hw.nvml_driver) + " supports CUDA " +
              cuda_ver(hw.driver_version) + ", runtime CUDA " + cuda_ver(hw.runtime_version),
          "", hw.driver_version, "");

  if (hw.gpus.empty()) {
    b.add("gpu.devices", Status::Warn, "no usable GPU: " + hw.cuda_unavailable,
          "run on a machine with an NVIDIA GPU; CPU checks above still apply", 0, "GPUs");
  }
  for (const auto& g : hw.gpus) {
    const std::string p = "gpu" + std::to_string(g.index);
    b.add(p + ".device", Status::Pass,
          g.name + ", " + g.arch() + ", " + std::to_string(g.sm_count) + " SMs, " + gib(g.memory_bytes) + ", SKU " +
              tel::gpu_sku_key(g),
          "", tel::gpu_sku_key(g));
    if (g.ecc_enabled < 0)
      b.add(p + ".ecc", Status::Warn, "ECC state unknown (NVML not loadable: " + telemetry::detail::load_error("nvml") + ")",
            "install the NVIDIA driver's NVML (libnvidia-ml.so.1)");
    else if (g.ecc_enabled == 0)
      b.add(p + ".ecc", Status::Warn, "ECC disabled", "enable with nvidia-smi -e 1 (reboot) if the GPU supports it", 0, "");
    else if (g.ecc_uncorrected > 0)
      b.add(p + ".ecc", Status::Fail, std::to_string(g.ecc_uncorrected) + " uncorrected ECC errors since driver load",
            "drain the GPU and check nvidia-smi -q -d ECC; reset or replace it", static_cast<double>(g.ecc_uncorrected),
            "errors");
    else if (g.ecc_corrected > 0)
      b.add(p + ".ecc", Status::Warn, std::to_string(g.ecc_corrected) + " corrected ECC errors since driver load",
            "watch nvidia-smi -q -d ECC; rising counts precede failures", static_cast<double>(g.ecc_corrected), "errors");
    else
      b.add(p + ".ecc", Status::Pass, "ECC on, no errors", "", 0, "errors");

    if (g.clock_sm_max_mhz > 0)
      b.add(p + ".clocks", Status::Pass,
            "SM " + std::to_string(g.clock_sm_mhz) + "/" + std::to_string(g.clock_sm_max_mhz) + " MHz, memory " +
                std::to_string(g.clock_mem_mhz) + "/" + std::to_string(g.clock_mem_max_mhz) +
                " MHz (now/max; an idle GPU clocks down)",
            "", g.clock_sm_mhz, "MHz");
    else
      b.add(p + ".clocks", Status::Warn, "clocks unknown (NVML not available)", "install the driver's NVML");

    if (g.pcie_width_max > 0 && g.pcie_width < g.pcie_width_max)
      b.add(p + ".pcie", Status::Warn,
            "PCIe x" + std::to_string(g.pcie_width) + " of x" + std::to_string(g.pcie_width_max) + " (gen " +
                std::to_string(g.pcie_gen) + "/" + std::to_string(g.pcie_gen_max) + ")",
            "reseat the card or use a full-width slot; check BIOS lane bifurcation", g.pcie_width, "lanes");
    else if (g.pcie_width_max > 0)
      b.add(p + ".pcie", Status::Pass,
            "PCIe x" + std::to_string(g.pcie_width) + "/x" + std::to_string(g.pcie_width_max) + ", gen " +
                std::to_string(g.pcie_gen) + "/" + std::to_string(g.pcie_gen_max) + " (an idle link may down-train its gen)",
            "", g.pcie_width, "lanes");
    else
      b.add(p + ".pcie", Status::Warn, "PCIe link unknown (NVML not available)", "install the driver's NVML");
  }

  auto lib = [&](const char* name, const std::string& ver, const char* key, const char* fix) {
    if (ver.empty())
      b.add(name, Status::Warn, std::string("not loadable: ") + telemetry::detail::load_error(key), fix);
    else
      b.add(name, Status::Pass, "version " + ver, "", ver);
  };
  lib("gpu.cudnn", hw.cudnn_version, "cudnn", "install cuDNN 9 (libcudnn.so.9) on the loader path");
  lib("gpu.nccl", hw.nccl_version, "nccl", "install NCCL 2 (libnccl.so.2) for multi-GPU training");

  const auto ca = telemetry::detail::cupti_counter_access(!hw.gpus.empty());
  const std::string fix_priv =
      "options nvidia NVreg_RestrictProfilingToAdminUsers=0 in /etc/modprobe.d (then reload the driver), or run as root";
  if (!ca.loadable)
    b.add("gpu.cupti", Status::Warn, ca.detail, "install CUPTI (libcupti.so from the CUDA toolkit) for rtx-trace");
  else if (!ca.attempted)
    b.add("gpu.cupti", Status::Warn, ca.detail + " (version " + hw.cupti_version + ")",
          "run on a GPU machine to check counter permissions", hw.cupti_version);
  else if (ca.result == 35 || (ca.admin_only && !ca.is_root))
    b.add("gpu.cupti", Status::Warn, ca.detail, fix_priv, ca.result, "");
  else if (ca.result != 0)
    b.add("gpu.cupti", Status::Warn, ca.detail, "check the CUPTI and driver versions match", ca.result, "");
  else
    b.add("gpu.cupti", Status::Pass, ca.detail + " (version " + hw.cupti_version + ")", "", hw.cupti_version);
}

// ---- probes ------------------------------------------------------------------------------
void run_probes(DoctorReport& r, const DoctorOptions& o, const tel::HardwareProfile& hw) {
  Builder b{r.checks, "Probes"};
  auto say = [&](const std::string& s) {
    if (o.progress) std::cerr << "rtx-doctor: " << s << "...\n";
  };
  nlohmann::json& P = r.probes;
  P["skipped"] = false;
  const auto t_start = std::chrono::steady_clock::now();

  // STREAM triad: arrays >= 4x L3 (so caches cannot hold them), capped at 1 GiB each, at 1/8 of RAM
  // and at 1/6 of the available memory (the three arrays then take at most half of it).
  uint64_t per = o.stream_bytes_per_array;
  if (per == 0) {
    per = std::max<uint64_t>(4 * hw.l3_bytes, 64ull << 20);
    per = std::min<uint64_t>(per, 1ull << 30);
    if (hw.memory_bytes > 0) per = std::min<uint64_t>(per, hw.memory_bytes / 8);
    if (const uint64_t avail = mem_available_bytes(); avail > 0) per = std::min<uint64_t>(per, avail / 6);
  }
  const uint64_t n = std::max<uint64_t>(per / sizeof(double), 1);
  say("STREAM triad on 3 x " + std::to_string((n * 8) >> 20) + " MiB");
  const double bw = stream_triad_bytes_per_s(n, o.stream_repeats, o.probe_budget_s);
  P["stream_triad"] = {{"bytes_per_s", bw},
                       {"array_bytes", n * 8},
                       {"elements", n},
                       {"repeats", o.stream_repeats},
                       {"threads", omp_get_max_threads()},
                       {"bytes_per_element", 24},
                       {"covers_l3_times", hw.l3_bytes ? static_cast<double>(n * 8) / hw.l3_bytes : 0.0}};
  b.add("probe.stream_triad", Status::Pass,
        fmt("%.1f GB/s", bw / 1e9) + " (float64 a=b+s*c, 3 x " + std::to_string((n * 8) >> 20) + " MiB, best of <= " +
            std::to_string(o.stream_repeats) + ", 24 B/element; no DRAM datasheet peak known for this host)",
        "", bw, "B/s");

  say("SGEMM " + std::to_string(o.gemm_n) + "^3");
  const double gf = sgemm_flops(o.gemm_n, o.gemm_repeats, o.probe_budget_s);
  const double peak = tel::cpu_peak_fp32_flops(hw);
  const double frac = peak > 0 ? gf / peak : 0;
  P["sgemm"] = {{"flops", gf}, {"n", o.gemm_n}, {"repeats", o.gemm_repeats}, {"peak_fp32_flops", peak},
                {"fraction_of_peak", peak > 0 ? nlohmann::json(frac) : nlohmann::json(nullptr)}};
  std::string gd = fmt("%.1f GFLOP/s", gf / 1e9) + " (cblas_sgemm " + std::to_string(o.gemm_n) + "^3, best of <= " +
                   std::to_string(o.gemm_repeats) + ")";
  if (peak > 0) gd += fmt(" = %.0f%%", 100 * frac) + fmt(" of the %.1f GFLOP/s theoretical peak", peak / 1e9);
  if (peak > 0 && frac < 0.3)
    b.add("probe.sgemm", Status::Warn, gd + ": under 30% of peak",
          "see host.blas (OpenBLAS kernel), host.load and the FMA-unit assumption in host.peak", gf,
          "FLOP/s");
  else if (peak > 0 && frac > 1.0) {  // the peak's clock is a base clock the CPU boosts above
    const double mhz = hw.max_mhz > 0 ? hw.max_mhz : hw.base_mhz;  // the clock host.peak used
    b.add("probe.sgemm", Status::Pass,
          gd + ": above it, so the cores ran faster than host.peak's " + fmt("%.0f MHz", mhz) + " (turbo: at least " +
              fmt("%.0f MHz", mhz * frac) + " for this figure) and roofline percentages of that peak read high",
          "", gf, "FLOP/s");
  }
  else
    b.add("probe.sgemm", Status::Pass, gd, "", gf, "FLOP/s");

  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& g : hw.gpus) {
    say("GPU " + std::to_string(g.index) + " copy bandwidth and bf16 GEMM");
    const auto res = detail::probe_gpu(g.index, 1ull << 30, 8192, 5);
    const auto ds = gpu_datasheet(g.name, g.memory_bytes);
    nlohmann::json j = {{"device", g.index},       {"name", g.name},           {"copy_bytes", res.copy_bytes},
                        {"copy_bytes_per_s", res.copy_bytes_per_s},             {"gemm_n", res.gemm_n},
                        {"bf16_flops", res.bf16_flops}, {"error", res.error}};
    if (ds) {
      j["datasheet"] = {{"model", ds->model}, {"bf16_flops", ds->bf16_flops}, {"bytes_per_s", ds->mem_bytes_per_s},
                        {"source", "vendor datasheet"}};
      j["copy_fraction"] = res.copy_bytes_per_s / ds->mem_bytes_per_s;
      j["bf16_fraction"] = res.bf16_flops / ds->bf16_flops;
    }
    gpus.push_back(j);
    const std::string p = "probe.gpu" + std::to_string(g.index);
    if (!res.error.empty()) {
      b.add(p, Status::Fail, "GPU probe failed: " + res.error, "check nvidia-smi for errors or other processes");
      continue;
    }
    std::string cd = fmt("%.0f GB/s", res.copy_bytes_per_s / 1e9) + " D2D copy (1 GiB, read+write)";
    std::string md = fmt("%.1f TFLOP/s", res.bf16_flops / 1e12) + " bf16 cublasGemmEx 8192^3 (fp32 accumulate)";
    if (ds) {
      cd += fmt(" = %.0f%%", 100 * res.copy_bytes_per_s / ds->mem_bytes_per_s) +
            fmt(" of %.2f TB/s", ds->mem_bytes_per_s / 1e12) + " (vendor datasheet, " + ds->model + ")";
      md += fmt(" = %.0f%%", 100 * res.bf16_flops / ds->bf16_flops) + fmt(" of %.0f TFLOP/s", ds->bf16_flops / 1e12) +
            " dense (vendor datasheet)";
    }
    b.add(p + ".copy", Status::Pass, cd, "", res.copy_bytes_per_s, "B/s");
    b.add(p + ".bf16_gemm", Status::Pass, md, ds ? "" : "GPU not in the datasheet table: no fraction of peak",
          res.bf16_flops, "FLOP/s");
  }
  P["gpus"] = gpus;
  P["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  P["peaks"] = {{"cpu_stream_bytes_per_s", bw},
                {"cpu_sgemm_flops", gf},
                {"cpu_peak_fp32_flops", peak},
                {"gpu_copy_bytes_per_s", gpus.empty() ? 0.0 : gpus[0].value("copy_bytes_per_s", 0.0)},
                {"gpu_bf16_flops", gpus.empty() ? 0.0 : gpus[0].value("bf16_flops", 0.0)},
                {"gpu_datasheet_bf16_flops",
                 gpus.empty() || !gpus[0].contains("datasheet") ? 0.0 : gpus[0]["datasheet"].value("bf16_flops", 0.0)},
                {"gpu_datasheet_bytes_per_s",
                 gpus.empty() || !gpus[0].contains("datasheet") ? 0.0 : gpus[0]["datasheet"].value("bytes_per_s", 0.0)},
                {"hw_digest", tel::digest(hw)},
                {"hw_key", machine_key(hw)},
                {"measured_at", r.created_at}};
}

}  // namespace

const char* status_name(Status s) noexcept {
  switch (s) {
    case Status::Pass: return "PASS";
    case Status::Warn: return "WARN";
    case Status::Fail: return "FAIL";
  }
  return "?";
}

int DoctorReport::count(Status s) const {
  return static_cast<int>(std::count_if(checks.begin(), checks.end(), [&](const Check& c) { return c.status == s; }));
}

int DoctorReport::exit_code() const { return count(Status::Fail) > 0 ? 1 : 0; }

nlohmann::json DoctorReport::to_json() const {
  nlohmann::json cs = nlohmann::json::array();
  for (const auto& c : checks)
    cs.push_back({{"group", c.group}, {"name", c.name}, {"status", status_name(c.status)}, {"detail", c.detail},
                  {"hint", c.hint}, {"value", c.value}, {"unit", c.unit}});
  return {{"schema", kSchema},
          {"rtx_version", rtx::version()},
          {"rtx_sha", rtx::git_sha()},
          {"created_at", created_at},
          {"quick", quick},
          {"hardware", hardware},
          {"checks", cs},
          {"summary", {{"pass", count(Status::Pass)}, {"warn", count(Status::Warn)}, {"fail", count(Status::Fail)}}},
          {"probes", probes},
          {"exit_code", exit_code()}};
}

std::string DoctorReport::render_text(bool color) const {
  auto paint = [&](Status s) -> std::string {
    const char* tag = status_name(s);
    if (!color) return std::string("[") + tag + "]";
    const char* code = s == Status::Pass ? "\033[32m" : s == Status::Warn ? "\033[33m" : "\033[31m";
    return std::string("[") + code + tag + "\033[0m]";
  };
  std::ostringstream o;
  o << "rtx-doctor " << rtx::version() << " (" << rtx::git_sha() << ")" << (quick ? ", quick: probes skipped" : "")
    << "\n";
  std::string group;
  size_t w = 0;
  for (const auto& c : checks) w = std::max(w, c.name.size());
  for (const auto& c : checks) {
    if (c.group != group) {
      group = c.group;
      o << "\n" << (color ? "\033[1m" : "") << group << (color ? "\033[0m" : "") << "\n";
    }
    o << "  " << paint(c.status) << " " << c.name << std::string(w - c.name.size() + 2, ' ') << c.detail << "\n";
    if (c.status != Status::Pass && !c.hint.empty()) o << "         " << std::string(w + 2, ' ') << "fix: " << c.hint << "\n";
  }
  o << "\n"
    << count(Status::Pass) << " passed, " << count(Status::Warn) << " warning(s), " << count(Status::Fail)
    << " failure(s)\n";
  return o.str();
}

DoctorReport run(const DoctorOptions& opts) {
  DoctorReport r;
  r.created_at = utc_now();
  r.quick = opts.quick;
  const tel::HardwareProfile& hw = tel::hardware_profile();
  r.hardware = tel::to_json(hw);

  // The store first: an unwritable RTX_HOME (Environment, exit 3) or a corrupt rtx.db (Input,
  // exit 2) propagates as rtx::Error from here; the doctor never reports those as PASS.
  const std::string db = rtx::store::resolve_db_path(opts.db);
  rtx::store::Store st(db);
  std::optional<MeasuredPeaks> previous;
  if (opts.quick) previous = latest_measured_peaks(st);

  host_checks(r.checks, hw);
  store_checks(r.checks, st);
  gpu_checks(r.checks, hw);
  if (opts.quick) {
    r.probes = {{"skipped", true}, {"reason", "--quick"}};
    if (previous)
      r.probes["peaks"] = {{"cpu_stream_bytes_per_s", previous->cpu_stream_bytes_per_s},
                           {"cpu_sgemm_flops", previous->cpu_sgemm_flops},
                           {"cpu_peak_fp32_flops", previous->cpu_peak_fp32_flops},
                           {"gpu_copy_bytes_per_s", previous->gpu_copy_bytes_per_s},
                           {"gpu_bf16_flops", previous->gpu_bf16_flops},
                           {"gpu_datasheet_bf16_flops", previous->gpu_datasheet_bf16_flops},
                           {"gpu_datasheet_bytes_per_s", previous->gpu_datasheet_bytes_per_s},
                           {"hw_digest", previous->hw_digest},
                           {"hw_key", previous->hw_key},
                           {"measured_at", previous->measured_at},
                           {"carried_over", true}};
  } else {
    run_probes(r, opts, hw);
  }

  if (opts.save) {
    nlohmann::json args = opts.args;
    const int64_t run_id =
        st.begin_run("rtx-doctor", args.dump(), opts.seed, rtx::git_sha(), tel::cpu_sku_key(hw), r.hardware.dump());
    st.put_doctor_report(run_id, r.to_json().dump());
    st.finish_run(run_id, r.exit_code() == 0 ? "ok" : "fail");
  }
  return r;
}

std::optional<MeasuredPeaks> measured_peaks_from_report(const nlohmann::json& rep) {
  if (!rep.is_object() || rep.value("schema", std::string()) != kSchema)
    throw_input("not an rtx.doctor.v1 report", "schema", "pass a report written by rtx-doctor --json");
  if (!rep.contains("probes") || !rep["probes"].is_object() || !rep["probes"].contains("peaks")) return std::nullopt;
  const auto& p = rep["probes"]["peaks"];
  MeasuredPeaks m;
  m.cpu_stream_bytes_per_s = p.value("cpu_stream_bytes_per_s", 0.0);
  m.cpu_sgemm_flops = p.value("cpu_sgemm_flops", 0.0);
  m.cpu_peak_fp32_flops = p.value("cpu_peak_fp32_flops", 0.0);
  m.gpu_copy_bytes_per_s = p.value("gpu_copy_bytes_per_s", 0.0);
  m.gpu_bf16_flops = p.value("gpu_bf16_flops", 0.0);
  m.gpu_datasheet_bf16_flops = p.value("gpu_datasheet_bf16_flops", 0.0);
  m.gpu_datasheet_bytes_per_s = p.value("gpu_datasheet_bytes_per_s", 0.0);
  m.hw_digest = p.value("hw_digest", std::string());
  m.hw_key = p.value("hw_key", std::string());
  m.measured_at = p.value("measured_at", std::string());
  return m;
}

std::optional<MeasuredPeaks> latest_measured_peaks(rtx::store::Store& store, std::string* why) {
  const auto none = [&](std::string reason) -> std::optional<MeasuredPeaks> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  const auto text = store.latest_doctor_report();
  if (!text) return none("no doctor report in the store; run rtx-doctor first");
  nlohmann::json rep;
  try {
    rep = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::exception& e) {
    throw_input(std::string("stored doctor report is not valid JSON: ") + e.what(), store.path(),
                "run rtx-doctor again to store a fresh report");
  }
  auto m = measured_peaks_from_report(rep);
  const std::string at = rep.value("created_at", std::string());
  if (!m)
    return none("the latest doctor report (" + at +
                ") ran with --quick and had no measured peaks to carry over; run rtx-doctor without --quick");
  if (const std::string here = machine_key(tel::hardware_profile()); m->hw_key != here)
    return none("the latest doctor report (" + at + ") was measured on another machine (" + m->hw_key + ", here " +
                here + "); run rtx-doctor on this one");
  return m;
}

}  // namespace rtx::app::doctor
