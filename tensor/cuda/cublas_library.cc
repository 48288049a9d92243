#include "tensor/cuda/cublas_library.h"

#include <dlfcn.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

// Names after macro expansion: cublas_v2.h maps cublasCreate to
// cublasCreate_v2, the symbol the library exports.
#define MT_CUBLAS_STRINGIZE(x) #x
#define MT_CUBLAS_SYMBOL(x) MT_CUBLAS_STRINGIZE(x)

namespace mirrortrain::cuda {
namespace {

absl::StatusOr<void*> Open(const std::string& soname) {
  std::string errors;
#ifdef MT_CUBLAS_LIBRARY_DIR
  const std::string at_build =
      std::string(MT_CUBLAS_LIBRARY_DIR) + "/" + soname;
  if (void* h = dlopen(at_build.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  absl::StrAppend(&errors, dlerror(), "; ");
#endif
  if (void* h = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  absl::StrAppend(&errors, dlerror());
  return absl::FailedPreconditionError(absl::StrCat(
      "cannot load ", soname, " (cuBLAS, for GPU products): ", errors));
}

template <typename F>
absl::Status Resolve(void* library, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(library, name));
  if (out == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuBLAS library has no symbol ", name));
  }
  return absl::OkStatus();
}

absl::StatusOr<CublasLibrary> Load() {
  const std::string major = MT_CUBLAS_SYMBOL(CUBLAS_VER_MAJOR);
  // cuBLAS needs cuBLASLt (its DT_NEEDED entry): opening cuBLASLt first
  // finds it where it was built against, not wherever cuBLAS's own search
  // would.
  absl::StatusOr<void*> lt = Open("libcublasLt.so." + major);
  if (!lt.ok()) return lt.status();
  absl::StatusOr<void*> blas = Open("libcublas.so." + major);
  if (!blas.ok()) return blas.status();
  CublasLibrary l;
  absl::Status s;
#define MT_RESOLVE(library, member, symbol) \
  s.Update(Resolve(library, MT_CUBLAS_SYMBOL(symbol), l.member))
  MT_RESOLVE(*blas, Create, cublasCreate);
  MT_RESOLVE(*blas, Destroy, cublasDestroy);
  MT_RESOLVE(*blas, SetStream, cublasSetStream);
  MT_RESOLVE(*blas, SetWorkspace, cublasSetWorkspace);
  MT_RESOLVE(*blas, SetMathMode, cublasSetMathMode);
  MT_RESOLVE(*blas, Sgemm, cublasSgemm);
  MT_RESOLVE(*blas, Dgemm, cublasDgemm);
  MT_RESOLVE(*blas, SgemmStridedBatched, cublasSgemmStridedBatched);
  MT_RESOLVE(*blas, DgemmStridedBatched, cublasDgemmStridedBatched);
  MT_RESOLVE(*blas, GemmEx, cublasGemmEx);
  MT_RESOLVE(*blas, GemmStridedBatchedEx, cublasGemmStridedBatchedEx);
  MT_RESOLVE(*blas, GetStatusName, cublasGetStatusName);
  MT_RESOLVE(*blas, GetStatusString, cublasGetStatusString);
  MT_RESOLVE(*lt, LtCreate, cublasLtCreate);
  MT_RESOLVE(*lt, LtDestroy, cublasLtDestroy);
  MT_RESOLVE(*lt, LtMatmul, cublasLtMatmul);
  MT_RESOLVE(*lt, LtMatmulAlgoGetHeuristic, cublasLtMatmulAlgoGetHeuristic);
  MT_RESOLVE(*lt, LtMatmulDescCreate, cublasLtMatmulDescCreate);
  MT_RESOLVE(*lt, LtMatmulDescDestroy, cublasLtMatmulDescDestroy);
  MT_RESOLVE(*lt, LtMatmulDescSetAttribute, cublasLtMatmulDescSetAttribute);
  MT_RESOLVE(*lt, LtMatmulPreferenceCreate, cublasLtMatmulPreferenceCreate);
  MT_RESOLVE(*lt, LtMatmulPreferenceDestroy, cublasLtMatmulPreferenceDestroy);
  MT_RESOLVE(*lt, LtMatmulPreferenceSetAttribute,
             cublasLtMatmulPreferenceSetAttribute);
  MT_RESOLVE(*lt, LtMatrixLayoutCreate, cublasLtMatrixLayoutCreate);
  MT_RESOLVE(*lt, LtMatrixLayoutDestroy, cublasLtMatrixLayoutDestroy);
#undef MT_RESOLVE
  if (!s.ok()) return s;
  return l;
}

}  // namespace

absl::StatusOr<const CublasLibrary*> LoadCublas() {
  // Loaded once; never unloaded (handles and kernels outlive any caller).
  static const absl::StatusOr<CublasLibrary>* const library =
      new absl::StatusOr<CublasLibrary>(Load());
  if (!library->ok()) return library->status();
  return &**library;
}

std::string CublasStatusText(cublasStatus_t status) {
  absl::StatusOr<const CublasLibrary*> l = LoadCublas();
  if (!l.ok()) return absl::StrCat("cuBLAS status ", static_cast<int>(status));
  return absl::StrCat((*l)->GetStatusName(status), ": ",
                      (*l)->GetStatusString(status));
}

}  // namespace mirrortrain::cuda
