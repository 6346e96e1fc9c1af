// `trainer`: the whole command line is brrr::run_cli (trainer/cli/cli.h), which a program with its
// own Trainer subclass, models or datasets calls the same way.
#include "trainer/cli/cli.h"

int main(int argc, char** argv) {
  return brrr::run_cli(argc, argv);
}
