// `trainer`: see trainer/cli.h.
#include <string>
#include <vector>

#include "trainer/cli/cli.h"

int main(int argc, char** argv) { return brrr::run_cli(std::vector<std::string>(argv + 1, argv + argc)); }
