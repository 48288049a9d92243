// The `npz` data source: the arrays x_train, y_train, x_test, y_test from a
// NumPy `.npz` (np.savez or np.savez_compressed; scripts/to_npz.py writes
// one from Keras, torchvision or the user's arrays) or from a directory
// holding x_train.npy, y_train.npy, x_test.npy and y_test.npy.
//
// x: uint8 (scaled to [0, 1]) or float32, [n, features], [n, h, w] (one
// channel added, unless model.input_shape is [h, w]: sequences [n, steps,
// channels]) or NHWC [n, h, w, c]; both splits of one example shape.
// y: any integer dtype, [n] or [n, 1] (one label per example), or [n, k...]
// (k labels per example: a sequence's, or binary_crossentropy's multi-label
// 0/1 labels), labels >= 0, both splits of one label shape. The classes are
// data.num_classes when set (labels must be below it), else the largest
// label of both splits + 1. A float y (float32, or float64 narrowed) holds
// real-valued targets for the regression losses: f32 labels, no classes
// (num_classes 0).
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensor/status_macros.h"
#include "trainer/data/data_source.h"
#include "trainer/data/dataset.h"
#include "trainer/data/gz_file.h"
#include "trainer/data/npy.h"
#include "trainer/data/npy_examples.h"
#include "trainer/data/zip_archive.h"

namespace mirrortrain::trainer {
namespace {

// Enough for any header numpy writes (version 1.0 headers are < 64 KiB).
constexpr uint64_t kHeaderPrefixBytes = uint64_t{1} << 20;
// Labels become i32 and num_classes = max + 1 must fit an int.
constexpr int64_t kMaxLabel = std::numeric_limits<int32_t>::max() - 1;

// The four arrays, from an .npz archive or a directory of .npy files.
class ArraySet {
 public:
  static absl::StatusOr<ArraySet> Open(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) return ArraySet(path, {});
    if (!std::filesystem::exists(path, ec)) {
      return absl::NotFoundError(absl::StrCat(
          path,
          ": no such .npz file or directory of .npy files (write one "
          "with scripts/to_npz.py)"));
    }
    MT_ASSIGN_OR_RETURN(ZipArchive zip, ZipArchive::Open(path));
    return ArraySet(path, std::move(zip));
  }

  // Names the array in errors: "data.npz: x_train" or "dir/x_train.npy".
  std::string Where(const std::string& name) const {
    return zip_.has_value() ? absl::StrCat(path_, ": ", name) : FilePath(name);
  }

  absl::StatusOr<NpyArray> Read(const std::string& name) {
    MT_RETURN_IF_ERROR(CheckPresent(name));
    std::string bytes;
    if (zip_.has_value()) {
      MT_ASSIGN_OR_RETURN(bytes, zip_->Read(name + ".npy"));
    } else {
      MT_ASSIGN_OR_RETURN(bytes, ReadWholeFile(FilePath(name)));
    }
    return ParseNpy(std::move(bytes), Where(name));
  }

  // The header alone: reads only the start of the array.
  absl::StatusOr<NpyHeader> ReadHeader(const std::string& name) {
    MT_RETURN_IF_ERROR(CheckPresent(name));
    std::string bytes;
    if (zip_.has_value()) {
      MT_ASSIGN_OR_RETURN(bytes, zip_->Read(name + ".npy", kHeaderPrefixBytes));
    } else {
      MT_ASSIGN_OR_RETURN(GzFile file, GzFile::Open(FilePath(name)));
      bytes.resize(kHeaderPrefixBytes);
      MT_ASSIGN_OR_RETURN(size_t got, file.Read(bytes.data(), bytes.size()));
      bytes.resize(got);
    }
    return ParseNpyHeader(bytes, Where(name));
  }

 private:
  ArraySet(std::string path, std::optional<ZipArchive> zip)
      : path_(std::move(path)), zip_(std::move(zip)) {}

  std::string FilePath(const std::string& name) const {
    return (std::filesystem::path(path_) / (name + ".npy")).string();
  }

