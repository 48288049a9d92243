#include "tests/test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "tensor/gradient_tape.h"
#include "tensor/ops/math_ops.h"
#include "tensor/ops/reduction_ops.h"
#include "tensor/status_macros.h"

namespace mirrortrain::testing {

absl::StatusOr<std::map<std::string, Tensor>> LoadGolden(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::map<std::string, Tensor> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream header(line);
    std::string word, name, dtype_name;
    int rank = 0;
    header >> word >> name >> dtype_name >> rank;
    if (word != "tensor" || !header) {
      return absl::DataLossError(absl::StrCat(path, ": bad header: ", line));
    }
    Shape shape(rank);
    for (int i = 0; i < rank; ++i) header >> shape[i];
    MT_ASSIGN_OR_RETURN(DType dtype, ParseDType(dtype_name));
    Tensor t = Tensor::HostEmpty(dtype, shape);
    if (!std::getline(in, line)) {
      return absl::DataLossError(absl::StrCat(path, ": no values for ", name));
    }
    std::istringstream values(line);
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      double v = 0;
      long long iv = 0;
      bool ok = IsFloating(dtype) ? static_cast<bool>(values >> v)
                                  : static_cast<bool>(values >> iv);
      if (!ok) {
        return absl::DataLossError(
            absl::StrCat(path, ": too few values for ", name));
      }
      switch (dtype) {
        case DType::kF32:
          t.data<float>()[i] = static_cast<float>(v);
          break;
        case DType::kF64:
          t.data<double>()[i] = v;
          break;
        case DType::kI32:
          t.data<int32_t>()[i] = static_cast<int32_t>(iv);
          break;
        case DType::kI64:
          t.data<int64_t>()[i] = iv;
          break;
      }
    }
    out[name] = t;
  }
  return out;
}

std::string GoldenPath(const std::string& name) {
  return absl::StrCat(MT_SOURCE_DIR, "/tests/golden/", name);
}

const std::map<std::string, Tensor>& CachedGolden(const std::string& name) {
  static auto* cache = new std::map<std::string, std::map<std::string, Tensor>>;
  auto it = cache->find(name);
  if (it == cache->end()) {
    auto loaded = LoadGolden(GoldenPath(name));
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    it = cache
             ->emplace(name, loaded.ok() ? *std::move(loaded)
                                         : std::map<std::string, Tensor>{})
             .first;
  }
  return it->second;
}

