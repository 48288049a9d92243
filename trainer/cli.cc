#include "trainer/cli.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "distribute/process_group.h"
#include "nlohmann/json.hpp"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/status_macros.h"
#include "trainer/checkpoint/safetensors.h"
#include "trainer/config.h"
#include "trainer/metrics_logger.h"
#include "trainer/signals.h"
#include "trainer/trainer.h"

#ifndef MIRRORTRAIN_VERSION
#define MIRRORTRAIN_VERSION "0.0.0"
#endif

namespace mirrortrain::trainer {
namespace {

constexpr char kUsage[] =
    "mirrortrain: synchronous data-parallel training (TensorFlow "
    "MirroredStrategy semantics)\n"
    "\n"
    "usage:\n"
    "  mirrortrain train   --config FILE [--set KEY=VALUE]... [--run_dir DIR]\n"
    "  mirrortrain eval    --config FILE --checkpoint PATH_OR_DIR "
    "[--weights raw|ema] [--set KEY=VALUE]...\n"
    "  mirrortrain inspect CHECKPOINT\n"
    "  mirrortrain config  --schema | --config FILE [--set KEY=VALUE]...\n"
    "  mirrortrain --help | --version\n"
    "\n"
    "Run 'mirrortrain VERB --help' for a verb's options.\n";

constexpr char kTrainUsage[] =
    "usage: mirrortrain train --config FILE [--set KEY=VALUE]... "
    "[--run_dir DIR] [--dry_run]\n"
    "\n"
    "Trains the model a YAML config describes.\n"
    "  --config FILE      the job config (see configs/)\n"
    "  --set KEY=VALUE    override a config key by dotted path, e.g.\n"
    "                     --set optimizer.learning_rate=0.01\n"
    "                     --set distribute.devices=[cpu:0,cpu:1]\n"
    "  --run_dir DIR      where config.yaml, metrics.jsonl, TensorBoard "
    "events\n"
    "                     and checkpoints go (default runs/<config name>)\n"
    "  --dry_run          print the model summary (layers, output shapes,\n"
    "                     parameter counts) and exit without training or\n"
    "                     writing anything\n";

constexpr char kConfigUsage[] =
    "usage: mirrortrain config --schema\n"
    "       mirrortrain config --config FILE [--set KEY=VALUE]...\n"
    "\n"
    "  --schema           every config key with its type, default and meaning\n"
    "                     (Markdown), from the registered components\n"
    "  --config FILE      print the resolved config (defaults and overrides\n"
    "                     applied), as a run writes it to config.yaml\n";

constexpr char kEvalUsage[] =
    "usage: mirrortrain eval --config FILE --checkpoint PATH_OR_DIR "
    "[--weights raw|ema] [--set KEY=VALUE]...\n"
    "\n"
    "Evaluates a checkpoint on the test split and prints one JSON line.\n"
    "  --checkpoint P     a checkpoint file, or a directory (its latest)\n"
    "  --weights W        ema (default when the config has EMA) or raw\n";

constexpr char kInspectUsage[] =
    "usage: mirrortrain inspect CHECKPOINT\n"
    "\n"
    "Lists the tensors (name, dtype, shape) and metadata of a checkpoint.\n";

struct Args {
  std::string config;
  std::vector<std::string> sets;
  std::string run_dir;
  std::string checkpoint;
  std::string weights;
  std::vector<std::string> positional;
  bool help = false;
  bool dry_run = false;
  bool schema = false;
};

// Flags that take no value.
bool IsSwitch(absl::string_view name) {
  return name == "dry_run" || name == "schema";
}

// Parses "--flag value" and "--flag=value" for the flags `allowed`.
absl::StatusOr<Args> ParseArgs(int argc, char** argv,
                               std::initializer_list<const char*> allowed) {
  Args args;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      args.help = true;
      continue;
    }
    if (!absl::StartsWith(arg, "--")) {
      args.positional.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    bool known = false;
    for (const char* a : allowed) known |= name == a;
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag '--", name, "'"));
    }
    if (IsSwitch(name)) {
      if (has_value) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag '--", name, "' takes no value"));
      }
      args.dry_run |= name == "dry_run";
      args.schema |= name == "schema";
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag '--", name, "' needs a value"));
      }
      value = argv[++i];
    }
    if (name == "config") args.config = value;
    if (name == "set") args.sets.push_back(value);
    if (name == "run_dir") args.run_dir = value;
    if (name == "checkpoint") args.checkpoint = value;
    if (name == "weights") args.weights = value;
  }
  return args;
}

