// Saver: save/restore round trips, name maps, subset restores, validation
// before assignment, max_to_keep pruning, the index file, and checkpoint
// lookup (LatestCheckpoint, ResolveCheckpoint, ListCheckpoints).
#include "trainer/checkpoint/saver.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/cuda/cuda_backend.h"
#include "tests/test_util.h"
#include "trainer/checkpoint/safetensors.h"

namespace mirrortrain::trainer {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

Variable MakeVariable(const std::string& name, const Tensor& value) {
  absl::StatusOr<Variable> v = Variable::Create(name, value);
  EXPECT_TRUE(v.ok()) << v.status();
  return *std::move(v);
}

std::vector<float> Floats(const Variable& v) {
  return v.value().ToVector<float>();
}

class SaverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = mirrortrain::testing::FreshTestDir("saver_test");
    dir_ = root_ + "/run/checkpoints";  // Not created: Save makes it.
  }
  void TearDown() override { fs::remove_all(root_); }

  std::vector<std::string> DirEntries() const {
    return mirrortrain::testing::SortedDirEntries(dir_);
  }
  std::string CkptPath(int64_t step) const {
    return (fs::path(dir_) / CheckpointFileName(step)).string();
  }

  std::string root_;
  std::string dir_;
};

TEST_F(SaverTest, SaveRestoreRoundTrip) {
  Variable kernel = MakeVariable(
      "dense/kernel", Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  Variable bias =
      MakeVariable("dense/bias", Tensor::FromVector<double>({0.5, -0.5}, {2}));
  Variable step = MakeVariable("global_step", Tensor::Scalar<int64_t>(42));
  Saver saver({&kernel, &bias, &step});

  absl::StatusOr<std::string> path =
      saver.Save(dir_, 42, {{"step", "42"}, {"epoch", "1"}}, 5);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, CkptPath(42));
  EXPECT_THAT(DirEntries(), ElementsAre("checkpoint", "ckpt-42.safetensors"));

  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(*path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT(file->names(),
              ElementsAre("dense/kernel", "dense/bias", "global_step"));
  EXPECT_EQ(file->metadata().at("step"), "42");
  EXPECT_EQ(file->metadata().at("epoch"), "1");

  ASSERT_TRUE(kernel.Assign(Tensor::HostZeros(DType::kF32, {2, 3})).ok());
  ASSERT_TRUE(bias.Assign(Tensor::HostZeros(DType::kF64, {2})).ok());
  ASSERT_TRUE(step.Assign(Tensor::Scalar<int64_t>(0)).ok());
  ASSERT_TRUE(saver.Restore(*path).ok());
  EXPECT_EQ(Floats(kernel), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(bias.value().ToVector<double>(), (std::vector<double>{0.5, -0.5}));
  EXPECT_EQ(step.value().ToVector<int64_t>(), (std::vector<int64_t>{42}));
}

TEST_F(SaverTest, NameMapSavesAndRestoresUnderFileNames) {
  Variable v2 = MakeVariable("v2", Tensor::FromVector<float>({7, 8}, {2}));
  Saver saver = Saver::FromNameMap({{"my_v2", &v2}});
  absl::StatusOr<std::string> path = saver.Save(dir_, 1, {}, 0);
  ASSERT_TRUE(path.ok()) << path.status();
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(*path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT(file->names(), ElementsAre("my_v2"));

  // A differently named variable in another model restores from "my_v2".
  Variable other = MakeVariable("other", Tensor::HostZeros(DType::kF32, {2}));
  Saver restorer = Saver::FromNameMap({{"my_v2", &other}});
  ASSERT_TRUE(restorer.Restore(*path).ok());
  EXPECT_EQ(Floats(other), (std::vector<float>{7, 8}));

  // By its own name it is not in the file; the error names both.
  absl::Status s = Saver({&other}).Restore(*path);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("variable 'other' not found"));
  Variable third = MakeVariable("third", Tensor::HostZeros(DType::kF32, {2}));
  s = Saver::FromNameMap({{"nope", &third}}).Restore(*path);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("variable 'third' (saved as 'nope') not found"));
}

TEST_F(SaverTest, SubsetRestoreKeepsTheOthersInitializers) {
  Variable a = MakeVariable("a", Tensor::FromVector<float>({1, 1}, {2}));
  Variable b = MakeVariable("b", Tensor::FromVector<float>({2, 2}, {2}));
  ASSERT_TRUE(a.Assign(Tensor::FromVector<float>({10, 11}, {2})).ok());
  ASSERT_TRUE(b.Assign(Tensor::FromVector<float>({20, 21}, {2})).ok());
  absl::StatusOr<std::string> path = Saver({&a, &b}).Save(dir_, 3, {}, 5);
  ASSERT_TRUE(path.ok()) << path.status();

  // A fresh model: restore only `a`; `b` keeps its initial value.
  Variable a2 = MakeVariable("a", Tensor::FromVector<float>({1, 1}, {2}));
  Variable b2 = MakeVariable("b", Tensor::FromVector<float>({2, 2}, {2}));
  ASSERT_TRUE(Saver({&a2}).Restore(*path).ok());
  EXPECT_EQ(Floats(a2), (std::vector<float>{10, 11}));
  EXPECT_EQ(Floats(b2), (std::vector<float>{2, 2}));
}

TEST_F(SaverTest, MissingVariableFailsAndChangesNothing) {
  Variable kernel =
      MakeVariable("dense/kernel", Tensor::FromVector<float>({1, 2}, {2}));
  absl::StatusOr<std::string> path = Saver({&kernel}).Save(dir_, 1, {}, 5);
  ASSERT_TRUE(path.ok()) << path.status();

  Variable kernel2 =
      MakeVariable("dense/kernel", Tensor::FromVector<float>({5, 5}, {2}));
  Variable extra =
      MakeVariable("dense_1/kernel", Tensor::FromVector<float>({6}, {1}));
  absl::Status s = Saver({&kernel2, &extra}).Restore(*path);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(s.message()),
      HasSubstr(absl::StrCat(
          *path, ": variable 'dense_1/kernel' not found in checkpoint")));
  // kernel2 was valid but is not assigned: validation precedes assignment.
  EXPECT_EQ(Floats(kernel2), (std::vector<float>{5, 5}));
}

