// Hardware profile: fields sane on this machine, flags consistent with /proc/cpuinfo, SKU keys
// well-formed, digest stable, peak formula checked by hand.
#include <catch2/catch.hpp>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "rtx/core/build_info.hpp"
#include "rtx/core/error.hpp"
#include "rtx/telemetry/hwprofile.hpp"

using namespace rtx::telemetry;

namespace {
/// The "flags" line of /proc/cpuinfo as a set (an independent source for the cpuid decoding).
std::set<std::string> cpuinfo_flags() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  std::set<std::string> out;
  while (std::getline(f, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream in(line.substr(line.find(':') + 1));
    std::string w;
    while (in >> w) out.insert(w);
    break;
  }
  return out;
}
const std::regex kSku("^(cpu|gpu):[a-z0-9_.:-]+$");
}  // namespace

TEST_CASE("hardware profile fields are sane on this machine", "[cpu]") {
  const HardwareProfile& p = hardware_profile();
  CHECK(p.physical_cores >= 1);
  CHECK(p.logical_cpus >= p.physical_cores);
  CHECK(p.sockets >= 1);
  CHECK(p.memory_bytes > (64ull << 20));
  CHECK(!p.cpu_model.empty());
  CHECK(!p.cpu_vendor.empty());
  CHECK(p.omp_max_threads >= 1);
  CHECK(p.l1d_bytes >= 4096);
  CHECK(p.l2_bytes >= p.l1d_bytes);
  CHECK(p.rtx_sha == std::string(rtx::git_sha()));
  CHECK(p.os == "Linux");
  CHECK(!p.kernel.empty());
  CHECK((p.clock_source == "cpufreq" || p.clock_source == "cpuinfo" || p.clock_source == "none"));
  if (p.clock_source != "none") CHECK(p.max_mhz > 100.0);
  CHECK(p.cuda_built == rtx::built_with_cuda());
  if (p.gpus.empty()) CHECK(!p.cuda_unavailable.empty());
}

TEST_CASE("ISA flags agree with /proc/cpuinfo and imply each other", "[cpu]") {
  const CpuFlags& f = hardware_profile().flags;
  const auto ci = cpuinfo_flags();
  REQUIRE(!ci.empty());
  CHECK(f.sse4_2 == (ci.count("sse4_2") == 1));
  CHECK(f.avx == (ci.count("avx") == 1));
  CHECK(f.avx2 == (ci.count("avx2") == 1));
  CHECK(f.fma == (ci.count("fma") == 1));
  CHECK(f.avx512f == (ci.count("avx512f") == 1));
  CHECK(f.avx512bw == (ci.count("avx512bw") == 1));
  CHECK(f.avx512vl == (ci.count("avx512vl") == 1));
  CHECK(f.avx512dq == (ci.count("avx512dq") == 1));
  CHECK(f.avx512cd == (ci.count("avx512cd") == 1));
  CHECK(f.avx512_bf16 == (ci.count("avx512_bf16") == 1));
  CHECK(f.avx512_vnni == (ci.count("avx512_vnni") == 1));
  CHECK(f.avx512_fp16 == (ci.count("avx512_fp16") == 1));
  CHECK(f.amx_tile == (ci.count("amx_tile") == 1));
  if (f.avx512f) CHECK(f.avx2);
  if (f.avx2) CHECK(f.avx);
  if (f.avx512_bf16) CHECK(f.avx512f);
  if (f.amx_bf16) CHECK(f.amx_tile);
}

TEST_CASE("SKU keys are well-formed", "[cpu]") {
  const HardwareProfile& p = hardware_profile();
  const std::string k = sku_key("cpu");
  CHECK(std::regex_match(k, kSku));
  CHECK(k == cpu_sku_key(p));
  const std::string isa = k.substr(k.rfind(':') + 1);
  CHECK((isa == "avx512" || isa == "avx2" || isa == "scalar"));
  if (p.flags.avx512f && p.flags.avx512bw && p.flags.avx512vl && p.flags.avx512dq) CHECK(isa == "avx512");
  CHECK_THROWS_AS(sku_key("tpu"), rtx::Error);
  if (p.gpus.empty()) {
    CHECK_THROWS_AS(sku_key("cuda"), rtx::Error);
  } else {
    CHECK(std::regex_match(sku_key("cuda"), kSku));
  }

  // Known model names -> slugs (profiles are keyed by these, so they must not drift).
  HardwareProfile amd;
  amd.cpu_vendor = "amd";
  amd.cpu_model = "AMD EPYC 9B14 96-Core Processor";
  amd.flags.avx512f = amd.flags.avx512bw = amd.flags.avx512vl = amd.flags.avx512dq = true;
  CHECK(cpu_sku_key(amd) == "cpu:amd-epyc-9b14:avx512");
  HardwareProfile intel;
  intel.cpu_vendor = "intel";
  intel.cpu_model = "Intel(R) Xeon(R) Platinum 8480+";
  intel.flags.avx2 = intel.flags.fma = true;
  CHECK(cpu_sku_key(intel) == "cpu:intel-xeon-platinum-8480:avx2");
  HardwareProfile generic;
  generic.cpu_vendor = "intel";
  generic.cpu_model = "Intel(R) Xeon(R) Processor";
  generic.cpu_family = 6;
  generic.cpu_model_id = 207;
  CHECK(cpu_sku_key(generic) == "cpu:intel-xeon-f6m207:scalar");
  HardwareProfile old;
  old.cpu_vendor = "intel";
  old.cpu_model = "Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz";
  old.flags.avx2 = old.flags.fma = true;
  CHECK(cpu_sku_key(old) == "cpu:intel-core-i7-8700:avx2");

  GpuInfo g;
  g.name = "NVIDIA H200";
  g.cc_major = 9;
  g.cc_minor = 0;
  CHECK(gpu_sku_key(g) == "gpu:sm_90:h200");
  g.name = "NVIDIA GeForce RTX 4090";
  g.cc_major = 8;
  g.cc_minor = 9;
  CHECK(gpu_sku_key(g) == "gpu:sm_89:geforce-rtx-4090");
}

