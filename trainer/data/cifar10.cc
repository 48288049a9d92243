// The `cifar10` data source: CIFAR-10's binary version
// (cifar-10-binary.tar.gz, extracted to cifar-10-batches-bin/):
// data_batch_1.bin .. data_batch_5.bin (train, 10000 records each) and
// test_batch.bin. A record is 1 label byte then 3072 pixel bytes: the red,
// green and blue planes of a 32x32 image, each row-major. Read through
// zlib, so gzip-compressed copies load too.
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensor/status_macros.h"
#include "trainer/data/data_source.h"
#include "trainer/data/dataset.h"
#include "trainer/data/gz_file.h"

namespace mirrortrain::trainer {
namespace {

constexpr int kClasses = 10;
constexpr int64_t kSide = 32;
constexpr int64_t kChannels = 3;
constexpr int64_t kPlane = kSide * kSide;
constexpr int64_t kPixels = kPlane * kChannels;
constexpr int64_t kRecordBytes = 1 + kPixels;

std::vector<std::string> SplitFiles(bool train) {
  if (!train) return {"test_batch.bin"};
  std::vector<std::string> files;
  for (int i = 1; i <= 5; ++i) {
    files.push_back(absl::StrCat("data_batch_", i, ".bin"));
  }
  return files;
}

// The records of one batch file, checked: whole records only, labels < 10.
absl::StatusOr<std::string> ReadBatchFile(const std::string& path) {
  MT_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path));
  if (bytes.empty()) {
    return BadData(path, absl::StrCat("empty file (CIFAR-10 records are ",
                                      kRecordBytes, " bytes)"));
  }
  if (bytes.size() % kRecordBytes != 0) {
    return BadData(
        path, absl::StrCat("size ", bytes.size(), " bytes is not a multiple of",
                           " the ", kRecordBytes,
                           "-byte CIFAR-10 record (1 label + 3072 pixels): "
                           "truncated, or not the binary version"));
  }
  const int64_t n = static_cast<int64_t>(bytes.size()) / kRecordBytes;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t label = static_cast<uint8_t>(bytes[i * kRecordBytes]);
    if (label >= kClasses) {
      return BadData(path,
                     absl::StrCat("label ", int{label}, " of record ", i,
                                  " is out of range [0, ", kClasses, ")"));
    }
  }
  return bytes;
}

absl::StatusOr<InMemoryDataset> LoadCifar10(const std::string& dir,
                                            bool train) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(
        absl::StrCat("CIFAR-10 not found in ", dir,
                     ": set data.dir to the cifar-10-batches-bin folder of "
                     "cifar-10-binary.tar.gz (or convert another copy with "
                     "scripts/to_npz.py and use data.name: npz)"));
  }
  std::vector<std::string> files;
  int64_t n = 0;
  for (const std::string& name : SplitFiles(train)) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    MT_ASSIGN_OR_RETURN(std::string bytes, ReadBatchFile(path));
    n += static_cast<int64_t>(bytes.size()) / kRecordBytes;
    files.push_back(std::move(bytes));
  }

  InMemoryDataset dataset;
  dataset.num_classes = kClasses;
  dataset.name = absl::StrCat("cifar10/", train ? "train" : "test");
  dataset.continuous = true;  // Pixels scaled to [0, 1].
  MT_ASSIGN_OR_RETURN(dataset.images,
                      Tensor::Empty(DType::kF32, {n, kSide, kSide, kChannels}));
  MT_ASSIGN_OR_RETURN(dataset.labels, Tensor::Empty(DType::kI32, {n}));
  const std::array<float, 256>& scale = ByteToUnitTable();
  float* pixels = dataset.images.data<float>();
  int32_t* labels = dataset.labels.data<int32_t>();
  int64_t row = 0;
  for (std::string& bytes : files) {
    const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
    const int64_t count = static_cast<int64_t>(bytes.size()) / kRecordBytes;
    for (int64_t i = 0; i < count; ++i, ++row) {
      const uint8_t* record = data + i * kRecordBytes;
      labels[row] = record[0];
      // Planes (CHW) to NHWC.
      float* out = pixels + row * kPixels;
      for (int64_t p = 0; p < kPlane; ++p) {
        for (int64_t c = 0; c < kChannels; ++c) {
          out[p * kChannels + c] = scale[record[1 + c * kPlane + p]];
        }
      }
    }
    bytes = std::string();  // Free each file once converted.
  }
  return dataset;
}

MT_REGISTER(
    DataSource,
    {.name = "cifar10",
     .doc = "CIFAR-10 binary version (data_batch_1..5.bin, "
            "test_batch.bin), 32x32x3, 10 classes, 50000 train / "
            "10000 test",
     .params = {{Param::String("dir").Doc("the cifar-10-batches-bin folder of "
                                          "cifar-10-binary.tar.gz")}},
     .load = [](const Params& p, const SplitRequest& split) {
       return LoadCifar10(p.String("dir"), split.train);
     }});

}  // namespace
}  // namespace mirrortrain::trainer