TEST_F(SaverTest, ShapeMismatchNamesBothShapesAndChangesNothing) {
  Variable bias =
      MakeVariable("dense/bias", Tensor::HostFull(DType::kF32, {4}, 1));
  Variable kernel = MakeVariable("dense/kernel",
                                 Tensor::HostFull(DType::kF32, {784, 256}, 1));
  absl::StatusOr<std::string> path =
      Saver({&bias, &kernel}).Save(dir_, 1, {}, 5);
  ASSERT_TRUE(path.ok()) << path.status();

  // `bias` comes first and matches; it must still not be assigned.
  Variable bias2 =
      MakeVariable("dense/bias", Tensor::HostFull(DType::kF32, {4}, 9));
  Variable kernel2 = MakeVariable("dense/kernel",
                                  Tensor::HostFull(DType::kF32, {784, 128}, 9));
  absl::Status s = Saver({&bias2, &kernel2}).Restore(*path);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat(*path,
                                     ": 'dense/kernel' has shape [784,256] in "
                                     "the checkpoint but [784,128] in the "
                                     "model")));
  EXPECT_EQ(Floats(bias2), std::vector<float>(4, 9));
  EXPECT_EQ(Floats(kernel2), std::vector<float>(784 * 128, 9));
}

TEST_F(SaverTest, DTypeMismatchAndSeveralProblemsAreAllReported) {
  Variable a = MakeVariable("a", Tensor::FromVector<double>({1}, {1}));
  absl::StatusOr<std::string> path = Saver({&a}).Save(dir_, 1, {}, 5);
  ASSERT_TRUE(path.ok()) << path.status();
  Variable a32 = MakeVariable("a", Tensor::FromVector<float>({1}, {1}));
  Variable b = MakeVariable("b", Tensor::FromVector<float>({1}, {1}));
  absl::Status s = Saver({&a32, &b}).Restore(*path);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("'a' has dtype f64 in the checkpoint but f32 in the "
                        "model; variable 'b' not found in checkpoint"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("nothing was restored"));
}

TEST_F(SaverTest, RestoreFromACorruptFileNamesIt) {
  fs::create_directories(dir_);
  const std::string path = dir_ + "/ckpt-1.safetensors";
  std::ofstream(path) << "garbage!garbage!";
  Variable a = MakeVariable("a", Tensor::FromVector<float>({1}, {1}));
  absl::Status s = Saver({&a}).Restore(path);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr(path));
}

