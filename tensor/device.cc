#include "tensor/device.h"

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace mirrortrain {

std::string Device::ToString() const {
  return absl::StrCat(is_cpu() ? "cpu:" : "gpu:", index);
}

absl::StatusOr<Device> ParseDevice(absl::string_view text) {
  if (text == "cpu") return Device::Cpu(0);
  const size_t colon = text.find(':');
  int index = -1;
  // K in plain decimal digits: "cpu:+1", "cpu: 1" and "cpu:01" are not
  // other spellings of cpu:1.
  const absl::string_view digits =
      colon == absl::string_view::npos ? "" : text.substr(colon + 1);
  const bool plain = !digits.empty() && absl::c_all_of(digits, [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c));
  }) && (digits.size() == 1 || digits[0] != '0');
  if (plain && absl::SimpleAtoi(digits, &index)) {
    absl::string_view kind = text.substr(0, colon);
    if (kind == "cpu") return Device::Cpu(index);
    if (kind == "gpu" || kind == "cuda") return Device::Cuda(index);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("bad device '", text,
                   "': expected cpu, cpu:K, gpu:K or cuda:K with K a "
                   "non-negative integer"));
}

}  // namespace mirrortrain
