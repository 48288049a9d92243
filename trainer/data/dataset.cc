#include "trainer/data/dataset.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <optional>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensor/parallel.h"
#include "tensor/status_macros.h"
#include "trainer/data/counter_hash.h"
#include "trainer/data/data_source.h"
#include "trainer/data/idx_reader.h"

namespace mirrortrain::trainer {
namespace {

std::string NotFoundMessage(const std::string& dir) {
  return absl::StrCat("Fashion-MNIST not found in ", dir,
                      ": install it with 'apt-get install "
                      "dataset-fashion-mnist' or set data.dir");
}

bool IsRegularFile(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

// `dir/stem.gz` when it exists, else `dir/stem`.
absl::StatusOr<std::string> FindIdxFile(const std::string& dir,
                                        const std::string& stem) {
  const std::string base = (std::filesystem::path(dir) / stem).string();
  const std::string gz = base + ".gz";
  if (IsRegularFile(gz)) return gz;
  if (IsRegularFile(base)) return base;
  return absl::NotFoundError(
      absl::StrCat(NotFoundMessage(dir), " (no ", stem, " or ", stem, ".gz)"));
}

// Uniform in [0, 1) from the top 24 bits, exactly representable in float.
float UnitFloat(uint64_t bits) {
  return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
}

}  // namespace

const std::array<float, 256>& ByteToUnitTable() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t;
    for (int p = 0; p < 256; ++p) t[p] = static_cast<float>(p) / 255.0f;
    return t;
  }();
  return table;
}

absl::StatusOr<InMemoryDataset> LoadFashionMnist(const std::string& dir,
                                                 bool train) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(NotFoundMessage(dir));
  }
  const std::string prefix = train ? "train" : "t10k";
  MT_ASSIGN_OR_RETURN(std::string images_path,
                      FindIdxFile(dir, prefix + "-images-idx3-ubyte"));
  MT_ASSIGN_OR_RETURN(std::string labels_path,
                      FindIdxFile(dir, prefix + "-labels-idx1-ubyte"));

  MT_ASSIGN_OR_RETURN(IdxImages idx_images, ReadIdxImages(images_path));
  if (idx_images.rows != kFashionMnistImageSize ||
      idx_images.cols != kFashionMnistImageSize) {
    return absl::InvalidArgumentError(
        absl::StrCat(images_path, ": images are ", idx_images.rows, "x",
                     idx_images.cols, ", Fashion-MNIST's are ",
                     kFashionMnistImageSize, "x", kFashionMnistImageSize));
  }
  MT_ASSIGN_OR_RETURN(std::vector<uint8_t> idx_labels,
                      ReadIdxLabels(labels_path, kFashionMnistClasses));
  const int64_t n = idx_images.count;
  if (static_cast<int64_t>(idx_labels.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(images_path, " holds ", n, " images but ", labels_path,
                     " holds ", idx_labels.size(), " labels"));
  }

  InMemoryDataset dataset;
  dataset.num_classes = kFashionMnistClasses;
  dataset.name = absl::StrCat("fashion_mnist/", train ? "train" : "test");
  dataset.continuous = true;  // Pixels scaled to [0, 1].
  MT_ASSIGN_OR_RETURN(dataset.images,
                      Tensor::Empty(DType::kF32, {n, kFashionMnistImageSize,
                                                  kFashionMnistImageSize, 1}));
  MT_ASSIGN_OR_RETURN(dataset.labels, Tensor::Empty(DType::kI32, {n}));

  // Over the math threads: the training split's 47M pixels took a third of
  // its load time on one thread, on the time-to-accuracy critical path.
  const std::array<float, 256>& scale = ByteToUnitTable();
  float* pixels = dataset.images.data<float>();
  const uint8_t* bytes = idx_images.pixels().data();
  ParallelFor(static_cast<int64_t>(idx_images.pixels().size()),
              int64_t{1} << 18, [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; ++i) {
                  pixels[i] = scale[bytes[i]];
                }
              });
  int32_t* labels = dataset.labels.data<int32_t>();
  for (int64_t i = 0; i < n; ++i) labels[i] = idx_labels[i];
  return dataset;
}