// Input and usage problems exit 2; failures while running exit 1.
int ExitCodeFor(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kOutOfRange:
      return kExitUsage;
    default:
      return kExitFailure;
  }
}

// The job's processes (set by RunCli): under an MPI launcher every process
// runs the same command; only the chief reports what all of them find.
distribute::ProcessGroup* processes = nullptr;

bool Reports() { return processes == nullptr || processes->chief(); }
bool MultiProcess() { return processes != nullptr && processes->size() > 1; }

// A failure every process finds alike (usage, config, a status all agreed
// on): reported once, by the chief.
int Fail(const absl::Status& s) {
  if (Reports()) {
    std::fprintf(stderr, "mirrortrain: %s\n", std::string(s.message()).c_str());
  }
  return ExitCodeFor(s);
}

// A failure of this process while the job runs: reported by it, naming it;
// then every process of the job ends (the others may be waiting for this
// one in a collective).
int FailHere(const absl::Status& s) {
  if (!MultiProcess()) return Fail(s);
  std::fprintf(stderr, "mirrortrain: process %d: %s\n", processes->rank(),
               std::string(s.message()).c_str());
  std::fflush(stderr);
  const int code = ExitCodeFor(s);
  processes->Abort(code);
  return code;
}

// Every process's `mine`, agreed: nullopt when all are OK, else the exit
// code after the chief reported the first failure.
std::optional<int> FailIfAnyFailed(const absl::Status& mine) {
  if (!MultiProcess()) {
    if (mine.ok()) return std::nullopt;
    return Fail(mine);
  }
  absl::StatusOr<absl::Status> agreed = processes->Agree(mine);
  if (!agreed.ok()) return FailHere(agreed.status());
  if (agreed->ok()) return std::nullopt;
  return Fail(*agreed);
}

// A usage error: one line naming the verb and the problem, and where the
// usage is (the usage text itself would bury the problem).
int Usage(absl::string_view verb, absl::string_view problem) {
  if (!Reports()) return kExitUsage;
  std::fprintf(stderr, "mirrortrain %s: %s (see mirrortrain %s --help)\n",
               std::string(verb).c_str(), std::string(problem).c_str(),
               std::string(verb).c_str());
  return kExitUsage;
}

// The flags of verb argv[1] and at most `max_positional` positional
// arguments; nullopt after printing the usage error.
std::optional<Args> ParseVerbArgs(int argc, char** argv,
                                  std::initializer_list<const char*> allowed,
                                  size_t max_positional) {
  absl::StatusOr<Args> args = ParseArgs(argc, argv, allowed);
  if (!args.ok()) {
    Usage(argv[1], args.status().message());
    return std::nullopt;
  }
  if (!args->help && args->positional.size() > max_positional) {
    Usage(argv[1], absl::StrCat("unexpected argument '",
                                args->positional[max_positional], "'"));
    return std::nullopt;
  }
  return *std::move(args);
}

// The model a config builds, as Keras's model.summary() prints it.
int DryRun(const Config& config) {
  absl::StatusOr<std::string> summary = ModelSummary(config);
  if (!summary.ok()) return Fail(summary.status());
  std::fputs(summary->c_str(), stdout);
  return kExitOk;
}