std::vector<std::string> SortedDirEntries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string FreshTestDir(const std::string& prefix) {
  const ::testing::TestInfo* info =
      ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/", prefix, "_",
                   info->test_suite_name(), "_", info->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

DiffAndNorm L2DiffAndNorm(const Tensor& actual, const Tensor& expected) {
  double diff = 0, norm = 0;
  for (int64_t k = 0; k < expected.num_elements(); ++k) {
    const double a = actual.ScalarAt(k), e = expected.ScalarAt(k);
    diff += (a - e) * (a - e);
    norm += e * e;
  }
  return {std::sqrt(diff), std::sqrt(norm)};
}

::testing::AssertionResult SameBits(const Tensor& actual,
                                    const Tensor& expected) {
  if (!actual.defined() || !expected.defined()) {
    return ::testing::AssertionFailure() << "undefined tensor";
  }
  if (actual.dtype() != expected.dtype() ||
      actual.shape() != expected.shape()) {
    return ::testing::AssertionFailure()
           << ShapeToString(actual.shape()) << " vs expected "
           << ShapeToString(expected.shape()) << " (or another dtype)";
  }
  const size_t width =
      actual.bytes() / std::max<int64_t>(1, actual.num_elements());
  const auto* a = static_cast<const char*>(actual.raw_data());
  const auto* e = static_cast<const char*>(expected.raw_data());
  for (int64_t i = 0; i < actual.num_elements(); ++i) {
    if (std::memcmp(a + i * width, e + i * width, width) != 0) {
      return ::testing::AssertionFailure()
             << "element " << i << ": " << actual.ScalarAt(i) << " vs expected "
             << expected.ScalarAt(i) << " (other bits)";
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult AllClose(const Tensor& actual,
                                    const Tensor& expected, double rtol,
                                    double atol) {
  if (!actual.defined() || !expected.defined()) {
    return ::testing::AssertionFailure() << "undefined tensor";
  }
  if (actual.shape() != expected.shape()) {
    return ::testing::AssertionFailure()
           << "shape " << ShapeToString(actual.shape()) << " vs expected "
           << ShapeToString(expected.shape());
  }
  double worst = 0;
  int64_t worst_i = -1;
  for (int64_t i = 0; i < actual.num_elements(); ++i) {
    double a = actual.ScalarAt(i), e = expected.ScalarAt(i);
    double err = std::abs(a - e);
    bool bad = !(err <= atol + rtol * std::abs(e)) &&
               !(std::isnan(a) && std::isnan(e));
    if (bad && (worst_i < 0 || err > worst)) {
      worst = err;
      worst_i = i;
    }
  }
  if (worst_i >= 0) {
    return ::testing::AssertionFailure()
           << "element " << worst_i << ": " << actual.ScalarAt(worst_i)
           << " vs expected " << expected.ScalarAt(worst_i) << " (|diff| "
           << worst << ", rtol " << rtol << ", atol " << atol << ")";
  }
  return ::testing::AssertionSuccess();
}

Tensor RandomTensor(const Shape& shape, uint64_t seed, DType dtype, double lo,
                    double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Tensor t = Tensor::HostEmpty(dtype, shape);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    double v = dist(rng);
    if (dtype == DType::kF32) {
      t.data<float>()[i] = static_cast<float>(v);
    } else {
      t.data<double>()[i] = v;
    }
  }
  return t;
}

namespace {

double Objective(const TensorFn& f, const std::vector<Tensor>& inputs,
                 const Tensor& w) {
  absl::StatusOr<Tensor> y = f(inputs);
  EXPECT_TRUE(y.ok()) << y.status();
  if (!y.ok()) return 0;
  double sum = 0;
  for (int64_t i = 0; i < y->num_elements(); ++i) {
    sum += y->ScalarAt(i) * w.ScalarAt(i);
  }
  return sum;
}

}  // namespace

void ExpectGradientsMatch(const TensorFn& f, const std::vector<Tensor>& inputs,
                          double eps, double tol) {
  absl::StatusOr<Tensor> probe = f(inputs);
  ASSERT_TRUE(probe.ok()) << probe.status();
  Tensor w = RandomTensor(probe->shape(), 1234, DType::kF64, 0.5, 1.5);

  std::vector<Tensor> sources;
  for (const Tensor& in : inputs) {
    if (IsFloating(in.dtype())) sources.push_back(in);
  }
  GradientTape tape;
  for (const Tensor& s : sources) tape.Watch(s);
  absl::StatusOr<Tensor> y = f(inputs);
  ASSERT_TRUE(y.ok()) << y.status();
  absl::StatusOr<Tensor> yw = ops::Mul(*y, w);
  ASSERT_TRUE(yw.ok()) << yw.status();
  absl::StatusOr<Tensor> loss = ops::ReduceSum(*yw);
  ASSERT_TRUE(loss.ok()) << loss.status();
  auto grads = tape.Gradient(*loss, sources);
  ASSERT_TRUE(grads.ok()) << grads.status();

  size_t s = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!IsFloating(inputs[k].dtype())) continue;
    const std::optional<Tensor>& g = (*grads)[s++];
    ASSERT_TRUE(g.has_value()) << "no gradient for input " << k;
    ASSERT_EQ(g->shape(), inputs[k].shape()) << "input " << k;
    for (int64_t i = 0; i < inputs[k].num_elements(); ++i) {
      std::vector<Tensor> plus = inputs, minus = inputs;
      plus[k] = *inputs[k].Clone();
      minus[k] = *inputs[k].Clone();
      plus[k].data<double>()[i] += eps;
      minus[k].data<double>()[i] -= eps;
      double numeric =
          (Objective(f, plus, w) - Objective(f, minus, w)) / (2 * eps);
      double analytic = g->ScalarAt(i);
      EXPECT_NEAR(analytic, numeric, tol * (1 + std::abs(numeric)))
          << "input " << k << " element " << i;
    }
  }
}

absl::StatusOr<OpRun> RunOp(const TensorFn& f,
                            const std::vector<Tensor>& inputs, const Tensor& w,
                            bool gradients) {
  std::vector<Tensor> sources;
  for (const Tensor& in : inputs) {
    if (IsFloating(in.dtype())) sources.push_back(in);
  }
  OpRun run;
  if (!gradients) {
    absl::StatusOr<Tensor> y = f(inputs);
    if (!y.ok()) return y.status();
    run.y = *y;
    return run;
  }
  GradientTape tape;
  for (const Tensor& s : sources) tape.Watch(s);
  absl::StatusOr<Tensor> y = f(inputs);
  if (!y.ok()) return y.status();
  run.y = *y;
  GradientOptions options;
  options.output_gradient = w;
  auto grads = tape.Gradient(*y, sources, options);
  if (!grads.ok()) return grads.status();
  run.grads = *std::move(grads);
  return run;
}

}  // namespace mirrortrain::testing
