#include "trainer/cli.h"

#include <cstdio>
#include <string>

#include "absl/strings/string_view.h"
#include "tensor/cuda/cuda_backend.h"

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
    "  mirrortrain --help | --version\n";

}  // namespace

int RunCli(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
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
  std::fprintf(stderr, "mirrortrain: unknown command '%s' (see --help)\n",
               argv[1]);
  return kExitUsage;
}

}  // namespace mirrortrain::trainer
