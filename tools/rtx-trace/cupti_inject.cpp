// librtx_cupti_inject.so: CUPTI activity tracing injected into any CUDA program through
// CUDA_INJECTION64_PATH (the driver calls InitializeInjection). Writes JSON Lines records to
// $RTX_TRACE_CUPTI_DIR/cupti.<pid>.jsonl for `rtx-trace record` to convert. Never writes to the
// target's stdout; on any CUPTI failure it prints what to do on stderr and leaves the target
// running untraced. Only a GPU machine runs this (scripts/gpu-check).
#include <cupti.h>
#include <cxxabi.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>
#include <unordered_map>

namespace {

constexpr size_t kBufferSize = 8u << 20;  // bytes per activity buffer
constexpr size_t kAlign = 8;              // CUPTI requires 8-byte aligned buffers

std::mutex g_mu;                 // guards g_out, g_open_ranges, counters below
std::FILE* g_out = nullptr;
std::atomic<bool> g_active{false};
uint64_t g_records = 0, g_capped = 0, g_dropped = 0, g_max = 0;
struct OpenRange { std::string name, domain; uint64_t start; uint32_t tid; };
std::unordered_map<uint32_t, OpenRange> g_open_ranges;  // NVTX range id -> start

uint64_t unix_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void warn(const std::string& msg) { std::fprintf(stderr, "rtx-trace (CUPTI injection): %s\n", msg.c_str()); }

void json_str(std::string& out, const char* s) {
  out += '"';
  for (const char* p = s ? s : ""; *p; ++p) {
    const unsigned char c = static_cast<unsigned char>(*p);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

std::string demangle(const char* name) {
  if (!name) return "[unknown kernel]";
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string r = (status == 0 && d) ? d : name;
  std::free(d);
  return r;
}

const char* result_text(CUptiResult r) {
  const char* s = nullptr;
  cuptiGetResultString(r, &s);
  return s ? s : "unknown CUPTI error";
}

void note_locked(const std::string& msg) {
  if (!g_out) return;
  std::string line = "{\"k\":\"note\",\"pid\":" + std::to_string(getpid()) + ",\"message\":";
  json_str(line, msg.c_str());
  line += "}\n";
  std::fputs(line.c_str(), g_out);
}

/// Explains a CUPTI failure and what to do; true when tracing must stop.
bool explain(CUptiResult r, const char* what) {
  std::string msg = std::string(what) + " failed: " + result_text(r);
  bool fatal = true;
  switch (r) {
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
      msg += ". Another profiler (Nsight Systems/Compute, a framework profiler) already uses CUPTI: run the "
             "program under only one of them, or record with `rtx-trace record --cuda off` for engine spans only";
      break;
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES:
      msg += ". GPU performance counters are restricted to admin users: load the driver with "
             "NVreg_RestrictProfilingToAdminUsers=0 or run as root (see NVIDIA's ERR_NVGPUCTRPERM page)";
      break;
    case CUPTI_ERROR_NOT_COMPATIBLE:
    case CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED:
      msg += ". This activity kind is not supported here; tracing goes on without it";
      fatal = false;
      break;
    default:
      msg += ". The program runs on untraced";
  }
  warn(msg);
  std::lock_guard<std::mutex> lk(g_mu);
  note_locked(msg);
  return fatal;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferSize));
  *size = *buffer ? kBufferSize : 0;
  *max_records = 0;  // as many as fit
}

void write_record(std::string& s, const CUpti_Activity* rec) {
  const int pid = getpid();
  char b[512];
  switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      s += "{\"k\":\"kernel\",\"name\":";
      json_str(s, demangle(k->name).c_str());
      std::snprintf(b, sizeof b,
                    ",\"pid\":%d,\"start\":%llu,\"end\":%llu,\"device\":%u,\"context\":%u,\"stream\":%u,\"corr\":%u,"
                    "\"grid\":[%d,%d,%d],\"block\":[%d,%d,%d],\"regs\":%u,\"smem_static\":%d,\"smem_dynamic\":%d}\n",
                    pid, (unsigned long long)k->start, (unsigned long long)k->end, k->deviceId, k->contextId,
                    k->streamId, k->correlationId, k->gridX, k->gridY, k->gridZ, k->blockX, k->blockY, k->blockZ,
                    (unsigned)k->registersPerThread, k->staticSharedMemory, k->dynamicSharedMemory);
      s += b;
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
      const char* kind = "other";
      switch (m->copyKind) {
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: kind = "HtoD"; break;
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: kind = "DtoH"; break;
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: kind = "DtoD"; break;
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: kind = "HtoH"; break;
        case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: kind = "PtoP"; break;
        default: break;
      }
      std::snprintf(b, sizeof b,
                    "{\"k\":\"memcpy\",\"copy\":\"%s\",\"pid\":%d,\"bytes\":%llu,\"start\":%llu,\"end\":%llu,"
                    "\"device\":%u,\"stream\":%u,\"corr\":%u}\n",
                    kind, pid, (unsigned long long)m->bytes, (unsigned long long)m->start, (unsigned long long)m->end,
                    m->deviceId, m->streamId, m->correlationId);
      s += b;
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
      std::snprintf(b, sizeof b,
                    "{\"k\":\"memset\",\"pid\":%d,\"bytes\":%llu,\"value\":%u,\"start\":%llu,\"end\":%llu,"
                    "\"device\":%u,\"stream\":%u,\"corr\":%u}\n",
                    pid, (unsigned long long)m->bytes, m->value, (unsigned long long)m->start,
                    (unsigned long long)m->end, m->deviceId, m->streamId, m->correlationId);
      s += b;
      break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
      const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(rec);
      const bool rt = rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME;
      const char* name = nullptr;
      cuptiGetCallbackName(rt ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API, a->cbid, &name);
      s += "{\"k\":\"api\",\"domain\":\"";
      s += rt ? "runtime" : "driver";
      s += "\",\"name\":";
      json_str(s, name ? name : "[unknown API]");
      std::snprintf(b, sizeof b, ",\"pid\":%u,\"tid\":%u,\"cbid\":%u,\"start\":%llu,\"end\":%llu,\"corr\":%u,\"ret\":%u}\n",
                    a->processId, a->threadId, (unsigned)a->cbid, (unsigned long long)a->start,
                    (unsigned long long)a->end, a->correlationId, a->returnValue);
      s += b;
      break;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
      const auto* y = reinterpret_cast<const CUpti_ActivitySynchronization2*>(rec);
      const char* t = "unknown";
      switch (y->type) {
        case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE: t = "event"; break;
        case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT: t = "stream wait event"; break;
        case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE: t = "stream"; break;
        case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE: t = "context"; break;
        default: break;
      }
      std::snprintf(b, sizeof b,
                    "{\"k\":\"sync\",\"type\":\"%s\",\"pid\":%d,\"start\":%llu,\"end\":%llu,\"stream\":%u,\"corr\":%u}\n",
                    t, pid, (unsigned long long)y->start, (unsigned long long)y->end, y->streamId, y->correlationId);
      s += b;
      break;
    }
    case CUPTI_ACTIVITY_KIND_MARKER: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMarker2*>(rec);
      const uint32_t tid = m->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ? m->objectId.pt.threadId : 0;
      if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS) {
        s += "{\"k\":\"mark\",\"name\":";
        json_str(s, m->name);
        std::snprintf(b, sizeof b, ",\"pid\":%d,\"tid\":%u,\"ts\":%llu}\n", pid, tid, (unsigned long long)m->timestamp);
        s += b;
      } else if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_START) {
        g_open_ranges[m->id] = {m->name ? m->name : "[unnamed range]", m->domain ? m->domain : "", m->timestamp, tid};
      } else if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_END) {
        auto it = g_open_ranges.find(m->id);
        if (it == g_open_ranges.end()) break;
        s += "{\"k\":\"nvtx\",\"name\":";
        json_str(s, it->second.name.c_str());
        s += ",\"domain\":";
        json_str(s, it->second.domain.c_str());
        std::snprintf(b, sizeof b, ",\"pid\":%d,\"tid\":%u,\"start\":%llu,\"end\":%llu}\n", pid, it->second.tid,
                      (unsigned long long)it->second.start, (unsigned long long)m->timestamp);
        s += b;
        g_open_ranges.erase(it);
      }
      break;
    }
    case CUPTI_ACTIVITY_KIND_OVERHEAD: {
      const auto* o = reinterpret_cast<const CUpti_ActivityOverhead3*>(rec);
      const char* kind = "overhead";
      switch (o->overheadKind) {
        case CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER: kind = "driver compiler"; break;
        case CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH: kind = "buffer flush"; break;
        case CUPTI_ACTIVITY_OVERHEAD_CUPTI_INSTRUMENTATION: kind = "instrumentation"; break;
        case CUPTI_ACTIVITY_OVERHEAD_CUPTI_RESOURCE: kind = "resource"; break;
        default: break;
      }
      std::snprintf(b, sizeof b, "{\"k\":\"overhead\",\"kind\":\"%s\",\"pid\":%d,\"start\":%llu,\"end\":%llu}\n", kind,
                    pid, (unsigned long long)o->start, (unsigned long long)o->end);
      s += b;
      break;
    }
    default:
      break;
  }
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t* buffer, size_t, size_t valid) {
  std::string out;
  out.reserve(1 << 16);
  {
    std::lock_guard<std::mutex> lk(g_mu);
    CUpti_Activity* rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
      if (g_max && g_records >= g_max) {
        ++g_capped;
        continue;
      }
      const size_t before = out.size();
      write_record(out, rec);
      if (out.size() != before) ++g_records;
      if (out.size() > (1u << 20) && g_out) {
        std::fwrite(out.data(), 1, out.size(), g_out);
        out.clear();
      }
    }
    if (g_out && !out.empty()) std::fwrite(out.data(), 1, out.size(), g_out);
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS) g_dropped += dropped;
  }
  std::free(buffer);
}

