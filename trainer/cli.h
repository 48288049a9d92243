// The `mirrortrain` command line: verb dispatch and argument parsing.
// main() only turns the returned exit code into the process status.
#ifndef MIRRORTRAIN_TRAINER_CLI_H_
#define MIRRORTRAIN_TRAINER_CLI_H_

namespace mirrortrain::trainer {

// Exit codes (DESIGN.md): 0 ok, 1 failure while running, 2 bad usage,
// config or input; 130/143 after SIGINT/SIGTERM.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

int RunCli(int argc, char** argv);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_CLI_H_
