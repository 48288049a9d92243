#include "trainer/sample.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensor/status_macros.h"

namespace mirrortrain::trainer {
namespace {

constexpr int64_t kBytes = 256;

// The next byte from one position's logits.
int Draw(const float* logits, double temperature, std::mt19937_64& rng) {
  if (temperature <= 0) {
    return static_cast<int>(std::max_element(logits, logits + kBytes) - logits);
  }
  const float top = *std::max_element(logits, logits + kBytes);
  std::vector<double> weights(kBytes);
  double total = 0;
  for (int64_t i = 0; i < kBytes; ++i) {
    weights[i] = std::exp((logits[i] - top) / temperature);
    total += weights[i];
  }
  // A uniform draw from 53 random bits: the same stream on every platform.
  double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;
  for (int64_t i = 0; i < kBytes; ++i) {
    u -= weights[i];
    if (u < 0) return static_cast<int>(i);
  }
  return kBytes - 1;
}

}  // namespace

absl::StatusOr<std::string> SampleText(models::Model& model, Device device,
                                       const SampleOptions& options,
                                       const std::function<void(char)>& emit) {
  const Shape& in = model.input_shape();
  const Shape& out = model.output_shape();
  if (in.size() != 1 || out != Shape{in[0], kBytes}) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sample needs a byte-level model (input [T] token ids, output [T, ",
        kBytes, "] logits: data.name text), this one maps ", ShapeToString(in),
        " to ", ShapeToString(out)));
  }
  MT_RETURN_IF_ERROR(CheckSampleOptions(options));
  const int64_t window = in[0];
  std::string text = options.prompt.empty() ? "\n" : options.prompt;
  const size_t generated_from = options.prompt.empty() ? 1 : text.size();
  std::mt19937_64 rng(options.seed);
  std::vector<float> ids(static_cast<size_t>(window));
  for (int64_t n = 0; n < options.length; ++n) {
    const int64_t used =
        std::min<int64_t>(window, static_cast<int64_t>(text.size()));
    const size_t start = text.size() - static_cast<size_t>(used);
    std::fill(ids.begin(), ids.end(), 0.0f);
    for (int64_t i = 0; i < used; ++i) {
      ids[i] = static_cast<float>(static_cast<uint8_t>(text[start + i]));
    }
    MT_ASSIGN_OR_RETURN(Tensor x,
                        Tensor::FromVector<float>(ids, {1, window}).To(device));
    MT_ASSIGN_OR_RETURN(Tensor logits, model.Call(x, {}));
    MT_ASSIGN_OR_RETURN(logits, logits.To(Device::Cpu()));
    text.push_back(static_cast<char>(Draw(
        logits.data<float>() + (used - 1) * kBytes, options.temperature, rng)));
    if (emit) emit(text.back());
  }
  return text.substr(generated_from);
}

absl::Status CheckSampleOptions(const SampleOptions& options) {
  if (options.length < 0) {
    return absl::InvalidArgumentError("--length: must be >= 0");
  }
  if (!(options.temperature >= 0) || !std::isfinite(options.temperature)) {
    return absl::InvalidArgumentError(
        "--temperature: must be a finite number >= 0");
  }
  return absl::OkStatus();
}

}  // namespace mirrortrain::trainer