int Train(int argc, char** argv) {
  std::optional<Args> args =
      ParseVerbArgs(argc, argv, {"config", "set", "run_dir", "dry_run"}, 0);
  if (!args.has_value()) return kExitUsage;
  if (args->help) {
    std::fputs(kTrainUsage, stdout);
    return kExitOk;
  }
  if (args->config.empty()) return Usage("train", "--config FILE is required");
  absl::StatusOr<Config> config = LoadConfig(args->config, args->sets);
  if (std::optional<int> failed = FailIfAnyFailed(config.status())) {
    return *failed;
  }
  if (args->dry_run) return Reports() ? DryRun(*config) : kExitOk;
  std::string run_dir = args->run_dir.empty()
                            ? absl::StrCat("runs/", config->name)
                            : args->run_dir;
  InstallStopSignalHandlers();
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(*config, run_dir, /*need_train_data=*/true, processes);
  if (std::optional<int> failed = FailIfAnyFailed(trainer.status())) {
    return *failed;
  }
  if (config->distribute.cross_device_ops == "none" && Reports()) {
    std::fprintf(stderr,
                 "mirrortrain: distribute.cross_device_ops=none: gradients are "
                 "not all-reduced and replicas drift apart (for measuring "
                 "communication cost only)\n");
  }
  absl::Status s = (*trainer)->Train();
  if (absl::IsCancelled(s) && StopSignal() != 0) return 128 + StopSignal();
  if (!s.ok()) return FailHere(s);
  return kExitOk;
}

int Eval(int argc, char** argv) {
  std::optional<Args> args =
      ParseVerbArgs(argc, argv, {"config", "set", "checkpoint", "weights"}, 0);
  if (!args.has_value()) return kExitUsage;
  if (args->help) {
    std::fputs(kEvalUsage, stdout);
    return kExitOk;
  }
  if (args->config.empty() || args->checkpoint.empty()) {
    return Usage("eval",
                 "--config FILE and --checkpoint PATH_OR_DIR are "
                 "required");
  }
  absl::StatusOr<Config> config = LoadConfig(args->config, args->sets);
  if (std::optional<int> failed = FailIfAnyFailed(config.status())) {
    return *failed;
  }
  std::string weights = args->weights;
  if (weights.empty()) weights = config->ema.decay.has_value() ? "ema" : "raw";
  if (weights != "ema" && weights != "raw") {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--weights: expected raw or ema, got '", weights, "'")));
  }
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(
      *config, /*run_dir=*/"", /*need_train_data=*/false, processes);
  if (std::optional<int> failed = FailIfAnyFailed(trainer.status())) {
    return *failed;
  }
  // Every process reads the checkpoint (a shared file system across hosts).
  if (std::optional<int> failed =
          FailIfAnyFailed((*trainer)->RestoreCheckpoint(args->checkpoint))) {
    return *failed;
  }
  absl::StatusOr<EvalResult> result = (*trainer)->Evaluate(weights == "ema");
  if (!result.ok()) return FailHere(result.status());
  if (!Reports()) return kExitOk;
  // A path need not be UTF-8: `replace` writes U+FFFD for a bad byte where
  // dump() would otherwise throw.
  const std::string checkpoint =
      nlohmann::json((*trainer)->restored_from())
          .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  // Byte-token (text) data: the tokens evaluated and bits per byte too.
  std::string text_fields;
  if (result->bits_per_byte) {
    text_fields = absl::StrCat(
        ", \"tokens\": ", result->labels,
        ", \"bits_per_byte\": ", FormatJsonNumber(*result->bits_per_byte));
  }
  std::printf(
      "{\"checkpoint\": %s, \"step\": %lld, \"weights\": \"%s\", "
      "\"examples\": %lld, \"loss\": %s, \"accuracy\": %s%s}\n",
      checkpoint.c_str(), static_cast<long long>((*trainer)->global_step()),
      weights.c_str(), static_cast<long long>(result->examples),
      FormatJsonNumber(result->loss).c_str(),
      FormatJsonNumber(result->accuracy).c_str(), text_fields.c_str());
  return kExitOk;
}

