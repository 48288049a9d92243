// JsonValue: a small, strict JSON document model, parser and serializer,
// sufficient for safetensors headers.
//
// Supported: objects (member order kept as written; duplicate keys are
// rejected), arrays, strings (all escapes, \u surrogate pairs, UTF-8
// validated), 64-bit signed integers, true, false and null. Numbers with a
// fraction or exponent are rejected: safetensors headers never contain them,
// and refusing them beats silently rounding a byte offset.
//
// Ownership: a JsonValue owns its children by value. Thread contract: none
// needed beyond that of standard containers (const access may be shared).
#ifndef MIRRORTRAIN_TRAINER_CHECKPOINT_JSON_H_
#define MIRRORTRAIN_TRAINER_CHECKPOINT_JSON_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mirrortrain::trainer {

class JsonValue {
 public:
  enum class Kind { kNull, kBool, kInteger, kString, kArray, kObject };
  using Array = std::vector<JsonValue>;
  using Member = std::pair<std::string, JsonValue>;
  using Object = std::vector<Member>;

  JsonValue() = default;  // null
  static JsonValue Bool(bool value);
  static JsonValue Integer(int64_t value);
  static JsonValue String(std::string value);
  static JsonValue MakeArray(Array elements = {});
  static JsonValue MakeObject(Object members = {});

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::kNull; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_integer() const { return kind_ == Kind::kInteger; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_object() const { return kind_ == Kind::kObject; }

  // Accessors for the matching kind; calling one for another kind is a
  // caller bug and returns a default value (false, 0, empty).
  bool bool_value() const { return kind_ == Kind::kBool && integer_ != 0; }
  int64_t integer_value() const {
    return kind_ == Kind::kInteger ? integer_ : 0;
  }
  const std::string& string_value() const { return string_; }
  const Array& array() const { return array_; }
  const Object& object() const { return object_; }

  // Object member by key, or nullptr (also for non-objects). Linear: the
  // objects looked up by key (tensor entries) have three members.
  const JsonValue* Find(absl::string_view key) const;

  // Appends to an array / object; ignored for other kinds. Add does not
  // check for duplicate keys (Serialize would then write them; Parse would
  // reject them).
  void Append(JsonValue element);
  void Add(std::string key, JsonValue value);

  // Compact JSON (no whitespace), members in stored order. Strings are
  // written as UTF-8 with '"', '\\' and control characters escaped.
  std::string Serialize() const;

  // "integer", "string", ... for error messages.
  static absl::string_view KindName(Kind kind);

 private:
  void SerializeTo(std::string* out) const;

  Kind kind_ = Kind::kNull;
  int64_t integer_ = 0;  // Also holds the bool.
  std::string string_;
  Array array_;
  Object object_;
};

// Whether `text` is well-formed UTF-8 (no overlong forms, no surrogates).
// JSON text must be; Serialize assumes its strings are.
bool IsValidUtf8(absl::string_view text);

// Parses exactly one JSON value (surrounding whitespace allowed). Errors are
// InvalidArgument "JSON parse error at byte <offset>: <reason>".
absl::StatusOr<JsonValue> ParseJson(absl::string_view text);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_CHECKPOINT_JSON_H_
