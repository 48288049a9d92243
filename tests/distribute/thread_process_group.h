// The processes of one job as threads of this one, for tests: ThreadWorld
// hands each thread a ProcessGroup (its rank), and their collectives meet
// at a shared rendezvous, so a test can run a job of several "processes"
// (a Trainer per thread) in one binary, without a launcher, and inspect
// what each process returns.
//
// Collectives keep ProcessGroup's contract: sums run in rank order, so
// every member ends with the same bytes. Members that meet in different
// collectives (kind, dtype, bytes or root) all fail there with Internal
// naming both, before any operand is read: the collective-order bugs a
// test of several processes exists to catch. A member that does not
// arrive within the watchdog breaks the world (DeadlineExceeded), and so
// does Abort: every later collective fails at once, so a broken test
// fails rather than hangs (a member leaving a collective on such a break
// may leave another still reading its operand).
//
// Thread contract: each member is used by one thread at a time (as an MPI
// process is); the world outlives its members.
#ifndef MIRRORTRAIN_TESTS_DISTRIBUTE_THREAD_PROCESS_GROUP_H_
#define MIRRORTRAIN_TESTS_DISTRIBUTE_THREAD_PROCESS_GROUP_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "distribute/process_group.h"
#include "tensor/tensor.h"

namespace mirrortrain::testing {

class ThreadWorld {
 public:
  explicit ThreadWorld(
      int size, std::chrono::milliseconds watchdog = std::chrono::minutes(2))
      : size_(size), watchdog_(watchdog), slots_(size) {}

  // The member of rank `rank`; valid while this world lives.
  std::unique_ptr<distribute::ProcessGroup> Member(int rank);

 private:
  class Group;
  enum class Kind { kAllReduceSum, kBroadcast, kBarrier };
  // A member's part in the collective under way.
  struct Slot {
    Kind kind = Kind::kBarrier;
    DType dtype = DType::kF32;  // kAllReduceSum only.
    int64_t bytes = 0;
    int root = 0;  // kBroadcast only.
    const void* data = nullptr;
  };

  static const char* KindName(Kind kind) {
    switch (kind) {
      case Kind::kAllReduceSum:
        return "AllReduceSum";
      case Kind::kBroadcast:
        return "Broadcast";
      case Kind::kBarrier:
        return "Barrier";
    }
    return "?";
  }

  // Publishes `mine` as member `rank`'s slot and waits for every member;
  // then fails (every member alike: they compare the same slots) unless
  // all are in the same collective. A failing member meets the others
  // once more first, so none rewrites its slot for its next collective
  // while another still compares this one's.
  absl::Status Meet(int rank, const Slot& mine, absl::string_view what) {
    slots_[rank] = mine;
    if (absl::Status s = Arrive(what); !s.ok()) return s;
    absl::Status verdict = absl::OkStatus();
    for (size_t r = 1; r < slots_.size() && verdict.ok(); ++r) {
      const Slot& a = slots_[0];
      const Slot& b = slots_[r];
      if (a.kind != b.kind || a.dtype != b.dtype || a.bytes != b.bytes ||
          a.root != b.root) {
        verdict = absl::InternalError(absl::StrCat(
            what, ": member 0 is in ", KindName(a.kind), " of ", a.bytes,
            " bytes (root ", a.root, "), member ", r, " in ", KindName(b.kind),
            " of ", b.bytes, " bytes (root ", b.root, ")"));
      }
    }
    if (verdict.ok()) return verdict;
    if (absl::Status s = Arrive(what); !s.ok()) return s;
    return verdict;
  }

