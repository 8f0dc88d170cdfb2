// NVML, cuDNN, NCCL and CUPTI loaded with dlopen: version probes and the CUPTI counter-permission
// check. Function signatures follow the vendors' public headers (nvml.h, cudnn.h, nccl.h, cupti.h).
#include "telemetry/dynlibs.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <map>
#include <mutex>
#include <string>

namespace rtx::telemetry::detail {
namespace {

std::mutex g_mu;
std::map<std::string, std::string> g_errors;  // library -> dlerror text

/// dlopen the first loadable name; handles stay open for the process (unloading cuDNN/NCCL is unsafe).
void* open_first(const std::string& key, std::initializer_list<const char*> names) {
  std::lock_guard<std::mutex> lk(g_mu);
  std::string errs;
  for (const char* n : names) {
    if (void* h = ::dlopen(n, RTLD_LAZY | RTLD_LOCAL)) {
      g_errors[key].clear();
      return h;
    }
    const char* e = ::dlerror();
    errs += std::string(e ? e : n) + "; ";
  }
  g_errors[key] = errs.empty() ? errs : errs.substr(0, errs.size() - 2);
  return nullptr;
}

template <class F>
F sym(void* h, const char* name) {
  return h ? reinterpret_cast<F>(::dlsym(h, name)) : nullptr;
}

void* nvml_handle() {
  static void* h = [] {
    void* lib = open_first("nvml", {"libnvidia-ml.so.1", "libnvidia-ml.so"});
    if (!lib) return static_cast<void*>(nullptr);
    auto init = sym<int (*)()>(lib, "nvmlInit_v2");
    if (!init || init() != 0) {
      std::lock_guard<std::mutex> lk(g_mu);
      g_errors["nvml"] = "nvmlInit_v2 failed (driver not loaded?)";
      return static_cast<void*>(nullptr);
    }
    return lib;
  }();
  return h;
}

}  // namespace

std::string load_error(const std::string& lib) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = g_errors.find(lib);
  return it == g_errors.end() ? std::string() : it->second;
}

std::string cudnn_version() {
  void* h = open_first("cudnn", {"libcudnn.so.9", "libcudnn.so.8", "libcudnn.so"});
  auto f = sym<size_t (*)()>(h, "cudnnGetVersion");
  if (!f) return "";
  const size_t v = f();
  // cuDNN >= 9: major*10000 + minor*100 + patch; cuDNN 8: major*1000 + minor*100 + patch.
  const size_t div = v >= 90000 ? 10000 : 1000;
  return std::to_string(v / div) + "." + std::to_string((v % div) / 100) + "." + std::to_string(v % 100);
}

std::string nccl_version() {
  void* h = open_first("nccl", {"libnccl.so.2", "libnccl.so"});
  auto f = sym<int (*)(int*)>(h, "ncclGetVersion");
  int v = 0;
  if (!f || f(&v) != 0 || v <= 0) return "";
  // NCCL >= 2.9: major*10000 + minor*100 + patch; older: major*1000 + minor*100 + patch.
  const int div = v >= 20900 ? 10000 : 1000;
  return std::to_string(v / div) + "." + std::to_string((v % div) / 100) + "." + std::to_string(v % 100);
}

static void* cupti_handle() {
  return open_first("cupti", {"libcupti.so", "libcupti.so.13", "libcupti.so.12"});
}

std::string cupti_version() {
  auto f = sym<int (*)(uint32_t*)>(cupti_handle(), "cuptiGetVersion");
  uint32_t v = 0;
  if (!f || f(&v) != 0) return "";
  return std::to_string(v);
}

