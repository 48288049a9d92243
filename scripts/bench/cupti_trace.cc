// A GPU timeline for any CUDA program, without Nsight Systems (the lent
// device has none that works): loaded with LD_PRELOAD, it records every
// kernel, memcpy and memset (GPU start/end, stream) and every CUDA runtime
// call (host start/end, thread) through CUPTI's activity API, and writes
// them at exit as tab-separated lines to $CUPTI_TRACE_OUT:
//
//   kind  start_ns  end_ns  stream_or_thread  name
//
// kind is K (kernel), C (memcpy), S (memset) or R (runtime call). Read it
// with scripts/bench/trace_report.py. Build (on the GPU host):
//
//   nvcc -O2 -shared -Xcompiler -fPIC -o cupti_trace.so cupti_trace.cc -lcupti
//
// A diagnostic for benchmarks only; not part of the build.
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

constexpr size_t kBufferBytes = 8 << 20;

std::mutex mutex;
std::vector<std::string>* lines = nullptr;  // Leaked: outlives static dtors.

void Check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* message = nullptr;
  cuptiGetResultString(r, &message);
  std::fprintf(stderr, "cupti_trace: %s: %s\n", what,
               message ? message : "unknown error");
}

std::string Demangle(const char* name) {
  if (name == nullptr) return "?";
  int status = 0;
  char* plain = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && plain ? plain : name;
  std::free(plain);
  // Template arguments make names long and tabs would break the format.
  for (char& c : out) {
    if (c == '\t' || c == '\n') c = ' ';
  }
  return out.size() > 160 ? out.substr(0, 160) : out;
}

void Add(char kind, uint64_t start, uint64_t end, uint64_t where,
         const std::string& name) {
  char head[96];
  std::snprintf(head, sizeof head, "%c\t%llu\t%llu\t%llu\t", kind,
                static_cast<unsigned long long>(start),
                static_cast<unsigned long long>(end),
                static_cast<unsigned long long>(where));
  lines->push_back(head + name);
}

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size,
                              size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t,
                              size_t valid) {
  std::lock_guard<std::mutex> lock(mutex);
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(record);
        Add('K', k->start, k->end, k->streamId, Demangle(k->name));
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        auto* m = reinterpret_cast<CUpti_ActivityMemcpy6*>(record);
        Add('C', m->start, m->end, m->streamId,
            "memcpy kind " + std::to_string(m->copyKind) + " bytes " +
                std::to_string(m->bytes));
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto* m = reinterpret_cast<CUpti_ActivityMemset4*>(record);
        Add('S', m->start, m->end, m->streamId,
            "memset bytes " + std::to_string(m->bytes));
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME: {
        auto* a = reinterpret_cast<CUpti_ActivityAPI*>(record);
        const char* name = nullptr;
        cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name);
        Add('R', a->start, a->end, a->threadId, name ? name : "?");
        break;
      }
      default:
        break;
    }
  }
  std::free(buffer);
}

__attribute__((constructor)) void Start() {
  lines = new std::vector<std::string>();
  lines->reserve(1 << 20);
  Check(cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted),
        "register callbacks");
  Check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
        "enable kernels");
  Check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enable memcpy");
  Check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enable memset");
  Check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME), "enable runtime");
}

__attribute__((destructor)) void Stop() {
  Check(cuptiActivityFlushAll(1), "flush");
  // A process without CUDA work (a wrapper such as timeout that inherited
  // LD_PRELOAD) must not truncate the trace of the process that had some.
  if (lines->empty()) return;
  const char* path = std::getenv("CUPTI_TRACE_OUT");
  std::FILE* f = std::fopen(path ? path : "cupti_trace.tsv", "w");
  if (f == nullptr) {
    std::perror("cupti_trace: cannot write the trace");
    return;
  }
  std::lock_guard<std::mutex> lock(mutex);
  for (const std::string& line : *lines) std::fprintf(f, "%s\n", line.c_str());
  std::fclose(f);
  std::fprintf(stderr, "cupti_trace: %zu records to %s\n", lines->size(),
               path ? path : "cupti_trace.tsv");
}

}  // namespace
