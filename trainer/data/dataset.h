// Datasets held in host memory: Fashion-MNIST read from IDX files, and a
// synthetic stand-in of the same shape for benchmarks and tests. Other
// sources (cifar10.cc, npz.cc) register themselves (data_source.h).
//
// Ownership: an InMemoryDataset owns its tensors (shared, immutable host
// buffers); copies share them. Thread contract: after construction nothing
// writes the tensors, so any number of threads may read a dataset.
#ifndef MIRRORTRAIN_TRAINER_DATA_DATASET_H_
#define MIRRORTRAIN_TRAINER_DATA_DATASET_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "tensor/tensor.h"

namespace mirrortrain::trainer {

inline constexpr int kFashionMnistClasses = 10;
inline constexpr int64_t kFashionMnistImageSize = 28;  // Rows and columns.

struct InMemoryDataset {
  Tensor images;  // f32 [N, H, W, C] NHWC (or [N, features]).
  Tensor labels;  // i32 [N], in [0, num_classes).
  int num_classes = 0;
  std::string name;  // "fashion_mnist/train", "cifar10/test", "synthetic"...

  int64_t size() const { return labels.defined() ? labels.dim(0) : 0; }
};

// p / 255.0f for every byte value p: how every source scales u8 pixels to
// [0, 1]. A table, so converting a dataset costs one lookup per pixel.
const std::array<float, 256>& ByteToUnitTable();

// Reads the train (60000) or test (10000) split from `dir`:
// {train,t10k}-images-idx3-ubyte and {train,t10k}-labels-idx1-ubyte, each
// `.gz` or raw (`.gz` is taken when both exist). A missing directory or file
// is NotFound with a message that says how to install the data; bad content
// is InvalidArgument naming the file (see idx_reader.h).
absl::StatusOr<InMemoryDataset> LoadFashionMnist(const std::string& dir,
                                                 bool train);

// A deterministic, learnable dataset of Fashion-MNIST's shape: each class has
// a fixed random prototype image and an example is its class's prototype
// blended with uniform noise. Depends only on (n, num_classes, seed), on every
// platform. Labels are uniform over [0, num_classes). The caller validates
// the arguments (n >= 0, num_classes >= 1); others are clamped to those.
InMemoryDataset MakeSynthetic(int64_t n, int num_classes, uint64_t seed);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_DATA_DATASET_H_
