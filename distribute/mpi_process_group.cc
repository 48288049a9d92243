// ProcessGroup over MPI_COMM_WORLD (builds with MPI only).
//
// Collectives are built from nonblocking point-to-point messages, polled
// against the watchdog: that bounds every wait, and a pending receive says
// which process never sent, so a stall names the process. (MPI's own
// collectives block without a timeout and do not fix the summation order.)
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "distribute/process_group.h"
#include "tensor/ops/op_util.h"
#include "tensor/ordered_sum.h"
#include "tensor/status_macros.h"

namespace mirrortrain::distribute {
namespace {

std::string MpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<size_t>(length));
}

#define MT_MPI_RETURN_IF_ERROR(call)                                          \
  do {                                                                        \
    const int _mt_mpi = (call);                                               \
    if (_mt_mpi != MPI_SUCCESS) {                                             \
      return absl::InternalError(absl::StrCat(#call, " failed at ", __FILE__, \
                                              ":", __LINE__, ": ",            \
                                              MpiError(_mt_mpi)));            \
    }                                                                         \
  } while (0)

// Messages are cut into pieces MPI's int counts can describe.
constexpr int64_t kMaxMessageBytes = int64_t{1} << 30;

// The nonblocking messages of one collective and the process each talks
// to, so that a wait that times out can say who is missing.
class Exchange {
 public:
  explicit Exchange(int tag) : tag_(tag) {}
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;
  // After a failure some messages are still posted, and the buffers they
  // name are about to be freed. Receives are cancelled and then completed:
  // one still unmatched completes at once, and one already matched (a
  // message under way) finishes its transfer, for up to a second, before
  // the buffer goes. Whatever is still open then (a peer stopped mid-
  // message) is released; sends are released too (cancelling one is
  // deprecated, and a send only reads). The group is broken by then, so
  // nothing more is received on it. After a stop signal's grace there is no
  // second to spare: the grace is half the launcher's SIGKILL timeout
  // (StopGrace), so the process dies a grace later, and the error naming
  // the missing process must be out by then: the wait is a quarter grace.
  ~Exchange() {
    for (size_t i = 0; i < requests_.size(); ++i) {
      if (requests_[i] != MPI_REQUEST_NULL && peers_[i].receive) {
        MPI_Cancel(&requests_[i]);
      }
    }
    const auto give_up = std::chrono::steady_clock::now() +
                         (stopped_ ? std::chrono::milliseconds(*stopped_ / 4)
                                   : std::chrono::milliseconds(1000));
    for (size_t i = 0; i < requests_.size(); ++i) {
      if (requests_[i] == MPI_REQUEST_NULL || !peers_[i].receive) continue;
      int done = 0;
      while (MPI_Test(&requests_[i], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS &&
             !done && std::chrono::steady_clock::now() < give_up) {
        std::this_thread::yield();
      }
    }
    for (MPI_Request& request : requests_) {
      if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
    }
  }
  absl::Status Send(const void* data, int64_t bytes, int peer) {
    return Post(const_cast<void*>(data), bytes, peer, /*receive=*/false);
  }
  absl::Status Receive(void* data, int64_t bytes, int peer) {
    return Post(data, bytes, peer, /*receive=*/true);
  }
  // Waits for every message until `watchdog`; DeadlineExceeded names the
  // processes whose messages did not come.
  // `stop_requested`/`grace`: ProcessGroup::set_stop_check.
  absl::Status Wait(std::chrono::milliseconds watchdog, int rank,
                    absl::string_view what,
                    const std::function<bool()>& stop_requested,
                    std::chrono::milliseconds grace) {
    const auto start = std::chrono::steady_clock::now();
    std::optional<std::chrono::steady_clock::time_point> stop_seen;
    std::vector<int> done(requests_.size());
    std::vector<MPI_Status> statuses(requests_.size());
    for (int polls = 0;; ++polls) {
      int count = 0;
      const int tested =
          MPI_Testsome(static_cast<int>(requests_.size()), requests_.data(),
                       &count, done.data(), statuses.data());
      if (tested != MPI_SUCCESS && tested != MPI_ERR_IN_STATUS) {
        return absl::InternalError(
            absl::StrCat("MPI_Testsome failed: ", MpiError(tested)));
      }
      if (count == MPI_UNDEFINED) break;  // All complete.
      for (int k = 0; k < count; ++k) {
        MT_RETURN_IF_ERROR(CheckReceived(
            done[k], statuses[k], tested == MPI_ERR_IN_STATUS, rank, what));
      }
      const auto now = std::chrono::steady_clock::now();
      if (now - start > watchdog) {
        return Missing(absl::StrCat("within ", Seconds(watchdog), " s"), rank,
                       what);
      }
      if (!stop_seen && stop_requested()) stop_seen = now;
      if (stop_seen && now - *stop_seen > grace) {
        stopped_ = grace;
        return Missing(absl::StrCat("within ", Seconds(grace),
                                    " s of a stop signal (a launcher "
                                    "stops the job when a process dies)"),
                       rank, what);
      }
      // Spin briefly (a collective of a step is usually close), then back
      // off so a long wait does not take a core from the replicas.
      if (polls > 1000) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      } else {
        std::this_thread::yield();
      }
    }
    return absl::OkStatus();
  }