int Inspect(int argc, char** argv) {
  std::optional<Args> args = ParseVerbArgs(argc, argv, {}, 1);
  if (!args.has_value()) return kExitUsage;
  if (args->help) {
    std::fputs(kInspectUsage, stdout);
    return kExitOk;
  }
  if (args->positional.empty()) {
    return Usage("inspect", "a CHECKPOINT file is required");
  }
  absl::StatusOr<SafetensorsFile> file =
      SafetensorsFile::Open(args->positional[0]);
  if (!file.ok()) return Fail(file.status());
  std::printf("%s\n", file->path().c_str());
  for (const std::string& name : file->names()) {
    absl::StatusOr<SafetensorsFile::Info> info = file->GetInfo(name);
    if (!info.ok()) return Fail(info.status());
    std::printf("  %-48s %-4s %s\n", name.c_str(),
                std::string(SafetensorsDTypeName(info->dtype)).c_str(),
                ShapeToString(info->shape).c_str());
  }
  std::printf("metadata:\n");
  for (const auto& [key, value] : file->metadata()) {
    std::printf("  %s: %s\n", key.c_str(), value.c_str());
  }
  return kExitOk;
}

int ConfigVerb(int argc, char** argv) {
  std::optional<Args> args =
      ParseVerbArgs(argc, argv, {"schema", "config", "set"}, 0);
  if (!args.has_value()) return kExitUsage;
  if (args->help) {
    std::fputs(kConfigUsage, stdout);
    return kExitOk;
  }
  if (args->schema == !args->config.empty()) {
    return Usage("config", "give either --schema or --config FILE");
  }
  if (args->schema && !args->sets.empty()) {
    return Usage("config", "--set applies to --config, not --schema");
  }
  if (args->schema) {
    std::fputs(SchemaMarkdown().c_str(), stdout);
    return kExitOk;
  }
  absl::StatusOr<Config> config = LoadConfig(args->config, args->sets);
  if (!config.ok()) return Fail(config.status());
  std::fputs(config->resolved_yaml.c_str(), stdout);
  return kExitOk;
}

int Dispatch(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(
        "mirrortrain: a command is required: train, eval, inspect or config "
        "(see mirrortrain --help)\n",
        stderr);
    return kExitUsage;
  }
  absl::string_view verb = argv[1];
  if (verb == "--help" || verb == "-h" || verb == "help") {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  if (verb == "--version") {
    std::printf("mirrortrain %s (CUDA backend: %s)\n", MIRRORTRAIN_VERSION,
                cuda::Built() ? "built" : "not built");
    return kExitOk;
  }
  if (verb == "train") return Train(argc, argv);
  if (verb == "eval") return Eval(argc, argv);
  if (verb == "inspect") return Inspect(argc, argv);
  if (verb == "config") return ConfigVerb(argc, argv);
  std::fprintf(stderr,
               "mirrortrain: unknown command '%s' (see mirrortrain --help)\n",
               argv[1]);
  return kExitUsage;
}

// How long a collective still waits for the other processes once a stop
// signal arrived: half the time Open MPI leaves between the SIGTERM and the
// SIGKILL of a job it tears down (odls_base_sigkill_timeout, 1 s unless
// set), so the line naming a dead process comes out before the SIGKILL.
std::chrono::milliseconds StopGrace() {
  double seconds = 1;
  if (const char* v = std::getenv("OMPI_MCA_odls_base_sigkill_timeout")) {
    seconds = std::max(1.0, std::atof(v));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 500));
}

}  // namespace

int RunCli(int argc, char** argv) {
  // Joins the job when an MPI launcher started this process; alone
  // otherwise. MPI is finalised when `group` goes, after the verb.
  absl::StatusOr<std::unique_ptr<distribute::ProcessGroup>> group =
      distribute::JoinProcessGroup();
  if (!group.ok()) return Fail(group.status());
  processes = group->get();
  processes->set_stop_check([] { return StopSignal() != 0; }, StopGrace());
  int code = kExitFailure;
  const absl::Status s = CatchAllocationFailure([&] {
    code = Dispatch(argc, argv);
    return absl::OkStatus();
  });
  if (!s.ok()) code = FailHere(s);
  processes = nullptr;
  return code;
}

}  // namespace mirrortrain::trainer
