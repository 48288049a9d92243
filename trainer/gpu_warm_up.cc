#include "trainer/gpu_warm_up.h"

#include "tensor/ops/fused_ops.h"
#include "tensor/ops/matmul.h"
#include "tensor/status_macros.h"
#include "tensor/tensor.h"

namespace mirrortrain::trainer {

absl::Status WarmUpProducts(Device device) {
  if (!device.is_cuda()) return absl::OkStatus();
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

}  // namespace mirrortrain::trainer