TEST_F(SaverTest, RejectsNullAndDuplicateEntries) {
  Variable a = MakeVariable("a", Tensor::FromVector<float>({1}, {1}));
  Variable a_again = MakeVariable("a", Tensor::FromVector<float>({1}, {1}));
  absl::StatusOr<std::string> saved =
      Saver({&a, &a_again}).Save(dir_, 1, {}, 5);
  EXPECT_EQ(saved.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(saved.status().message()),
              HasSubstr("two variables saved under 'a'"));
  EXPECT_EQ(Saver({nullptr}).Save(dir_, 1, {}, 5).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(dir_ + "/ckpt-1.safetensors"));
}

TEST_F(SaverTest, MaxToKeepPrunesOldestAndIndexListsTheKept) {
  Variable v = MakeVariable("v", Tensor::FromVector<float>({0}, {1}));
  Saver saver({&v});
  for (int64_t step = 100; step <= 500; step += 100) {
    ASSERT_TRUE(
        v.Assign(Tensor::FromVector<float>({static_cast<float>(step)}, {1}))
            .ok());
    ASSERT_TRUE(saver.Save(dir_, step, {}, 3).ok());
  }
  EXPECT_THAT(DirEntries(),
              ElementsAre("checkpoint", "ckpt-300.safetensors",
                          "ckpt-400.safetensors", "ckpt-500.safetensors"));
  EXPECT_EQ(testing::ReadFile(dir_ + "/checkpoint"),
            "model_checkpoint_path: \"ckpt-500.safetensors\"\n"
            "all_model_checkpoint_paths: \"ckpt-300.safetensors\"\n"
            "all_model_checkpoint_paths: \"ckpt-400.safetensors\"\n"
            "all_model_checkpoint_paths: \"ckpt-500.safetensors\"\n");
  absl::StatusOr<std::vector<std::string>> list = ListCheckpoints(dir_);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_THAT(*list, ElementsAre(CkptPath(300), CkptPath(400), CkptPath(500)));
  absl::StatusOr<std::string> latest = LatestCheckpoint(dir_);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, CkptPath(500));

  // Re-saving a kept step replaces it and makes it the latest.
  ASSERT_TRUE(v.Assign(Tensor::FromVector<float>({-4}, {1})).ok());
  ASSERT_TRUE(saver.Save(dir_, 400, {}, 3).ok());
  list = ListCheckpoints(dir_);
  ASSERT_TRUE(list.ok());
  EXPECT_THAT(*list, ElementsAre(CkptPath(300), CkptPath(500), CkptPath(400)));
  EXPECT_EQ(*LatestCheckpoint(dir_), CkptPath(400));
  ASSERT_TRUE(saver.Restore(*LatestCheckpoint(dir_)).ok());
  EXPECT_EQ(Floats(v), (std::vector<float>{-4}));

  // A smaller max_to_keep prunes down to it; 0 would keep everything.
  ASSERT_TRUE(saver.Save(dir_, 600, {}, 1).ok());
  EXPECT_THAT(DirEntries(), ElementsAre("checkpoint", "ckpt-600.safetensors"));
}

// 0 keeps all, and so does any count beyond the saves, including one past
// 32 bits (checkpoint.max_to_keep is 64-bit; it was cut to int, which made
// 2^32 + 1 keep one).
TEST_F(SaverTest, MaxToKeepZeroOrHugeKeepsAll) {
  for (const int64_t keep : {int64_t{0}, (int64_t{1} << 32) + 1}) {
    SCOPED_TRACE(keep);
    fs::remove_all(dir_);
    Variable v = MakeVariable("v", Tensor::FromVector<float>({0}, {1}));
    Saver saver({&v});
    for (int64_t step = 1; step <= 4; ++step) {
      ASSERT_TRUE(saver.Save(dir_, step, {}, keep).ok());
    }
    absl::StatusOr<std::vector<std::string>> list = ListCheckpoints(dir_);
    ASSERT_TRUE(list.ok());
    EXPECT_EQ(list->size(), 4u);
  }
}

