#pragma once
// The `trainer` command line. main() only forwards here; this is the one place that turns
// exceptions into exit codes: 0 success, 2 usage or config error, 1 failure while running,
// 128+N when stopped by signal N (after a checkpoint was written).
#include <string>
#include <vector>

namespace brrr {

int run_cli(const std::vector<std::string>& args);

/// The usage text of `trainer --help`.
std::string cli_usage();

}  // namespace brrr
