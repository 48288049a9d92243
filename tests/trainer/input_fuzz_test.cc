// Seeded random mutation of the two parsers that read untrusted input: the
// YAML config reader (mutated versions of configs/*.yaml, with and without
// --set overrides) and the safetensors reader (mutated bytes of a valid
// file). Every case must end in OK or a clean status with a one-line
// message; a crash, hang or exception fails the test. Each target runs for
// a bounded time (kBudget); the number of cases run is recorded as a test
// property and printed. To explore: MT_FUZZ_SEED picks another seed, and
// MT_FUZZ_DUMP=FILE keeps the config case being parsed (for a crash).
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "trainer/checkpoint/safetensors.h"
#include "trainer/config.h"

namespace mirrortrain::trainer {
namespace {

namespace fs = std::filesystem;

constexpr auto kBudget = std::chrono::milliseconds(2500);

uint64_t Seed() {
  const char* seed = std::getenv("MT_FUZZ_SEED");
  return seed != nullptr ? std::strtoull(seed, nullptr, 10) : 18;
}

bool Within(std::chrono::steady_clock::time_point start) {
  return std::chrono::steady_clock::now() - start < kBudget;
}

// Fragments that YAML and the config schema give meaning to.
const std::vector<std::string>& Tokens() {
  static const auto* tokens =
      new std::vector<std::string>{"{",
                                   "}",
                                   "[",
                                   "]",
                                   ":",
                                   ": ",
                                   "- ",
                                   ",",
                                   "\n",
                                   "  ",
                                   "---\n",
                                   "...\n",
                                   "&a ",
                                   "*a",
                                   "<<: *a",
                                   "!!str ",
                                   "!!int ",
                                   "? ",
                                   "#",
                                   "'",
                                   "\"",
                                   "|\n",
                                   "~",
                                   "null",
                                   "true",
                                   "0",
                                   "-1",
                                   "1e400",
                                   "nan",
                                   ".inf",
                                   "9223372036854775808",
                                   "2147483648",
                                   "4611686018427387904",
                                   "0.0001",
                                   "name: cnn",
                                   "layers: [{type: dense, units: 3}]",
                                   "type: residual",
                                   "ema: null",
                                   "seed: 1",
                                   "repeat: 10000",
                                   "\t",
                                   "\xff",
                                   std::string(1, 0)};
  return *tokens;
}

std::string Mutate(std::string text, std::mt19937_64& rng) {
  const std::vector<std::string>& tokens = Tokens();
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    const size_t at = text.empty() ? 0 : rng() % (text.size() + 1);
    switch (rng() % 5) {
      case 0:  // Insert a token.
        text.insert(at, tokens[rng() % tokens.size()]);
        break;
      case 1:  // Delete a range.
        text.erase(at, 1 + rng() % 16);
        break;
      case 2:  // Overwrite a byte.
        if (at < text.size()) text[at] = static_cast<char>(rng());
        break;
      case 3: {  // Duplicate a range elsewhere (repeated keys, nesting).
        const std::string piece = text.substr(at, 1 + rng() % 64);
        text.insert(rng() % (text.size() + 1), piece);
        break;
      }
      default:  // Replace a digit run with a token (sizes, extremes).
        if (at < text.size() &&
            std::isdigit(static_cast<unsigned char>(text[at]))) {
          size_t end = at;
          while (end < text.size() &&
                 std::isdigit(static_cast<unsigned char>(text[end]))) {
            ++end;
          }
          text.replace(at, end - at, tokens[rng() % tokens.size()]);
        }
        break;
    }
  }
  return text;
}

// OK, or InvalidArgument with a one-line message naming its source.
void CheckConfigResult(const absl::StatusOr<Config>& c,
                       const std::string& input) {
  if (c.ok()) {
    // What a run writes to config.yaml must read back as the same config.
    absl::StatusOr<Config> again = ParseConfig(c->resolved_yaml, "r.yaml", {});
    ASSERT_TRUE(again.ok()) << again.status() << "\ninput:\n" << input;
    EXPECT_EQ(again->resolved_yaml, c->resolved_yaml) << input;
    return;
  }
  const std::string message(c.status().message());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument)
      << message << "\ninput:\n"
      << input;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message << "\ninput:\n"
                                                   << input;
  EXPECT_TRUE(absl::StartsWith(message, "fuzz.yaml") ||
              absl::StartsWith(message, "--set "))
      << message << "\ninput:\n"
      << input;
}

