#include "trainer/checkpoint/json.h"

#include <cstdint>
#include <limits>
#include <string>
#include <unordered_set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tensor/status_macros.h"

namespace mirrortrain::trainer {
namespace {

// Deep enough for any header; shallow enough that recursion cannot
// overflow the stack on hostile input.
constexpr int kMaxDepth = 256;

// Length of the well-formed UTF-8 sequence starting at text[pos], or 0.
size_t Utf8SequenceLength(absl::string_view text, size_t pos) {
  const auto byte = [&](size_t i) -> int {
    return i < text.size() ? static_cast<unsigned char>(text[i]) : -1;
  };
  const auto in = [](int b, int lo, int hi) { return b >= lo && b <= hi; };
  const int b0 = byte(pos);
  if (in(b0, 0x00, 0x7F)) return 1;
  if (in(b0, 0xC2, 0xDF)) return in(byte(pos + 1), 0x80, 0xBF) ? 2 : 0;
  if (in(b0, 0xE0, 0xEF)) {
    // Bounds of the second byte exclude overlong forms (E0) and UTF-16
    // surrogates (ED).
    const int lo = b0 == 0xE0 ? 0xA0 : 0x80;
    const int hi = b0 == 0xED ? 0x9F : 0xBF;
    return in(byte(pos + 1), lo, hi) && in(byte(pos + 2), 0x80, 0xBF) ? 3 : 0;
  }
  if (in(b0, 0xF0, 0xF4)) {
    // F0 excludes overlong forms; F4 caps code points at U+10FFFF.
    const int lo = b0 == 0xF0 ? 0x90 : 0x80;
    const int hi = b0 == 0xF4 ? 0x8F : 0xBF;
    return in(byte(pos + 1), lo, hi) && in(byte(pos + 2), 0x80, 0xBF) &&
                   in(byte(pos + 3), 0x80, 0xBF)
               ? 4
               : 0;
  }
  return 0;
}

void AppendUtf8(uint32_t code_point, std::string* out) {
  if (code_point < 0x80) {
    out->push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

void AppendQuoted(absl::string_view s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppendFormat(out, "\\u%04x", static_cast<unsigned char>(c));
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

class Parser {
 public:
  explicit Parser(absl::string_view text) : text_(text) {}

  absl::StatusOr<JsonValue> ParseDocument() {
    SkipWhitespace();
    MT_ASSIGN_OR_RETURN(JsonValue value, ParseValue(0));
    SkipWhitespace();
    if (pos_ != text_.size()) {
      return Error("unexpected characters after the JSON value");
    }
    return value;
  }

 private:
  absl::Status Error(absl::string_view reason) const {
    return ErrorAt(pos_, reason);
  }
  absl::Status ErrorAt(size_t pos, absl::string_view reason) const {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON parse error at byte ", pos, ": ", reason));
  }

  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return text_[pos_]; }

  void SkipWhitespace() {
    while (!AtEnd() && (Peek() == ' ' || Peek() == '\t' || Peek() == '\n' ||
                        Peek() == '\r')) {
      ++pos_;
    }
  }

  bool ConsumeLiteral(absl::string_view literal) {
    if (text_.substr(pos_, literal.size()) != literal) return false;
    pos_ += literal.size();
    return true;
  }

  absl::StatusOr<JsonValue> ParseValue(int depth) {
    if (depth > kMaxDepth) {
      return Error(absl::StrCat("nesting deeper than ", kMaxDepth));
    }
    if (AtEnd()) return Error("unexpected end of input, expected a value");
    const char c = Peek();
    if (c == '{') return ParseObject(depth);
    if (c == '[') return ParseArray(depth);
    if (c == '"') {
      MT_ASSIGN_OR_RETURN(std::string s, ParseString());
      return JsonValue::String(std::move(s));
    }
    if (c == '-' || (c >= '0' && c <= '9')) return ParseInteger();
    if (ConsumeLiteral("true")) return JsonValue::Bool(true);
    if (ConsumeLiteral("false")) return JsonValue::Bool(false);
    if (ConsumeLiteral("null")) return JsonValue();
    return Error(
        absl::StrFormat("unexpected character '%c', expected a value", c));
  }

  absl::StatusOr<JsonValue> ParseObject(int depth) {
    ++pos_;  // '{'
    JsonValue object = JsonValue::MakeObject();
    std::unordered_set<std::string> keys;
    SkipWhitespace();
    if (!AtEnd() && Peek() == '}') {
      ++pos_;
      return object;
    }
    while (true) {
      SkipWhitespace();
      if (AtEnd() || Peek() != '"') return Error("expected a string key");
      const size_t key_pos = pos_;
      MT_ASSIGN_OR_RETURN(std::string key, ParseString());
      if (!keys.insert(key).second) {
        return ErrorAt(key_pos, absl::StrCat("duplicate key \"", key, "\""));
      }
      SkipWhitespace();
      if (AtEnd() || Peek() != ':') return Error("expected ':' after key");
      ++pos_;
      SkipWhitespace();
      MT_ASSIGN_OR_RETURN(JsonValue value, ParseValue(depth + 1));
      object.Add(std::move(key), std::move(value));
      SkipWhitespace();
      if (AtEnd()) return Error("unexpected end of input in object");
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() == '}') {
        ++pos_;
        return object;
      }
      return Error("expected ',' or '}' in object");
    }
  }

  absl::StatusOr<JsonValue> ParseArray(int depth) {
    ++pos_;  // '['
    JsonValue array = JsonValue::MakeArray();
    SkipWhitespace();
    if (!AtEnd() && Peek() == ']') {
      ++pos_;
      return array;
    }
    while (true) {
      SkipWhitespace();
      MT_ASSIGN_OR_RETURN(JsonValue element, ParseValue(depth + 1));
      array.Append(std::move(element));
      SkipWhitespace();
      if (AtEnd()) return Error("unexpected end of input in array");
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() == ']') {
        ++pos_;
        return array;
      }
      return Error("expected ',' or ']' in array");
    }
  }

  absl::StatusOr<JsonValue> ParseInteger() {
    const size_t start = pos_;
    const bool negative = Peek() == '-';
    if (negative) ++pos_;
    if (AtEnd() || Peek() < '0' || Peek() > '9') {
      return Error("expected a digit");
    }
    if (Peek() == '0' && pos_ + 1 < text_.size() && text_[pos_ + 1] >= '0' &&
        text_[pos_ + 1] <= '9') {
      return Error("leading zeros are not allowed");
    }
    // Accumulate the magnitude; 2^63 is representable only when negative.
    const uint64_t limit =
        static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) +
        (negative ? 1 : 0);
    uint64_t magnitude = 0;
    while (!AtEnd() && Peek() >= '0' && Peek() <= '9') {
      const uint64_t digit = static_cast<uint64_t>(Peek() - '0');
      if (magnitude > (limit - digit) / 10) {
        return ErrorAt(start, "integer out of the 64-bit signed range");
      }
      magnitude = magnitude * 10 + digit;
      ++pos_;
    }
    if (!AtEnd() && (Peek() == '.' || Peek() == 'e' || Peek() == 'E')) {
      return ErrorAt(start, "non-integer numbers are not supported");
    }
    if (!negative) return JsonValue::Integer(static_cast<int64_t>(magnitude));
    // -(2^63) without overflowing: negate in unsigned arithmetic.
    return JsonValue::Integer(static_cast<int64_t>(0 - magnitude));
  }