CuptiAccess cupti_counter_access(bool have_gpu) {
  CuptiAccess a;
  a.is_root = ::geteuid() == 0;
  {
    std::ifstream params("/proc/driver/nvidia/params");
    std::string line;
    while (std::getline(params, line))
      if (line.rfind("RmProfilingAdminOnly:", 0) == 0) a.admin_only = line.find('1') != std::string::npos;
  }
  void* h = cupti_handle();
  // CUpti_Profiler_Initialize_Params: {size_t structSize; void* pPriv;} (cupti_profiler_target.h).
  struct InitParams {
    size_t structSize;
    void* pPriv;
  };
  struct DeinitParams {
    size_t structSize;
    void* pPriv;
  };
  auto init = sym<int (*)(InitParams*)>(h, "cuptiProfilerInitialize");
  auto deinit = sym<int (*)(DeinitParams*)>(h, "cuptiProfilerDeInitialize");
  a.loadable = init != nullptr;
  if (!a.loadable) {
    a.detail = "libcupti not loadable: " + load_error("cupti");
    return a;
  }
  if (!have_gpu) {
    a.detail = "CUPTI loads; counter permission not testable without a GPU";
    return a;
  }
  InitParams p{sizeof(InitParams), nullptr};
  a.attempted = true;
  a.result = init(&p);
  if (a.result == 0 && deinit) {
    DeinitParams d{sizeof(DeinitParams), nullptr};
    deinit(&d);
  }
  if (a.result == 35)
    a.detail = "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: GPU performance counters are restricted to admin users";
  else if (a.result != 0)
    a.detail = "cuptiProfilerInitialize returned CUptiResult " + std::to_string(a.result);
  else if (a.admin_only && !a.is_root)
    a.detail = "driver restricts profiling to admins (RmProfilingAdminOnly: 1) and this process is not root";
  else
    a.detail = "CUPTI profiler initialised: counters readable";
  return a;
}

std::string nvml_driver_version() {
  auto f = sym<int (*)(char*, unsigned)>(nvml_handle(), "nvmlSystemGetDriverVersion");
  char buf[96] = {0};
  if (!f || f(buf, sizeof(buf)) != 0) return "";
  return buf;
}

bool nvml_fill(GpuInfo& g, const std::string& pci_bus_id) {
  void* h = nvml_handle();
  if (!h) return false;
  using Dev = void*;
  auto by_pci = sym<int (*)(const char*, Dev*)>(h, "nvmlDeviceGetHandleByPciBusId_v2");
  Dev d = nullptr;
  if (!by_pci || by_pci(pci_bus_id.c_str(), &d) != 0) return false;
  // nvmlClockType_t: NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2.
  auto clk = sym<int (*)(Dev, int, unsigned*)>(h, "nvmlDeviceGetClockInfo");
  auto clk_max = sym<int (*)(Dev, int, unsigned*)>(h, "nvmlDeviceGetMaxClockInfo");
  unsigned v = 0;
  if (clk && clk(d, 1, &v) == 0) g.clock_sm_mhz = static_cast<int>(v);
  if (clk && clk(d, 2, &v) == 0) g.clock_mem_mhz = static_cast<int>(v);
  if (clk_max && clk_max(d, 1, &v) == 0) g.clock_sm_max_mhz = static_cast<int>(v);
  if (clk_max && clk_max(d, 2, &v) == 0) g.clock_mem_max_mhz = static_cast<int>(v);
  // nvmlEnableState_t current/pending; nvmlMemoryErrorType_t CORRECTED 0 / UNCORRECTED 1; VOLATILE_ECC 0.
  auto ecc_mode = sym<int (*)(Dev, int*, int*)>(h, "nvmlDeviceGetEccMode");
  int cur = 0, pend = 0;
  if (ecc_mode && ecc_mode(d, &cur, &pend) == 0) g.ecc_enabled = cur ? 1 : 0;
  auto ecc_cnt = sym<int (*)(Dev, int, int, unsigned long long*)>(h, "nvmlDeviceGetTotalEccErrors");
  unsigned long long c = 0;
  if (g.ecc_enabled == 1 && ecc_cnt && ecc_cnt(d, 0, 0, &c) == 0) g.ecc_corrected = static_cast<long long>(c);
  if (g.ecc_enabled == 1 && ecc_cnt && ecc_cnt(d, 1, 0, &c) == 0) g.ecc_uncorrected = static_cast<long long>(c);
  auto get = [&](const char* name, int& out) {
    auto f = sym<int (*)(Dev, unsigned*)>(h, name);
    unsigned x = 0;
    if (f && f(d, &x) == 0) out = static_cast<int>(x);
  };
  get("nvmlDeviceGetCurrPcieLinkGeneration", g.pcie_gen);
  get("nvmlDeviceGetMaxPcieLinkGeneration", g.pcie_gen_max);
  get("nvmlDeviceGetCurrPcieLinkWidth", g.pcie_width);
  get("nvmlDeviceGetMaxPcieLinkWidth", g.pcie_width_max);
  return true;
}

}  // namespace rtx::telemetry::detail