InMemoryDataset MakeSynthetic(int64_t n, int num_classes, uint64_t seed,
                              int64_t first, const Shape& example_shape) {
  n = std::max<int64_t>(n, 0);
  first = std::max<int64_t>(first, 0);
  num_classes = std::max(num_classes, 1);
  Shape shape = {n};
  int64_t values_per_example = 1;
  for (const int64_t d : example_shape) {
    shape.push_back(std::max<int64_t>(d, 1));
    values_per_example *= shape.back();
  }
  // Streams of the hash: one per kind of draw.
  constexpr uint64_t kPrototypeStream = 1, kLabelStream = 2, kNoiseStream = 3;
  // Mostly signal, so a small model separates the classes in a few steps.
  constexpr float kSignal = 0.6f;

  std::vector<float> prototypes(static_cast<size_t>(num_classes) *
                                values_per_example);
  for (size_t k = 0; k < prototypes.size(); ++k) {
    prototypes[k] = UnitFloat(CounterHash(seed, kPrototypeStream, k));
  }

  InMemoryDataset dataset;
  dataset.num_classes = num_classes;
  dataset.name = "synthetic";
  dataset.continuous = true;
  dataset.images = Tensor::HostEmpty(DType::kF32, shape);
  dataset.labels = Tensor::HostEmpty(DType::kI32, {n});
  float* pixels = dataset.images.data<float>();
  int32_t* labels = dataset.labels.data<int32_t>();
  // Over the math threads: every value depends on its index alone.
  ParallelFor(n, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const uint64_t index = static_cast<uint64_t>(first + i);
      // The modulo bias of a 64-bit draw over <= 2^31 classes is negligible.
      const int32_t label =
          static_cast<int32_t>(CounterHash(seed, kLabelStream, index) %
                               static_cast<uint64_t>(num_classes));
      labels[i] = label;
      const float* prototype = prototypes.data() + label * values_per_example;
      float* out = pixels + i * values_per_example;
      for (int64_t k = 0; k < values_per_example; ++k) {
        const float noise = UnitFloat(
            CounterHash(seed, kNoiseStream,
                        index * values_per_example + static_cast<uint64_t>(k)));
        out[k] = kSignal * prototype[k] + (1.0f - kSignal) * noise;
      }
    }
  });
  return dataset;
}

MT_REGISTER(DataSource,
            {.name = "fashion_mnist",
             .doc = "Fashion-MNIST IDX files (.gz or raw), 28x28x1, 10 "
                    "classes, 60000 train / 10000 test",
             .params = {{Param::String("dir")
                             .Default("/usr/share/datasets/fashion-mnist")
                             .Doc("folder of the IDX files (Debian "
                                  "dataset-fashion-mnist)")}},
             .load = [](const Params& p, const SplitRequest& split) {
               return LoadFashionMnist(p.String("dir"), split.train);
             }});

namespace {

// The synthetic splits' size: at most this many bytes of examples each.
constexpr int64_t kMaxSyntheticBytes = int64_t{4} << 30;

absl::StatusOr<InMemoryDataset> LoadSynthetic(const SplitRequest& split) {
  const Shape shape =
      split.example_shape.empty()
          ? Shape{kFashionMnistImageSize, kFashionMnistImageSize, 1}
          : split.example_shape;
  // Examples 0-59999 and 60000-69999 of one sequence, split as
  // Fashion-MNIST: both splits share the class prototypes. Only those
  // used are made.
  int64_t n = split.train ? 60000 : 10000;
  if (split.max_examples > 0) n = std::min(n, split.max_examples);
  // The examples and the class prototypes they blend.
  const std::optional<int64_t> values = CheckedNumElements(shape);
  const int64_t most_values = kMaxSyntheticBytes /
                              static_cast<int64_t>(sizeof(float)) /
                              (n + kFashionMnistClasses);
  if (!values.has_value() || *values < 1 || *values > most_values) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data: synthetic: ", n, " examples of ", ShapeToString(shape),
        " (model.input_shape) and their ", kFashionMnistClasses,
        " class prototypes take more than ", kMaxSyntheticBytes >> 30,
        " GiB; set data.", split.train ? "train" : "test",
        "_examples lower or the shape smaller"));
  }
  return MakeSynthetic(n, kFashionMnistClasses, split.seed,
                       split.train ? 0 : 60000, shape);
}

}  // namespace

MT_REGISTER(DataSource,
            {.name = "synthetic",
             .doc = "learnable random data of the model's input shape "
                    "(model.input_shape; 28x28x1 without one), 10 classes, "
                    "60000 / 10000 examples, for benchmarks and tests",
             .load = [](const Params&, const SplitRequest& split) {
               return LoadSynthetic(split);
             }});

}  // namespace mirrortrain::trainer
