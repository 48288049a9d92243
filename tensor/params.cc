#include "tensor/params.h"

#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mirrortrain {
namespace {

std::string Number(double v) {
  // Integral values print without a fraction (1e+06 would read oddly).
  if (std::isfinite(v) && v == std::floor(v) && std::abs(v) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(v));
  }
  return absl::StrCat(v);
}

struct ValuePrinter {
  std::string operator()(std::monostate) const { return "null"; }
  std::string operator()(int64_t v) const { return absl::StrCat(v); }
  std::string operator()(double v) const {
    // Shortest text that reads back as the same double.
    char buffer[64];
    auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), v);
    return std::string(buffer, ec == std::errc() ? end : buffer);
  }
  std::string operator()(bool v) const { return v ? "true" : "false"; }
  std::string operator()(const std::string& v) const { return v; }
  std::string operator()(const StringMap& m) const {
    std::vector<std::string> parts;
    for (const auto& [key, value] : m) parts.push_back(key + ": " + value);
    return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
  }
  template <typename T>
  std::string operator()(const std::vector<T>& v) const {
    std::vector<std::string> parts;
    for (const T& x : v) parts.push_back((*this)(x));
    return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
  }
};

// The numbers and strings of a value, for element-wise range checks.
void Elements(const ParamValue& value, std::vector<double>* numbers,
              std::vector<std::string>* strings) {
  if (auto* i = std::get_if<int64_t>(&value)) numbers->push_back(*i);
  if (auto* d = std::get_if<double>(&value)) numbers->push_back(*d);
  if (auto* s = std::get_if<std::string>(&value)) strings->push_back(*s);
  if (auto* l = std::get_if<std::vector<int64_t>>(&value)) {
    numbers->insert(numbers->end(), l->begin(), l->end());
  }
  if (auto* l = std::get_if<std::vector<double>>(&value)) {
    numbers->insert(numbers->end(), l->begin(), l->end());
  }
  if (auto* l = std::get_if<std::vector<std::string>>(&value)) {
    strings->insert(strings->end(), l->begin(), l->end());
  }
}

size_t ListLength(const ParamValue& value) {
  return std::visit(
      [](const auto& v) -> size_t {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, std::vector<int64_t>> ||
                      std::is_same_v<V, std::vector<double>> ||
                      std::is_same_v<V, std::vector<std::string>>) {
          return v.size();
        } else {
          return 0;
        }
      },
      value);
}

bool IsList(ParamType type) {
  return type == ParamType::kIntList || type == ParamType::kFloatList ||
         type == ParamType::kStringList;
}

}  // namespace

const char* ParamTypeName(ParamType type) {
  switch (type) {
    case ParamType::kInt:
      return "an integer";
    case ParamType::kFloat:
      return "a number";
    case ParamType::kBool:
      return "true or false";
    case ParamType::kString:
      return "a string";
    case ParamType::kIntList:
      return "a list of integers";
    case ParamType::kFloatList:
      return "a list of numbers";
    case ParamType::kStringList:
      return "a list of strings";
    case ParamType::kStringMap:
      return "a mapping of strings to strings";
    case ParamType::kIntPair:
      return "an integer or a list of 2 integers";
    case ParamType::kIntBox:
      return "an integer, a list of 2 or 4, or 2 lists of 2 integers";
  }
  return "?";
}

std::string ParamValueToString(const ParamValue& value) {
  return std::visit(ValuePrinter(), value);
}

Param Param::Default(ParamValue value) && {
  default_ = std::move(value);
  return std::move(*this);
}
Param Param::Nullable() && {
  nullable_ = true;
  return std::move(*this);
}
Param Param::Min(double lo, bool inclusive) && {
  min_ = lo;
  min_inclusive_ = inclusive;
  return std::move(*this);
}
Param Param::Max(double hi, bool inclusive) && {
  max_ = hi;
  max_inclusive_ = inclusive;
  return std::move(*this);
}
Param Param::OneOf(std::vector<std::string> choices) && {
  choices_ = std::move(choices);
  return std::move(*this);
}
Param Param::MinLength(size_t n) && {
  min_length_ = n;
  return std::move(*this);
}
Param Param::MaxLength(size_t n) && {
  max_length_ = n;
  return std::move(*this);
}
Param Param::InFloat32() && {
  in_float32_ = true;
  return std::move(*this);
}
Param Param::OneIntegerIsAList() && {
  one_integer_is_a_list_ = true;
  return std::move(*this);
}
Param Param::Doc(std::string doc) && {
  doc_ = std::move(doc);
  return std::move(*this);
}

std::optional<ParamValue> Param::default_value() const {
  if (default_.has_value()) return default_;
  if (nullable_) return ParamValue();
  return std::nullopt;
}

