// CUDA kernel entry points as plain C++ values, so a CPU-only build needs no
// stubs: a header declares each entry point once with
//   MT_CUDA_KERNEL(Unary, absl::Status(UnaryKind kind, DType dtype, ...));
// and the .cu file that implements it (compiled only with CUDA) defines it:
//   MT_DEFINE_CUDA_KERNEL(Unary, UnaryOnGpu);
// Callers write cuda::Unary(kind, dtype, ...) as for a function; without a
// definition (no CUDA in this build) the call returns NotBuiltError naming
// the kernel.
//
// Thread contract: definitions are installed during static initialisation
// and read-only afterwards; calls may come from any thread.
#ifndef MIRRORTRAIN_TENSOR_CUDA_CUDA_KERNEL_H_
#define MIRRORTRAIN_TENSOR_CUDA_CUDA_KERNEL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensor/registry.h"

namespace mirrortrain::cuda {

template <typename Signature>
class CudaKernel;

template <typename... Args>
class CudaKernel<absl::Status(Args...)> {
 public:
  using Fn = absl::Status (*)(Args...);

  constexpr explicit CudaKernel(const char* name) : name_(name) {}
  CudaKernel(const CudaKernel&) = delete;
  CudaKernel& operator=(const CudaKernel&) = delete;

  absl::Status operator()(Args... args) const {
    if (fn_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("CUDA kernel ", name_,
                       ": this mirrortrain was built without CUDA "
                       "(MIRRORTRAIN_CUDA=OFF or no nvcc found)"));
    }
    return fn_(args...);
  }

  const char* name() const { return name_; }
  bool defined() const { return fn_ != nullptr; }
  // Installs the implementation (MT_DEFINE_CUDA_KERNEL).
  bool Define(Fn fn) const {
    fn_ = fn;
    return true;
  }

 private:
  const char* name_;
  mutable Fn fn_ = nullptr;
};

// Every declared entry point, for the test that a CUDA build defines all.
struct CudaKernelInfo {
  std::string name;
  bool (*defined)();
};
using CudaKernelRegistry = Registry<CudaKernelInfo>;

}  // namespace mirrortrain::cuda

// In a header, inside namespace mirrortrain::cuda.
#define MT_CUDA_KERNEL(name, signature)                                   \
  inline constinit const ::mirrortrain::cuda::CudaKernel<signature> name{ \
      #name};                                                             \
  inline const bool mt_cuda_kernel_declared_##name =                      \
      ::mirrortrain::cuda::CudaKernelRegistry::Global().Add(              \
          {#name, [] { return name.defined(); }})

// In the .cu file, inside namespace mirrortrain::cuda, after `impl`.
#define MT_DEFINE_CUDA_KERNEL(name, impl)                            \
  [[maybe_unused]] static const bool mt_cuda_kernel_defined_##name = \
      name.Define(&impl)

#endif  // MIRRORTRAIN_TENSOR_CUDA_CUDA_KERNEL_H_