 private:
  struct Peer {
    int rank;
    bool receive;
    int bytes;  // the message's (a receive takes at most this many)
  };
  // A completed message `i` whose status is `status` (its MPI_ERROR field
  // valid when `in_status`): an error, or a receive that got another size
  // than it posted. Peers that disagree on a collective's size (a defect:
  // their configs are checked alike) would otherwise leave the rest of a
  // short message's buffer stale, silently.
  absl::Status CheckReceived(int i, const MPI_Status& status, bool in_status,
                             int rank, absl::string_view what) const {
    const Peer& peer = peers_[i];
    const char* verb = peer.receive ? "receiving from" : "sending to";
    if (in_status && status.MPI_ERROR != MPI_SUCCESS) {
      int error_class = 0;
      MPI_Error_class(status.MPI_ERROR, &error_class);
      if (peer.receive && error_class == MPI_ERR_TRUNCATE) {
        return absl::InternalError(
            absl::StrCat(what, ": process ", peer.rank, " sent more than the ",
                         peer.bytes, " bytes process ", rank, " expected"));
      }
      return absl::InternalError(
          absl::StrCat(what, ": process ", rank, " ", verb, " process ",
                       peer.rank, ": ", MpiError(status.MPI_ERROR)));
    }
    if (!peer.receive) return absl::OkStatus();
    int got = 0;
    MPI_Get_count(&status, MPI_BYTE, &got);
    if (got == peer.bytes) return absl::OkStatus();
    return absl::InternalError(
        absl::StrCat(what, ": process ", peer.rank, " sent ", got,
                     " bytes where process ", rank, " expected ", peer.bytes));
  }
  static double Seconds(std::chrono::milliseconds t) {
    return std::chrono::duration<double>(t).count();
  }
  absl::Status Post(void* data, int64_t bytes, int peer, bool receive) {
    char* p = static_cast<char*>(data);
    do {
      const int n = static_cast<int>(std::min(bytes, kMaxMessageBytes));
      requests_.push_back(MPI_REQUEST_NULL);
      peers_.push_back({peer, receive, n});
      MT_MPI_RETURN_IF_ERROR(
          receive ? MPI_Irecv(p, n, MPI_BYTE, peer, tag_, MPI_COMM_WORLD,
                              &requests_.back())
                  : MPI_Isend(p, n, MPI_BYTE, peer, tag_, MPI_COMM_WORLD,
                              &requests_.back()));
      p += n;
      bytes -= n;
    } while (bytes > 0);
    return absl::OkStatus();
  }
  absl::Status Missing(absl::string_view when, int rank,
                       absl::string_view what) const {
    // A missing receive is a process that never sent; sends pending alone
    // (a peer not receiving) name their peers.
    std::vector<int> missing;
    for (bool receives : {true, false}) {
      for (size_t i = 0; i < requests_.size(); ++i) {
        if (requests_[i] != MPI_REQUEST_NULL && peers_[i].receive == receives &&
            std::find(missing.begin(), missing.end(), peers_[i].rank) ==
                missing.end()) {
          missing.push_back(peers_[i].rank);
        }
      }
      if (!missing.empty()) break;
    }
    std::sort(missing.begin(), missing.end());
    return absl::DeadlineExceededError(
        absl::StrCat("watchdog: process", missing.size() > 1 ? "es " : " ",
                     absl::StrJoin(missing, ", "), " did not reach ", what, " ",
                     when, " (process ", rank, " waited)"));
  }

  const int tag_;
  // Set when Wait gave up after a stop signal's grace: that grace.
  std::optional<std::chrono::milliseconds> stopped_;
  std::vector<MPI_Request> requests_;
  std::vector<Peer> peers_;
};

class MpiWorld final : public ProcessGroup {
 public:
  MpiWorld(int rank, int size, int local_size)
      : rank_(rank), size_(size), local_size_(local_size) {}
  ~MpiWorld() override {
    // After a failure a peer may never arrive at MPI_Finalize's own
    // synchronisation: leave it to the launcher (the process exits non-zero
    // or has called Abort).
    if (broken_.ok()) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }
  std::string name() const override { return "mpi"; }

  absl::Status AllReduceSum(const Tensor& buffer,
                            absl::string_view what) override {
    if (!buffer.device().is_cpu()) {
      return absl::InvalidArgumentError(absl::StrCat("process all-reduce of ",
                                                     buffer.DebugString(),
                                                     ": not in host memory"));
    }
    MT_RETURN_IF_ERROR(broken_);
    absl::Status s;
    MT_DISPATCH_ALL(buffer.dtype(), T, s = SumInRankOrder<T>(buffer, what));
    return Check(s);
  }

