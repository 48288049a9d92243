#include "trainer/checkpoint/saver.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tensor/allocator.h"
#include "tensor/status_macros.h"
#include "trainer/checkpoint/atomic_file.h"
#include "trainer/checkpoint/safetensors.h"
#include "trainer/regular_file.h"

namespace mirrortrain::trainer {
namespace {

namespace fs = std::filesystem;

constexpr absl::string_view kIndexFileName = "checkpoint";
constexpr absl::string_view kLatestKey = "model_checkpoint_path";
constexpr absl::string_view kAllKey = "all_model_checkpoint_paths";
constexpr absl::string_view kCheckpointPrefix = "ckpt-";
constexpr absl::string_view kCheckpointSuffix = ".safetensors";
// Restore lists this many problems in full before summarising the rest.
constexpr size_t kMaxProblemsListed = 5;

// The index's entries as written (usually names relative to the directory).
struct CheckpointIndex {
  std::string latest;
  std::vector<std::string> all;
};

std::string IndexPath(const std::string& dir) {
  return (fs::path(dir) / std::string(kIndexFileName)).string();
}

// An index entry (a file name, see ReadIndex) as a path usable from here.
std::string ResolveEntry(const std::string& dir, const std::string& entry) {
  return (fs::path(dir) / entry).string();
}

// Whether `entry` names a file directly inside the directory. Only such
// entries are accepted, so that neither restoring nor pruning ever reaches
// outside the checkpoint directory.
bool IsFileNameInDirectory(absl::string_view entry) {
  return !entry.empty() && entry != "." && entry != ".." &&
         !absl::StrContains(entry, '/');
}

// nullopt when there is no index file.
absl::StatusOr<std::optional<CheckpointIndex>> ReadIndex(
    const std::string& dir) {
  const std::string path = IndexPath(dir);
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(path, ec);
  if (status.type() == fs::file_type::not_found) {
    return std::optional<CheckpointIndex>();
  }
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat(path, ": cannot stat: ", ec.message()));
  }
  // Opening a FIFO would block; a symbolic link could lead anywhere.
  if (status.type() != fs::file_type::regular) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the checkpoint index is not a regular file (",
                     FileTypeName(status.type()), ")"));
  }
  MT_ASSIGN_OR_RETURN(const std::string text,
                      ReadRegularFile(path, HostMemoryBytes()));
  CheckpointIndex index;
  bool have_latest = false;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    const auto bad_line = [&](absl::string_view reason) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_number, ": ", reason));
    };
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) {
      return bad_line("expected 'key: \"value\"'");
    }
    const absl::string_view key =
        absl::StripAsciiWhitespace(line.substr(0, colon));
    const absl::string_view quoted =
        absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (quoted.size() < 2 || quoted.front() != '"' || quoted.back() != '"') {
      return bad_line("value is not a quoted string");
    }
    std::string value;
    std::string error;
    if (!absl::CUnescape(quoted.substr(1, quoted.size() - 2), &value, &error)) {
      return bad_line(absl::StrCat("bad escape in value: ", error));
    }
    if (value.empty()) return bad_line("empty checkpoint path");
    if (!IsFileNameInDirectory(value)) {
      return bad_line(absl::StrCat(
          "'", value,
          "' is not a file name inside the checkpoint directory (mirrortrain "
          "reads and deletes nothing outside it)"));
    }
    if (key == kLatestKey) {
      if (have_latest) return bad_line("second model_checkpoint_path");
      index.latest = std::move(value);
      have_latest = true;
    } else if (key == kAllKey) {
      index.all.push_back(std::move(value));
    } else {
      return bad_line(absl::StrCat("unknown key '", key, "'"));
    }
  }
  if (!have_latest) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": no model_checkpoint_path"));
  }
  return std::optional<CheckpointIndex>(std::move(index));
}