void finish() {
  if (!g_active.exchange(false)) return;
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_out) return;
  std::fprintf(g_out, "{\"k\":\"summary\",\"pid\":%d,\"records\":%llu,\"capped\":%llu,\"dropped\":%llu}\n", getpid(),
               (unsigned long long)g_records, (unsigned long long)g_capped, (unsigned long long)g_dropped);
  std::fclose(g_out);
  g_out = nullptr;
}

}  // namespace

/// Entry point the CUDA driver calls once when it loads this library (CUDA_INJECTION64_PATH).
/// Returns 1 (success) even when tracing could not start, so the program always runs.
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* dir = std::getenv("RTX_TRACE_CUPTI_DIR");
    if (!dir || !*dir) return;  // loaded outside rtx-trace: stay inert
    if (const char* m = std::getenv("RTX_TRACE_MAX_EVENTS")) g_max = std::strtoull(m, nullptr, 10);
    const std::string path = std::string(dir) + "/cupti." + std::to_string(getpid()) + ".jsonl";
    g_out = std::fopen(path.c_str(), "w");
    if (!g_out) {
      warn("cannot write " + path + ": " + std::strerror(errno) + "; the program runs untraced");
      return;
    }
    std::setvbuf(g_out, nullptr, _IOFBF, 1 << 20);
    CUptiResult r = cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);  // gettid, as rtx spans
    if (r != CUPTI_SUCCESS) explain(r, "cuptiSetThreadIdType");
    uint64_t cupti_ts = 0;
    cuptiGetTimestamp(&cupti_ts);
    std::fprintf(g_out, "{\"k\":\"clock\",\"pid\":%d,\"cupti_ns\":%llu,\"unix_ns\":%llu}\n", getpid(),
                 (unsigned long long)cupti_ts, (unsigned long long)unix_ns());
    r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) {
      explain(r, "cuptiActivityRegisterCallbacks");
      std::fclose(g_out);
      g_out = nullptr;
      return;
    }
    const struct { CUpti_ActivityKind kind; const char* name; } kinds[] = {
        {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "CONCURRENT_KERNEL"}, {CUPTI_ACTIVITY_KIND_MEMCPY, "MEMCPY"},
        {CUPTI_ACTIVITY_KIND_MEMSET, "MEMSET"},   {CUPTI_ACTIVITY_KIND_RUNTIME, "RUNTIME"},
        {CUPTI_ACTIVITY_KIND_DRIVER, "DRIVER"},   {CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, "SYNCHRONIZATION"},
        {CUPTI_ACTIVITY_KIND_MARKER, "MARKER"},   {CUPTI_ACTIVITY_KIND_OVERHEAD, "OVERHEAD"}};
    for (const auto& k : kinds) {
      r = cuptiActivityEnable(k.kind);
      if (r != CUPTI_SUCCESS && explain(r, (std::string("cuptiActivityEnable(") + k.name + ")").c_str())) {
        for (const auto& j : kinds) cuptiActivityDisable(j.kind);
        std::lock_guard<std::mutex> lk(g_mu);
        std::fclose(g_out);
        g_out = nullptr;
        return;
      }
    }
    g_active = true;
    std::atexit(finish);
  });
  return 1;
}
