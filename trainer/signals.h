// SIGINT/SIGTERM/SIGHUP handling: the handler only records the signal; the
// loop finishes its step, checkpoints and exits 128 + signal (130/143/129).
// The handler runs once: a second signal takes the default action (the
// process ends at once; checkpoints are written atomically, so the last one
// stays whole). SIGPIPE (our output's reader gone) stops the run the same
// way, exit 141, and stays handled: each later write to the pipe raises it
// again.
#ifndef MIRRORTRAIN_TRAINER_SIGNALS_H_
#define MIRRORTRAIN_TRAINER_SIGNALS_H_

namespace mirrortrain::trainer {

void InstallStopSignalHandlers();
// The signal number received, or 0.
int StopSignal();
// Records `sig` as if received (another process of the job got it, and all
// stop together), unless a signal was received already.
void RecordStopSignal(int sig);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_SIGNALS_H_