TEST_F(SaverTest, LatestCheckpointOnEmptyOrMissingDirectory) {
  fs::create_directories(dir_);
  for (const std::string& dir : {dir_, root_ + "/does/not/exist"}) {
    absl::StatusOr<std::string> latest = LatestCheckpoint(dir);
    EXPECT_EQ(latest.status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(latest.status().message(),
              absl::StrCat(
                  dir, ": no checkpoint found (no 'checkpoint' index file)"));
    absl::StatusOr<std::vector<std::string>> list = ListCheckpoints(dir);
    ASSERT_TRUE(list.ok()) << list.status();
    EXPECT_TRUE(list->empty());
  }
}

TEST_F(SaverTest, LatestCheckpointWhoseFileIsMissing) {
  Variable v = MakeVariable("v", Tensor::FromVector<float>({0}, {1}));
  ASSERT_TRUE(Saver({&v}).Save(dir_, 7, {}, 5).ok());
  fs::remove(CkptPath(7));
  absl::StatusOr<std::string> latest = LatestCheckpoint(dir_);
  EXPECT_EQ(latest.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(latest.status().message()),
              HasSubstr("names 'ckpt-7.safetensors' as the latest checkpoint"));
  EXPECT_THAT(std::string(latest.status().message()),
              HasSubstr(CkptPath(7) + " does not exist"));
}

TEST_F(SaverTest, MalformedIndexIsAnErrorAndBlocksSaving) {
  fs::create_directories(dir_);
  std::ofstream(dir_ + "/checkpoint")
      << "model_checkpoint_path: \"ckpt-1.safetensors\"\nbogus line\n";
  absl::StatusOr<std::string> latest = LatestCheckpoint(dir_);
  EXPECT_EQ(latest.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(latest.status().message()),
              HasSubstr(dir_ + "/checkpoint:2: expected 'key: \"value\"'"));
  Variable v = MakeVariable("v", Tensor::FromVector<float>({0}, {1}));
  EXPECT_FALSE(Saver({&v}).Save(dir_, 2, {}, 5).ok());
  EXPECT_FALSE(fs::exists(CkptPath(2)));

  std::ofstream(dir_ + "/checkpoint")
      << "all_model_checkpoint_paths: \"ckpt-1.safetensors\"\n";
  EXPECT_THAT(std::string(LatestCheckpoint(dir_).status().message()),
              HasSubstr("no model_checkpoint_path"));
}

// Entries that leave the directory: the index is rejected by every reader,
// and a save (which would prune them) fails before writing anything, so the
// file outside survives.
TEST_F(SaverTest, IndexEntriesOutsideTheDirectoryAreRejected) {
  Variable v = MakeVariable("v", Tensor::FromVector<float>({3}, {1}));
  const std::string outside = root_ + "/outside.safetensors";
  ASSERT_TRUE(Saver({&v}).Save(root_ + "/elsewhere", 9, {}, 5).ok());
  fs::copy_file(root_ + "/elsewhere/ckpt-9.safetensors", outside);
  fs::create_directories(dir_);
  for (const std::string& entry :
       {outside, std::string("../../outside.safetensors"),
        std::string("sub/ckpt-1.safetensors"), std::string("..")}) {
    SCOPED_TRACE(entry);
    std::ofstream(dir_ + "/checkpoint", std::ios::trunc)
        << "model_checkpoint_path: \"" << entry << "\"\n"
        << "all_model_checkpoint_paths: \"" << entry << "\"\n";
    for (const absl::Status& s :
         {LatestCheckpoint(dir_).status(), ListCheckpoints(dir_).status(),
          Saver({&v}).Save(dir_, 10, {}, 1).status()}) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_THAT(std::string(s.message()),
                  HasSubstr(dir_ + "/checkpoint:1: '" + entry +
                            "' is not a file name inside the checkpoint "
                            "directory"));
    }
    EXPECT_TRUE(fs::exists(outside));
    EXPECT_THAT(DirEntries(), ElementsAre("checkpoint"));
  }
}

// Pruning deletes only our regular files: a kept entry that has become a
// link (to a file outside) or a directory is dropped from the index but
// left on disk, and the link's target is untouched.
TEST_F(SaverTest, PruningDeletesOnlyRegularCheckpointFiles) {
  Variable v = MakeVariable("v", Tensor::FromVector<float>({3}, {1}));
  Saver saver({&v});
  for (int64_t step = 1; step <= 2; ++step) {
    ASSERT_TRUE(saver.Save(dir_, step, {}, 5).ok());
  }
  const std::string outside = root_ + "/precious.txt";
  std::ofstream(outside) << "not a checkpoint";
  fs::remove(CkptPath(1));
  fs::create_symlink(outside, CkptPath(1));
  fs::remove(CkptPath(2));
  fs::create_directories(CkptPath(2));
  ASSERT_TRUE(saver.Save(dir_, 3, {}, 1).ok());
  EXPECT_EQ(testing::ReadFile(outside), "not a checkpoint");
  EXPECT_TRUE(fs::is_symlink(CkptPath(1)));
  EXPECT_TRUE(fs::is_directory(CkptPath(2)));
  EXPECT_THAT(*ListCheckpoints(dir_), ElementsAre(CkptPath(3)));
}

