// Readying the GPUs and their matrix-product libraries ahead of the first
// step.
//
// A GPU job's first allocation would load cuBLAS and cuBLASLt (0.09 s on
// the H100 host), then create the CUDA context (0.13 s), and its first
// products would set the libraries up (0.1 s, with the GPU idle: 61, 28 and
// 10 ms gaps between the first kernels of the 2026-11-26 trace); all of it
// on the time-to-accuracy critical path. WarmUpGpus, run on a thread of its
// own while the model is built and the data loads, creates the contexts
// while the libraries load (cuda::StartDevices), then runs a product of
// each kind, so the first step pays none of it. Most of the cost is per
// process (the libraries' set-up and kernel probes).
//
// Thread contract: call from any thread; it uses that thread's stream and
// returns once its products are done. Its tensors come back to the
// allocator only after that, so the per-thread default stream they used is
// idle when another thread reuses their memory. The process must not exit
// before it returns (cuBLASLt's initialisers, cublas_library.h).
#ifndef MIRRORTRAIN_TRAINER_GPU_WARM_UP_H_
#define MIRRORTRAIN_TRAINER_GPU_WARM_UP_H_

#include <vector>

#include "absl/status/status.h"
#include "tensor/device.h"

namespace mirrortrain::trainer {

// On the GPUs among `devices` (a GPU listed again, a logical replica, is
// warm already): their contexts, then on each a small plain product
// (cuBLAS) and a fused bias+relu one (cuBLASLt's epilogue, its operands
// bfloat16 under bf16) in the process's matrix-product precision. Nothing
// on CPUs. The first error, if any; the products report it again.
absl::Status WarmUpGpus(const std::vector<Device>& devices);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_GPU_WARM_UP_H_
