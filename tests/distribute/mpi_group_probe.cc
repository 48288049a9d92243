// Run by mpirun (mpi_training_test's MpiProcessGroupTest): every process
// joins the group and sum-all-reduces a float buffer of 8 elements, except
// process argv[1], whose buffer has 9, as peers that disagree on a
// collective's size would; each prints "process <rank>: <status>".
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "distribute/process_group.h"
#include "tensor/tensor.h"

int main(int argc, char** argv) {
  using namespace mirrortrain;
  if (argc != 2) {
    std::fprintf(stderr, "usage: mpi_group_probe <rank with 9 elements>\n");
    return 2;
  }
  absl::StatusOr<std::unique_ptr<distribute::ProcessGroup>> group =
      distribute::JoinProcessGroup();
  if (!group.ok()) {
    std::fprintf(stderr, "%s\n", group.status().ToString().c_str());
    return 1;
  }
  (*group)->set_watchdog(std::chrono::seconds(5));
  const int rank = (*group)->rank();
  const int64_t n = rank == std::atoi(argv[1]) ? 9 : 8;
  const Tensor buffer = Tensor::HostFull(DType::kF32, {n}, 1.0);
  const absl::Status s = (*group)->AllReduceSum(buffer, "probe all-reduce");
  std::printf("process %d: %s\n", rank, s.ToString().c_str());
  std::fflush(stdout);
  return 0;
}