  // Waits until every member has arrived (a rendezvous of all `size_`).
  absl::Status Arrive(absl::string_view what) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!broken_.ok()) return broken_;
    const int64_t generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return absl::OkStatus();
    }
    const bool met = cv_.wait_for(lock, watchdog_, [&] {
      return generation_ != generation || !broken_.ok();
    });
    if (!met) {
      broken_ = absl::DeadlineExceededError(
          absl::StrCat(what, ": a member did not arrive"));
      cv_.notify_all();
    }
    return generation_ != generation ? absl::OkStatus() : broken_;
  }

  void Break(absl::Status why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_.ok()) broken_ = std::move(why);
    cv_.notify_all();
  }

  const int size_;
  const std::chrono::milliseconds watchdog_;
  // Each member's part in the collective under way (written by its owner
  // before the first rendezvous, read by every member before the second).
  std::vector<Slot> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  int64_t generation_ = 0;
  absl::Status broken_;
};

class ThreadWorld::Group final : public distribute::ProcessGroup {
 public:
  Group(ThreadWorld* world, int rank) : world_(world), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return world_->size_; }
  std::string name() const override { return "threads"; }

  absl::Status AllReduceSum(const Tensor& buffer,
                            absl::string_view what) override {
    const Slot mine = {.kind = Kind::kAllReduceSum,
                       .dtype = buffer.dtype(),
                       .bytes = static_cast<int64_t>(buffer.bytes()),
                       .data = buffer.raw_data()};
    if (absl::Status s = world_->Meet(rank_, mine, what); !s.ok()) return s;
    std::vector<char> sum(buffer.bytes());
    absl::Status summed = absl::OkStatus();
    switch (buffer.dtype()) {
      case DType::kF32:
        SumInRankOrder<float>(sum.data(), buffer.num_elements());
        break;
      case DType::kF64:
        SumInRankOrder<double>(sum.data(), buffer.num_elements());
        break;
      case DType::kI32:
        SumInRankOrder<int32_t>(sum.data(), buffer.num_elements());
        break;
      case DType::kI64:
        SumInRankOrder<int64_t>(sum.data(), buffer.num_elements());
        break;
      default:
        summed = absl::UnimplementedError(
            absl::StrCat(what, ": ThreadWorld sums f32, f64, i32 and i64"));
    }
    // Everyone has read every operand before anyone overwrites its own.
    if (absl::Status s = world_->Arrive(what); !s.ok()) return s;
    if (!summed.ok()) return summed;
    std::memcpy(buffer.raw_data(), sum.data(), sum.size());
    return absl::OkStatus();
  }

  absl::Status Broadcast(void* data, int64_t bytes, int root,
                         absl::string_view what) override {
    const Slot mine = {
        .kind = Kind::kBroadcast, .bytes = bytes, .root = root, .data = data};
    if (absl::Status s = world_->Meet(rank_, mine, what); !s.ok()) return s;
    if (rank_ != root) std::memcpy(data, world_->slots_[root].data, bytes);
    // The root's buffer is read by all before it may change.
    return world_->Arrive(what);
  }

  absl::Status Barrier(absl::string_view what) override {
    // Two rendezvous, as the others: the slots are read before the next
    // collective rewrites them.
    if (absl::Status s = world_->Meet(rank_, {}, what); !s.ok()) return s;
    return world_->Arrive(what);
  }

  void Abort(int code) override {
    world_->Break(absl::AbortedError(
        absl::StrCat("process ", rank_, " aborted with ", code)));
  }

 private:
  template <typename T>
  void SumInRankOrder(char* out, int64_t n) const {
    // Rank 0's values, then each next rank's added (not 0 + x: that
    // would turn a -0 into +0).
    T* sum = reinterpret_cast<T*>(out);
    std::memcpy(sum, world_->slots_[0].data, n * sizeof(T));
    for (size_t r = 1; r < world_->slots_.size(); ++r) {
      const T* x = static_cast<const T*>(world_->slots_[r].data);
      for (int64_t i = 0; i < n; ++i) sum[i] += x[i];
    }
  }

  ThreadWorld* world_;
  const int rank_;
};

inline std::unique_ptr<distribute::ProcessGroup> ThreadWorld::Member(int rank) {
  return std::make_unique<Group>(this, rank);
}

}  // namespace mirrortrain::testing

#endif  // MIRRORTRAIN_TESTS_DISTRIBUTE_THREAD_PROCESS_GROUP_H_