// The latest must be a regular file in the directory: a link (even to a
// valid checkpoint), a directory or a FIFO is an error naming what it is,
// never followed or opened (a FIFO would block).
TEST_F(SaverTest, LatestThatIsNotARegularFileIsAnError) {
  Variable v = MakeVariable("v", Tensor::FromVector<float>({3}, {1}));
  const std::string elsewhere = root_ + "/elsewhere";
  ASSERT_TRUE(Saver({&v}).Save(elsewhere, 1, {}, 5).ok());
  ASSERT_TRUE(Saver({&v}).Save(dir_, 1, {}, 5).ok());
  struct Case {
    std::function<void()> make;
    std::string what;
  };
  const std::vector<Case> cases = {
      {[&] {
         fs::create_symlink(elsewhere + "/ckpt-1.safetensors", CkptPath(1));
       },
       "is a symbolic link"},
      {[&] { fs::create_symlink(root_ + "/nothing", CkptPath(1)); },
       "is a symbolic link"},
      {[&] { fs::create_directories(CkptPath(1)); }, "is a directory"},
      {[&] { ASSERT_EQ(::mkfifo(CkptPath(1).c_str(), 0644), 0); }, "is a FIFO"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    fs::remove_all(CkptPath(1));
    c.make();
    absl::StatusOr<std::string> latest = LatestCheckpoint(dir_);
    EXPECT_EQ(latest.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(
        std::string(latest.status().message()),
        HasSubstr(CkptPath(1) + " " + c.what + ", not a checkpoint file"));
  }
  // The index itself as a FIFO: an error, not a read that blocks.
  fs::remove(dir_ + "/checkpoint");
  ASSERT_EQ(::mkfifo((dir_ + "/checkpoint").c_str(), 0644), 0);
  EXPECT_THAT(std::string(LatestCheckpoint(dir_).status().message()),
              HasSubstr("the checkpoint index is not a regular file (a FIFO)"));
}

TEST_F(SaverTest, CheckpointFileNamesParseBack) {
  EXPECT_EQ(ParseCheckpointFileName(CheckpointFileName(0)), 0);
  EXPECT_EQ(ParseCheckpointFileName(CheckpointFileName(123)), 123);
  for (const char* name :
       {"ckpt-.safetensors", "ckpt--1.safetensors", "ckpt-1.safetensors.tmp.3",
        "ckpt-1x.safetensors", "ckpt-+1.safetensors", "xckpt-1.safetensors",
        "ckpt-99999999999999999999.safetensors",
        // Not the name a save writes, so not ours to prune or clean up.
        "ckpt-0009.safetensors", "ckpt-00.safetensors"}) {
    EXPECT_EQ(ParseCheckpointFileName(name), std::nullopt) << name;
  }
}

// Saves carry the data checksum, and a flipped data byte is caught on
// open.
TEST_F(SaverTest, SavesCarryTheDataChecksum) {
  Variable v = MakeVariable("v", Tensor::FromVector<float>({1, 2}, {2}));
  absl::StatusOr<std::string> path = Saver({&v}).Save(dir_, 1, {}, 5);
  ASSERT_TRUE(path.ok());
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(*path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata().at(std::string(kDataCrc32cKey)),
            *TensorDataCrc32c({{"v", v.value()}}));
  std::string bytes = testing::ReadFile(*path);
  bytes.back() ^= 1;
  std::ofstream(*path, std::ios::binary | std::ios::trunc) << bytes;
  EXPECT_EQ(SafetensorsFile::Open(*path).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST_F(SaverTest, ResolveCheckpoint) {
  Variable v = MakeVariable("v", Tensor::FromVector<float>({0}, {1}));
  Saver saver({&v});
  ASSERT_TRUE(saver.Save(dir_, 1, {}, 5).ok());
  ASSERT_TRUE(saver.Save(dir_, 2, {}, 5).ok());
  EXPECT_EQ(*ResolveCheckpoint(dir_), CkptPath(2));
  EXPECT_EQ(*ResolveCheckpoint(CkptPath(1)), CkptPath(1));

  const std::string missing = root_ + "/missing.safetensors";
  absl::StatusOr<std::string> r = ResolveCheckpoint(missing);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(missing));
  // A FIFO or device is named for what it is, not as missing.
  const std::string fifo = root_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  r = ResolveCheckpoint(fifo);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            fifo + ": is a FIFO, not a checkpoint file or directory");
  r = ResolveCheckpoint("/dev/null");
  EXPECT_EQ(r.status().message(),
            "/dev/null: is a device, not a checkpoint file or directory");
  // A loop of links: the system's reason, not a file type.
  const std::string loop = root_ + "/loop";
  fs::create_symlink(loop + "2", loop);
  fs::create_symlink(loop, loop + "2");
  r = ResolveCheckpoint(loop);
  EXPECT_EQ(r.status().message(), loop + ": Too many levels of symbolic links");

  const std::string empty = root_ + "/empty";
  fs::create_directories(empty);
  r = ResolveCheckpoint(empty);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("no checkpoint found"));
}

TEST_F(SaverTest, SaveFailureKeepsThePreviousCheckpointLatest) {
  Variable v = MakeVariable("v", Tensor::FromVector<float>({1}, {1}));
  Saver saver({&v});
  ASSERT_TRUE(saver.Save(dir_, 1, {}, 5).ok());
  // A directory squatting on the next checkpoint's name makes its rename
  // fail after the data was written.
  fs::create_directories(CkptPath(2) + "/x");
  EXPECT_FALSE(saver.Save(dir_, 2, {}, 5).ok());
  EXPECT_EQ(*LatestCheckpoint(dir_), CkptPath(1));
  EXPECT_THAT(*ListCheckpoints(dir_), ElementsAre(CkptPath(1)));
  EXPECT_THAT(DirEntries(), ElementsAre("checkpoint", "ckpt-1.safetensors",
                                        "ckpt-2.safetensors"));
}

// A save whose index cannot be written (a full disk) takes its new file
// back: a first checkpoint no index names would make the run directory
// refuse to resume; a later one would be an orphan.
TEST_F(SaverTest, SaveWhoseIndexFailsLeavesTheDirectoryAsItWas) {
  Variable v = MakeVariable("v", Tensor::FromVector<float>({1}, {1}));
  Saver saver({&v});
  // A directory squatting on the index's temporary name makes its write
  // fail after the checkpoint's rename.
  const std::string index_temp =
      absl::StrCat(dir_, "/checkpoint.tmp.", ::getpid());
  fs::create_directories(index_temp);
  absl::StatusOr<std::string> first = saver.Save(dir_, 1, {}, 5);
  EXPECT_THAT(first.status().message(), HasSubstr(index_temp));
  EXPECT_THAT(DirEntries(), ElementsAre(fs::path(index_temp).filename()));
  fs::remove(index_temp);
  ASSERT_TRUE(saver.Save(dir_, 1, {}, 5).ok());
  fs::create_directories(index_temp);
  EXPECT_FALSE(saver.Save(dir_, 2, {}, 5).ok());
  // Saving a step again that the index names keeps the file.
  EXPECT_FALSE(saver.Save(dir_, 1, {}, 5).ok());
  fs::remove(index_temp);
  EXPECT_EQ(*LatestCheckpoint(dir_), CkptPath(1));
  EXPECT_THAT(DirEntries(), ElementsAre("checkpoint", "ckpt-1.safetensors"));
}

TEST_F(SaverTest, RestoresIntoGpuVariables) {
  if (!cuda::Built()) GTEST_SKIP() << "built without CUDA";
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no GPU visible";
  absl::StatusOr<Tensor> init =
      Tensor::FromVector<float>({1, 2, 3}, {3}).To(Device::Cuda(0));
  ASSERT_TRUE(init.ok()) << init.status();
  Variable v = MakeVariable("v", *init);
  absl::StatusOr<std::string> path = Saver({&v}).Save(dir_, 1, {}, 5);
  ASSERT_TRUE(path.ok()) << path.status();
  ASSERT_TRUE(v.Assign(Tensor::HostZeros(DType::kF32, {3})).ok());
  ASSERT_TRUE(Saver({&v}).Restore(*path).ok());
  EXPECT_TRUE(v.device().is_cuda());
  absl::StatusOr<Tensor> host = v.value().To(Device::Cpu());
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(host->ToVector<float>(), (std::vector<float>{1, 2, 3}));
}

}  // namespace
}  // namespace mirrortrain::trainer
