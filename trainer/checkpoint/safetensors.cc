#include "trainer/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensor/status_macros.h"
#include "trainer/checkpoint/atomic_file.h"
#include "trainer/checkpoint/json.h"

namespace mirrortrain::trainer {
namespace {

// The format is little-endian; tensors are written and read with memcpy.
static_assert(std::endian::native == std::endian::little,
              "safetensors I/O assumes a little-endian host");

constexpr absl::string_view kMetadataKey = "__metadata__";
constexpr size_t kHeaderLengthBytes = 8;
// The reference writer aligns the data to 8 bytes so it can be mapped and
// viewed in place as any dtype.
constexpr size_t kDataAlignment = 8;

absl::Status InvalidFile(absl::string_view path, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", reason));
}

absl::Status TruncatedFile(absl::string_view path, absl::string_view reason) {
  return absl::DataLossError(absl::StrCat(path, ": ", reason));
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error_number = errno;
    return absl::ErrnoToStatus(
        error_number,
        absl::StrCat(path, ": cannot open: ", std::strerror(error_number)));
  }
  std::string contents;
  struct stat st;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    contents.reserve(static_cast<size_t>(st.st_size));
  }
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error_number = errno;
      ::close(fd);
      return absl::ErrnoToStatus(
          error_number,
          absl::StrCat(path, ": read failed: ", std::strerror(error_number)));
    }
    contents.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return contents;
}

// A non-negative integer array (shape or data_offsets) from the header.
absl::StatusOr<std::vector<int64_t>> NonNegativeIntegers(
    const JsonValue& value, absl::string_view what) {
  if (!value.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is a ", JsonValue::KindName(value.kind()),
                     ", not an array of integers"));
  }
  std::vector<int64_t> out;
  out.reserve(value.array().size());
  for (const JsonValue& element : value.array()) {
    if (!element.is_integer() || element.integer_value() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " must hold non-negative integers, got ", element.Serialize()));
    }
    out.push_back(element.integer_value());
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
                   "' (mirrortrain reads F32, F64, I32 and I64)"));
}

