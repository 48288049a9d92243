#include "trainer/data/npy.h"

#include <cctype>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensor/status_macros.h"
#include "trainer/data/gz_file.h"

namespace mirrortrain::trainer {
namespace {

constexpr absl::string_view kMagic = "\x93NUMPY";
// No dataset has more elements; beyond is a corrupt header.
constexpr int64_t kMaxElements = int64_t{1} << 40;

// A value of the header dict: only the kinds .npy headers use.
struct HeaderValue {
  enum Kind { kString, kBool, kInts, kOther } kind = kOther;
  std::string text;           // kString
  bool flag = false;          // kBool
  std::vector<int64_t> ints;  // kInts: a tuple of integers.
};

// The header dict literal, as numpy's format.write_array writes it (and as
// Python's repr may: either quote, optional trailing commas, 'L' suffixes
// from Python 2).
class HeaderParser {
 public:
  explicit HeaderParser(absl::string_view text) : text_(text) {}

  // The dict's entries, or "" as the problem in `error`.
  bool Parse(std::map<std::string, HeaderValue>* out) {
    if (!Consume('{')) return Fail("expected '{'");
    while (!Consume('}')) {
      std::string key;
      if (!ParseString(&key)) return Fail("expected a quoted key");
      if (!Consume(':'))
        return Fail(absl::StrCat("expected ':' after '", key, "'"));
      HeaderValue value;
      if (!ParseValue(&value)) {
        return Fail(absl::StrCat("cannot read the value of '", key, "'"));
      }
      (*out)[key] = std::move(value);
      if (!Consume(',')) {
        if (!Consume('}')) return Fail("expected ',' or '}'");
        break;
      }
    }
    SkipSpace();
    if (pos_ != text_.size()) return Fail("text after the closing '}'");
    return true;
  }

  const std::string& error() const { return error_; }

