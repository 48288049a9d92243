// The `text` data source: byte-level language modelling. The files at
// data.path are read in order and concatenated; every byte is a token
// (vocabulary 256). The last data.validation_fraction of the bytes (rounded
// down) is the test split, the rest the training split. Each split is cut
// into non-overlapping windows of data.sequence_length bytes: window i holds
// the inputs bytes[i*L, i*L+L) and the targets bytes[i*L+1, i*L+L+1) (the
// next byte of each input), so a split of m bytes gives (m-1)/L windows and
// its last (m-1)%L bytes are unused. Windows are examples: the batch
// iterator shuffles them with the seed and resumes at its exact position.
// Files are read through zlib, so gzip-compressed copies load too.
#include "trainer/data/text.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensor/status_macros.h"
#include "trainer/data/data_source.h"
#include "trainer/data/dataset.h"
#include "trainer/data/gz_file.h"

namespace mirrortrain::trainer {

namespace {

constexpr int kByteVocabulary = 256;

// The bytes of `paths`, concatenated in order. An empty file is an error
// naming it: it would most likely be a wrong path, not intended data.
absl::StatusOr<std::string> ReadFilesInOrder(
    const std::vector<std::string>& paths) {
  if (paths.empty()) {
    return absl::InvalidArgumentError("data.path: no text file given");
  }
  std::string bytes;
  for (const std::string& path : paths) {
    MT_ASSIGN_OR_RETURN(std::string part, ReadWholeFile(path));
    if (part.empty()) return BadData(path, "empty text file");
    bytes += part;
  }
  return bytes;
}

// A split of `windows` windows of `sequence_length` tokens, unfilled.
absl::StatusOr<InMemoryDataset> EmptyTextSplit(int64_t windows,
                                               int64_t sequence_length,
                                               bool train) {
  InMemoryDataset dataset;
  dataset.num_classes = kByteVocabulary;
  dataset.bytes_as_tokens = true;
  dataset.name = absl::StrCat("text/", train ? "train" : "test");
  MT_ASSIGN_OR_RETURN(dataset.images,
                      Tensor::Empty(DType::kF32, {windows, sequence_length}));
  MT_ASSIGN_OR_RETURN(dataset.labels,
                      Tensor::Empty(DType::kI32, {windows, sequence_length}));
  return dataset;
}

}  // namespace

absl::StatusOr<InMemoryDataset> LoadText(const std::vector<std::string>& paths,
                                         int64_t sequence_length,
                                         double validation_fraction,
                                         bool train) {
  if (sequence_length < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.sequence_length: must be >= 1, got ", sequence_length));
  }
  if (!(validation_fraction >= 0 && validation_fraction < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.validation_fraction: must be in [0, 1), got ",
                     validation_fraction));
  }
  MT_ASSIGN_OR_RETURN(const std::string bytes, ReadFilesInOrder(paths));
  const int64_t n = static_cast<int64_t>(bytes.size());
  const int64_t test_bytes = static_cast<int64_t>(
      std::floor(static_cast<double>(n) * validation_fraction));
  const int64_t train_bytes = n - test_bytes;
  const std::string files = absl::StrJoin(paths, ", ");
  // Both splits are checked whichever is loaded, so a config fails the
  // same way for training and for evaluation.
  // As unsigned: sequence_length + 1 overflows int64 at its largest.
  const uint64_t window = static_cast<uint64_t>(sequence_length) + 1;
  if (static_cast<uint64_t>(train_bytes) < window) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.sequence_length: ", sequence_length, " needs ",
                     window, " bytes per window but the training split of ",
                     files, " has ", train_bytes, " bytes"));
  }
  if (static_cast<uint64_t>(test_bytes) < window) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.validation_fraction: ", validation_fraction, " holds out ",
        test_bytes, " of the ", n, " bytes of ", files,
        ", fewer than one window of data.sequence_length + 1 = ", window));
  }
  const int64_t begin = train ? 0 : train_bytes;
  const int64_t m = train ? train_bytes : test_bytes;
  const int64_t windows = (m - 1) / sequence_length;

  MT_ASSIGN_OR_RETURN(InMemoryDataset dataset,
                      EmptyTextSplit(windows, sequence_length, train));
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data()) + begin;
  float* inputs = dataset.images.data<float>();
  int32_t* targets = dataset.labels.data<int32_t>();
  for (int64_t i = 0; i < windows * sequence_length; ++i) {
    inputs[i] = static_cast<float>(data[i]);
    targets[i] = data[i + 1];
  }
  return dataset;
}

MT_REGISTER(
    DataSource,
    {.name = "text",
     .doc = "bytes of text files as tokens (vocabulary 256): windows of "
            "sequence_length inputs with next-byte targets",
     .params = {{Param::StringList("path").Doc(
                     "a text file, or a list of files read in order and "
                     "concatenated (gzip is decompressed)"),
                 Param::Int("sequence_length")
                     .Default(int64_t{128})
                     .Min(1)
                     .Doc("tokens per example window"),
                 Param::Float("validation_fraction")
                     .Default(0.1)
                     .Min(0, false)
                     .Max(1, false)
                     .Doc("the last fraction of the bytes: the test split")}},
     .load = [](const Params& p,
                const SplitRequest& split) -> absl::StatusOr<InMemoryDataset> {
       // The keys give the shape: no file need exist to sample.
       if (split.shapes_only) {
         return EmptyTextSplit(0, p.Int("sequence_length"), split.train);
       }
       return LoadText(p.StringList("path"), p.Int("sequence_length"),
                       p.Float("validation_fraction"), split.train);
     }});

}  // namespace mirrortrain::trainer