std::string FormatIndex(const CheckpointIndex& index) {
  std::string out =
      absl::StrCat(kLatestKey, ": \"", absl::CEscape(index.latest), "\"\n");
  for (const std::string& entry : index.all) {
    absl::StrAppend(&out, kAllKey, ": \"", absl::CEscape(entry), "\"\n");
  }
  return out;
}

}  // namespace

std::string CheckpointFileName(int64_t step) {
  return absl::StrCat(kCheckpointPrefix, step, kCheckpointSuffix);
}

absl::string_view CheckpointIndexName() { return kIndexFileName; }

std::optional<int64_t> ParseCheckpointFileName(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kCheckpointPrefix) ||
      !absl::ConsumeSuffix(&name, kCheckpointSuffix) || name.empty() ||
      !absl::c_all_of(name, absl::ascii_isdigit) ||
      // Only the name a save writes (ckpt-9, never ckpt-0009): another is
      // not ours to clean up or prune.
      (name.size() > 1 && name[0] == '0')) {
    return std::nullopt;
  }
  int64_t step = 0;
  if (!absl::SimpleAtoi(name, &step)) return std::nullopt;
  return step;
}

absl::string_view FileTypeName(fs::file_type type) {
  switch (type) {
    case fs::file_type::regular:
      return "a regular file";
    case fs::file_type::directory:
      return "a directory";
    case fs::file_type::symlink:
      return "a symbolic link";
    case fs::file_type::fifo:
      return "a FIFO";
    case fs::file_type::socket:
      return "a socket";
    case fs::file_type::block:
    case fs::file_type::character:
      return "a device";
    case fs::file_type::not_found:
      return "missing";
    default:
      return "of an unknown type";
  }
}

Saver::Saver(const std::vector<Variable*>& variables) {
  entries_.reserve(variables.size());
  for (Variable* v : variables) {
    entries_.emplace_back(v != nullptr ? v->name() : std::string(), v);
  }
}

Saver Saver::FromNameMap(
    std::vector<std::pair<std::string, Variable*>> name_map) {
  Saver saver;
  saver.entries_ = std::move(name_map);
  return saver;
}

