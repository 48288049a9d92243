#include "trainer/checkpoint/safetensors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "tensor/allocator.h"
#include "tensor/status_macros.h"
#include "trainer/checkpoint/atomic_file.h"
#include "trainer/logging/crc32c.h"
#include "trainer/regular_file.h"

namespace mirrortrain::trainer {
namespace {

uint16_t LittleEndian16(const char* p) {
  return static_cast<uint16_t>(static_cast<unsigned char>(p[0]) |
                               static_cast<unsigned char>(p[1]) << 8);
}

// IEEE binary16 -> binary32, exactly (every half is a float): subnormals,
// infinities and NaN payloads included.
float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in a float.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  const uint32_t float_exponent = exponent == 0x1fu ? 0xffu : exponent + 112;
  return std::bit_cast<float>(sign | float_exponent << 23 | mantissa << 13);
}

// bfloat16 is a float's upper half.
float BFloat16ToFloat(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

using ::nlohmann::json;
using ::nlohmann::ordered_json;

// The format is little-endian; tensors are written and read with memcpy.
static_assert(std::endian::native == std::endian::little,
              "safetensors I/O assumes a little-endian host");

constexpr absl::string_view kMetadataKey = "__metadata__";
constexpr size_t kHeaderLengthBytes = 8;
// The reference implementation's cap: a header takes about 100 bytes per
// tensor, and parsing it costs several times its size in memory.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// The reference writer aligns the data to 8 bytes so it can be mapped and
// viewed in place as any dtype.
constexpr size_t kDataAlignment = 8;
// A valid header nests two levels deep. nlohmann's parser does not recurse,
// but dump() (error messages) does, so a hostile header is refused early.
constexpr size_t kMaxJsonDepth = 256;

absl::Status InvalidFile(absl::string_view path, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", reason));
}

absl::Status TruncatedFile(absl::string_view path, absl::string_view reason) {
  return absl::DataLossError(absl::StrCat(path, ": ", reason));
}

// `size` bytes at `offset` of `file`; fewer (it shrank since it was opened)
// is a truncated file.
absl::Status ReadExactly(const RegularFile& file, uint64_t offset, void* dst,
                         size_t size) {
  MT_ASSIGN_OR_RETURN(const size_t n,
                      ReadAt(file.fd.get(), file.path, offset, dst, size));
  if (n == size) return absl::OkStatus();
  return TruncatedFile(
      file.path, absl::StrCat("the file ends at byte ", offset + n, " of the ",
                              offset + size, " read"));
}

std::string FormatCrc32c(uint32_t crc) { return absl::StrFormat("%08x", crc); }

// Exactly FormatCrc32c's form, so that one file has one valid spelling.
bool ParseCrc32c(absl::string_view text, uint32_t* crc) {
  constexpr size_t kDigits = 8;
  if (text.size() != kDigits) return false;
  for (char c : text) {
    if (!absl::ascii_isdigit(c) && !(c >= 'a' && c <= 'f')) return false;
  }
  return absl::SimpleHexAtoi(text, crc);
}

// Whether nlohmann's serializer accepts `s`: well-formed UTF-8 (RFC 3629: no
// overlong forms, surrogates or code points past U+10FFFF). Checked per
// string so that the error names the entry and the final dump() cannot
// throw.
bool IsValidUtf8(const std::string& s) {
  try {
    (void)json(s).dump();
    return true;
  } catch (const json::type_error&) {
    return false;
  }
}

// The JSON type for error messages, with its article for "X is <kind>"
// ("an integer", "an object", "null"). Integers are named apart from other
// numbers because only they are accepted.
std::string KindName(const json& value) {
  const std::string kind =
      value.is_number_integer() ? "integer" : value.type_name();
  if (value.is_null()) return kind;
  return absl::StrCat(absl::StrContains("aeiou", kind[0]) ? "an " : "a ", kind);
}

// nlohmann's message without its "[json.exception.<kind>.<id>] " prefix and,
// for a parse error, without "parse error at line L, column C: " (the byte
// offset is reported instead, as the rest of the file's errors do).
absl::string_view ExceptionReason(const json::exception& e) {
  absl::string_view what = e.what();
  if (const size_t end = what.find("] "); end != absl::string_view::npos) {
    what.remove_prefix(end + 2);
  }
  if (absl::StartsWith(what, "parse error")) {
    if (const size_t colon = what.find(": ");
        colon != absl::string_view::npos) {
      what.remove_prefix(colon + 2);
    }
  }
  return what;
}

// The checks nlohmann's parser leaves out, as a SAX handler for a first pass
// that builds nothing: duplicate keys (nlohmann keeps the last one silently,
// so a repeated tensor name would hide a tensor) and nesting deeper than
// kMaxJsonDepth. Also records the root's keys in file order. A SAX pass
// rather than a parser callback: nlohmann's callback parser rescans an
// object each time a member object ends, quadratic in the tensor count.
class HeaderChecker : public nlohmann::json_sax<json> {
 public:
  // Why parsing stopped; empty if it did not.
  const std::string& problem() const { return problem_; }
  std::vector<std::string> TakeRootKeys() { return std::move(root_keys_); }

  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override {
    return Value();
  }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool start_object(std::size_t) override { return StartContainer(); }
  bool key(string_t& key) override {
    if (!open_keys_.back().insert(key).second) {
      problem_ = absl::StrCat("JSON parse error: duplicate key \"", key, "\"");
      return false;
    }
    if (open_keys_.size() == 1) root_keys_.push_back(key);
    return true;
  }
  bool end_object() override { return EndContainer(); }
  bool start_array(std::size_t) override { return StartContainer(); }
  bool end_array() override { return EndContainer(); }
  bool parse_error(std::size_t position, const std::string&,
                   const json::exception& e) override {
    // `position` counts the bytes read, the offending one included.
    problem_ =
        absl::StrCat("JSON parse error at byte ",
                     position > 0 ? position - 1 : 0, ": ", ExceptionReason(e));
    return false;
  }

 private:
  // Called for every value, containers included; it lies at depth
  // open_keys_.size().
  bool Value() {
    if (open_keys_.size() > kMaxJsonDepth) {
      problem_ =
          absl::StrCat("JSON parse error: nesting deeper than ", kMaxJsonDepth);
      return false;
    }
    return true;
  }
  bool StartContainer() {
    if (!Value()) return false;
    open_keys_.emplace_back();
    return true;
  }
  bool EndContainer() {
    open_keys_.pop_back();
    return true;
  }

  // The keys of each open container, outermost first (empty for arrays).
  std::vector<absl::flat_hash_set<std::string>> open_keys_;
  std::vector<std::string> root_keys_;
  std::string problem_;
};

struct ParsedHeader {
  json root;
  // The root object's keys in file order: json sorts its keys, and
  // ordered_json finds them by linear search, which a hostile header with
  // millions of keys would make quadratic.
  std::vector<std::string> root_keys;
};

// Parses the header strictly. nlohmann itself refuses what is not strict
// JSON: invalid UTF-8, unpaired surrogates, raw control characters, leading
// zeros, trailing text, comments, NaN; HeaderChecker adds duplicate keys and
// the depth limit. Numbers with a fraction or exponent parse, and are refused
// where integers are expected (NonNegativeIntegers). Errors are
// InvalidArgument "JSON parse error at byte <offset>: <reason>" ("JSON parse
// error: <reason>" for HeaderChecker's own checks). Throws nothing: neither
// sax_parse nor parse with allow_exceptions=false does.
absl::StatusOr<ParsedHeader> ParseHeader(absl::string_view text) {
  HeaderChecker checker;
  if (!json::sax_parse(text.begin(), text.end(), &checker)) {
    return absl::InvalidArgumentError(checker.problem());
  }
  ParsedHeader parsed;
  parsed.root = json::parse(text.begin(), text.end(), /*cb=*/nullptr,
                            /*allow_exceptions=*/false);
  if (parsed.root.is_discarded()) {  // Not after the first pass succeeded.
    return absl::InvalidArgumentError("JSON parse error");
  }
  parsed.root_keys = checker.TakeRootKeys();
  return parsed;
}

// A non-negative integer array (shape or data_offsets) from the header.
absl::StatusOr<std::vector<int64_t>> NonNegativeIntegers(
    const json& value, absl::string_view what) {
  if (!value.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is ", KindName(value), ", not an array of integers"));
  }
  std::vector<int64_t> out;
  out.reserve(value.size());
  for (const json& element : value) {
    // nlohmann reads 8.0, 8e0 and integers of 2^64 or more as doubles:
    // refused rather than rounded into a byte offset.
    if (element.is_number_float()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " must hold integers, got ", element.dump(),
                       " (a number with a fraction or exponent, or of 2^64 "
                       "or more)"));
    }
    if (element.is_number_unsigned() &&
        element.get<uint64_t>() >
            static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " must hold integers below 2^63, got ", element.dump()));
    }
    if (!element.is_number_integer() || element.get<int64_t>() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " must hold non-negative integers, got ", element.dump()));
    }
    out.push_back(element.get<int64_t>());
  }
  return out;
}

}  // namespace

