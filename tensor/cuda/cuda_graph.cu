// CudaGraph on the CUDA runtime's stream capture (cuda_graph.h).
#include <cuda_runtime.h>

#include <atomic>
#include <utility>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_graph.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/status_macros.h"

namespace mirrortrain::cuda {
namespace {

cudaStream_t CapturedStream() {
  StreamHandle current = CurrentStream();
  return current != nullptr ? static_cast<cudaStream_t>(current)
                            : cudaStreamPerThread;
}

}  // namespace

absl::Status CudaGraph::BeginCapture(int device) {
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  MT_CUDA_RETURN_IF_ERROR(
      cudaStreamBeginCapture(CapturedStream(), cudaStreamCaptureModeRelaxed));
  return absl::OkStatus();
}

absl::StatusOr<CudaGraph> CudaGraph::EndCapture(int device) {
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device));
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(CapturedStream(), &graph);
  if (ended != cudaSuccess) {
    cudaGetLastError();  // Not blamed on later calls.
    if (graph != nullptr) cudaGraphDestroy(graph);
    // The likely cause, where the error says it.
    const char* hint =
        ended == cudaErrorStreamCaptureInvalidated
            ? " (the step waited on the host or copied synchronously)"
        : ended == cudaErrorStreamCaptureUnjoined
            ? " (a stream joined the capture and did not rejoin its origin)"
            : "";
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA graph capture failed: ", cudaGetErrorName(ended),
                     ": ", cudaGetErrorString(ended), hint));
  }
  CudaGraph g;
  g.graph_ = graph;
  g.device_ = device;
  size_t nodes = 0;
  MT_CUDA_RETURN_IF_ERROR(cudaGraphGetNodes(graph, nullptr, &nodes));
  g.num_nodes_ = static_cast<int64_t>(nodes);
  cudaGraphExec_t exec = nullptr;
  // A library may allocate inside the capture (cuBLAS takes its workspace
  // stream-ordered since CUDA 12.2) without freeing it there; such a graph
  // could not be launched twice unless the launch frees it first. Kernels
  // keep the priority of the stream they were captured from (a replica's
  // collectives run ahead of its queued backward work, as eagerly), rather
  // than all taking the launch stream's.
  MT_CUDA_RETURN_IF_ERROR(
      cudaGraphInstantiate(&exec, graph,
                           cudaGraphInstantiateFlagAutoFreeOnLaunch |
                               cudaGraphInstantiateFlagUseNodePriority));
  g.exec_ = exec;
  return g;
}

CudaGraph::CudaGraph(CudaGraph&& other) noexcept
    : graph_(std::exchange(other.graph_, nullptr)),
      exec_(std::exchange(other.exec_, nullptr)),
      device_(std::exchange(other.device_, -1)),
      num_nodes_(std::exchange(other.num_nodes_, 0)),
      memory_pool_(std::exchange(other.memory_pool_, 0)) {}

// The old graph leaves with `other` and is released there.
CudaGraph& CudaGraph::operator=(CudaGraph&& other) noexcept {
  std::swap(graph_, other.graph_);
  std::swap(exec_, other.exec_);
  std::swap(device_, other.device_);
  std::swap(num_nodes_, other.num_nodes_);
  std::swap(memory_pool_, other.memory_pool_);
  return *this;
}

CudaGraph::~CudaGraph() {
  if (graph_ == nullptr && exec_ == nullptr) return;
  DeviceGuard guard;
  if (!guard.Set(device_).ok()) return;
  // A replay may still be running: the executable graph is released by the
  // driver once it has finished.
  if (exec_ != nullptr)
    cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_ != nullptr) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  // After a replay still running: the release synchronises the device.
  if (memory_pool_ != 0) {
    ReleaseGraphMemoryPool(device_, memory_pool_).IgnoreError();
  }
}

absl::Status CudaGraph::Launch() const {
  if (exec_ == nullptr) {
    return absl::FailedPreconditionError("CudaGraph::Launch: no graph");
  }
  DeviceGuard guard;
  MT_RETURN_IF_ERROR(guard.Set(device_));
  MT_CUDA_RETURN_IF_ERROR(
      cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), CapturedStream()));
  return absl::OkStatus();
}

absl::StatusOr<bool> StreamIsCapturing(StreamHandle stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  MT_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(
      stream != nullptr ? static_cast<cudaStream_t>(stream)
                        : cudaStreamPerThread,
      &status));
  return status != cudaStreamCaptureStatusNone;
}

uint64_t NewGraphMemoryPoolId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

ScopedGraphMemoryPool::ScopedGraphMemoryPool(uint64_t pool_id)
    : previous_(SetThreadGraphMemoryPool(pool_id)) {}

ScopedGraphMemoryPool::~ScopedGraphMemoryPool() {
  SetThreadGraphMemoryPool(previous_);
}

}  // namespace mirrortrain::cuda