absl::Status Saver::CheckEntries() const {
  std::set<absl::string_view> names;
  for (const auto& [name, variable] : entries_) {
    if (variable == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("Saver: null variable for entry '", name, "'"));
    }
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("Saver: two variables saved under '", name, "'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Saver::Save(
    const std::string& dir, int64_t step,
    const std::map<std::string, std::string>& metadata, int64_t max_to_keep) {
  MT_RETURN_IF_ERROR(CheckEntries());
  std::error_code ec;
  if (absl::Status created = CreateDirectoriesDurably(dir); !created.ok()) {
    return created;
  }
  // Read the index first: a malformed one fails the save before anything is
  // written, rather than being silently replaced.
  MT_ASSIGN_OR_RETURN(std::optional<CheckpointIndex> old_index, ReadIndex(dir));

  const std::string file_name = CheckpointFileName(step);
  const std::string path = (fs::path(dir) / file_name).string();
  // Host copies of all tensors at once: the checksum goes into the header,
  // which is written before the data.
  std::vector<NamedTensor> tensors;
  tensors.reserve(entries_.size());
  for (const auto& [name, variable] : entries_) {
    Tensor value = variable->value();
    if (!value.device().is_cpu()) {
      absl::StatusOr<Tensor> host = value.To(Device::Cpu());
      if (!host.ok()) {
        return absl::Status(
            host.status().code(),
            absl::StrCat(path, ": copying '", name,
                         "' to the host: ", host.status().message()));
      }
      value = *std::move(host);
    }
    tensors.push_back(NamedTensor{name, std::move(value)});
  }
  std::map<std::string, std::string> with_checksum = metadata;
  MT_ASSIGN_OR_RETURN(with_checksum[std::string(kDataCrc32cKey)],
                      TensorDataCrc32c(tensors));
  // A checkpoint of this step already there (a rerun's) is in the old
  // index: a failed index write below must not take it away.
  const bool replaces =
      fs::symlink_status(path, ec).type() != fs::file_type::not_found;
  if (absl::Status written = WriteSafetensors(path, tensors, with_checksum);
      !written.ok()) {
    // A file renamed into place before the failure (its directory's fsync
    // failed) would be a first checkpoint no index names, which makes the
    // run directory refuse to resume (checkpoint_dir.h).
    if (!replaces) ::unlink(path.c_str());
    return written;
  }

  CheckpointIndex index;
  index.latest = file_name;
  if (old_index.has_value()) {
    for (std::string& entry : old_index->all) {
      if (ResolveEntry(dir, entry) != path) index.all.push_back(entry);
    }
  }
  index.all.push_back(file_name);
  std::vector<std::string> pruned;
  if (max_to_keep > 0 && index.all.size() > static_cast<size_t>(max_to_keep)) {
    const size_t excess = index.all.size() - static_cast<size_t>(max_to_keep);
    pruned.assign(index.all.begin(), index.all.begin() + excess);
    index.all.erase(index.all.begin(), index.all.begin() + excess);
  }
  bool index_renamed = false;
  if (absl::Status indexed = WriteFileAtomically(
          IndexPath(dir), FormatIndex(index), &index_renamed);
      !indexed.ok()) {
    // The directory as it was: a first checkpoint no index names would
    // make the run directory refuse to resume (checkpoint_dir.h). An index
    // renamed into place before the failure names the new file, which
    // therefore stays.
    if (!replaces && !index_renamed) ::unlink(path.c_str());
    return indexed;
  }

  // Only now, with the index no longer naming them, are old files removed:
  // only our own checkpoint files, never a link or anything else an index
  // entry may have come to name.
  for (const std::string& entry : pruned) {
    const std::string old_path = ResolveEntry(dir, entry);
    const fs::file_status old_status = fs::symlink_status(old_path, ec);
    if (!ParseCheckpointFileName(entry).has_value() ||
        old_status.type() != fs::file_type::regular) {
      continue;
    }
    if (::unlink(old_path.c_str()) != 0 && errno != ENOENT) {
      const int error_number = errno;
      return absl::ErrnoToStatus(
          error_number,
          absl::StrCat(path, " was saved, but deleting the old checkpoint ",
                       old_path, " failed"));
    }
  }
  return path;
}

absl::Status Saver::Restore(const std::string& path) {
  MT_ASSIGN_OR_RETURN(const SafetensorsFile file, SafetensorsFile::Open(path));
  return Restore(file);
}

absl::Status Saver::Restore(const SafetensorsFile& file) {
  MT_RETURN_IF_ERROR(CheckEntries());
  const std::string& path = file.path();

  std::vector<std::string> problems;
  for (const auto& [name, variable] : entries_) {
    const std::string quoted =
        name == variable->name()
            ? absl::StrCat("'", name, "'")
            : absl::StrCat("'", name, "' (variable '", variable->name(), "')");
    if (!file.Contains(name)) {
      problems.push_back(absl::StrCat(
          "variable ",
          name == variable->name() ? quoted
                                   : absl::StrCat("'", variable->name(),
                                                  "' (saved as '", name, "')"),
          " not found in checkpoint"));
      continue;
    }
    MT_ASSIGN_OR_RETURN(SafetensorsFile::Info info, file.GetInfo(name));
    if (info.dtype != variable->dtype()) {
      problems.push_back(
          absl::StrCat(quoted, " has dtype ", DTypeName(info.dtype),
                       " in the checkpoint but ", DTypeName(variable->dtype()),
                       " in the model"));
    } else if (info.shape != variable->shape()) {
      problems.push_back(
          absl::StrCat(quoted, " has shape ", ShapeToString(info.shape),
                       " in the checkpoint but ",
                       ShapeToString(variable->shape()), " in the model"));
    }
  }
  if (!problems.empty()) {
    std::string message = absl::StrCat(path, ": ", problems[0]);
    const size_t listed = std::min(problems.size(), kMaxProblemsListed);
    for (size_t i = 1; i < listed; ++i) {
      absl::StrAppend(&message, "; ", problems[i]);
    }
    if (problems.size() > listed) {
      absl::StrAppend(&message, "; and ", problems.size() - listed,
                      " more problems");
    }
    absl::StrAppend(&message, " (nothing was restored)");
    return absl::InvalidArgumentError(message);
  }

  // Read every tensor before assigning any, so a read failure also leaves
  // the variables as they were.
  std::vector<Tensor> values;
  values.reserve(entries_.size());
  for (const auto& entry : entries_) {
    MT_ASSIGN_OR_RETURN(Tensor value, file.Get(entry.first));
    values.push_back(std::move(value));
  }
  for (size_t i = 0; i < entries_.size(); ++i) {
    const absl::Status s = entries_[i].second->Assign(values[i]);
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat(path, ": restoring '", entries_[i].first,
                                       "': ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> LatestCheckpoint(const std::string& dir) {
  MT_ASSIGN_OR_RETURN(std::optional<CheckpointIndex> index, ReadIndex(dir));
  if (!index.has_value()) {
    return absl::NotFoundError(absl::StrCat(dir, ": no checkpoint found (no '",
                                            kIndexFileName, "' index file)"));
  }
  const std::string path = ResolveEntry(dir, index->latest);
  std::error_code ec;
  // Not followed: a link may lead out of the directory.
  const fs::file_type type = fs::symlink_status(path, ec).type();
  if (type == fs::file_type::regular) return path;
  const std::string names = absl::StrCat(
      IndexPath(dir), " names '", index->latest, "' as the latest checkpoint");
  if (type == fs::file_type::not_found) {
    return absl::NotFoundError(
        absl::StrCat(names, ", but ", path, " does not exist"));
  }
  return absl::InvalidArgumentError(absl::StrCat(names, ", but ", path, " is ",
                                                 FileTypeName(type),
                                                 ", not a checkpoint file"));
}

absl::StatusOr<std::string> ResolveCheckpoint(const std::string& path_or_dir) {
  std::error_code ec;
  const fs::file_status status = fs::status(path_or_dir, ec);
  if (fs::is_directory(status)) {
    // A run directory (no index of its own, a checkpoints folder): that
    // folder's latest, or its error.
    const std::string inner = (fs::path(path_or_dir) / "checkpoints").string();
    const bool own_index =
        fs::symlink_status(IndexPath(path_or_dir), ec).type() !=
        fs::file_type::not_found;
    if (!own_index && fs::is_directory(inner, ec)) {
      return LatestCheckpoint(inner);
    }
    return LatestCheckpoint(path_or_dir);
  }
  if (fs::is_regular_file(status)) return path_or_dir;
  if (status.type() == fs::file_type::not_found) {
    return absl::NotFoundError(
        absl::StrCat(path_or_dir, ": no such checkpoint file or directory"));
  }
  // A loop of links, a name too long, a directory not to be searched.
  if (ec) {
    return absl::ErrnoToStatus(ec.value(), path_or_dir);  // Adds strerror.
  }
  // A FIFO, device or socket: said as `inspect` says it (not opened).
  return absl::InvalidArgumentError(
      absl::StrCat(path_or_dir, ": is ", FileTypeName(status.type()),
                   ", not a checkpoint file or directory"));
}

absl::StatusOr<std::vector<std::string>> ListCheckpoints(
    const std::string& dir) {
  MT_ASSIGN_OR_RETURN(std::optional<CheckpointIndex> index, ReadIndex(dir));
  std::vector<std::string> out;
  if (!index.has_value()) return out;
  out.reserve(index->all.size());
  for (const std::string& entry : index->all) {
    out.push_back(ResolveEntry(dir, entry));
  }
  return out;
}

}  // namespace mirrortrain::trainer
