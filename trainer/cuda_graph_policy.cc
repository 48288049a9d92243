#include "trainer/cuda_graph_policy.h"

namespace mirrortrain::trainer {

CudaGraphDecision DecideCudaGraph(const Config& config,
                                  const CudaGraphFacts& facts) {
  CudaGraphDecision d;
  if (config.train.cuda_graph == "off") return d;
  auto no = [&d](std::string reason) {
    d.reason = std::move(reason);
    return d;
  };
  if (!facts.replicas_on_gpus) return no("the replicas are not on GPUs");
  if (!facts.mirrored_variables) {
    return no(
        "central storage and parameter servers update outside the "
        "replica's step");
  }
  if (!facts.strategy_reason.empty()) return no(facts.strategy_reason);
  d.capture = true;
  return d;
}

}  // namespace mirrortrain::trainer