absl::string_view SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF64:
      return "F64";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
  }
  return "UNKNOWN";
}

absl::StatusOr<DType> ParseSafetensorsDType(absl::string_view name) {
  for (DType d : {DType::kF32, DType::kF64, DType::kI32, DType::kI64}) {
    if (SafetensorsDTypeName(d) == name) return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported dtype '", name,
                   "' (mirrortrain reads F32, F64, I32 and I64, and F16 and "
                   "BF16 as F32)"));
}

absl::StatusOr<std::string> TensorDataCrc32c(
    absl::Span<const NamedTensor> tensors) {
  uint32_t crc = 0;
  for (const NamedTensor& t : tensors) {
    if (!t.tensor.defined() || !t.tensor.device().is_cpu()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TensorDataCrc32c: tensor '", t.name, "' is not on the host"));
    }
    crc = Crc32cExtend(crc, t.tensor.raw_data(), t.tensor.bytes());
  }
  return FormatCrc32c(crc);
}

absl::Status WriteSafetensors(
    const std::string& path, absl::Span<const NamedTensor> tensors,
    const std::map<std::string, std::string>& metadata) {
  // Validate everything before creating the temporary file.
  // ordered_json: members are written in insertion order, as the reference
  // writer does (metadata first, then the tensors in the order given).
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json meta = ordered_json::object();
    for (const auto& [key, value] : metadata) {
      if (!IsValidUtf8(key) || !IsValidUtf8(value)) {
        return InvalidFile(path, absl::StrCat("metadata entry '", key,
                                              "' is not valid UTF-8"));
      }
      meta[key] = value;
    }
    header[std::string(kMetadataKey)] = std::move(meta);
  }
  std::set<absl::string_view> seen;
  int64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    if (t.name.empty() || t.name == kMetadataKey || !IsValidUtf8(t.name)) {
      return InvalidFile(path,
                         absl::StrCat("invalid tensor name '", t.name, "'"));
    }
    if (!seen.insert(t.name).second) {
      return InvalidFile(path,
                         absl::StrCat("duplicate tensor name '", t.name, "'"));
    }
    if (!t.tensor.defined()) {
      return InvalidFile(path,
                         absl::StrCat("tensor '", t.name, "' is undefined"));
    }
    ordered_json shape = ordered_json::array();
    for (int64_t d : t.tensor.shape()) shape.push_back(d);
    const int64_t end = offset + static_cast<int64_t>(t.tensor.bytes());
    ordered_json entry = ordered_json::object();
    entry["dtype"] = std::string(SafetensorsDTypeName(t.tensor.dtype()));
    entry["shape"] = std::move(shape);
    entry["data_offsets"] = ordered_json::array({offset, end});
    // Appended without ordered_map's linear search for the key (`seen`
    // made sure it is new): header[t.name] made saving quadratic in the
    // tensors, 2.3 s for 10 000 of them.
    using Members = std::vector<ordered_json::object_t::value_type>;
    static_assert(std::is_base_of_v<Members, ordered_json::object_t>,
                  "nlohmann's ordered_map is no longer a vector of members");
    static_cast<Members&>(header.get_ref<ordered_json::object_t&>())
        .emplace_back(t.name, std::move(entry));
    offset = end;
  }
  // Compact, UTF-8 kept as is: the bytes the reference writer produces. Every
  // string was checked above, so dump() cannot throw.
  std::string header_text = header.dump();
  header_text.append(
      (kDataAlignment - header_text.size() % kDataAlignment) % kDataAlignment,
      ' ');

  MT_ASSIGN_OR_RETURN(AtomicFileWriter writer, AtomicFileWriter::Create(path));
  const uint64_t header_length = header_text.size();
  char length_bytes[kHeaderLengthBytes];
  std::memcpy(length_bytes, &header_length, kHeaderLengthBytes);
  MT_RETURN_IF_ERROR(
      writer.Append(absl::string_view(length_bytes, kHeaderLengthBytes)));
  MT_RETURN_IF_ERROR(writer.Append(header_text));
  for (const NamedTensor& t : tensors) {
    // One host copy at a time keeps the extra memory to one tensor.
    Tensor host = t.tensor;
    if (!host.device().is_cpu()) {
      absl::StatusOr<Tensor> copied = t.tensor.To(Device::Cpu());
      if (!copied.ok()) {
        return absl::Status(
            copied.status().code(),
            absl::StrCat(path, ": copying '", t.name,
                         "' to the host: ", copied.status().message()));
      }
      host = *std::move(copied);
    }
    MT_RETURN_IF_ERROR(writer.Append(absl::string_view(
        static_cast<const char*>(host.raw_data()), host.bytes())));
  }
  return writer.Commit();
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  SafetensorsFile file;
  file.path_ = path;
  // The header is read and checked before the data: a huge file whose
  // header is garbage costs no more than its header.
  MT_ASSIGN_OR_RETURN(const RegularFile opened, OpenRegularFile(path));
  if (opened.size > HostMemoryBytes()) {
    // More than the host's memory could never be held.
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": file is ", opened.size, " bytes, more than the limit of ",
        HostMemoryBytes(), " bytes"));
  }
  if (opened.size < kHeaderLengthBytes) {
    return TruncatedFile(
        path, absl::StrCat("file is ", opened.size,
                           " bytes, too short for the 8-byte header length "
                           "(truncated file?)"));
  }
  uint64_t header_length = 0;
  MT_RETURN_IF_ERROR(
      ReadExactly(opened, 0, &header_length, kHeaderLengthBytes));
  const uint64_t available = opened.size - kHeaderLengthBytes;
  if (header_length > available) {
    return TruncatedFile(
        path,
        absl::StrCat("header length ", header_length, " exceeds the ",
                     available, " bytes that follow it (truncated file?)"));
  }
  if (header_length > kMaxHeaderBytes) {
    return InvalidFile(path, absl::StrCat("header length ", header_length,
                                          " exceeds the limit of ",
                                          kMaxHeaderBytes, " bytes"));
  }
  file.data_start_ = kHeaderLengthBytes + static_cast<size_t>(header_length);
  const size_t data_size = opened.size - file.data_start_;
  std::string& contents = file.contents_;
  contents.resize(file.data_start_);
  std::memcpy(contents.data(), &header_length, kHeaderLengthBytes);
  MT_RETURN_IF_ERROR(ReadExactly(opened, kHeaderLengthBytes,
                                 contents.data() + kHeaderLengthBytes,
                                 header_length));

  const absl::string_view header_text = absl::string_view(contents).substr(
      kHeaderLengthBytes, static_cast<size_t>(header_length));
  // JSON text never holds a NUL (the parser would call it the end of its
  // input): it is a zeroed block, as a crash or a full disk can leave.
  if (const size_t nul = header_text.find('\0');
      nul != absl::string_view::npos) {
    return InvalidFile(
        path,
        absl::StrCat("header holds a NUL byte at offset ", nul, " of its ",
                     header_length, " bytes (a zero-filled or damaged file?)"));
  }
  absl::StatusOr<ParsedHeader> parsed = ParseHeader(header_text);
  if (!parsed.ok()) {
    return InvalidFile(path, absl::StrCat("header is not valid JSON (",
                                          parsed.status().message(), ")"));
  }
  const json& header = parsed->root;
  if (!header.is_object()) {
    return InvalidFile(path, absl::StrCat("header is ", KindName(header),
                                          ", not a JSON object"));
  }

  for (const std::string& name : parsed->root_keys) {
    // at() cannot throw: root_keys are exactly the root's keys.
    const json& value = header.at(name);
    if (name == kMetadataKey) {
      if (!value.is_object()) {
        return InvalidFile(path, "__metadata__ is not an object");
      }
      for (auto it = value.begin(); it != value.end(); ++it) {
        if (!it->is_string()) {
          return InvalidFile(
              path, absl::StrCat("__metadata__ value for '", it.key(), "' is ",
                                 KindName(*it), ", not a string"));
        }
        file.metadata_[it.key()] = it->get<std::string>();
      }
      continue;
    }
    const std::string where = absl::StrCat("tensor '", name, "'");
    if (!value.is_object()) {
      return InvalidFile(path,
                         absl::StrCat(where, ": entry is ", KindName(value),
                                      ", not an object"));
    }
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (it.key() != "dtype" && it.key() != "shape" &&
          it.key() != "data_offsets") {
        return InvalidFile(
            path, absl::StrCat(where, ": unexpected key '", it.key(), "'"));
      }
    }
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
      if (!value.contains(key)) {
        return InvalidFile(path, absl::StrCat(where, ": missing '", key, "'"));
      }
    }
    const json& dtype_json = value.at("dtype");
    const json& shape_json = value.at("shape");
    const json& offsets_json = value.at("data_offsets");
    if (!dtype_json.is_string()) {
      return InvalidFile(path, absl::StrCat(where, ": dtype is not a string"));
    }
    const std::string& dtype_name = dtype_json.get_ref<const std::string&>();
    const Half half = dtype_name == "F16"    ? Half::kF16
                      : dtype_name == "BF16" ? Half::kBF16
                                             : Half::kNone;
    absl::StatusOr<DType> dtype = half == Half::kNone
                                      ? ParseSafetensorsDType(dtype_name)
                                      : absl::StatusOr<DType>(DType::kF32);
    if (!dtype.ok()) {
      return InvalidFile(path,
                         absl::StrCat(where, ": ", dtype.status().message()));
    }
    absl::StatusOr<std::vector<int64_t>> shape =
        NonNegativeIntegers(shape_json, "shape");
    absl::StatusOr<std::vector<int64_t>> offsets =
        NonNegativeIntegers(offsets_json, "data_offsets");
    for (const absl::Status& s : {shape.status(), offsets.status()}) {
      if (!s.ok()) {
        return InvalidFile(path, absl::StrCat(where, ": ", s.message()));
      }
    }
    if (offsets->size() != 2 || (*offsets)[0] > (*offsets)[1]) {
      return InvalidFile(
          path, absl::StrCat(where, ": data_offsets ", offsets_json.dump(),
                             " is not [begin, end] with begin <= end"));
    }
    // Byte size with overflow checks: a hostile shape must not wrap around
    // to a size that happens to match the offsets.
    uint64_t expected_bytes =
        half == Half::kNone ? DTypeSize(*dtype) : sizeof(uint16_t);
    bool overflow = false;
    for (int64_t d : *shape) {
      overflow |= __builtin_mul_overflow(
          expected_bytes, static_cast<uint64_t>(d), &expected_bytes);
    }
    const uint64_t begin = static_cast<uint64_t>((*offsets)[0]);
    const uint64_t end = static_cast<uint64_t>((*offsets)[1]);
    if (overflow || end - begin != expected_bytes) {
      return InvalidFile(
          path,
          absl::StrCat(where, ": data_offsets ", offsets_json.dump(), " span ",
                       end - begin, " bytes but dtype ", dtype_name,
                       " and shape ", ShapeToString(*shape), " need ",
                       overflow ? std::string("more than 2^64")
                                : absl::StrCat(expected_bytes)));
    }
    if (end > data_size) {
      return TruncatedFile(
          path, absl::StrCat(where, ": data_offsets ", offsets_json.dump(),
                             " run past the end of the ", data_size,
                             "-byte data section (truncated file?)"));
    }
    file.index_[name] = file.entries_.size();
    file.entries_.push_back(
        Entry{name, Info{*dtype, *std::move(shape), dtype_name}, half,
              static_cast<size_t>(begin), static_cast<size_t>(end)});
  }

  // The data must be exactly the tensors, back to back, in some order.
  std::vector<const Entry*> by_offset;
  by_offset.reserve(file.entries_.size());
  for (const Entry& e : file.entries_) by_offset.push_back(&e);
  std::stable_sort(
      by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
        return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
      });
  size_t expected_begin = 0;
  const Entry* previous = nullptr;
  for (const Entry* e : by_offset) {
    if (e->begin < expected_begin) {
      return InvalidFile(path, absl::StrCat("data of tensors '", previous->name,
                                            "' and '", e->name, "' overlap"));
    }
    if (e->begin > expected_begin) {
      return InvalidFile(
          path, absl::StrCat("non-contiguous data: ", e->begin - expected_begin,
                             " unused bytes before tensor '", e->name, "'"));
    }
    expected_begin = e->end;
    previous = e;
  }
  if (expected_begin != data_size) {
    return InvalidFile(path, absl::StrCat(data_size - expected_begin,
                                          " unused bytes after the last "
                                          "tensor's data"));
  }
  contents.resize(opened.size);
  MT_RETURN_IF_ERROR(ReadExactly(
      opened, file.data_start_, contents.data() + file.data_start_, data_size));
  if (auto it = file.metadata_.find(std::string(kDataCrc32cKey));
      it != file.metadata_.end()) {
    uint32_t expected = 0;
    if (!ParseCrc32c(it->second, &expected)) {
      return InvalidFile(path, absl::StrCat("metadata '", kDataCrc32cKey,
                                            "' is not 8 lowercase hex "
                                            "digits: '",
                                            it->second, "'"));
    }
    const uint32_t actual =
        Crc32c(absl::string_view(contents).substr(file.data_start_));
    if (actual != expected) {
      return absl::DataLossError(
          absl::StrCat(path, ": the tensor data does not match its checksum (",
                       kDataCrc32cKey, " ", it->second, ", computed ",
                       FormatCrc32c(actual), "): the file is corrupt"));
    }
  }
  return file;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const Entry& e : entries_) out.push_back(e.name);
  return out;
}

