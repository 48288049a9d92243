// Declared, typed parameters of registered components (layers, optimizers,
// schedules, data sources, strategies): each component lists its keys next
// to its code as a ParamSchema, and receives them checked and typed as
// Params. The config reader (trainer/config.cc) is generic over schemas, so
// adding a component never touches it, and `mirrortrain config --schema`
// prints every schema.
//
// Thread contract: schemas are immutable after static initialisation;
// Params are values.
#ifndef MIRRORTRAIN_TENSOR_PARAMS_H_
#define MIRRORTRAIN_TENSOR_PARAMS_H_

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mirrortrain {

enum class ParamType {
  kInt,
  kFloat,
  kBool,
  kString,
  kIntList,
  kFloatList,
  kStringList,
  kStringMap,
  // An integer, or a list of two (Keras's kernel_size: 3 or (1, 7)).
  kIntPair,
  // Padding or cropping around an image, as Keras takes it: an integer (all
  // four sides), [rows, columns] (symmetric), or [[top, bottom], [left,
  // right]] (either pair also one integer: Keras's mixed form); the last
  // held flat as [top, bottom, left, right], which reads back too.
  kIntBox,
};

// "an integer", "a list of numbers", ... (for errors and the schema dump).
const char* ParamTypeName(ParamType type);

// A mapping of strings to strings, in the order written; keys unique.
using StringMap = std::vector<std::pair<std::string, std::string>>;

// std::monostate is null (an optional key left unset).
using ParamValue =
    std::variant<std::monostate, int64_t, double, bool, std::string,
                 std::vector<int64_t>, std::vector<double>,
                 std::vector<std::string>, StringMap>;

// The value as YAML flow text: 3, 0.5, true, relu, [1, 2], {a: b}, null.
std::string ParamValueToString(const ParamValue& value);

// One key: its type, default, allowed values and a one-line doc. Built
// fluently: Param::Int("units").Min(1).Doc("output width").
class Param {
 public:
  // A key without .Default() is required (unless nullable: then null).
  static Param Int(std::string name) {
    return {std::move(name), ParamType::kInt};
  }
  static Param Float(std::string name) {
    return {std::move(name), ParamType::kFloat};
  }
  static Param Bool(std::string name) {
    return {std::move(name), ParamType::kBool};
  }
  static Param String(std::string name) {
    return {std::move(name), ParamType::kString};
  }
  static Param IntList(std::string name) {
    return {std::move(name), ParamType::kIntList};
  }
  static Param FloatList(std::string name) {
    return {std::move(name), ParamType::kFloatList};
  }
  static Param StringList(std::string name) {
    return {std::move(name), ParamType::kStringList};
  }
  static Param StringMap(std::string name) {
    return {std::move(name), ParamType::kStringMap};
  }
  // Held as written: an integer, or a list of two integers (Params::IntPair
  // reads both as a pair).
  static Param IntPair(std::string name) {
    return {std::move(name), ParamType::kIntPair};
  }
  // Held as an integer, a list of two, or the four sides flat (Params::IntBox
  // reads each as [top, bottom, left, right]).
  static Param IntBox(std::string name) {
    return {std::move(name), ParamType::kIntBox};
  }

  Param Default(ParamValue value) &&;
  // String literals (a plain const char* overload would also catch a
  // literal 0).
  template <size_t N>
  Param Default(const char (&value)[N]) && {
    return std::move(*this).Default(ParamValue(std::string(value)));
  }
  // null is allowed (and is the default unless Default() says otherwise).
  Param Nullable() &&;
  // Numbers (and every element of a number list) must be >= / > lo, <= / <
  // hi and finite.
  Param Min(double lo, bool inclusive = true) &&;
  Param Max(double hi, bool inclusive = true) &&;
  // Strings (and every element of a string list) must be one of these.
  Param OneOf(std::vector<std::string> choices) &&;
  // A list must have at least / at most this many elements.
  Param MinLength(size_t n) &&;
  Param MaxLength(size_t n) &&;
  // The number is used in float32 (an optimizer's hyperparameter): it must
  // be finite there, and nonzero there when it must be > 0 (1e-320 is).
  Param InFloat32() &&;
  // An integer list key that also takes one integer for a list of it
  // (Keras's `axis=-1` for `axis=[-1]`).
  Param OneIntegerIsAList() &&;
  Param Doc(std::string doc) &&;

  const std::string& name() const { return name_; }
  ParamType type() const { return type_; }
  bool nullable() const { return nullable_; }
  bool one_integer_is_a_list() const { return one_integer_is_a_list_; }
  bool required() const { return !default_.has_value() && !nullable_; }
  // The default (null for a nullable key without one); required: none.
  std::optional<ParamValue> default_value() const;
  const std::string& doc() const { return doc_; }
  // "an integer >= 1", "one of relu, tanh", ... for errors and docs.
  std::string Describe() const;

  // Checks the range of a value already of this key's type; returns the
  // problem ("must be >= 1, got 0") or "".
  std::string CheckRange(const ParamValue& value) const;

 private:
  Param(std::string name, ParamType type)
      : name_(std::move(name)), type_(type) {}

  std::string name_;
  ParamType type_;
  std::optional<ParamValue> default_;
  bool nullable_ = false;
  std::optional<double> min_, max_;
  bool min_inclusive_ = true, max_inclusive_ = true;
  std::vector<std::string> choices_;
  size_t min_length_ = 0;
  size_t max_length_ = SIZE_MAX;
  bool in_float32_ = false;
  bool one_integer_is_a_list_ = false;
  std::string doc_;
};

class Params;

// The keys of one component, in the order they are documented and written
// to the resolved config, plus an optional check across keys.
struct ParamSchema {
  std::vector<Param> params;
  // Cross-key checks, after every key passed its own; returns
  // InvalidArgument naming the key (relative to the component).
  std::function<absl::Status(const Params&)> validate;

  const Param* Find(const std::string& name) const;
};

// Checked values of one component's keys (every key of its schema present,
// defaults applied). Typed getters; a wrong type or missing key is a
// programming error and yields the type's zero value.
class Params {
 public:
  Params() = default;

  void Set(const std::string& name, ParamValue value) {
    values_[name] = std::move(value);
  }
  bool Has(const std::string& name) const { return values_.contains(name); }
  bool IsNull(const std::string& name) const;
  const ParamValue* Get(const std::string& name) const;

  int64_t Int(const std::string& name) const;
  double Float(const std::string& name) const;
  bool Bool(const std::string& name) const;
  std::string String(const std::string& name) const;
  std::vector<int64_t> IntList(const std::string& name) const;
  std::vector<double> FloatList(const std::string& name) const;
  std::vector<std::string> StringList(const std::string& name) const;
  mirrortrain::StringMap StringMap(const std::string& name) const;
  // An IntPair key: {v, v} for an integer v, else the list's two.
  std::array<int64_t, 2> IntPair(const std::string& name) const;
  std::optional<std::array<int64_t, 2>> OptionalIntPair(
      const std::string& name) const;
  // An IntBox key as [top, bottom, left, right].
  std::array<int64_t, 4> IntBox(const std::string& name) const;
  std::optional<int64_t> OptionalInt(const std::string& name) const;
  std::optional<double> OptionalFloat(const std::string& name) const;

  // Only the defaults of `schema` (required keys absent): for components
  // built in code rather than from a config.
  static Params Defaults(const ParamSchema& schema);

 private:
  template <typename T>
  T As(const std::string& name) const;

  absl::flat_hash_map<std::string, ParamValue> values_;
};

// Whether `value` has the C++ type of `type` (an integer passes for a
// number; null for none).
bool ParamTypeMatches(ParamType type, const ParamValue& value);

// Checks every key of `schema` in `params`: present unless nullable, of the
// key's type (an integer passes for a number), in range; then the schema's
// cross-key check. InvalidArgument "key: problem".
absl::Status CheckParams(const ParamSchema& schema, const Params& params);

// The defaults of `schema` with `values` set, checked (CheckParams); an
// unknown key is InvalidArgument. For components built in code and tests.
absl::StatusOr<Params> MakeParams(
    const ParamSchema& schema,
    std::vector<std::pair<std::string, ParamValue>> values = {});

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_PARAMS_H_
