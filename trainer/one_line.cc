#include "trainer/one_line.h"

#include "absl/strings/str_format.h"

namespace mirrortrain::trainer {

std::string OneLine(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      out += absl::StrFormat("\\x%02x", u);
    } else {
      out += c;
    }
  }
  return out;
}

absl::Status OneLine(const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), OneLine(status.message()));
}

}  // namespace mirrortrain::trainer
