// The examples (x) of a NumPy array, as the `npz` data source and
// `mirrortrain predict` read them: uint8 (pixels, scaled to [0, 1]) or
// float32 (finite), shaped [n, features], [n, h, w] (one channel added,
// unless the model takes two-axis examples: sequences [n, steps,
// channels])
// or NHWC [n, h, w, c].
//
// Errors are InvalidArgument "<where>: <reason>". Thread contract: no state.
#ifndef MIRRORTRAIN_TRAINER_DATA_NPY_EXAMPLES_H_
#define MIRRORTRAIN_TRAINER_DATA_NPY_EXAMPLES_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensor/shape.h"
#include "tensor/tensor.h"
#include "trainer/data/npy.h"

namespace mirrortrain::trainer {

// One example's shape, with the channel added to [n, h, w] unless
// `model_example` (the model's input, when known) has two axes.
absl::StatusOr<Shape> NpyExampleShape(const NpyHeader& x,
                                      const std::string& where,
                                      const Shape& model_example = {});

// OK for uint8 and float32; else an error saying how to convert.
absl::Status CheckExampleDtype(const NpyHeader& x, const std::string& where);

// The examples as a host f32 tensor [n, ...NpyExampleShape]; at least one.
// With `bytes_are_ids` uint8 values are token ids, kept as they are.
absl::StatusOr<Tensor> NpyExamples(const NpyArray& x, const std::string& where,
                                   bool bytes_are_ids = false,
                                   const Shape& model_example = {});

// Elements [first, first + count) of an array of examples (of a uint8 or
// float32 header `x`), read from `data`, as f32 into `out`: NpyExamples's
// conversion of a part of the array (errors name an element by its index
// in the whole array).
absl::Status NpyElementsToF32(const NpyHeader& x, const char* data,
                              int64_t first, int64_t count,
                              const std::string& where, bool bytes_are_ids,
                              float* out);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_DATA_NPY_EXAMPLES_H_