  absl::Status CheckPresent(const std::string& name) const {
    std::error_code ec;
    const bool present = zip_.has_value()
                             ? zip_->Has(name + ".npy")
                             : std::filesystem::exists(FilePath(name), ec);
    if (present) return absl::OkStatus();
    return BadData(path_,
                   zip_.has_value()
                       ? absl::StrCat("no array ", name, " (the archive has ",
                                      zip_->ListMembers(),
                                      "; it needs x_train, y_train, x_test, "
                                      "y_test)")
                       : absl::StrCat("no ", name, ".npy in the directory"));
  }

  std::string path_;
  std::optional<ZipArchive> zip_;
};

// One example's labels: [] for y [n] or [n, 1] (Keras's column of class
// labels), else y's shape past n.
Shape LabelShape(const NpyHeader& h) {
  if (h.shape.size() == 2 && h.shape[1] == 1) return {};
  return Shape(h.shape.begin() + 1, h.shape.end());
}

// The labels as int64, flat (u64 values above int64's range are out of
// range, and named as they are). Elements are little-endian, as the
// host's.
absl::StatusOr<std::vector<int64_t>> LabelValues(const NpyArray& y,
                                                 const std::string& where) {
  const NpyHeader& h = y.header;
  if (h.shape.empty()) {
    return BadData(where, "is a scalar, not labels [n] (integer classes)");
  }
  if (absl::c_linear_search(LabelShape(h), 0)) {
    return BadData(where, absl::StrCat("shape ", h.ShapeString(),
                                       " holds no labels per example"));
  }
  const int64_t n = NumElements(h.shape);
  std::vector<int64_t> out(n);
  // The first u64 label past int64: its index and its value as it is.
  int64_t huge_at = -1;
  std::string huge;
  auto widen = [&](auto element) {
    using T = decltype(element);
    for (int64_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, y.data() + i * sizeof(T), sizeof(T));
      if constexpr (std::is_same_v<T, uint64_t>) {
        const bool past =
            v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
        if (past && huge_at < 0) {
          huge_at = i;
          huge = absl::StrCat(v);
        }
        out[i] = past ? std::numeric_limits<int64_t>::max()
                      : static_cast<int64_t>(v);
      } else {
        out[i] = static_cast<int64_t>(v);
      }
    }
  };
  const std::string type = absl::StrCat(std::string(1, h.kind), h.item_bytes);
  if (type == "i1") {
    widen(int8_t{});
  } else if (type == "i2") {
    widen(int16_t{});
  } else if (type == "i4") {
    widen(int32_t{});
  } else if (type == "i8") {
    widen(int64_t{});
  } else if (type == "u1") {
    widen(uint8_t{});
  } else if (type == "u2") {
    widen(uint16_t{});
  } else if (type == "u4") {
    widen(uint32_t{});
  } else if (type == "u8") {
    widen(uint64_t{});
  } else {
    return BadData(where,
                   absl::StrCat("dtype '", h.descr,
                                "' is not an integer type (class labels: "
                                "y.astype(np.int64)",
                                h.shape.size() > 1 && h.shape[1] > 1
                                    ? "; one-hot rows: y.argmax(-1)"
                                    : "",
                                ")"));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (out[i] < 0 || out[i] > kMaxLabel) {
      const bool saturated = i == huge_at;
      return BadData(
          where,
          absl::StrCat("label ", saturated ? huge : absl::StrCat(out[i]),
                       " at index ", i,
                       out[i] < 0 ? " is negative" : " is implausibly large"));
    }
  }
  return out;
}

