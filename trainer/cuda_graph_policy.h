// Whether a training step runs as a captured CUDA graph (train.cuda_graph),
// decided once per run from facts known before the first step.
//
// `auto` captures the step when everything in it can be replayed as
// recorded: GPU replicas with mirrored variables whose strategy records its
// steps (Strategy::CanCaptureRuns: one GPU, or logical replicas of one GPU,
// in one process). Anything else trains eagerly; `reason` says why.
#ifndef MIRRORTRAIN_TRAINER_CUDA_GRAPH_POLICY_H_
#define MIRRORTRAIN_TRAINER_CUDA_GRAPH_POLICY_H_

#include <string>

#include "trainer/config.h"

namespace mirrortrain::trainer {

struct CudaGraphFacts {
  bool replicas_on_gpus = false;   // every replica's device is a GPU
  bool mirrored_variables = true;  // not central storage or parameter servers
  // Why the strategy cannot record its steps (Strategy::CanCaptureRuns);
  // "" when it can.
  std::string strategy_reason;
};

struct CudaGraphDecision {
  bool capture = false;
  // Why not, for a one-line notice ("" when capturing or when
  // train.cuda_graph is off).
  std::string reason;
};

CudaGraphDecision DecideCudaGraph(const Config& config,
                                  const CudaGraphFacts& facts);

// Eager steps before the capture: they create the optimizer's slots and
// staged parameters, the libraries' handles and the allocator's blocks.
inline constexpr int kCudaGraphWarmupSteps = 2;

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_CUDA_GRAPH_POLICY_H_
