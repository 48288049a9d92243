#include "trainer/gpu_warm_up.h"

#include <algorithm>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/ops/fused_ops.h"
#include "tensor/ops/matmul.h"
#include "tensor/status_macros.h"
#include "tensor/tensor.h"

namespace mirrortrain::trainer {
namespace {

absl::Status WarmUpProducts(Device device) {
  constexpr int64_t kSize = 64;
  MT_ASSIGN_OR_RETURN(const Tensor a,
                      Tensor::Zeros(DType::kF32, {kSize, kSize}, device));
  MT_ASSIGN_OR_RETURN(const Tensor bias,
                      Tensor::Zeros(DType::kF32, {kSize}, device));
  MT_ASSIGN_OR_RETURN(const Tensor plain, ops::MatMul(a, a));
  MT_ASSIGN_OR_RETURN(const Tensor fused, ops::MatMulBiasRelu(a, a, bias));
  // Copies to the host wait for the products (see the thread contract).
  MT_RETURN_IF_ERROR(plain.To(Device::Cpu()).status());
  return fused.To(Device::Cpu()).status();
}

}  // namespace

absl::Status WarmUpGpus(const std::vector<Device>& devices) {
  std::vector<int> gpus;
  for (const Device& d : devices) {
    if (d.is_cuda() &&
        std::find(gpus.begin(), gpus.end(), d.index) == gpus.end()) {
      gpus.push_back(d.index);
    }
  }
  if (gpus.empty()) return absl::OkStatus();
  MT_RETURN_IF_ERROR(cuda::StartDevices(gpus));
  for (int gpu : gpus) MT_RETURN_IF_ERROR(WarmUpProducts(Device::Cuda(gpu)));
  return absl::OkStatus();
}

}  // namespace mirrortrain::trainer