 private:
  void SkipSpace() {
    while (pos_ < text_.size() &&
           absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Fail(std::string problem) {
    error_ = absl::StrCat(problem, " at offset ", pos_);
    return false;
  }

  bool ParseString(std::string* out) {
    SkipSpace();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
      return false;
    }
    const char quote = text_[pos_++];
    const size_t end = text_.find(quote, pos_);
    if (end == absl::string_view::npos) return false;
    *out = std::string(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return true;
  }

  bool ParseInt(int64_t* out) {
    SkipSpace();
    size_t end = pos_;
    while (end < text_.size() &&
           absl::ascii_isdigit(static_cast<unsigned char>(text_[end]))) {
      ++end;
    }
    if (end == pos_ || !absl::SimpleAtoi(text_.substr(pos_, end - pos_), out)) {
      return false;
    }
    pos_ = end;
    if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;
    return true;
  }

  bool ParseWord(absl::string_view word) {
    SkipSpace();
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  // Skips a bracketed value we do not interpret (a structured dtype's list).
  bool SkipNested(char open, char close) {
    int depth = 0;
    for (; pos_ < text_.size(); ++pos_) {
      const char c = text_[pos_];
      if (c == '\'' || c == '"') {
        const size_t end = text_.find(c, pos_ + 1);
        if (end == absl::string_view::npos) return false;
        pos_ = end;
      } else if (c == open) {
        ++depth;
      } else if (c == close && --depth == 0) {
        ++pos_;
        return true;
      }
    }
    return false;
  }

  bool ParseValue(HeaderValue* out) {
    SkipSpace();
    if (pos_ >= text_.size()) return false;
    const char c = text_[pos_];
    if (c == '\'' || c == '"') {
      out->kind = HeaderValue::kString;
      return ParseString(&out->text);
    }
    for (const bool flag : {true, false}) {
      if (ParseWord(flag ? "True" : "False")) {
        out->kind = HeaderValue::kBool;
        out->flag = flag;
        return true;
      }
    }
    if (c == '[') return SkipNested('[', ']');
    if (c != '(') return false;
    const size_t start = pos_;
    ++pos_;
    out->kind = HeaderValue::kInts;
    while (!Consume(')')) {
      int64_t v = 0;
      if (!ParseInt(&v)) {
        // Not a shape: a tuple of something else.
        pos_ = start;
        out->kind = HeaderValue::kOther;
        return SkipNested('(', ')');
      }
      out->ints.push_back(v);
      if (!Consume(',')) {
        if (!Consume(')')) return false;
        break;
      }
    }
    return true;
  }

  absl::string_view text_;
  size_t pos_ = 0;
  std::string error_;
};

uint32_t LittleEndian(absl::string_view bytes, size_t offset, int n) {
  uint32_t v = 0;
  for (int i = n - 1; i >= 0; --i) {
    v = (v << 8) | static_cast<unsigned char>(bytes[offset + i]);
  }
  return v;
}

absl::Status CheckDescr(const std::string& descr, const std::string& where,
                        NpyHeader* header) {
  auto bad = [&](absl::string_view why) {
    return BadData(where, absl::StrCat("dtype '", descr, "' ", why));
  };
  if (descr.size() < 3) return bad("is not a numeric dtype");
  const char order = descr[0];
  header->kind = descr[1];
  int bytes = 0;
  if (!absl::SimpleAtoi(descr.substr(2), &bytes) || bytes < 1 || bytes > 16 ||
      std::string("biufc").find(header->kind) == std::string::npos) {
    return bad("is not a numeric dtype");
  }
  header->item_bytes = bytes;
  if (order == '>' && bytes > 1) {
    return bad(
        "is big-endian (save it with a little-endian dtype, e.g. "
        "x.astype(x.dtype.newbyteorder('<')))");
  }
  if (order != '<' && order != '|' && order != '>' && order != '=') {
    return bad("has an unknown byte order");
  }
  return absl::OkStatus();
}

}  // namespace

int64_t NpyHeader::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string NpyHeader::ShapeString() const {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

absl::StatusOr<NpyHeader> ParseNpyHeader(absl::string_view bytes,
                                         const std::string& where) {
  if (bytes.size() < kMagic.size() + 2 ||
      bytes.substr(0, kMagic.size()) != kMagic) {
    return BadData(where, bytes.size() < kMagic.size() + 2 &&
                                  kMagic.substr(0, bytes.size()) == bytes
                              ? "truncated: shorter than the .npy magic"
                              : "bad magic: not a .npy array (no \\x93NUMPY)");
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  if (major < 1 || major > 3 || minor != 0) {
    return BadData(where, absl::StrCat("unsupported .npy version ", major, ".",
                                       minor, " (1.0, 2.0 and 3.0 are read)"));
  }
  const size_t length_bytes = major == 1 ? 2 : 4;
  const size_t prefix = kMagic.size() + 2 + length_bytes;
  if (bytes.size() < prefix) {
    return BadData(where, "truncated inside the .npy header");
  }
  const uint32_t header_len = LittleEndian(bytes, prefix - length_bytes,
                                           static_cast<int>(length_bytes));
  if (bytes.size() - prefix < header_len) {
    return BadData(where, absl::StrCat("truncated: the .npy header is ",
                                       header_len, " bytes, the file holds ",
                                       bytes.size() - prefix, " after it"));
  }

  std::map<std::string, HeaderValue> dict;
  HeaderParser parser(bytes.substr(prefix, header_len));
  if (!parser.Parse(&dict)) {
    return BadData(where, absl::StrCat("bad .npy header: ", parser.error()));
  }
  auto get = [&](const char* key, HeaderValue::Kind kind,
                 const char* expected) -> absl::StatusOr<const HeaderValue*> {
    auto it = dict.find(key);
    if (it == dict.end()) {
      return BadData(where, absl::StrCat("bad .npy header: no '", key, "'"));
    }
    if (it->second.kind != kind) {
      return BadData(where, absl::StrCat("bad .npy header: '", key, "' is not ",
                                         expected));
    }
    return &it->second;
  };

  NpyHeader header;
  header.data_offset = prefix + header_len;
  auto descr = dict.find("descr");
  if (descr != dict.end() && descr->second.kind == HeaderValue::kOther) {
    return BadData(where,
                   "structured dtype (a record array); save plain "
                   "numeric arrays");
  }
  MT_ASSIGN_OR_RETURN(const HeaderValue* d,
                      get("descr", HeaderValue::kString, "a dtype string"));
  header.descr = d->text;
  MT_RETURN_IF_ERROR(CheckDescr(header.descr, where, &header));
  MT_ASSIGN_OR_RETURN(const HeaderValue* fortran,
                      get("fortran_order", HeaderValue::kBool, "True/False"));
  MT_ASSIGN_OR_RETURN(const HeaderValue* shape,
                      get("shape", HeaderValue::kInts, "a tuple of integers"));
  header.shape = shape->ints;
  int64_t n = 1;
  for (int64_t dim : header.shape) {
    if (dim != 0 && n > kMaxElements / dim) {
      return BadData(where,
                     absl::StrCat("implausible shape ", header.ShapeString(),
                                  " in the .npy header"));
    }
    n *= dim;
  }
  // A Fortran-ordered array of rank <= 1 has the same layout as C order.
  if (fortran->flag && header.shape.size() > 1) {
    return BadData(where,
                   "fortran_order is True; save a C-ordered array "
                   "(np.ascontiguousarray(x))");
  }
  return header;
}

std::string NpyHeaderBytes(absl::string_view descr,
                           const std::vector<int64_t>& shape) {
  // Python's tuple syntax: a one-element tuple keeps its comma.
  const std::string tuple =
      shape.size() == 1 ? absl::StrCat("(", shape[0], ",)")
                        : absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
  std::string dict =
      absl::StrCat("{'descr': '", descr,
                   "', 'fortran_order': False, 'shape': ", tuple, ", }");
  // Magic, version and the 2-byte length before it; a newline ends it.
  const size_t unpadded = kMagic.size() + 4 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict.push_back('\n');
  std::string out(kMagic);
  out.append({'\x01', '\x00', static_cast<char>(dict.size() & 0xff),
              static_cast<char>(dict.size() >> 8)});
  return out + dict;
}

namespace {

// A header longer than this is not a dataset's (numpy writes ~128 bytes).
constexpr uint32_t kMaxHeaderBytes = uint32_t{1} << 20;

// Reads `n` bytes of `file` onto `out` (fewer only where the data ends).
absl::Status ReadOnto(GzFile& file, size_t n, std::string& out) {
  const size_t start = out.size();
  out.resize(start + n);
  MT_ASSIGN_OR_RETURN(const size_t got, file.Read(out.data() + start, n));
  out.resize(start + got);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<NpyHeader> ReadNpyHeader(GzFile& file) {
  // The magic and version, the length, then that many bytes (fewer where
  // the file ends: ParseNpyHeader says what is missing).
  std::string bytes;
  MT_RETURN_IF_ERROR(ReadOnto(file, kMagic.size() + 2, bytes));
  if (bytes.size() == kMagic.size() + 2) {
    const size_t length_bytes = bytes[kMagic.size()] == 1 ? 2 : 4;
    MT_RETURN_IF_ERROR(ReadOnto(file, length_bytes, bytes));
    if (bytes.size() == kMagic.size() + 2 + length_bytes) {
      const uint32_t length = LittleEndian(bytes, kMagic.size() + 2,
                                           static_cast<int>(length_bytes));
      if (length > kMaxHeaderBytes) {
        return BadData(file.path(),
                       absl::StrCat("a .npy header of ", length,
                                    " bytes (numpy writes a few hundred)"));
      }
      MT_RETURN_IF_ERROR(ReadOnto(file, length, bytes));
    }
  }
  MT_RETURN_IF_ERROR(CheckGzStream(file, bytes.size()));
  return ParseNpyHeader(bytes, file.path());
}

absl::Status CheckNpyPayload(const NpyHeader& header, uint64_t have,
                             const std::string& where) {
  const uint64_t need =
      static_cast<uint64_t>(header.num_elements()) * header.item_bytes;
  if (have < need) {
    return BadData(
        where, absl::StrCat("truncated: shape ", header.ShapeString(), " of ",
                            header.descr, " needs ", need,
                            " bytes, the file holds ", have));
  }
  if (have > need) {
    return BadData(where,
                   absl::StrCat("trailing bytes: ", have - need, " after the ",
                                need, " bytes of shape ", header.ShapeString(),
                                " of ", header.descr));
  }
  return absl::OkStatus();
}

absl::StatusOr<NpyArray> ParseNpy(std::string bytes, const std::string& where) {
  MT_ASSIGN_OR_RETURN(NpyHeader header, ParseNpyHeader(bytes, where));
  MT_RETURN_IF_ERROR(
      CheckNpyPayload(header, bytes.size() - header.data_offset, where));
  return NpyArray{std::move(header), std::move(bytes)};
}

}  // namespace mirrortrain::trainer
