// Error messages are one line on stderr (README, "Exit codes"), whatever
// the input they quote: a key, a value or a path may hold newlines or other
// control characters.
#ifndef MIRRORTRAIN_TRAINER_ONE_LINE_H_
#define MIRRORTRAIN_TRAINER_ONE_LINE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace mirrortrain::trainer {

// `text` with control characters escaped (\n, \r, \t, \xNN).
std::string OneLine(absl::string_view text);
// `status` with its message made one line (OK stays OK).
absl::Status OneLine(const absl::Status& status);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_ONE_LINE_H_
