#include "distribute/nccl_all_reduce.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device_guard.h"
#include "tensor/status_macros.h"

#define MT_NCCL_RETURN_IF_ERROR(call)                                         \
  do {                                                                        \
    ncclResult_t _mt_nccl = (call);                                           \
    if (_mt_nccl != ncclSuccess) {                                            \
      return absl::InternalError(absl::StrCat(#call, " failed at ", __FILE__, \
                                              ":", __LINE__, ": ",            \
                                              ncclGetErrorString(_mt_nccl))); \
    }                                                                         \
  } while (0)

namespace mirrortrain::distribute {
namespace {

// Owns one communicator; destroyed (never throwing) with its owner, unless
// it was aborted: ncclCommAbort frees it, and destroying it again would be
// a double free.
class NcclComm {
 public:
  explicit NcclComm(ncclComm_t comm) : comm_(comm) {}
  NcclComm(NcclComm&& other) noexcept
      : comm_(std::exchange(other.comm_, nullptr)), aborted_(other.aborted_) {}
  NcclComm& operator=(NcclComm&&) = delete;
  NcclComm(const NcclComm&) = delete;
  ~NcclComm() {
    if (comm_ != nullptr && !aborted_) ncclCommDestroy(comm_);
  }
  ncclComm_t get() const { return comm_; }
  // Aborts the communicator (blocked kernels return); once.
  void Abort() {
    if (comm_ == nullptr || aborted_) return;
    aborted_ = true;
    ncclCommAbort(comm_);
  }

 private:
  ncclComm_t comm_;
  bool aborted_ = false;
};

absl::StatusOr<ncclDataType_t> NcclType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF64:
      return ncclFloat64;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
  }
  return absl::InvalidArgumentError("unsupported dtype");
}

class NcclAllReduce final : public CrossDeviceOps {
 public:
  NcclAllReduce(std::vector<int> devices, std::vector<NcclComm> comms)
      : devices_(std::move(devices)), comms_(std::move(comms)) {}

  absl::Status AllReduce(int replica, ReduceOp op, Tensor& buffer) override {
    if (!buffer.device().is_cuda() ||
        buffer.device().index != devices_[replica]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "NCCL all-reduce: replica ", replica, " buffer ",
          buffer.DebugString(), " is not on gpu:", devices_[replica]));
    }
    MT_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(buffer.dtype()));
    cuda::DeviceGuard guard;
    MT_RETURN_IF_ERROR(guard.Set(devices_[replica]));
    cudaStream_t stream = static_cast<cudaStream_t>(cuda::CurrentStream());
    if (stream == nullptr) stream = cudaStreamPerThread;
    // Not under mu_: with one thread per GPU an enqueue may wait for its
    // peers, which only an abort releases. An abort racing this check is
    // the case ncclCommAbort exists for (as PyTorch's watchdog uses it).
    if (aborted_flag_.load(std::memory_order_acquire)) return AbortReason();
    MT_NCCL_RETURN_IF_ERROR(ncclAllReduce(
        buffer.raw_data(), buffer.raw_data(), buffer.num_elements(), type,
        op == ReduceOp::kMean ? ncclAvg : ncclSum, comms_[replica].get(),
        stream));
    return absl::OkStatus();
  }

  // Aborting makes blocked ranks return; the communicators are unusable
  // after (and freed: never destroyed again), and later collectives fail
  // with the first reason. Any thread, any number of times.
  void Abort(const absl::Status& reason) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.ok()) aborted_ = reason;
    aborted_flag_.store(true, std::memory_order_release);
    for (NcclComm& c : comms_) c.Abort();
  }

  absl::Status AsyncError(int replica) const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_.ok()) return absl::OkStatus();  // Reported already.
    ncclResult_t async = ncclSuccess;
    MT_NCCL_RETURN_IF_ERROR(
        ncclCommGetAsyncError(comms_[replica].get(), &async));
    if (async != ncclSuccess && async != ncclInProgress) {
      return absl::InternalError(absl::StrCat("NCCL on gpu:", devices_[replica],
                                              ": ", ncclGetErrorString(async)));
    }
    return absl::OkStatus();
  }

  std::string name() const override { return "nccl"; }

 private:
  absl::Status AbortReason() const {
    std::lock_guard<std::mutex> lock(mu_);
    return aborted_;
  }

  std::vector<int> devices_;
  mutable std::mutex mu_;  // Orders aborts and asynchronous-error queries.
  std::vector<NcclComm> comms_;
  absl::Status aborted_;  // Guarded by mu_.
  std::atomic<bool> aborted_flag_{false};
};

}  // namespace

bool NcclBuilt() { return true; }

namespace {

// Process p's devices as ranks p*L .. p*L+L-1 of all processes' GPUs.
absl::Status InitAcrossProcesses(const std::vector<int>& devices,
                                 ProcessGroup& processes,
                                 std::vector<ncclComm_t>& raw) {
  ncclUniqueId id;
  if (processes.chief()) MT_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
  MT_RETURN_IF_ERROR(
      processes.Broadcast(&id, sizeof(id), 0, "the NCCL unique id"));
  const int local = static_cast<int>(devices.size());
  const int ranks = local * processes.size();
  // One thread initialises several ranks: inside a group call, so that
  // ncclCommInitRank does not wait for the next local rank.
  MT_NCCL_RETURN_IF_ERROR(ncclGroupStart());
  absl::Status status;
  for (int i = 0; i < local && status.ok(); ++i) {
    cuda::DeviceGuard guard;
    status = guard.Set(devices[i]);
    if (!status.ok()) break;
    const ncclResult_t r =
        ncclCommInitRank(&raw[i], ranks, id, processes.rank() * local + i);
    if (r != ncclSuccess) {
      status = absl::InternalError(
          absl::StrCat("ncclCommInitRank(rank ", processes.rank() * local + i,
                       " of ", ranks, ") failed: ", ncclGetErrorString(r)));
    }
  }
  const ncclResult_t ended = ncclGroupEnd();
  MT_RETURN_IF_ERROR(status);
  if (ended != ncclSuccess) {
    return absl::InternalError(absl::StrCat(
        "ncclCommInitRank (", ranks, " ranks over ", processes.size(),
        " processes) failed: ", ncclGetErrorString(ended)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CrossDeviceOps>> MakeNcclAllReduce(
    const std::vector<int>& devices, ProcessGroup* processes) {
  for (int d : devices) MT_RETURN_IF_ERROR(cuda::CheckDevice(d));
  std::vector<ncclComm_t> raw(devices.size(), nullptr);
  if (processes != nullptr && processes->size() > 1) {
    absl::Status s = InitAcrossProcesses(devices, *processes, raw);
    if (!s.ok()) {
      for (ncclComm_t c : raw) {
        if (c != nullptr) ncclCommDestroy(c);
      }
      return s;
    }
  } else {
    MT_NCCL_RETURN_IF_ERROR(ncclCommInitAll(
        raw.data(), static_cast<int>(devices.size()), devices.data()));
  }
  std::vector<NcclComm> comms;
  for (ncclComm_t c : raw) comms.emplace_back(c);
  return std::unique_ptr<CrossDeviceOps>(
      new NcclAllReduce(devices, std::move(comms)));
}

}  // namespace mirrortrain::distribute
