#include "trainer/checkpoint/checkpoint_dir.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "tensor/status_macros.h"
#include "trainer/checkpoint/saver.h"

namespace mirrortrain::trainer {
namespace {

namespace fs = std::filesystem;

// AtomicFileWriter's temporary of one of our files: "<ours>.tmp.<digits>".
bool IsTemporaryName(absl::string_view name) {
  constexpr absl::string_view kTmp = ".tmp.";
  const size_t at = name.rfind(kTmp);
  if (at == absl::string_view::npos) return false;
  const absl::string_view base = name.substr(0, at);
  const absl::string_view pid = name.substr(at + kTmp.size());
  return !pid.empty() && absl::c_all_of(pid, absl::ascii_isdigit) &&
         (base == CheckpointIndexName() ||
          ParseCheckpointFileName(base).has_value());
}

}  // namespace

absl::StatusOr<CheckpointDirContents> ScanCheckpointDir(
    const std::string& dir) {
  CheckpointDirContents contents;
  std::error_code ec;
  const fs::file_type type = fs::status(dir, ec).type();
  if (type == fs::file_type::not_found) return contents;
  if (type != fs::file_type::directory) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, " is ", FileTypeName(type), ", not a directory for checkpoints"));
  }
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code type_ec;
    const bool regular =
        it->symlink_status(type_ec).type() == fs::file_type::regular;
    if (name == CheckpointIndexName()) {
      contents.has_index = true;
    } else if (regular && ParseCheckpointFileName(name).has_value()) {
      contents.checkpoints.push_back(name);
    } else if (regular && IsTemporaryName(name)) {
      contents.temporaries.push_back(name);
    }
  }
  if (ec) {
    return absl::ErrnoToStatus(ec.value(), absl::StrCat(dir, ": cannot list"));
  }
  absl::c_sort(contents.checkpoints);
  absl::c_sort(contents.temporaries);
  return contents;
}

absl::StatusOr<std::vector<std::string>> RemoveCheckpointLeftovers(
    const std::string& dir, const std::string& keep) {
  MT_ASSIGN_OR_RETURN(const CheckpointDirContents contents,
                      ScanCheckpointDir(dir));
  std::vector<std::string> doomed = contents.temporaries;
  // Without an index nothing says which checkpoints are the run's.
  if (contents.has_index) {
    MT_ASSIGN_OR_RETURN(const std::vector<std::string> kept,
                        ListCheckpoints(dir));
    MT_ASSIGN_OR_RETURN(const std::string latest, LatestCheckpoint(dir));
    std::set<std::string> indexed = {fs::path(latest).filename().string()};
    for (const std::string& path : kept) {
      indexed.insert(fs::path(path).filename().string());
    }
    for (const std::string& name : contents.checkpoints) {
      if (indexed.contains(name)) continue;
      std::error_code ec;
      if (!keep.empty() && fs::equivalent(fs::path(dir) / name, keep, ec)) {
        continue;
      }
      doomed.push_back(name);
    }
  }
  std::vector<std::string> removed;
  for (const std::string& name : doomed) {
    const std::string path = (fs::path(dir) / name).string();
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      const int error_number = errno;
      // ErrnoToStatus appends the system's reason.
      return absl::ErrnoToStatus(
          error_number,
          absl::StrCat(path, ": cannot remove what an interrupted save left"));
    }
    removed.push_back(name);
  }
  return removed;
}

}  // namespace mirrortrain::trainer
