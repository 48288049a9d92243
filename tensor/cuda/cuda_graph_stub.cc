// cuda_graph.h without CUDA: nothing can be captured or launched; memory
// pools have nothing to route.
#include "tensor/cuda/cuda_graph.h"
#include "tensor/cuda/not_built.h"

namespace mirrortrain::cuda {

absl::Status CudaGraph::BeginCapture(int) { return NotBuiltError(); }
absl::StatusOr<CudaGraph> CudaGraph::EndCapture(int) { return NotBuiltError(); }
CudaGraph::CudaGraph(CudaGraph&&) noexcept {}
CudaGraph& CudaGraph::operator=(CudaGraph&&) noexcept { return *this; }
CudaGraph::~CudaGraph() = default;
absl::Status CudaGraph::Launch() const { return NotBuiltError(); }

absl::StatusOr<bool> StreamIsCapturing(StreamHandle) { return false; }
uint64_t NewGraphMemoryPoolId() { return 1; }
ScopedGraphMemoryPool::ScopedGraphMemoryPool(uint64_t) : previous_(0) {}
ScopedGraphMemoryPool::~ScopedGraphMemoryPool() = default;
uint64_t SetThreadGraphMemoryPool(uint64_t) { return 0; }
absl::Status ReleaseGraphMemoryPool(int, uint64_t) { return absl::OkStatus(); }

}  // namespace mirrortrain::cuda