std::string Param::Describe() const {
  std::string out = one_integer_is_a_list_ ? "an integer or a list of integers"
                                           : ParamTypeName(type_);
  if (!choices_.empty()) {
    out = absl::StrCat(IsList(type_) ? "a list of " : "", "one of ",
                       absl::StrJoin(choices_, ", "));
  }
  if (min_ && max_) {
    absl::StrAppend(&out, " in ", min_inclusive_ ? "[" : "(", Number(*min_),
                    ", ", Number(*max_), max_inclusive_ ? "]" : ")");
  } else if (min_) {
    absl::StrAppend(&out, min_inclusive_ ? " >= " : " > ", Number(*min_));
  } else if (max_) {
    absl::StrAppend(&out, max_inclusive_ ? " <= " : " < ", Number(*max_));
  }
  if (min_length_ > 0 && max_length_ != SIZE_MAX) {
    absl::StrAppend(&out, " (", min_length_, " to ", max_length_, ")");
  } else if (min_length_ > 0) {
    absl::StrAppend(&out, " (at least ", min_length_, ")");
  } else if (max_length_ != SIZE_MAX) {
    absl::StrAppend(&out, " (at most ", max_length_, ")");
  }
  if (nullable_) absl::StrAppend(&out, ", or null");
  return out;
}

std::string Param::CheckRange(const ParamValue& value) const {
  if (std::holds_alternative<std::monostate>(value)) {
    return nullable_ ? "" : absl::StrCat("expected ", Describe(), ", got null");
  }
  if (IsList(type_) && ListLength(value) < min_length_) {
    return absl::StrCat("expected ", Describe(), ", got ",
                        ParamValueToString(value));
  }
  if (IsList(type_) && ListLength(value) > max_length_) {
    return absl::StrCat("expected ", Describe(), ", got a list of ",
                        ListLength(value));
  }
  std::vector<double> numbers;
  std::vector<std::string> strings;
  Elements(value, &numbers, &strings);
  for (double v : numbers) {
    const bool ok = std::isfinite(v) &&
                    (!min_ || (min_inclusive_ ? v >= *min_ : v > *min_)) &&
                    (!max_ || (max_inclusive_ ? v <= *max_ : v < *max_));
    if (!ok) {
      return absl::StrCat("expected ", Describe(), ", got ",
                          ParamValueToString(value));
    }
    // Used in float32 (InFloat32): one that rounds onto an excluded bound
    // there is out of range (an epsilon of 1e-320 is 0 and would divide by
    // zero; a beta of 0.99999999 is 1 and makes Adam's bias correction
    // 1 - 1), and one beyond its range is infinite.
    const bool real = in_float32_;
    const float rounded = static_cast<float>(v);
    if (real &&
        ((min_ && !min_inclusive_ && rounded <= static_cast<float>(*min_)) ||
         (max_ && !max_inclusive_ && rounded >= static_cast<float>(*max_)))) {
      return absl::StrCat("expected ", Describe(), ", got ",
                          ParamValueToString(value), " (", Number(rounded),
                          " in float32, which computes it)");
    }
    if (real && !std::isfinite(static_cast<float>(v))) {
      return absl::StrCat("expected ", Describe(), ", got ",
                          ParamValueToString(value),
                          " (infinite in float32, which computes it)");
    }
  }
  if (!choices_.empty()) {
    for (const std::string& s : strings) {
      bool found = false;
      for (const std::string& c : choices_) found = found || c == s;
      if (!found) {
        return absl::StrCat("unknown value '", s, "' (expected ", Describe(),
                            ")");
      }
    }
  }
  return "";
}

const Param* ParamSchema::Find(const std::string& name) const {
  for (const Param& p : params) {
    if (p.name() == name) return &p;
  }
  return nullptr;
}

bool Params::IsNull(const std::string& name) const {
  const ParamValue* v = Get(name);
  return v == nullptr || std::holds_alternative<std::monostate>(*v);
}

const ParamValue* Params::Get(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? nullptr : &it->second;
}

template <typename T>
T Params::As(const std::string& name) const {
  const ParamValue* v = Get(name);
  if (v == nullptr) return T{};
  if (const T* t = std::get_if<T>(v)) return *t;
  return T{};
}