TEST(InputFuzzTest, ConfigParserNeverCrashesAndErrsOnOneLine) {
  std::vector<std::string> seeds;
  for (const auto& entry :
       fs::directory_iterator(absl::StrCat(MT_SOURCE_DIR, "/configs"))) {
    seeds.push_back(testing::ReadFile(entry.path().string()));
  }
  ASSERT_FALSE(seeds.empty());
  const std::vector<std::string> keys = {"seed",
                                         "model",
                                         "model.hidden_units",
                                         "model.layers[0]",
                                         "optimizer",
                                         "ema",
                                         "ema.decay",
                                         "data",
                                         "distribute",
                                         "train.steps",
                                         "train.early_stopping_patience",
                                         "loss",
                                         "loss.label_smoothing",
                                         "checkpoint"};
  std::mt19937_64 rng(Seed());
  int64_t cases = 0, accepted = 0;
  const auto start = std::chrono::steady_clock::now();
  while (Within(start) && !HasFailure()) {
    const std::string text = Mutate(seeds[rng() % seeds.size()], rng);
    std::vector<std::string> overrides;
    if (rng() % 4 == 0) {
      overrides.push_back(
          Mutate(absl::StrCat(keys[rng() % keys.size()], "=",
                              Tokens()[rng() % Tokens().size()]),
                 rng));
    }
    if (const char* dump = std::getenv("MT_FUZZ_DUMP")) {
      std::ofstream(dump, std::ios::binary | std::ios::trunc)
          << text << "\n#####\n"
          << (overrides.empty() ? "" : overrides[0]);
    }
    const absl::StatusOr<Config> c = ParseConfig(text, "fuzz.yaml", overrides);
    CheckConfigResult(c, text);
    ++cases;
    accepted += c.ok();
  }
  RecordProperty("cases", static_cast<int>(cases));
  RecordProperty("accepted", static_cast<int>(accepted));
  std::printf("config parser: %lld mutated cases, %lld accepted\n",
              static_cast<long long>(cases), static_cast<long long>(accepted));
  EXPECT_GT(cases, 100);
}

TEST(InputFuzzTest, SafetensorsReaderNeverCrashes) {
  const std::string dir = ::testing::TempDir() + "/mt_fuzz_safetensors";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string valid = dir + "/valid.safetensors";
  std::vector<NamedTensor> tensors = {
      {"dense/kernel", Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3})},
      {"dense/bias", Tensor::FromVector<double>({0.5, -1}, {2})},
      {"step", Tensor::FromVector<int64_t>({7}, {})},
      {"ids", Tensor::FromVector<int32_t>({1, 2, 3}, {3})}};
  ASSERT_TRUE(
      WriteSafetensors(valid, tensors, {{"step", "7"}, {"format", "mt"}}).ok());
  const std::string original = testing::ReadFile(valid);
  std::mt19937_64 rng(Seed());
  int64_t cases = 0, opened = 0;
  const std::string path = dir + "/mutated.safetensors";
  const auto start = std::chrono::steady_clock::now();
  while (Within(start) && !HasFailure()) {
    std::string bytes = original;
    if (rng() % 8 == 0) {
      // The 8-byte header length: any value, including huge ones.
      const uint64_t length = rng() >> (rng() % 64);
      for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(length >> 8 * i);
    } else if (rng() % 2 == 0) {
      // Keep the length word intact: mutate the JSON header and the data.
      const std::string head = bytes.substr(0, 8);
      bytes = head + Mutate(bytes.substr(8), rng);
    } else {
      bytes = Mutate(bytes, rng);
    }
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
    ++cases;
    if (!file.ok()) {
      EXPECT_FALSE(file.status().message().empty());
      continue;
    }
    ++opened;
    for (const std::string& name : file->names()) {
      absl::StatusOr<SafetensorsFile::Info> info = file->GetInfo(name);
      ASSERT_TRUE(info.ok()) << info.status();
      absl::StatusOr<Tensor> t = file->Get(name);
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_EQ(t->shape(), info->shape);
      EXPECT_EQ(t->dtype(), info->dtype);
    }
  }
  RecordProperty("cases", static_cast<int>(cases));
  RecordProperty("opened", static_cast<int>(opened));
  std::printf("safetensors reader: %lld mutated files, %lld opened\n",
              static_cast<long long>(cases), static_cast<long long>(opened));
  EXPECT_GT(cases, 100);
}

}  // namespace
}  // namespace mirrortrain::trainer
