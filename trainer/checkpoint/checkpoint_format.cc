#include "trainer/checkpoint/checkpoint_format.h"

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tensor/status_macros.h"

namespace mirrortrain::trainer {
namespace {

constexpr absl::string_view kGlobalStep = "global_step";

absl::Status Invalid(const SafetensorsFile& file, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(file.path(), ": ", reason));
}

// A metadata integer in [0, max].
absl::StatusOr<int64_t> MetadataCount(const SafetensorsFile& file,
                                      absl::string_view key, int64_t max) {
  auto it = file.metadata().find(std::string(key));
  int64_t v = 0;
  if (it == file.metadata().end() || !absl::SimpleAtoi(it->second, &v)) {
    return Invalid(file, absl::StrCat("metadata '", key,
                                      "' is missing or not an integer"));
  }
  if (v < 0 || v > max) {
    return Invalid(file, absl::StrCat("metadata '", key, "' is ", v,
                                      ", outside [0, ", max, "]"));
  }
  return v;
}

absl::Status CheckFormat(const SafetensorsFile& file) {
  auto it = file.metadata().find("format");
  if (it == file.metadata().end()) {
    return Invalid(file,
                   "metadata 'format' is missing (not a mirrortrain training "
                   "checkpoint; a file of weights starts a run through "
                   "checkpoint.warm_start_from)");
  }
  if (it->second == kCheckpointFormat) {
    if (!file.metadata().contains(std::string(kDataCrc32cKey))) {
      return Invalid(
          file, absl::StrCat("format ", kCheckpointFormat, " without its '",
                             kDataCrc32cKey, "' checksum"));
    }
    return absl::OkStatus();
  }
  if (it->second == kCheckpointFormatV1) return absl::OkStatus();
  return Invalid(
      file, absl::StrCat("unknown checkpoint format '", it->second,
                         "' (this build reads ", kCheckpointFormat, " and ",
                         kCheckpointFormatV1,
                         absl::StartsWith(it->second, "mirrortrain/")
                             ? ")"
                             : "; a file of weights starts a run through "
                               "checkpoint.warm_start_from)"));
}

absl::Status CheckGlobalStep(const SafetensorsFile& file, int64_t step) {
  absl::StatusOr<SafetensorsFile::Info> info = file.GetInfo(kGlobalStep);
  if (!info.ok()) {
    return Invalid(file, absl::StrCat("no '", kGlobalStep, "' tensor"));
  }
  if (info->dtype != DType::kI64 || !info->shape.empty()) {
    return Invalid(
        file,
        absl::StrCat("'", kGlobalStep, "' is ", DTypeName(info->dtype),
                     ShapeToString(info->shape), ", not an int64 scalar"));
  }
  MT_ASSIGN_OR_RETURN(Tensor value, file.Get(kGlobalStep));
  const int64_t global_step = *value.data<int64_t>();
  if (global_step != step) {
    return Invalid(file,
                   absl::StrCat("metadata 'step' is ", step, " but the '",
                                kGlobalStep, "' tensor holds ", global_step));
  }
  return absl::OkStatus();
}

template <typename T>
int64_t CountNonFinite(const Tensor& t) {
  const T* p = t.data<T>();
  int64_t count = 0;
  for (int64_t i = 0; i < t.num_elements(); ++i) count += !std::isfinite(p[i]);
  return count;
}

// Which named tensors hold NaN or infinity: "'name' holds K NaN or
// infinite of N values (and M more tensors)", or "" when none does.
// `get(i)` gives the i-th (name, host tensor), one at a time, so the extra
// memory stays at one tensor.
absl::StatusOr<std::string> NonFiniteReport(
    size_t count,
    const std::function<absl::StatusOr<std::pair<std::string, Tensor>>(size_t)>&
        get) {
  std::string first;
  int tensors = 0;
  for (size_t i = 0; i < count; ++i) {
    MT_ASSIGN_OR_RETURN(auto named, get(i));
    const auto& [name, t] = named;
    if (!t.defined() || (t.dtype() != DType::kF32 && t.dtype() != DType::kF64))
      continue;
    const int64_t bad = t.dtype() == DType::kF32 ? CountNonFinite<float>(t)
                                                 : CountNonFinite<double>(t);
    if (bad == 0) continue;
    if (tensors++ == 0) {
      first = absl::StrCat("'", name, "' holds ", bad, " NaN or infinite of ",
                           t.num_elements(), " values");
    }
  }
  if (tensors > 1)
    absl::StrAppend(&first, " (and ", tensors - 1, " more tensors)");
  return first;
}

absl::Status CheckFinite(const SafetensorsFile& file,
                         absl::Span<const std::string> names) {
  MT_ASSIGN_OR_RETURN(
      const std::string bad,
      NonFiniteReport(
          names.size(),
          [&](size_t i) -> absl::StatusOr<std::pair<std::string, Tensor>> {
            MT_ASSIGN_OR_RETURN(SafetensorsFile::Info info,
                                file.GetInfo(names[i]));
            if (info.dtype != DType::kF32 && info.dtype != DType::kF64) {
              return std::pair<std::string, Tensor>(names[i], Tensor());
            }
            MT_ASSIGN_OR_RETURN(Tensor t, file.Get(names[i]));
            return std::pair<std::string, Tensor>(names[i], std::move(t));
          }));
  if (bad.empty()) return absl::OkStatus();
  return Invalid(
      file,
      absl::StrCat(
          bad, "; set checkpoint.allow_non_finite=true to restore it anyway"));
}

}  // namespace