int64_t Params::Int(const std::string& name) const { return As<int64_t>(name); }
double Params::Float(const std::string& name) const {
  const ParamValue* v = Get(name);
  if (v != nullptr) {
    if (const int64_t* i = std::get_if<int64_t>(v)) return *i;
  }
  return As<double>(name);
}
bool Params::Bool(const std::string& name) const { return As<bool>(name); }
std::string Params::String(const std::string& name) const {
  return As<std::string>(name);
}
std::vector<int64_t> Params::IntList(const std::string& name) const {
  // One integer where the key takes it for a list of it
  // (Param::OneIntegerIsAList; a spec built in code may hold it so).
  const ParamValue* v = Get(name);
  if (v != nullptr && std::holds_alternative<int64_t>(*v)) {
    return {std::get<int64_t>(*v)};
  }
  return As<std::vector<int64_t>>(name);
}
std::vector<double> Params::FloatList(const std::string& name) const {
  return As<std::vector<double>>(name);
}
std::vector<std::string> Params::StringList(const std::string& name) const {
  return As<std::vector<std::string>>(name);
}
StringMap Params::StringMap(const std::string& name) const {
  return As<mirrortrain::StringMap>(name);
}
std::array<int64_t, 2> Params::IntPair(const std::string& name) const {
  const ParamValue* v = Get(name);
  if (v != nullptr) {
    if (const auto* list = std::get_if<std::vector<int64_t>>(v);
        list != nullptr && list->size() == 2) {
      return {(*list)[0], (*list)[1]};
    }
  }
  const int64_t both = Int(name);
  return {both, both};
}
std::array<int64_t, 4> Params::IntBox(const std::string& name) const {
  const ParamValue* v = Get(name);
  if (v != nullptr) {
    if (const auto* list = std::get_if<std::vector<int64_t>>(v)) {
      if (list->size() == 4) {
        return {(*list)[0], (*list)[1], (*list)[2], (*list)[3]};
      }
      if (list->size() == 2) {
        return {(*list)[0], (*list)[0], (*list)[1], (*list)[1]};
      }
    }
  }
  const int64_t all = Int(name);
  return {all, all, all, all};
}
std::optional<std::array<int64_t, 2>> Params::OptionalIntPair(
    const std::string& name) const {
  if (IsNull(name)) return std::nullopt;
  return IntPair(name);
}
std::optional<int64_t> Params::OptionalInt(const std::string& name) const {
  if (IsNull(name)) return std::nullopt;
  return Int(name);
}
std::optional<double> Params::OptionalFloat(const std::string& name) const {
  if (IsNull(name)) return std::nullopt;
  return Float(name);
}

Params Params::Defaults(const ParamSchema& schema) {
  Params out;
  for (const Param& p : schema.params) {
    if (std::optional<ParamValue> d = p.default_value()) out.Set(p.name(), *d);
  }
  return out;
}

bool ParamTypeMatches(ParamType type, const ParamValue& value) {
  switch (type) {
    case ParamType::kInt:
      return std::holds_alternative<int64_t>(value);
    case ParamType::kFloat:
      return std::holds_alternative<double>(value) ||
             std::holds_alternative<int64_t>(value);
    case ParamType::kBool:
      return std::holds_alternative<bool>(value);
    case ParamType::kString:
      return std::holds_alternative<std::string>(value);
    case ParamType::kIntList:
      return std::holds_alternative<std::vector<int64_t>>(value);
    case ParamType::kFloatList:
      return std::holds_alternative<std::vector<double>>(value);
    case ParamType::kStringList:
      return std::holds_alternative<std::vector<std::string>>(value);
    case ParamType::kStringMap:
      return std::holds_alternative<StringMap>(value);
    case ParamType::kIntPair: {
      const auto* list = std::get_if<std::vector<int64_t>>(&value);
      return std::holds_alternative<int64_t>(value) ||
             (list != nullptr && list->size() == 2);
    }
    case ParamType::kIntBox: {
      const auto* list = std::get_if<std::vector<int64_t>>(&value);
      return std::holds_alternative<int64_t>(value) ||
             (list != nullptr && (list->size() == 2 || list->size() == 4));
    }
  }
  return false;
}

absl::Status CheckParams(const ParamSchema& schema, const Params& params) {
  for (const Param& p : schema.params) {
    const ParamValue* v = params.Get(p.name());
    if (v == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(p.name(), ": required (expected ", p.Describe(), ")"));
    }
    const bool one_for_a_list =
        p.one_integer_is_a_list() && std::holds_alternative<int64_t>(*v);
    if (!std::holds_alternative<std::monostate>(*v) && !one_for_a_list &&
        !ParamTypeMatches(p.type(), *v)) {
      return absl::InvalidArgumentError(absl::StrCat(p.name(), ": expected ",
                                                     p.Describe(), ", got ",
                                                     ParamValueToString(*v)));
    }
    std::string problem = p.CheckRange(*v);
    if (!problem.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(p.name(), ": ", problem));
    }
  }
  if (schema.validate) return schema.validate(params);
  return absl::OkStatus();
}

absl::StatusOr<Params> MakeParams(
    const ParamSchema& schema,
    std::vector<std::pair<std::string, ParamValue>> values) {
  Params params = Params::Defaults(schema);
  for (auto& [name, value] : values) {
    if (schema.Find(name) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": unknown key"));
    }
    params.Set(name, std::move(value));
  }
  absl::Status status = CheckParams(schema, params);
  if (!status.ok()) return status;
  return params;
}

}  // namespace mirrortrain