TEST_CASE("digest is stable, short and sensitive to identity", "[cpu]") {
  const std::string d = digest();
  CHECK(d.size() == 16);
  CHECK(std::regex_match(d, std::regex("^[0-9a-f]{16}$")));
  CHECK(digest() == d);
  CHECK(digest(hardware_profile()) == d);
  // A fresh probe of the same machine gives the same digest (no time-varying fields in it).
  CHECK(digest(probe_hardware_profile()) == d);
  HardwareProfile other = hardware_profile();
  other.physical_cores += 1;
  CHECK(digest(other) != d);
  // Concurrent first use from several threads yields one profile.
  std::vector<std::string> got(4);
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; ++i) ts.emplace_back([&, i] { got[i] = digest(); });
  for (auto& t : ts) t.join();
  for (auto& s : got) CHECK(s == d);
  const nlohmann::json id = identity_json();
  CHECK(id.at("rtx_sha") == rtx::git_sha());
  CHECK(std::regex_match(id.at("arch").get<std::string>(), kSku));
  CHECK(id.at("digest") == d);
}

TEST_CASE("theoretical CPU peak follows cores x FMA units x lanes x 2 x clock", "[cpu]") {
  HardwareProfile p;
  p.physical_cores = 2;
  p.fma_units = 2;
  p.vector_bits = 512;
  p.max_mhz = 2300;
  CHECK(cpu_peak_fp32_flops(p) == Approx(2.0 * 2 * 16 * 2 * 2.3e9));
  p.max_mhz = 0;
  p.base_mhz = 1000;
  p.vector_bits = 256;
  p.fma_units = 1;
  p.physical_cores = 7;
  CHECK(cpu_peak_fp32_flops(p) == Approx(7.0 * 1 * 8 * 2 * 1e9));
  p.base_mhz = 0;
  CHECK(cpu_peak_fp32_flops(p) == 0.0);
  const HardwareProfile& h = hardware_profile();
  CHECK(h.fma_units >= 1);
  CHECK((h.vector_bits == 128 || h.vector_bits == 256 || h.vector_bits == 512));
  CHECK(!h.cpu_peak_note.empty());
  if (h.max_mhz > 0) CHECK(cpu_peak_fp32_flops(h) > 1e9);
}

TEST_CASE("to_json carries the documented fields", "[cpu]") {
  const nlohmann::json j = to_json(hardware_profile());
  for (const char* k : {"cpu", "memory_bytes", "gpus", "cuda_built", "driver_version", "runtime_version",
                        "cudnn_version", "nccl_version", "cupti_version", "rtx_sha", "os", "kernel", "digest"})
    CHECK(j.contains(k));
  for (const char* k : {"vendor", "model", "flags", "physical_cores", "logical_cpus", "sockets", "l1d_bytes",
                        "l2_bytes", "l3_bytes", "base_mhz", "max_mhz", "clock_source", "omp_max_threads",
                        "peak_fp32_flops", "peak_note", "sku"})
    CHECK(j["cpu"].contains(k));
  CHECK(j["cpu"]["flags"].size() == 15);
  CHECK(j["digest"] == digest());
}

TEST_CASE("psi_stall_share and look_at_host report the numbers busy_host_warning judges", "[cpu]") {
  const auto psi = [](uint64_t total_us) {
    CpuPressure p;
    p.valid = true;
    p.some_total_us = total_us;
    return p;
  };
  // 50 ms of stall in a 0.2 s look: 25%.
  REQUIRE(psi_stall_share(psi(1'000'000), psi(1'050'000), 0.2));
  CHECK(*psi_stall_share(psi(1'000'000), psi(1'050'000), 0.2) == Approx(0.25).epsilon(1e-12));
  CHECK(*psi_stall_share(psi(0), psi(900'000), 0.2) == 1.0);  // clamped: stall summed over tasks
  CHECK_FALSE(psi_stall_share(psi(10), psi(5), 0.2));          // counter went backwards
  CHECK_FALSE(psi_stall_share(psi(0), psi(5), 0.0));
  CHECK_FALSE(psi_stall_share(CpuPressure{}, psi(5), 0.2));
  const BusyLook l = look_at_host(hardware_profile(), 0.05);
  CHECK(l.look_s >= 0);
  CHECK(l.logical_cpus == hardware_profile().logical_cpus);
  CHECK(l.stall_share.has_value() == read_cpu_pressure().valid);
  if (read_cpu_busy().valid) {
    // The one rule decides on other processes' CPU time (judge_host_window), not on PSI.
    CHECK(l.look_s >= 0.05);
    CHECK(l.warning.empty() == !(l.other_share > kMaxOtherCpuShare));
    if (!l.warning.empty()) CHECK_THAT(l.warning, Catch::StartsWith("other processes took "));
  } else if (l.stall_share) {
    CHECK(l.look_s >= 0.05);
    CHECK(l.warning.empty() == !(*l.stall_share > kBusyPsiStallShare));
  }
}
