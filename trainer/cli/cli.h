#pragma once
// The `trainer` command line, for the stock `trainer` and for a user's own main(): run_cli gives
// a program every command and flag of `trainer` (--config, --set, --resume, --print-config,
// --dry-run, report, eval, export, --help-config) for its own Trainer subclass and for the
// models and datasets it registered (brrr::register_model / brrr::register_dataset). This is the
// one place that turns exceptions into exit codes: 0 success, 2 usage or config error, 1 failure
// while running, 128+N when stopped by signal N (after a checkpoint was written).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "trainer/trainer.h"

namespace brrr {

/// Makes the Trainer a run uses (the stock one when empty).
using TrainerFactory = std::function<std::unique_ptr<Trainer>(const ExperimentConfig& config)>;

/// `args` are the arguments after the program name.
int run_cli(const std::vector<std::string>& args, const TrainerFactory& make_trainer = {});

/// The whole command line of `argc`/`argv` as main() receives them.
int run_cli(int argc, char** argv, const TrainerFactory& make_trainer = {});

/// run_cli with `T` (a Trainer subclass constructible from an ExperimentConfig) as the trainer:
///   int main(int argc, char** argv) { return brrr::run_cli<MyTrainer>(argc, argv); }
template <typename T>
int run_cli(int argc, char** argv) {
  return run_cli(argc, argv, [](const ExperimentConfig& config) -> std::unique_ptr<Trainer> {
    return std::make_unique<T>(config);
  });
}

/// The usage text of `trainer --help`.
std::string cli_usage();

}  // namespace brrr