  absl::StatusOr<uint32_t> ParseHex4() {
    if (pos_ + 4 > text_.size()) return Error("truncated \\u escape");
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_ + i];
      uint32_t digit;
      if (c >= '0' && c <= '9') {
        digit = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        digit = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        digit = c - 'A' + 10;
      } else {
        return ErrorAt(pos_ + i, "invalid hex digit in \\u escape");
      }
      value = value * 16 + digit;
    }
    pos_ += 4;
    return value;
  }

  absl::StatusOr<std::string> ParseString() {
    ++pos_;  // '"'
    std::string out;
    while (true) {
      if (AtEnd()) return Error("unterminated string");
      const unsigned char c = static_cast<unsigned char>(Peek());
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) return Error("unescaped control character in string");
      if (c != '\\') {
        const size_t n = Utf8SequenceLength(text_, pos_);
        if (n == 0) return Error("invalid UTF-8 in string");
        out.append(text_.data() + pos_, n);
        pos_ += n;
        continue;
      }
      const size_t escape_pos = pos_;
      ++pos_;
      if (AtEnd()) return Error("unterminated escape");
      const char e = Peek();
      ++pos_;
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out.push_back(e);
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          MT_ASSIGN_OR_RETURN(uint32_t unit, ParseHex4());
          if (unit >= 0xDC00 && unit <= 0xDFFF) {
            return ErrorAt(escape_pos, "unpaired low surrogate");
          }
          if (unit >= 0xD800 && unit <= 0xDBFF) {
            if (!ConsumeLiteral("\\u")) {
              return ErrorAt(escape_pos, "unpaired high surrogate");
            }
            MT_ASSIGN_OR_RETURN(uint32_t low, ParseHex4());
            if (low < 0xDC00 || low > 0xDFFF) {
              return ErrorAt(escape_pos, "unpaired high surrogate");
            }
            unit = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
          }
          AppendUtf8(unit, &out);
          break;
        }
        default:
          return ErrorAt(escape_pos, "invalid escape sequence");
      }
    }
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