// Real-valued labels (regression targets): float32 or float64 y (narrowed
// to float32, as numpy's astype), finite, the other split's alike; f32
// [n, ...label shape].
absl::StatusOr<Tensor> RealLabels(ArraySet& arrays, const NpyArray& y,
                                  const std::string& y_name,
                                  const std::string& y_other, int64_t n,
                                  const std::string& x_name,
                                  bool num_classes_given) {
  const std::string where = arrays.Where(y_name);
  if (num_classes_given) {
    return BadData(where,
                   "holds real values (regression targets), not "
                   "classes: leave data.num_classes out");
  }
  MT_ASSIGN_OR_RETURN(NpyArray y2, arrays.Read(y_other));
  if (y2.header.kind != 'f') {
    return BadData(where, absl::StrCat("holds real values but ", y_other,
                                       " class labels (integers): both "
                                       "splits' labels must be one kind"));
  }
  Tensor out;
  for (const NpyArray* a : std::array<const NpyArray*, 2>{&y, &y2}) {
    const NpyHeader& h = a->header;
    const std::string at = arrays.Where(a == &y ? y_name : y_other);
    if (h.shape.empty()) {
      return BadData(at, "is a scalar, not labels [n] (regression targets)");
    }
    if (absl::c_linear_search(LabelShape(h), 0)) {
      return BadData(at, absl::StrCat("shape ", h.ShapeString(),
                                      " holds no labels per example"));
    }
    if (h.item_bytes != 4 && h.item_bytes != 8) {
      return BadData(at, absl::StrCat("dtype '", h.descr,
                                      "' is neither float32 nor float64"));
    }
  }
  if (y.header.shape[0] != n) {
    return BadData(
        arrays.Where(y_name),
        absl::StrCat("has ", y.header.shape[0], " examples' targets but ",
                     x_name, " has ", n, " examples"));
  }
  if (LabelShape(y.header) != LabelShape(y2.header)) {
    return BadData(where, absl::StrCat("has targets of shape ",
                                       ShapeToString(LabelShape(y.header)),
                                       " per example but ", y_other, " has ",
                                       ShapeToString(LabelShape(y2.header))));
  }
  for (const NpyArray* a : std::array<const NpyArray*, 2>{&y2, &y}) {
    const int64_t count = a->header.num_elements();
    Shape shape = {a->header.shape[0]};
    const Shape per = LabelShape(a->header);
    shape.insert(shape.end(), per.begin(), per.end());
    MT_ASSIGN_OR_RETURN(Tensor values, Tensor::Empty(DType::kF32, shape));
    float* v = values.data<float>();
    for (int64_t i = 0; i < count; ++i) {
      if (a->header.item_bytes == 4) {
        std::memcpy(&v[i], a->data() + 4 * i, 4);
      } else {
        double d;
        std::memcpy(&d, a->data() + 8 * i, 8);
        v[i] = static_cast<float>(d);
      }
      if (!std::isfinite(v[i])) {
        const int64_t targets = count / a->header.shape[0];
        return BadData(
            arrays.Where(a == &y ? y_name : y_other),
            absl::StrCat(
                "example ", i / targets,
                targets > 1 ? absl::StrCat(" target ", i % targets) : "",
                " is not a finite float32 (", v[i], ")"));
      }
    }
    out = std::move(values);  // y's, last.
  }
  return out;
}