absl::Status WriteSafetensors(
    const std::string& path, absl::Span<const NamedTensor> tensors,
    const std::map<std::string, std::string>& metadata) {
  // Validate everything before creating the temporary file.
  JsonValue header = JsonValue::MakeObject();
  if (!metadata.empty()) {
    JsonValue meta = JsonValue::MakeObject();
    for (const auto& [key, value] : metadata) {
      if (!IsValidUtf8(key) || !IsValidUtf8(value)) {
        return InvalidFile(path, absl::StrCat("metadata entry '", key,
                                              "' is not valid UTF-8"));
      }
      meta.Add(key, JsonValue::String(value));
    }
    header.Add(std::string(kMetadataKey), std::move(meta));
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
    JsonValue shape = JsonValue::MakeArray();
    for (int64_t d : t.tensor.shape()) shape.Append(JsonValue::Integer(d));
    const int64_t end = offset + static_cast<int64_t>(t.tensor.bytes());
    JsonValue entry = JsonValue::MakeObject();
    entry.Add(
        "dtype",
        JsonValue::String(std::string(SafetensorsDTypeName(t.tensor.dtype()))));
    entry.Add("shape", std::move(shape));
    entry.Add("data_offsets", JsonValue::MakeArray({JsonValue::Integer(offset),
                                                    JsonValue::Integer(end)}));
    header.Add(t.name, std::move(entry));
    offset = end;
  }
  std::string header_text = header.Serialize();
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
  MT_ASSIGN_OR_RETURN(file.contents_, ReadWholeFile(path));
  const std::string& contents = file.contents_;

  if (contents.size() < kHeaderLengthBytes) {
    return TruncatedFile(
        path, absl::StrCat("file is ", contents.size(),
                           " bytes, too short for the 8-byte header length "
                           "(truncated file?)"));
  }
  uint64_t header_length = 0;
  std::memcpy(&header_length, contents.data(), kHeaderLengthBytes);
  const size_t available = contents.size() - kHeaderLengthBytes;
  if (header_length > available) {
    return TruncatedFile(
        path,
        absl::StrCat("header length ", header_length, " exceeds the ",
                     available, " bytes that follow it (truncated file?)"));
  }
  file.data_start_ = kHeaderLengthBytes + static_cast<size_t>(header_length);
  const size_t data_size = contents.size() - file.data_start_;

  absl::StatusOr<JsonValue> parsed =
      ParseJson(absl::string_view(contents).substr(
          kHeaderLengthBytes, static_cast<size_t>(header_length)));
  if (!parsed.ok()) {
    return InvalidFile(path, absl::StrCat("header is not valid JSON (",
                                          parsed.status().message(), ")"));
  }
  const JsonValue& header = *parsed;
  if (!header.is_object()) {
    return InvalidFile(path, absl::StrCat("header is a JSON ",
                                          JsonValue::KindName(header.kind()),
                                          ", not an object"));
  }

  for (const auto& [name, value] : header.object()) {
    if (name == kMetadataKey) {
      if (!value.is_object()) {
        return InvalidFile(path, "__metadata__ is not an object");
      }
      for (const auto& [key, meta_value] : value.object()) {
        if (!meta_value.is_string()) {
          return InvalidFile(
              path, absl::StrCat("__metadata__ value for '", key, "' is a ",
                                 JsonValue::KindName(meta_value.kind()),
                                 ", not a string"));
        }
        file.metadata_[key] = meta_value.string_value();
      }
      continue;
    }
    const std::string where = absl::StrCat("tensor '", name, "'");
    if (!value.is_object()) {
      return InvalidFile(path, absl::StrCat(where, ": entry is a ",
                                            JsonValue::KindName(value.kind()),
                                            ", not an object"));
    }
    for (const auto& member : value.object()) {
      if (member.first != "dtype" && member.first != "shape" &&
          member.first != "data_offsets") {
        return InvalidFile(
            path, absl::StrCat(where, ": unexpected key '", member.first, "'"));
      }
    }
    const JsonValue* dtype_json = value.Find("dtype");
    const JsonValue* shape_json = value.Find("shape");
    const JsonValue* offsets_json = value.Find("data_offsets");
    for (const auto& [key, found] :
         {std::pair{"dtype", dtype_json}, std::pair{"shape", shape_json},
          std::pair{"data_offsets", offsets_json}}) {
      if (found == nullptr) {
        return InvalidFile(path, absl::StrCat(where, ": missing '", key, "'"));
      }
    }
    if (!dtype_json->is_string()) {
      return InvalidFile(path, absl::StrCat(where, ": dtype is not a string"));
    }
    absl::StatusOr<DType> dtype =
        ParseSafetensorsDType(dtype_json->string_value());
    if (!dtype.ok()) {
      return InvalidFile(path,
                         absl::StrCat(where, ": ", dtype.status().message()));
    }
    absl::StatusOr<std::vector<int64_t>> shape =
        NonNegativeIntegers(*shape_json, "shape");
    absl::StatusOr<std::vector<int64_t>> offsets =
        NonNegativeIntegers(*offsets_json, "data_offsets");
    for (const absl::Status& s : {shape.status(), offsets.status()}) {
      if (!s.ok()) {
        return InvalidFile(path, absl::StrCat(where, ": ", s.message()));
      }
    }
    if (offsets->size() != 2 || (*offsets)[0] > (*offsets)[1]) {
      return InvalidFile(
          path,
          absl::StrCat(where, ": data_offsets ", offsets_json->Serialize(),
                       " is not [begin, end] with begin <= end"));
    }
    // Byte size with overflow checks: a hostile shape must not wrap around
    // to a size that happens to match the offsets.
    uint64_t expected_bytes = DTypeSize(*dtype);
    bool overflow = false;
    for (int64_t d : *shape) {
      overflow |= __builtin_mul_overflow(
          expected_bytes, static_cast<uint64_t>(d), &expected_bytes);
    }
    const uint64_t begin = static_cast<uint64_t>((*offsets)[0]);
    const uint64_t end = static_cast<uint64_t>((*offsets)[1]);
    if (overflow || end - begin != expected_bytes) {
      return InvalidFile(
          path, absl::StrCat(where, ": data_offsets ",
                             offsets_json->Serialize(), " span ", end - begin,
                             " bytes but dtype ", dtype_json->string_value(),
                             " and shape ", ShapeToString(*shape), " need ",
                             overflow ? std::string("more than 2^64")
                                      : absl::StrCat(expected_bytes)));
    }
    if (end > data_size) {
      return TruncatedFile(
          path,
          absl::StrCat(where, ": data_offsets ", offsets_json->Serialize(),
                       " run past the end of the ", data_size,
                       "-byte data section (truncated file?)"));
    }
    file.index_[name] = file.entries_.size();
    file.entries_.push_back(Entry{name, Info{*dtype, *std::move(shape)},
                                  static_cast<size_t>(begin),
                                  static_cast<size_t>(end)});
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
  if (e->end > e->begin) {
    std::memcpy(t.raw_data(), contents_.data() + data_start_ + e->begin,
                e->end - e->begin);
  }
  return t;
}

}  // namespace mirrortrain::trainer
