#include "trainer/early_stopping.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mirrortrain::trainer {
namespace {

constexpr char kBest[] = "early_stopping_best";
constexpr char kBestStep[] = "early_stopping_best_step";
constexpr char kWait[] = "early_stopping_wait";

}  // namespace

bool EarlyStopping::Update(double value, int64_t step) {
  ++wait_;
  const bool improved =
      !best_.has_value() ||
      (options_.maximize ? value - options_.min_delta > *best_
                         : value + options_.min_delta < *best_);
  if (improved) {
    best_ = value;
    best_step_ = step;
    wait_ = 0;
    return false;
  }
  return stopped();
}

void EarlyStopping::Save(std::map<std::string, std::string>& metadata) const {
  // %.17g: the same double back; "none" before the first evaluation.
  metadata[kBest] =
      best_.has_value() ? absl::StrFormat("%.17g", *best_) : "none";
  metadata[kBestStep] = absl::StrCat(best_step_);
  metadata[kWait] = absl::StrCat(wait_);
}

absl::Status EarlyStopping::Restore(
    const std::map<std::string, std::string>& metadata,
    const std::string& path) {
  best_.reset();
  best_step_ = wait_ = 0;
  const auto best = metadata.find(kBest);
  if (best == metadata.end()) return absl::OkStatus();
  auto bad = [&](const char* key, const char* expected) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": metadata ", key,
                                                   ": '", metadata.at(key),
                                                   "' is not ", expected));
  };
  for (const char* key : {kBestStep, kWait}) {
    if (!metadata.contains(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": metadata has ", kBest, " but no ", key));
    }
  }
  double value = 0;
  if (best->second != "none") {
    if (!absl::SimpleAtod(best->second, &value)) {
      return bad(kBest, "a number or none");
    }
    best_ = value;
  }
  if (!absl::SimpleAtoi(metadata.at(kBestStep), &best_step_) ||
      best_step_ < 0) {
    return bad(kBestStep, "an integer >= 0");
  }
  if (!absl::SimpleAtoi(metadata.at(kWait), &wait_) || wait_ < 0) {
    return bad(kWait, "an integer >= 0");
  }
  return absl::OkStatus();
}

}  // namespace mirrortrain::trainer
