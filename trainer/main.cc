#include "trainer/cli.h"

int main(int argc, char** argv) {
  return mirrortrain::trainer::RunCli(argc, argv);
}
