// Datasets held in host memory: Fashion-MNIST read from IDX files, and a
// synthetic stand-in of the same shape for benchmarks and tests. Other
// sources (cifar10.cc, npz.cc, text.cc) register themselves (data_source.h);
// text.h declares the text loader for its tests.
//
// Ownership: an InMemoryDataset owns its tensors (shared, immutable host
// buffers); copies share them. Thread contract: after construction nothing
// writes the tensors, so any number of threads may read a dataset.
#ifndef MIRRORTRAIN_TRAINER_DATA_DATASET_H_
#define MIRRORTRAIN_TRAINER_DATA_DATASET_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tensor/tensor.h"

namespace mirrortrain::trainer {

inline constexpr int kFashionMnistClasses = 10;
inline constexpr int64_t kFashionMnistImageSize = 28;  // Rows and columns.

struct InMemoryDataset {
  // f32 [N, H, W, C] NHWC (or [N, features]); sequences: [N, T] token ids
  // as floats (exact below 2^24; Keras's Embedding casts them to int).
  Tensor images;
  // i32 [N] in [0, num_classes): one class per example; or [N, T]: one per
  // token of a sequence (the loss and metrics average over all of them);
  // or f32 [N] or [N, k]: real-valued targets (regression; num_classes 0).
  Tensor labels;
  int num_classes = 0;
  std::string name;  // "fashion_mnist/train", "cifar10/test", "synthetic"...
  // Where the examples were read, for errors that name one of their values
  // ("<file>: x_train" for npz); empty where `name` says enough.
  std::string origin;
  // Tokens are bytes (the `text` source): evaluation also reports bits per
  // byte, the per-token loss in bits.
  bool bytes_as_tokens = false;
  // The examples are real values that are never token ids (synthetic
  // values, or pixels scaled to [0, 1]): a model may not read them as ids.
  bool continuous = false;

  int64_t size() const { return labels.defined() ? labels.dim(0) : 0; }
  // Labels per example: 1, or T for sequences.
  int64_t labels_per_example() const {
    if (!labels.defined()) return 1;
    return NumElements(absl::MakeConstSpan(labels.shape()).subspan(1));
  }
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

// A deterministic, learnable dataset of examples of `example_shape`
// (Fashion-MNIST's, 28x28x1, by default): each class has a fixed random
// prototype example and an example is its class's prototype blended with
// uniform noise. Examples first .. first + n - 1 of one endless sequence
// that depends only on (num_classes, seed, example_shape), on every
// platform: each example is drawn from its own index, so a split is made
// without the examples before it. Labels are uniform over
// [0, num_classes). The caller validates the arguments (n >= 0,
// first >= 0, num_classes >= 1, dimensions >= 1); others are clamped to
// those.
InMemoryDataset MakeSynthetic(int64_t n, int num_classes, uint64_t seed,
                              int64_t first = 0,
                              const Shape& example_shape = {
                                  kFashionMnistImageSize,
                                  kFashionMnistImageSize, 1});

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_DATA_DATASET_H_
