#include "distribute/mirrored_variable.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "tensor/status_macros.h"

namespace mirrortrain::distribute {

absl::StatusOr<MirroredVariable> MirroredVariable::Create(
    std::vector<Variable*> copies) {
  if (copies.empty() || copies[0] == nullptr) {
    return absl::InvalidArgumentError("MirroredVariable: no copies");
  }
  for (Variable* v : copies) {
    if (v == nullptr || v->name() != copies[0]->name() ||
        v->dtype() != copies[0]->dtype() || v->shape() != copies[0]->shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat("MirroredVariable '", copies[0]->name(),
                       "': replica copies differ in name, dtype or shape"));
    }
  }
  MirroredVariable m(std::move(copies));
  MT_RETURN_IF_ERROR(m.CheckIdentical());
  return m;
}

absl::Status MirroredVariable::CheckIdentical() const {
  MT_ASSIGN_OR_RETURN(Tensor reference, copies_[0]->value().To(Device::Cpu()));
  for (int r = 1; r < num_replicas(); ++r) {
    MT_ASSIGN_OR_RETURN(Tensor other, copies_[r]->value().To(Device::Cpu()));
    if (other.bytes() != reference.bytes() ||
        std::memcmp(other.raw_data(), reference.raw_data(), other.bytes()) !=
            0) {
      return absl::InternalError(absl::StrCat("replica invariant broken: '",
                                              name(), "' on replica ", r,
                                              " differs from replica 0"));
    }
  }
  return absl::OkStatus();
}

absl::Status MirroredVariable::AssignAll(const Tensor& value) {
  for (Variable* v : copies_) MT_RETURN_IF_ERROR(v->Assign(value));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<MirroredVariable>> MirrorReplicaStates(
    const std::vector<std::vector<Variable*>>& per_replica) {
  std::vector<MirroredVariable> out;
  if (per_replica.empty()) return out;
  for (const std::vector<Variable*>& state : per_replica) {
    if (state.size() != per_replica[0].size()) {
      return absl::InvalidArgumentError(
          "replicas hold different numbers of variables");
    }
  }
  for (size_t i = 0; i < per_replica[0].size(); ++i) {
    std::vector<Variable*> copies;
    for (const std::vector<Variable*>& state : per_replica) {
      copies.push_back(state[i]);
    }
    MT_ASSIGN_OR_RETURN(MirroredVariable m,
                        MirroredVariable::Create(std::move(copies)));
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace mirrortrain::distribute