const SafetensorsFile::Entry* SafetensorsFile::Find(
    absl::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

bool SafetensorsFile::Contains(absl::string_view name) const {
  return Find(name) != nullptr;
}

absl::Status SafetensorsFile::NotFound(absl::string_view name) const {
  return absl::NotFoundError(
      absl::StrCat(path_, ": no tensor '", name, "' in the file"));
}

absl::StatusOr<SafetensorsFile::Info> SafetensorsFile::GetInfo(
    absl::string_view name) const {
  const Entry* e = Find(name);
  if (e == nullptr) return NotFound(name);
  return e->info;
}

absl::StatusOr<Tensor> SafetensorsFile::Get(absl::string_view name) const {
  const Entry* e = Find(name);
  if (e == nullptr) return NotFound(name);
  Tensor t = Tensor::HostEmpty(e->info.dtype, e->info.shape);
  const char* bytes = contents_.data() + data_start_ + e->begin;
  if (e->half != Half::kNone) {
    float* out = t.data<float>();
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      const uint16_t h = LittleEndian16(bytes + 2 * i);
      out[i] = e->half == Half::kF16 ? HalfToFloat(h) : BFloat16ToFloat(h);
    }
  } else if (e->end > e->begin) {
    std::memcpy(t.raw_data(), bytes, e->end - e->begin);
  }
  return t;
}

}  // namespace mirrortrain::trainer