JsonValue JsonValue::Bool(bool value) {
  JsonValue v;
  v.kind_ = Kind::kBool;
  v.integer_ = value ? 1 : 0;
  return v;
}

JsonValue JsonValue::Integer(int64_t value) {
  JsonValue v;
  v.kind_ = Kind::kInteger;
  v.integer_ = value;
  return v;
}

JsonValue JsonValue::String(std::string value) {
  JsonValue v;
  v.kind_ = Kind::kString;
  v.string_ = std::move(value);
  return v;
}

JsonValue JsonValue::MakeArray(Array elements) {
  JsonValue v;
  v.kind_ = Kind::kArray;
  v.array_ = std::move(elements);
  return v;
}

JsonValue JsonValue::MakeObject(Object members) {
  JsonValue v;
  v.kind_ = Kind::kObject;
  v.object_ = std::move(members);
  return v;
}

const JsonValue* JsonValue::Find(absl::string_view key) const {
  for (const Member& member : object_) {
    if (member.first == key) return &member.second;
  }
  return nullptr;
}

void JsonValue::Append(JsonValue element) {
  if (kind_ == Kind::kArray) array_.push_back(std::move(element));
}

void JsonValue::Add(std::string key, JsonValue value) {
  if (kind_ == Kind::kObject) {
    object_.emplace_back(std::move(key), std::move(value));
  }
}

std::string JsonValue::Serialize() const {
  std::string out;
  SerializeTo(&out);
  return out;
}

void JsonValue::SerializeTo(std::string* out) const {
  switch (kind_) {
    case Kind::kNull:
      out->append("null");
      return;
    case Kind::kBool:
      out->append(integer_ != 0 ? "true" : "false");
      return;
    case Kind::kInteger:
      absl::StrAppend(out, integer_);
      return;
    case Kind::kString:
      AppendQuoted(string_, out);
      return;
    case Kind::kArray:
      out->push_back('[');
      for (size_t i = 0; i < array_.size(); ++i) {
        if (i > 0) out->push_back(',');
        array_[i].SerializeTo(out);
      }
      out->push_back(']');
      return;
    case Kind::kObject:
      out->push_back('{');
      for (size_t i = 0; i < object_.size(); ++i) {
        if (i > 0) out->push_back(',');
        AppendQuoted(object_[i].first, out);
        out->push_back(':');
        object_[i].second.SerializeTo(out);
      }
      out->push_back('}');
      return;
  }
}

absl::string_view JsonValue::KindName(Kind kind) {
  switch (kind) {
    case Kind::kNull:
      return "null";
    case Kind::kBool:
      return "boolean";
    case Kind::kInteger:
      return "integer";
    case Kind::kString:
      return "string";
    case Kind::kArray:
      return "array";
    case Kind::kObject:
      return "object";
  }
  return "unknown";
}

bool IsValidUtf8(absl::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t n = Utf8SequenceLength(text, pos);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

absl::StatusOr<JsonValue> ParseJson(absl::string_view text) {
  return Parser(text).ParseDocument();
}

}  // namespace mirrortrain::trainer
