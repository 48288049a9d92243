#include "distribute/process_group.h"

#include <cstdlib>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "tensor/status_macros.h"

namespace mirrortrain::distribute {

#ifdef MIRRORTRAIN_MPI
// mpi_process_group.cc: MPI_COMM_WORLD.
absl::StatusOr<std::unique_ptr<ProcessGroup>> JoinMpiWorld();
bool MpiBuilt() { return true; }
#else
bool MpiBuilt() { return false; }
#endif

namespace {

class Single final : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "single"; }
  absl::Status AllReduceSum(const Tensor&, absl::string_view) override {
    return absl::OkStatus();
  }
  absl::Status Broadcast(void*, int64_t, int, absl::string_view) override {
    return absl::OkStatus();
  }
  absl::Status Barrier(absl::string_view) override { return absl::OkStatus(); }
  void Abort(int) override {}
};

// The variable a launcher sets in every process it starts, or nullptr.
const char* LauncherVariable() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"}) {
    if (std::getenv(name) != nullptr) return name;
  }
  return nullptr;
}

}  // namespace

std::unique_ptr<ProcessGroup> SingleProcessGroup() {
  return std::make_unique<Single>();
}

absl::StatusOr<std::unique_ptr<ProcessGroup>> JoinProcessGroup() {
  const char* launcher = LauncherVariable();
  if (launcher == nullptr) return SingleProcessGroup();
#ifdef MIRRORTRAIN_MPI
  return JoinMpiWorld();
#else
  return absl::FailedPreconditionError(absl::StrCat(
      "started by an MPI launcher (", launcher, "=", std::getenv(launcher),
      ") but this mirrortrain was built without MPI (install libopenmpi-dev "
      "and rebuild), so its processes would train separate copies"));
#endif
}

absl::Status ProcessGroup::AllReduceSum(absl::Span<double> values,
                                        absl::string_view what) {
  if (size() == 1 || values.empty()) return absl::OkStatus();
  Tensor buffer = Tensor::FromVector<double>(
      std::vector<double>(values.begin(), values.end()),
      {static_cast<int64_t>(values.size())});
  MT_RETURN_IF_ERROR(AllReduceSum(buffer, what));
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = buffer.data<double>()[i];
  }
  return absl::OkStatus();
}

absl::Status ProcessGroup::BroadcastString(std::string& s, int root,
                                           absl::string_view what) {
  if (size() == 1) return absl::OkStatus();
  int64_t length = static_cast<int64_t>(s.size());
  MT_RETURN_IF_ERROR(Broadcast(&length, sizeof(length), root, what));
  s.resize(static_cast<size_t>(length));
  return Broadcast(s.data(), length, root, what);
}

absl::Status ProcessGroup::AgreedStatus(const absl::Status& mine) {
  MT_ASSIGN_OR_RETURN(const absl::Status agreed, Agree(mine));
  return agreed;
}

absl::StatusOr<absl::Status> ProcessGroup::Agree(const absl::Status& mine) {
  if (size() == 1) return mine;
  // Process p's status code at index p: after the sum every process knows
  // which failed.
  std::vector<double> codes(size(), 0.0);
  codes[rank()] = static_cast<double>(mine.code());
  MT_RETURN_IF_ERROR(AllReduceSum(absl::MakeSpan(codes), "status agreement"));
  return AgreeOnCodes(mine, codes);
}

absl::StatusOr<absl::Status> ProcessGroup::AgreeOnCodes(
    const absl::Status& mine, absl::Span<const double> codes) {
  if (size() == 1) return mine;
  if (codes.size() != static_cast<size_t>(size())) {
    return absl::InternalError(absl::StrCat("status agreement: ", codes.size(),
                                            " codes for ", size(),
                                            " processes"));
  }
  int first = -1;
  for (int p = 0; p < size() && first < 0; ++p) {
    if (codes[p] != 0) first = p;
  }
  if (first < 0) return absl::OkStatus();
  if (first == rank()) {
    std::string message(mine.message());
    MT_RETURN_IF_ERROR(BroadcastString(message, first, "status agreement"));
    return MarkAgreed(mine);
  }
  std::string message;
  MT_RETURN_IF_ERROR(BroadcastString(message, first, "status agreement"));
  return MarkAgreed(
      absl::Status(static_cast<absl::StatusCode>(codes[first]),
                   absl::StrCat("process ", first, ": ", message)));
}

namespace {
constexpr absl::string_view kAgreedPayload = "mirrortrain/agreed";
}  // namespace

absl::Status MarkAgreed(absl::Status failure) {
  if (!failure.ok()) failure.SetPayload(kAgreedPayload, absl::Cord());
  return failure;
}

bool IsAgreed(const absl::Status& status) {
  return status.GetPayload(kAgreedPayload).has_value();
}

}  // namespace mirrortrain::distribute
