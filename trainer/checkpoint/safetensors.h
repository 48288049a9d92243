// The safetensors file format: writer and strict reader.
//
// Layout: an 8-byte little-endian u64 N, N bytes of UTF-8 JSON header, then
// the tensors' raw little-endian bytes, contiguous. The header maps each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the start of the data) and may hold "__metadata__", an object
// of strings. As the reference implementation does, the header is padded
// with trailing spaces so the data starts 8-byte aligned. Files written here
// are read by the Python `safetensors` package and by
// scripts/read_checkpoint.py (numpy only).
//
// mirrortrain's dtypes map to "F32", "F64", "I32", "I64". The reader also
// takes "F16" and "BF16" (PyTorch's and Hugging Face's half-precision
// weights) and widens them to F32, exactly; a file holding any other dtype
// is rejected when opened.
//
// Integrity: a file may carry "data_crc32c" in its metadata, the CRC-32C of
// the whole data section as 8 lowercase hex digits (TensorDataCrc32c).
// Opening such a file verifies it; other readers ignore the key.
#ifndef MIRRORTRAIN_TRAINER_CHECKPOINT_SAFETENSORS_H_
#define MIRRORTRAIN_TRAINER_CHECKPOINT_SAFETENSORS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tensor/dtype.h"
#include "tensor/shape.h"
#include "tensor/tensor.h"

namespace mirrortrain::trainer {

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

// The metadata key of the data checksum.
inline constexpr absl::string_view kDataCrc32cKey = "data_crc32c";

// The value of kDataCrc32cKey for a file of `tensors` in this order: the
// CRC-32C of their bytes back to back, as 8 lowercase hex digits.
// InvalidArgument unless every tensor is on the host.
absl::StatusOr<std::string> TensorDataCrc32c(
    absl::Span<const NamedTensor> tensors);

// "F32", "F64", "I32", "I64".
absl::string_view SafetensorsDTypeName(DType dtype);
absl::StatusOr<DType> ParseSafetensorsDType(absl::string_view name);

// Writes `tensors` (in the order given; any device: each is copied to the
// host) and `metadata` (omitted from the header when empty, as the
// reference writer does) to `path`, atomically: a temporary file in the same
// directory is fsynced and renamed over `path`, then the directory is
// fsynced. On failure nothing is left behind and an existing `path` is
// untouched. Names must be unique, non-empty, valid UTF-8 and not
// "__metadata__". Errors name the path.
absl::Status WriteSafetensors(
    const std::string& path, absl::Span<const NamedTensor> tensors,
    const std::map<std::string, std::string>& metadata);

// A validated safetensors file held in memory.
//
// Ownership: owns a copy of the whole file; tensors returned by Get are
// independent host copies. Movable. Thread contract: const methods may be
// called from several threads.
class SafetensorsFile {
 public:
  struct Info {
    DType dtype;  // What Get returns: F32 for an F16 or BF16 entry.
    Shape shape;
    std::string file_dtype;  // The dtype as the file names it ("BF16").
  };

  // Reads the whole file and validates it strictly. Errors say
  // "<path>: <reason>": DataLoss for a truncated file (shorter than 8 bytes,
  // header or data running past the end), InvalidArgument for anything else
  // malformed (header not UTF-8 JSON or not an object, an entry missing or
  // with a malformed dtype/shape/data_offsets, unknown dtype, offsets that do
  // not match dtype size x shape, overlapping or non-contiguous data,
  // trailing bytes, non-string metadata values, a malformed data_crc32c);
  // DataLoss when the data does not match its data_crc32c; NotFound etc.
  // when the file cannot be read.
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }
  // Tensor names in header order.
  std::vector<std::string> names() const;
  bool Contains(absl::string_view name) const;
  // NotFound naming the tensor and the file.
  absl::StatusOr<Info> GetInfo(absl::string_view name) const;
  // A host copy of the tensor (F16 and BF16 widened to F32); NotFound
  // naming the tensor and the file.
  absl::StatusOr<Tensor> Get(absl::string_view name) const;

 private:
  // The half-precision formats read as F32.
  enum class Half { kNone, kF16, kBF16 };

  struct Entry {
    std::string name;
    Info info;
    Half half = Half::kNone;
    size_t begin = 0;  // Offsets into the data section.
    size_t end = 0;
  };

  SafetensorsFile() = default;
  const Entry* Find(absl::string_view name) const;
  absl::Status NotFound(absl::string_view name) const;

  std::string path_;
  std::string contents_;                              // The whole file.
  size_t data_start_ = 0;                             // 8 + header length.
  std::vector<Entry> entries_;                        // Header order.
  std::map<std::string, size_t, std::less<>> index_;  // name -> entries_ idx.
  std::map<std::string, std::string> metadata_;
};

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_CHECKPOINT_SAFETENSORS_H_