absl::Status CheckFiniteState(absl::Span<Variable* const> vars, int64_t step) {
  MT_ASSIGN_OR_RETURN(
      const std::string bad,
      NonFiniteReport(
          vars.size(),
          [&](size_t i) -> absl::StatusOr<std::pair<std::string, Tensor>> {
            MT_ASSIGN_OR_RETURN(Tensor host,
                                vars[i]->value().To(Device::Cpu()));
            return std::pair<std::string, Tensor>(vars[i]->name(),
                                                  std::move(host));
          }));
  if (bad.empty()) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat(
      "the state after step ", step, " is not finite: ", bad,
      "; not saved (set checkpoint.allow_non_finite=true to save it anyway)"));
}

absl::StatusOr<CheckpointPosition> CheckTrainingCheckpoint(
    const SafetensorsFile& file, bool allow_non_finite) {
  MT_RETURN_IF_ERROR(CheckFormat(file));
  CheckpointPosition position;
  MT_ASSIGN_OR_RETURN(position.step,
                      MetadataCount(file, "step", kMaxCheckpointStep));
  MT_ASSIGN_OR_RETURN(position.input_epoch,
                      MetadataCount(file, "input_epoch", kMaxCheckpointStep));
  MT_ASSIGN_OR_RETURN(position.input_batch,
                      MetadataCount(file, "input_batch", kMaxCheckpointStep));
  MT_RETURN_IF_ERROR(CheckGlobalStep(file, position.step));
  const auto& metadata = file.metadata();
  if (metadata.contains("input_batch_size")) {
    MT_ASSIGN_OR_RETURN(
        position.input_batch_size,
        MetadataCount(file, "input_batch_size", kMaxCheckpointStep));
    if (*position.input_batch_size < 1) {
      return Invalid(file, "metadata 'input_batch_size' is 0");
    }
  }
  if (metadata.contains("log_window_loss") ||
      metadata.contains("log_window_steps")) {
    MT_ASSIGN_OR_RETURN(position.log_window_steps,
                        MetadataCount(file, "log_window_steps", position.step));
    auto loss = metadata.find("log_window_loss");
    if (loss == metadata.end() ||
        !absl::SimpleAtod(loss->second, &position.log_window_loss)) {
      return Invalid(file,
                     "metadata 'log_window_loss' is missing or not a number");
    }
  }
  if (!allow_non_finite) MT_RETURN_IF_ERROR(CheckFinite(file, file.names()));
  return position;
}

bool IsMirrortrainCheckpoint(const SafetensorsFile& file) {
  auto it = file.metadata().find("format");
  return it != file.metadata().end() &&
         absl::StartsWith(it->second, "mirrortrain/");
}

absl::Status CheckEntriesFinite(const SafetensorsFile& file,
                                absl::Span<const std::string> names,
                                bool allow_non_finite) {
  if (allow_non_finite) return absl::OkStatus();
  return CheckFinite(file, names);
}

}  // namespace mirrortrain::trainer