  absl::Status Broadcast(void* data, int64_t bytes, int root,
                         absl::string_view what) override {
    MT_RETURN_IF_ERROR(broken_);
    Exchange exchange(NextTag());
    absl::Status s;
    for (int p = 0; p < size_ && s.ok(); ++p) {
      if (p == rank_) continue;
      if (rank_ == root) {
        s = exchange.Send(data, bytes, p);
      } else if (p == root) {
        s = exchange.Receive(data, bytes, p);
      }
    }
    if (s.ok()) s = Wait(exchange, what);
    return Check(s);
  }

  absl::Status Barrier(absl::string_view what) override {
    MT_RETURN_IF_ERROR(broken_);
    Exchange exchange(NextTag());
    char out = 0;
    std::vector<char> inbox(size_);
    absl::Status s;
    for (int p = 0; p < size_ && s.ok(); ++p) {
      if (p == rank_) continue;
      s = exchange.Send(&out, 1, p);
      if (s.ok()) s = exchange.Receive(&inbox[p], 1, p);
    }
    if (s.ok()) s = Wait(exchange, what);
    return Check(s);
  }

  void Abort(int code) override {
    broken_ = absl::AbortedError("aborted");
    MPI_Abort(MPI_COMM_WORLD, code);
  }

 private:
  // Process p owns elements [n*p/P, n*(p+1)/P): it receives that slice from
  // every process, sums the P copies in rank order, and sends the sum back
  // to all. Each process sends and receives (P-1)/P of the buffer twice,
  // as a ring all-reduce does.
  template <typename T>
  absl::Status SumInRankOrder(const Tensor& buffer, absl::string_view what) {
    T* data = buffer.data<T>();
    const int64_t n = buffer.num_elements();
    auto begin = [&](int p) { return n * p / size_; };
    const int64_t mine = begin(rank_), count = begin(rank_ + 1) - mine;
    std::vector<T> copies(static_cast<size_t>(count * size_));
    {
      Exchange exchange(NextTag());
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;
        MT_RETURN_IF_ERROR(
            exchange.Receive(copies.data() + p * count, count * sizeof(T), p));
        MT_RETURN_IF_ERROR(exchange.Send(
            data + begin(p), (begin(p + 1) - begin(p)) * sizeof(T), p));
      }
      MT_RETURN_IF_ERROR(Wait(exchange, what));
    }
    // This process's own copy is read where it is (OrderedSum reads a block
    // of every part before writing it); its slot in `copies` stays unused.
    T* const out = data + mine;
    std::vector<const T*> parts;
    for (int p = 0; p < size_; ++p) {
      parts.push_back(p == rank_ ? out : copies.data() + p * count);
    }
    OrderedSum<T>(parts, count, /*mean=*/false, {&out, 1});
    Exchange exchange(NextTag());
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      MT_RETURN_IF_ERROR(exchange.Receive(
          data + begin(p), (begin(p + 1) - begin(p)) * sizeof(T), p));
      MT_RETURN_IF_ERROR(exchange.Send(data + mine, count * sizeof(T), p));
    }
    return Wait(exchange, what);
  }

  absl::Status Wait(Exchange& exchange, absl::string_view what) {
    return exchange.Wait(
        watchdog(), rank_, what, [this] { return stop_requested(); },
        stop_grace());
  }
  // A failed collective leaves messages in flight: the group is unusable.
  absl::Status Check(absl::Status s) {
    if (!s.ok() && broken_.ok()) broken_ = s;
    return s;
  }
  // Every process numbers its collectives alike; distinct tags keep a late
  // message of one from matching another.
  int NextTag() { return static_cast<int>(calls_++ % 32000); }

  const int rank_, size_, local_size_;
  uint64_t calls_ = 0;
  absl::Status broken_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGroup>> JoinMpiWorld() {
  int provided = 0;
  MT_MPI_RETURN_IF_ERROR(
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    return absl::FailedPreconditionError(
        "MPI does not support MPI_THREAD_SERIALIZED (collectives run on "
        "replica threads)");
  }
  // Errors come back as codes (turned into a Status), never abort here.
  MT_MPI_RETURN_IF_ERROR(
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  int rank = 0, size = 1;
  MT_MPI_RETURN_IF_ERROR(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MT_MPI_RETURN_IF_ERROR(MPI_Comm_size(MPI_COMM_WORLD, &size));
  // The processes that share this host's memory (and cores).
  MPI_Comm host;
  MT_MPI_RETURN_IF_ERROR(MPI_Comm_split_type(
      MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host));
  int local_size = 1;
  const int got = MPI_Comm_size(host, &local_size);
  MPI_Comm_free(&host);
  MT_MPI_RETURN_IF_ERROR(got);
  return std::unique_ptr<ProcessGroup>(new MpiWorld(rank, size, local_size));
}

}  // namespace mirrortrain::distribute
