// Shared test helpers: golden-file loading, closeness checks and the
// finite-difference gradient checker.
#ifndef MIRRORTRAIN_TESTS_TEST_UTIL_H_
#define MIRRORTRAIN_TESTS_TEST_UTIL_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "tensor/tensor.h"

namespace mirrortrain::testing {

// Reads a file written by scripts/golden/golden_io.py: lines
// "tensor NAME DTYPE RANK DIMS..." each followed by a line of values.
absl::StatusOr<std::map<std::string, Tensor>> LoadGolden(
    const std::string& path);
// MT_SOURCE_DIR/tests/golden/<name>.
std::string GoldenPath(const std::string& name);
// The golden file `name`, loaded once per process (empty if unreadable; the
// tests then fail on the missing names).
const std::map<std::string, Tensor>& CachedGolden(const std::string& name);

// The names in `dir`, sorted.
std::vector<std::string> SortedDirEntries(const std::string& dir);
// The whole file as bytes; empty if it cannot be read.
std::string ReadFile(const std::string& path);
// Writes `bytes` as the whole file (a test failure if it cannot).
void WriteBytes(const std::string& path, const std::string& bytes);

// A fresh, empty directory under TempDir() named after `prefix` and the
// running test (unique when ctest runs test cases in parallel).
std::string FreshTestDir(const std::string& prefix);

// ||actual - expected|| and ||expected||, L2 over all elements of two host
// tensors of one shape, summed in double: for relative errors of whole
// tensors (weights after training, matrix products).
struct DiffAndNorm {
  double diff = 0;
  double norm = 0;
};
DiffAndNorm L2DiffAndNorm(const Tensor& actual, const Tensor& expected);

// The same dtype, shape and bytes (so -0 is not +0, and a NaN equals only
// the same NaN): what "bit for bit" means. Host tensors; reports the first
// element that differs.
::testing::AssertionResult SameBits(const Tensor& actual,
                                    const Tensor& expected);

// Elementwise |a - b| <= atol + rtol * |b| (host tensors, any float dtype);
// reports the worst element.
::testing::AssertionResult AllClose(const Tensor& actual,
                                    const Tensor& expected, double rtol,
                                    double atol);

// Random host tensor, uniform in [lo, hi), fixed seed.
Tensor RandomTensor(const Shape& shape, uint64_t seed,
                    DType dtype = DType::kF64, double lo = -1.0,
                    double hi = 1.0);

using TensorFn =
    std::function<absl::StatusOr<Tensor>(const std::vector<Tensor>&)>;

// Compares the tape gradient of L = sum(f(inputs) * w), w a fixed random
// tensor, with central finite differences, for every floating input (f64).
// Non-floating inputs (labels, indices) are passed through unchanged.
void ExpectGradientsMatch(const TensorFn& f, const std::vector<Tensor>& inputs,
                          double eps = 1e-6, double tol = 1e-6);

// The output of f on `inputs` and, when `gradients`, the tape gradients of
// sum(f(inputs) * w) for every floating input.
struct OpRun {
  Tensor y;
  std::vector<std::optional<Tensor>> grads;
};
absl::StatusOr<OpRun> RunOp(const TensorFn& f,
                            const std::vector<Tensor>& inputs, const Tensor& w,
                            bool gradients);

}  // namespace mirrortrain::testing

#endif  // MIRRORTRAIN_TESTS_TEST_UTIL_H_
