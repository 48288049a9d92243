#include "tensor/device.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace mirrortrain {

std::string Device::ToString() const {
  return absl::StrCat(is_cpu() ? "cpu:" : "gpu:", index);
}

absl::StatusOr<Device> ParseDevice(absl::string_view text) {
  if (text == "cpu") return Device::Cpu(0);
  size_t colon = text.find(':');
  int index = -1;
  if (colon != absl::string_view::npos &&
      absl::SimpleAtoi(text.substr(colon + 1), &index) && index >= 0) {
    absl::string_view kind = text.substr(0, colon);
    if (kind == "cpu") return Device::Cpu(index);
    if (kind == "gpu" || kind == "cuda") return Device::Cuda(index);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "bad device '", text, "': expected cpu:K or gpu:K with K >= 0"));
}

}  // namespace mirrortrain
