// Initialising the GPU matrix-product libraries ahead of the first step.
//
// cuBLAS and cuBLASLt initialise at their first products, with the GPU
// idle: about 0.1 s of the first step of the time-to-accuracy run on the
// H100 (2026-11-26 trace: 61, 28 and 10 ms gaps with no GPU work between
// its first kernels). Most of it is per process (the libraries' setup and
// kernel probes), so running a product of each kind on another thread while
// the model is built and the data loads takes it off the first step.
//
// Thread contract: call from any thread; it uses that thread's stream and
// returns once its products are done. Its tensors come back to the
// allocator only after that, so the per-thread default stream they used is
// idle when another thread reuses their memory.
#ifndef MIRRORTRAIN_TRAINER_GPU_WARM_UP_H_
#define MIRRORTRAIN_TRAINER_GPU_WARM_UP_H_

#include "absl/status/status.h"
#include "tensor/device.h"

namespace mirrortrain::trainer {

// A small plain product (cuBLAS) and a fused bias+relu one (cuBLASLt's
// epilogue, its operands bfloat16 under bf16) on `device`, in the
// process's matrix-product precision; nothing on CPUs.
absl::Status WarmUpProducts(Device device);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_GPU_WARM_UP_H_