absl::StatusOr<InMemoryDataset> LoadNpz(const std::string& path, bool train,
                                        std::optional<int64_t> num_classes,
                                        const Shape& model_example) {
  MT_ASSIGN_OR_RETURN(ArraySet arrays, ArraySet::Open(path));
  const std::string split = train ? "train" : "test";
  const std::string other = train ? "test" : "train";
  const std::string x_name = "x_" + split, y_name = "y_" + split;

  MT_ASSIGN_OR_RETURN(NpyArray x, arrays.Read(x_name));
  InMemoryDataset dataset;
  dataset.name = "npz/" + split;
  dataset.origin = arrays.Where(x_name);
  MT_ASSIGN_OR_RETURN(dataset.images,
                      NpyExamples(x, arrays.Where(x_name),
                                  /*bytes_are_ids=*/false, model_example));
  const bool bytes = x.header.kind == 'u';
  x = NpyArray();  // Converted; free the bytes.

  // Both splits must feed the same model.
  const std::string x_other = "x_" + other;
  MT_ASSIGN_OR_RETURN(NpyHeader other_header, arrays.ReadHeader(x_other));
  MT_RETURN_IF_ERROR(CheckExampleDtype(other_header, arrays.Where(x_other)));
  MT_ASSIGN_OR_RETURN(
      Shape other_example,
      NpyExampleShape(other_header, arrays.Where(x_other), model_example));
  // Said here too: the test split loads first, and the classes it counts
  // from an empty training split would fail the model's check first.
  if (other_header.shape[0] == 0) {
    return BadData(arrays.Where(x_other), "holds no examples");
  }
  const Shape& shape = dataset.images.shape();
  const Shape example(shape.begin() + 1, shape.end());
  if (example != other_example) {
    return BadData(path, absl::StrCat(x_name, " has examples of shape ",
                                      ShapeToString(example), " but ", x_other,
                                      " has ", ShapeToString(other_example)));
  }
  // uint8 x (of either split) are pixels scaled to [0, 1], never token
  // ids: an embedding would read every one as id 0.
  dataset.continuous = bytes || other_header.kind == 'u';

  MT_ASSIGN_OR_RETURN(NpyArray y, arrays.Read(y_name));
  const int64_t n = shape[0];
  // Real values (float y: regression targets) or classes (integer y).
  if (y.header.kind == 'f') {
    MT_ASSIGN_OR_RETURN(dataset.labels,
                        RealLabels(arrays, y, y_name, "y_" + other, n, x_name,
                                   num_classes.has_value()));
    dataset.num_classes = 0;
    return dataset;
  }
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> labels,
                      LabelValues(y, arrays.Where(y_name)));
  if (y.header.shape[0] != n) {
    return BadData(path, absl::StrCat(y_name, " has ", y.header.shape[0],
                                      " examples' labels but ", x_name, " has ",
                                      n, " examples"));
  }
  const std::string y_other = "y_" + other;
  MT_ASSIGN_OR_RETURN(NpyArray y2, arrays.Read(y_other));
  if (y2.header.kind == 'f') {
    return BadData(path, absl::StrCat(y_name,
                                      " holds class labels (integers) "
                                      "but ",
                                      y_other,
                                      " real values: both "
                                      "splits' labels must be one kind"));
  }
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> other_labels,
                      LabelValues(y2, arrays.Where(y_other)));
  const Shape label_shape = LabelShape(y.header);
  if (label_shape != LabelShape(y2.header)) {
    return BadData(path, absl::StrCat(y_name, " has labels of shape ",
                                      ShapeToString(label_shape),
                                      " per example but ", y_other, " has ",
                                      ShapeToString(LabelShape(y2.header))));
  }

  if (num_classes.has_value()) {
    for (const auto& [name, values] :
         {std::pair{y_name, &labels}, std::pair{y_other, &other_labels}}) {
      for (size_t i = 0; i < values->size(); ++i) {
        if ((*values)[i] >= *num_classes) {
          return BadData(arrays.Where(name),
                         absl::StrCat("label ", (*values)[i], " at index ", i,
                                      " is out of range [0, ", *num_classes,
                                      ") (data.num_classes)"));
        }
      }
    }
    dataset.num_classes = static_cast<int>(*num_classes);
  } else {
    int64_t max_label = 0;
    for (int64_t v : labels) max_label = std::max(max_label, v);
    for (int64_t v : other_labels) max_label = std::max(max_label, v);
    dataset.num_classes = static_cast<int>(max_label + 1);
  }

  Shape labels_shape = {n};
  labels_shape.insert(labels_shape.end(), label_shape.begin(),
                      label_shape.end());
  MT_ASSIGN_OR_RETURN(dataset.labels, Tensor::Empty(DType::kI32, labels_shape));
  int32_t* out = dataset.labels.data<int32_t>();
  for (size_t i = 0; i < labels.size(); ++i) {
    out[i] = static_cast<int32_t>(labels[i]);
  }
  return dataset;
}

MT_REGISTER(DataSource,
            {.name = "npz",
             .doc = "NumPy arrays x_train, y_train, x_test, y_test: an .npz "
                    "(np.savez or savez_compressed; scripts/to_npz.py) or a "
                    "directory of .npy files; x uint8 (scaled to [0, 1]) or "
                    "float32, [n, features], [n, h, w], NHWC, or more axes as "
                    "model.input_shape; y integer "
                    "[n] or [n, 1], or [n, k] (k labels per example); a "
                    "float y: regression targets",
             .params = {{Param::String("path").Doc(
                             "the .npz file, or a directory of x_train.npy, "
                             "y_train.npy, x_test.npy, y_test.npy"),
                         Param::Int("num_classes")
                             .Nullable()
                             .Min(1)
                             .Max(kMaxLabel + 1)
                             .Doc("null: the largest label of both splits "
                                  "+ 1; else labels must be below it")}},
             .load = [](const Params& p, const SplitRequest& split) {
               return LoadNpz(p.String("path"), split.train,
                              p.OptionalInt("num_classes"),
                              split.example_shape);
             }});

}  // namespace
}  // namespace mirrortrain::trainer
