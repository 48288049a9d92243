// CUDA graphs: the work one thread enqueues on its current stream, recorded
// once (stream capture) and replayed with one launch. A replay runs the
// recorded kernels with the recorded arguments and addresses, so values
// that change between replays must be read from device memory
// (StagedTensor), and memory the graph uses must not be handed to other
// work between replays (ScopedGraphMemoryPool).
//
// No CUDA types cross this header; without CUDA, capture and launch return
// FailedPrecondition and the memory pool scope does nothing.
//
// Thread contract: a capture begins and ends on one thread, which enqueues
// nothing else meanwhile; a CudaGraph is launched by one thread at a time.
#ifndef MIRRORTRAIN_TENSOR_CUDA_CUDA_GRAPH_H_
#define MIRRORTRAIN_TENSOR_CUDA_CUDA_GRAPH_H_

#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensor/cuda/cuda_backend.h"

namespace mirrortrain::cuda {

class CudaGraph {
 public:
  // Starts recording the calling thread's current stream on `device`.
  // Relaxed mode: other threads are unaffected, and the caching allocator
  // may still take new memory from the driver.
  static absl::Status BeginCapture(int device);
  // Ends the capture this thread began on `device` and instantiates it.
  // When the capture was invalidated (the step waited on the host, or made
  // a synchronous copy) the graph is discarded and the error says so.
  static absl::StatusOr<CudaGraph> EndCapture(int device);

  CudaGraph() = default;
  CudaGraph(CudaGraph&& other) noexcept;
  CudaGraph& operator=(CudaGraph&& other) noexcept;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  ~CudaGraph();

  bool defined() const { return exec_ != nullptr; }
  // Enqueues one replay on the calling thread's current stream.
  absl::Status Launch() const;
  // Nodes (kernels, copies, memsets) of the recorded graph.
  int64_t num_nodes() const { return num_nodes_; }

 private:
  friend class ScopedCapture;
  void* graph_ = nullptr;
  void* exec_ = nullptr;
  int device_ = -1;
  int64_t num_nodes_ = 0;
  uint64_t memory_pool_ = 0;
};

// Gives the free blocks of graph memory pool `pool_id` on `device` back to
// the driver, after synchronising the device: for a pool whose graph is
// gone or was never made (a failed capture). Blocks still referenced go
// back to the pool when freed, and stay cached.
absl::Status ReleaseGraphMemoryPool(int device, uint64_t pool_id);

// A capture of the calling thread's current stream for a scope: End()
// returns the graph; a capture still open when the scope is left (an error
// return, an exception) is ended and discarded, so the stream is usable
// again. `memory_pool` (0: none) is the pool the recorded work allocates
// from (ScopedGraphMemoryPool on its threads): the graph End() returns owns
// it, and frees its blocks when destroyed; without a graph the scope frees
// them when it ends.
class ScopedCapture {
 public:
  explicit ScopedCapture(int device, uint64_t memory_pool = 0)
      : device_(device), memory_pool_(memory_pool) {}
  ~ScopedCapture() {
    if (open_) CudaGraph::EndCapture(device_).status().IgnoreError();
    if (memory_pool_ != 0) {
      ReleaseGraphMemoryPool(device_, memory_pool_).IgnoreError();
    }
  }
  ScopedCapture(const ScopedCapture&) = delete;
  ScopedCapture& operator=(const ScopedCapture&) = delete;

  absl::Status Begin() {
    absl::Status begun = CudaGraph::BeginCapture(device_);
    open_ = begun.ok();
    return begun;
  }
  absl::StatusOr<CudaGraph> End() {
    open_ = false;
    absl::StatusOr<CudaGraph> graph = CudaGraph::EndCapture(device_);
    if (graph.ok()) graph->memory_pool_ = std::exchange(memory_pool_, 0);
    return graph;
  }

 private:
  const int device_;
  uint64_t memory_pool_;
  bool open_ = false;
};

// Whether `stream` (nullptr: the calling thread's default stream) is being
// recorded into a graph; false without CUDA.
absl::StatusOr<bool> StreamIsCapturing(StreamHandle stream);

// A fresh id for ScopedGraphMemoryPool (never 0).
uint64_t NewGraphMemoryPoolId();

// While alive, the device memory the calling thread allocates comes from
// the pool `pool_id` and goes back to it when freed, also after the scope
// has ended: eager work between replays never gets memory a graph writes.
// Scopes nest; the outermost restores the thread's own pools.
class ScopedGraphMemoryPool {
 public:
  explicit ScopedGraphMemoryPool(uint64_t pool_id);
  ~ScopedGraphMemoryPool();
  ScopedGraphMemoryPool(const ScopedGraphMemoryPool&) = delete;
  ScopedGraphMemoryPool& operator=(const ScopedGraphMemoryPool&) = delete;

 private:
  uint64_t previous_;
};

// The calling thread's graph memory pool (0: none); returns the previous.
uint64_t SetThreadGraphMemoryPool(uint64_t pool_id);

}  // namespace mirrortrain::cuda

#endif  // MIRRORTRAIN_TENSOR_CUDA_CUDA_GRAPH_H_
