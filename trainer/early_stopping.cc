#include "trainer/early_stopping.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mirrortrain::trainer {
namespace {

constexpr char kBest[] = "early_stopping_best";
constexpr char kBestStep[] = "early_stopping_best_step";
constexpr char kWait[] = "early_stopping_wait";
constexpr char kWatch[] = "early_stopping_watch";

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
  metadata[kWatch] = options_.watch;
}

absl::StatusOr<EarlyStopping> EarlyStopping::Restored(
    const Options& options, const std::map<std::string, std::string>& metadata,
    const std::string& path, std::string* note) {
  note->clear();
  EarlyStopping out(options);
  const auto best = metadata.find(kBest);
  if (best == metadata.end()) return out;
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
  if (best->second != "none") {
    double value = 0;
    if (!absl::SimpleAtod(best->second, &value)) {
      return bad(kBest, "a number or none");
    }
    out.best_ = value;
  }
  if (!absl::SimpleAtoi(metadata.at(kBestStep), &out.best_step_) ||
      out.best_step_ < 0) {
    return bad(kBestStep, "an integer >= 0");
  }
  if (!absl::SimpleAtoi(metadata.at(kWait), &out.wait_) || out.wait_ < 0) {
    return bad(kWait, "an integer >= 0");
  }
  const auto watch = metadata.find(kWatch);
  if (watch == metadata.end() || watch->second != options.watch) {
    *note = absl::StrCat(
        path, " watched ",
        watch == metadata.end() ? "an unnamed metric"
                                : absl::StrCat("the ", watch->second),
        "; early stopping starts afresh on the ", options.watch);
    return EarlyStopping(options);
  }
  return out;
}

}  // namespace mirrortrain::trainer
