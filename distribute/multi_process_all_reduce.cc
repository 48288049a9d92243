#include "distribute/multi_process_all_reduce.h"

#include "absl/strings/str_cat.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/ops/op_util.h"
#include "tensor/status_macros.h"

namespace mirrortrain::distribute {

MultiProcessAllReduce::MultiProcessAllReduce(
    std::unique_ptr<CrossDeviceOps> local, int local_replicas,
    ProcessGroup* processes, std::chrono::milliseconds watchdog)
    : local_(std::move(local)),
      local_replicas_(local_replicas),
      processes_(processes),
      // Replica 0 may wait up to the group's watchdog for the processes;
      // the others wait for replica 0 longer, so the error that names the
      // missing process comes first.
      barrier_(local_replicas, 2 * watchdog + std::chrono::seconds(1)),
      posted_(local_replicas, nullptr) {}

void MultiProcessAllReduce::Abort(const absl::Status& reason) {
  local_->Abort(reason);
  barrier_.Abort(reason);
}

absl::Status MultiProcessAllReduce::AcrossProcesses(ReduceOp op,
                                                    Tensor& buffer) {
  const std::string what =
      absl::StrCat("all-reduce #", calls_++, " (", buffer.DebugString(), ")");
  Tensor host = buffer;
  if (!buffer.device().is_cpu()) {
    MT_ASSIGN_OR_RETURN(host, buffer.To(Device::Cpu()));
  }
  MT_RETURN_IF_ERROR(processes_->AllReduceSum(host, what));
  if (op == ReduceOp::kMean) {
    // Divided as LocalAllReduce divides its sum, by the replica count.
    const int64_t n = host.num_elements();
    const int replicas = local_replicas_ * processes_->size();
    MT_DISPATCH_ALL(host.dtype(), T, {
      T* data = host.data<T>();
      for (int64_t i = 0; i < n; ++i) data[i] /= static_cast<T>(replicas);
    });
  }
  if (!buffer.device().is_cpu()) {
    MT_RETURN_IF_ERROR(buffer.CopyFrom(host));
    MT_RETURN_IF_ERROR(cuda::Synchronize(buffer.device().index));
  }
  return absl::OkStatus();
}

absl::Status MultiProcessAllReduce::AllReduce(int replica, ReduceOp op,
                                              Tensor& buffer) {
  if (local_replicas_ == 1) return AcrossProcesses(op, buffer);
  // Every local buffer holds the process's sum afterwards.
  MT_RETURN_IF_ERROR(local_->AllReduce(replica, ReduceOp::kSum, buffer));
  posted_[replica] = &buffer;
  MT_RETURN_IF_ERROR(barrier_.Wait(replica, "the process all-reduce"));
  if (replica == 0) {
    absl::Status s = AcrossProcesses(op, buffer);
    if (!s.ok()) {
      // The others never read this buffer: their Wait below fails.
      barrier_.Abort(s);
      return s;
    }
  }
  // Replica 0 is done (or the barrier is aborted).
  MT_RETURN_IF_ERROR(barrier_.Wait(replica, "the process all-reduce result"));
  absl::Status s;
  if (replica != 0) {
    s = buffer.CopyFrom(*posted_[0]);
    if (s.ok() && buffer.device().is_cuda()) {
      s = cuda::Synchronize(buffer.device().index);
    }
  }
  // Replica 0's buffer stays alive until every copy is made.
  barrier_.Join();
  return s;
}

}  // namespace mirrortrain::distribute
