// All-reduce between replicas whose buffers are in host memory (logical CPU
// devices) or on one shared GPU (logical GPU devices; the slice sums then
// run as kernels, see device_slice_sum.h), without copies through a central
// buffer: after all replicas posted their buffers, replica r sums elements
// [r*n/N, (r+1)*n/N) over the replicas, always in replica order 0..N-1,
// and writes the result into every replica's buffer. Each element is
// written by one thread with one value, so all replicas end bitwise
// identical, whatever N. Buffers on different GPUs are an error (that is
// NCCL's job).
//
// A list of tensors is reduced in place as one buffer, their elements in
// order (AllReduceList): no packing, so a gradient bucket costs only its
// sum's reads and writes. Replicas may post the same elements cut into
// different tensors (one packed its bucket, another did not); only the
// total count must agree, unless a replica asks for the same cuts.
//
// The replicas share one memory, so they may also hand each other their
// tensors instead (Share, EndShare): a consumer that sums them where it
// reads them saves the reduction's pass. On a GPU the replicas' streams
// are then ordered by events, eagerly as in a captured step: the host
// waits for no device work there.
//
// While the replicas' streams are being recorded into one CUDA graph (a
// captured step), a GPU all-reduce waits on nothing on the host: each
// replica records an event after its buffer, the slice sums wait for all
// of them on the device, and each replica's stream then waits for every
// slice sum, so the graph holds the same order the eager path enforces
// with synchronisations.
#ifndef MIRRORTRAIN_DISTRIBUTE_LOCAL_ALL_REDUCE_H_
#define MIRRORTRAIN_DISTRIBUTE_LOCAL_ALL_REDUCE_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distribute/cross_device_ops.h"
#include "distribute/replica_barrier.h"
#include "tensor/cuda/stream.h"

namespace mirrortrain::distribute {

class LocalAllReduce final : public CrossDeviceOps {
 public:
  LocalAllReduce(int replicas, std::chrono::milliseconds watchdog);
  absl::Status AllReduce(int replica, ReduceOp op, Tensor& buffer) override {
    return AllReduceList(replica, op, absl::MakeSpan(&buffer, 1),
                         ListCuts::kAny);
  }
  absl::Status AllReduceList(int replica, ReduceOp op,
                             absl::Span<Tensor> tensors,
                             ListCuts cuts) override;
  bool reduces_lists() const override { return true; }
  void Abort(const absl::Status& reason) override { barrier_.Abort(reason); }
  absl::Status Recover() override {
    barrier_.Reset();
    return absl::OkStatus();
  }
  std::string name() const override { return "local"; }
  bool records_into_graphs() const override { return true; }
  bool shares_memory() const override { return true; }
  absl::StatusOr<std::vector<std::vector<Tensor>>> Share(
      int replica, absl::Span<Tensor> tensors) override;
  absl::Status EndShare(int replica) override;

 private:
  // Replica `replica`'s share of the sum, once every buffer is posted; on
  // a GPU enqueued on the current stream, not waited for.
  absl::Status SumMySlice(int replica, ReduceOp op);
  // Whether every replica posted the same number of elements, of one dtype
  // on one device, cut the same way where any replica asked for that
  // (ListCuts::kSame); the same answer on every replica.
  absl::Status CheckPosted(int replica) const;
  // The device all-reduce inside a stream capture (see above).
  absl::Status CapturedAllReduce(int replica, ReduceOp op, int device,
                                 const std::string& what);
  // Every replica's list, once they are posted: the same number of
  // tensors, alike one by one, in one memory.
  absl::StatusOr<std::vector<std::vector<Tensor>>> SharedLists(
      int replica) const;
  // Per replica, on its GPU: where its stream had posted its buffer and
  // summed its slice (a recorded all-reduce), and where it had made its
  // shared tensors (`posted`, Share) and read its peers' (`read`, EndShare).
  struct ReplicaEvents {
    cuda::Event posted, summed, read;
  };
  // Records the replica's `which` event on its current stream, creating
  // its events on first use; aborts the barrier on failure.
  absl::Status RecordPoint(int replica, int device,
                           cuda::Event ReplicaEvents::*which);
  // After a rendezvous: the current stream waits for every peer's `which`.
  absl::Status WaitForPeers(int replica,
                            cuda::Event ReplicaEvents::*which) const;

  const int replicas_;
  ReplicaBarrier barrier_;
  // Per replica, valid between barriers.
  std::vector<absl::Span<Tensor>> posted_;
  std::vector<ListCuts> cuts_;
  std::vector<uint64_t> calls_;  // Per replica: collectives so far.
  std::vector<std::unique_ptr<ReplicaEvents>> events_;
  // Per replica: the GPU its shared tensors are on, from Share to EndShare.
  std::vector<std::optional<int>> shared_gpu_;
};

}  // namespace mirrortrain::distribute

#endif  // MIRRORTRAIN_DISTRIBUTE_LOCAL_ALL_REDUCE_H_
