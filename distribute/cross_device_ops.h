// Collective reductions between the replicas of one process.
//
// Thread contract: every replica calls AllReduce from its own thread, the
// same number of times, in the same order, with buffers of the same dtype
// and size (the k-th calls of all replicas form one collective). Abort()
// may be called from any thread; it makes pending and later collectives
// return an error instead of waiting.
#ifndef MIRRORTRAIN_DISTRIBUTE_CROSS_DEVICE_OPS_H_
#define MIRRORTRAIN_DISTRIBUTE_CROSS_DEVICE_OPS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "distribute/strategy.h"
#include "tensor/tensor.h"

namespace mirrortrain::distribute {

// How the replicas of a list collective may cut its elements into tensors:
// anywhere, as long as the totals agree (gradient buckets, which one
// replica may pack and another not), or into tensors of the same sizes
// (ReplicaContext::AllReduce's contract).
enum class ListCuts { kAny, kSame };

class CrossDeviceOps {
 public:
  virtual ~CrossDeviceOps() = default;
  // Replaces `buffer` (replica `replica`'s) by the sum (or mean) over all
  // replicas, in place. Every replica ends with bitwise-identical values.
  virtual absl::Status AllReduce(int replica, ReduceOp op, Tensor& buffer) = 0;
  // The same for `tensors` taken as one buffer, their elements in order,
  // in place: one collective, no packing. Only where reduces_lists() is
  // true; the default reduces a list of one and refuses longer ones.
  virtual absl::Status AllReduceList(int replica, ReduceOp op,
                                     absl::Span<Tensor> tensors,
                                     ListCuts /*cuts*/) {
    if (tensors.size() == 1) return AllReduce(replica, op, tensors[0]);
    return absl::UnimplementedError(
        absl::StrCat(name(), " collectives do not reduce lists"));
  }
  virtual bool reduces_lists() const { return false; }
  virtual void Abort(const absl::Status& reason) = 0;
  // Makes collectives work again after Abort, once no replica is inside
  // one: a step that was only being recorded into a CUDA graph, and failed,
  // ran nothing, so the run can go on eagerly. Default: the ops stay
  // aborted (FailedPrecondition).
  virtual absl::Status Recover() {
    return absl::FailedPreconditionError(
        absl::StrCat(name(), " collectives cannot recover from an abort"));
  }
  // An error the transport met after AllReduce returned (NCCL's
  // asynchronous error on replica `replica`'s communicator); OK if none.
  // Any thread; the collective watchdog polls it.
  virtual absl::Status AsyncError(int /*replica*/) const {
    return absl::OkStatus();
  }
  virtual std::string name() const = 0;
  // Whether AllReduce may be called on a stream that is being recorded
  // into a CUDA graph (it then only enqueues; see MirroredStrategy).
  virtual bool records_into_graphs() const { return false; }
  // False for the `none` ops, which leave every buffer as it is.
  virtual bool reduces() const { return true; }

  // Replicas that share one memory (logical devices: the local ops) may
  // hand each other their tensors instead of reducing them, for a consumer
  // that adds them itself where it reads them (an optimizer update that
  // sums every replica's gradient: the same sum, without a pass of its own
  // that reads and writes every copy). Share posts `tensors` and returns
  // every replica's list, in replica order (this replica's own included),
  // once all have posted the same shapes and dtypes; the calling thread's
  // current stream is then ordered after every replica's work on its
  // tensors. They stay valid and must stay unchanged until EndShare, which
  // every replica calls after enqueueing its reads and before dropping or
  // overwriting its tensors: it orders each replica's later work after
  // every replica's reads. Both are collectives (the k-th calls of all
  // replicas pair up, counted with the reductions).
  virtual bool shares_memory() const { return false; }
  virtual absl::StatusOr<std::vector<std::vector<Tensor>>> Share(
      int /*replica*/, absl::Span<Tensor> /*tensors*/) {
    return absl::UnimplementedError(
        absl::StrCat(name(), " collectives do not share memory"));
  }
  virtual absl::Status EndShare(int /*replica*/) {
    return absl::UnimplementedError(
        absl::StrCat(name(), " collectives do not share memory"));
  }
};

}  // namespace mirrortrain::distribute

#endif  // MIRRORTRAIN_DISTRIBUTE_CROSS_DEVICE_OPS_H_
