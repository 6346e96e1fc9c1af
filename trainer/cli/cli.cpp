#include "trainer/cli/cli.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <c10/util/Exception.h>
#include <fmt/ranges.h>

#include "core/build_info.h"
#include "core/checkpoint_io.h"
#include "core/config.h"
#include "core/error.h"
#include "core/json_lines.h"
#include "core/log.h"
#include "data/dataset_factory.h"
#include "models/registry.h"
#include "models/weights_file.h"
#include "trainer/cli/embedded_configs.h"
#include "trainer/dist/launcher.h"
#include "trainer/report/report.h"
#include "trainer/signals.h"
#include "trainer/trainer.h"

namespace brrr {
namespace {

namespace fs = std::filesystem;

bool debug_requested() {
  const char* v = std::getenv("BRRR_DEBUG");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

struct Args {
  std::string config;
  std::vector<std::string> overrides;
  std::string resume;
  bool print_config = false;
  bool dry_run = false;
  /// --nproc-per-node N: launch N local ranks running `rank_args` (0 = train here).
  int64_t nproc_per_node = 0;
  std::vector<std::string> rank_args;
};

std::string take_value(const std::vector<std::string>& args, size_t& i, const std::string& flag) {
  const std::string& arg = args[i];
  const std::string prefix = flag + "=";
  if (arg.rfind(prefix, 0) == 0) return arg.substr(prefix.size());
  if (i + 1 >= args.size())
    throw UsageError(fmt::format("{} needs a value (see trainer --help)", flag));
  return args[++i];
}

bool is_flag(const std::string& arg, const std::string& flag) {
  return arg == flag || arg.rfind(flag + "=", 0) == 0;
}

Args parse_args(const std::vector<std::string>& args) {
  Args out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const size_t first = i;
    if (is_flag(a, "--config")) {
      out.config = take_value(args, i, "--config");
    } else if (is_flag(a, "--set")) {
      out.overrides.push_back(take_value(args, i, "--set"));
    } else if (is_flag(a, "--resume")) {
      out.resume = take_value(args, i, "--resume");
    } else if (a == "--print-config") {
      out.print_config = true;
    } else if (a == "--dry-run") {
      out.dry_run = true;
    } else if (is_flag(a, "--nproc-per-node")) {
      const std::string n = take_value(args, i, "--nproc-per-node");
      char* end = nullptr;
      const long long v = std::strtoll(n.c_str(), &end, 10);
      if (n.empty() || *end != '\0' || v < 1) {
        throw UsageError(fmt::format("--nproc-per-node needs a number of ranks >= 1, got '{}'", n));
      }
      out.nproc_per_node = v;
      continue;  // the ranks do not get it
    } else {
      throw UsageError(fmt::format("unknown argument '{}' (see trainer --help)", a));
    }
    // Every argument but --nproc-per-node is also the ranks' (when launching them).
    out.rank_args.insert(out.rank_args.end(), args.begin() + static_cast<std::ptrdiff_t>(first),
                         args.begin() + static_cast<std::ptrdiff_t>(i) + 1);
  }
  if (out.config.empty()) throw UsageError("missing --config FILE (see trainer --help)");
  return out;
}

// A path, or the name of a config shipped inside the binary (e.g. `quickstart`).
ExperimentConfig load(const Args& args) {
  if (fs::exists(args.config)) return load_config(args.config, args.overrides);
  if (const char* embedded = embedded_config(args.config)) {
    return parse_config(embedded, "<embedded " + args.config + ".yaml>", args.overrides);
  }
  return load_config(args.config, args.overrides);  // reports the unreadable file
}

std::unique_ptr<Trainer> make(const TrainerFactory& make_trainer, const ExperimentConfig& config) {
  if (!make_trainer) return std::make_unique<Trainer>(config);
  std::unique_ptr<Trainer> trainer = make_trainer(config);
  if (!trainer) throw Error("the program's trainer factory returned no trainer");
  return trainer;
}

// --help-config: the keys, then the names a program registered besides brrr's own.
std::string help_config() {
  return fmt::format("{}\nmodel.name: {}\ndata.dataset: {}\n", config_reference(),
                     fmt::join(model_names(), ", "), fmt::join(dataset_names(), ", "));
}

int run_train(const std::vector<std::string>& argv, const TrainerFactory& make_trainer) {
  const Args args = parse_args(argv);
  const ExperimentConfig config = load(args);
  if (args.print_config) {
    std::cout << to_yaml(config);
    return 0;
  }
  if (args.nproc_per_node > 0 && !args.dry_run) {
    // The config is read (and any error in it reported) once, here, before any rank starts.
    LaunchOptions launch;
    launch.nproc = args.nproc_per_node;
    launch.args = args.rank_args;
    return launch_local_ranks(launch);
  }
  const std::unique_ptr<Trainer> trainer = make(make_trainer, config);
  if (args.dry_run) {
    std::cout << trainer->plan();
    return 0;
  }
  trainer->fit(args.resume);
  if (const int sig = StopSignalGuard::pending()) {
    log::warn("stopped by signal {}; resume with --resume auto", sig);
    return 128 + sig;
  }
  return 0;
}

int run_report_command(const std::vector<std::string>& argv) {
  std::vector<std::string> runs;
  std::string out;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (is_flag(argv[i], "--out")) {
      out = take_value(argv, i, "--out");
    } else if (argv[i].rfind("--", 0) == 0) {
      throw UsageError(fmt::format("trainer report: unknown argument '{}'", argv[i]));
    } else {
      runs.push_back(argv[i]);
    }
  }
  if (runs.empty()) throw UsageError("trainer report: give one or two run directories");
  return run_report(runs, out);
}

// The checkpoint `target` names: a file, or a run directory's newest valid checkpoint.
std::string checkpoint_of(const std::string& target) {
  if (!fs::is_directory(target)) return target;
  const CheckpointStore store(target, 0, /*writable=*/false);
  if (auto latest = store.latest()) return *latest;
  throw UsageError(fmt::format("'{}' holds no valid checkpoint (in {})", target, store.dir()));
}

int run_export_command(const std::vector<std::string>& argv) {
  std::string target, out, format = "safetensors", names = "brrr", vocab = "50257";
  for (size_t i = 0; i < argv.size(); ++i) {
    if (is_flag(argv[i], "--out")) {
      out = take_value(argv, i, "--out");
    } else if (is_flag(argv[i], "--format")) {
      format = take_value(argv, i, "--format");
    } else if (is_flag(argv[i], "--names")) {
      names = take_value(argv, i, "--names");
    } else if (is_flag(argv[i], "--vocab-size")) {
      vocab = take_value(argv, i, "--vocab-size");
    } else if (argv[i].rfind("--", 0) == 0 || !target.empty()) {
      throw UsageError(fmt::format("trainer export: unexpected argument '{}'", argv[i]));
    } else {
      target = argv[i];
    }
  }
  if (target.empty()) throw UsageError("trainer export: give a run directory or a checkpoint");
  if (format != "safetensors") {
    throw UsageError(
        fmt::format("trainer export: --format {} is not supported (safetensors)", format));
  }
  const std::string checkpoint = checkpoint_of(target);
  if (verify_checkpoint_checksum(checkpoint) == ChecksumStatus::kMissing) {
    log::warn("checkpoint '{}' carries no checksum; exporting it unverified", checkpoint);
  }
  if (names != "brrr" && names != "hf-gpt2") {
    throw UsageError(fmt::format("trainer export: --names {} is not one of brrr, hf-gpt2", names));
  }
  char* end = nullptr;
  const long long vocab_size = std::strtoll(vocab.c_str(), &end, 10);
  if (vocab.empty() || *end != '\0' || vocab_size <= 0) {
    throw UsageError(
        fmt::format("trainer export: --vocab-size needs a positive integer, got '{}'", vocab));
  }
  TensorMap weights = read_weights_file(checkpoint);
  if (names == "hf-gpt2") {
    try {
      weights = to_hf_gpt2(weights, vocab_size);
    } catch (const Error& e) {
      throw UsageError(fmt::format("trainer export --names hf-gpt2: {}: {}", checkpoint, e.what()));
    }
  }
  if (out.empty()) out = fs::path(checkpoint).replace_extension(".safetensors").string();
  write_safetensors(out, weights, {{"format", "pt"}, {"brrr_checkpoint", checkpoint}});
  log::info("exported {} tensors of {} to {}{}", weights.size(), checkpoint, out,
            names == "hf-gpt2"
                ? fmt::format(" (Hugging Face GPT-2 names, vocabulary {})", vocab_size)
                : "");
  return 0;
}

int run_eval_command(const std::vector<std::string>& argv, const TrainerFactory& make_trainer) {
  std::vector<std::string> rest;
  std::string checkpoint;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (is_flag(argv[i], "--checkpoint")) {
      checkpoint = take_value(argv, i, "--checkpoint");
    } else {
      rest.push_back(argv[i]);
    }
  }
  const Args args = parse_args(rest);
  if (checkpoint.empty()) throw UsageError("trainer eval: give --checkpoint PATH|auto");
  const ExperimentConfig config = load(args);
  if (config.data.val.dataset.empty()) {
    throw ConfigError("trainer eval: the config has no evaluation data (data.val.dataset)");
  }
  const std::unique_ptr<Trainer> made = make(make_trainer, config);
  Trainer& trainer = *made;
  const std::string path = checkpoint == "auto" ? checkpoint_of(trainer.run_dir()) : checkpoint;
  trainer.load_checkpoint(path);
  const Metrics metrics = trainer.evaluate();
  JsonObject record;
  record.set("kind", "eval").set("step", trainer.step()).set("checkpoint", path);
  std::string line;
  for (const auto& [name, value] : metrics) {
    record.set(name, value);
    line += fmt::format(" {} {:.4f}", name, value);
  }
  std::cout << fmt::format("eval of {} (step {}):{}\n", path, trainer.step(), line);
  // Appended beside the run's files, never into them: a training run may own metrics.jsonl.
  if (fs::is_directory(trainer.run_dir())) {
    std::ofstream(fs::path(trainer.run_dir()) / "eval.jsonl", std::ios::app)
        << record.dump() << "\n";
  }
  return 0;
}

}  // namespace

std::string cli_usage() {
  return R"(usage:
  trainer --config FILE [--set KEY=VALUE]... [--resume auto|PATH] [--print-config] [--dry-run]
          [--nproc-per-node N]
  trainer report RUN_DIR [RUN_DIR_2] [--out DIR]
  trainer eval --config FILE --checkpoint PATH|auto [--set KEY=VALUE]...
  trainer export RUN_DIR|CHECKPOINT [--format safetensors] [--names brrr|hf-gpt2] [--out FILE]
  trainer --help | --help-config | --version

Trains the experiment described by a YAML file (see configs/ and the README's configuration reference).
FILE may also name a config built into the binary: quickstart.

  --config FILE        experiment file (`base: other.yaml` inside it extends another file)
  --set KEY=VALUE      override any key after loading, e.g. --set train.precision=bf16 (repeatable)
  --resume auto|PATH   continue from the newest checkpoint of the run, or from PATH
  --print-config       print the fully resolved config as YAML and exit
  --dry-run            build everything, print the plan (device, precision, model, batch, loader) and exit
  --nproc-per-node N   data-parallel training on N ranks of this machine (one GPU each on CUDA,
                       Gloo processes on CPU); data.batch_size is per rank. torchrun
                       --nproc-per-node N --no-python trainer --config FILE works too
  report               plots and a summary of finished runs (two runs are overlaid: baseline vs tuned)
  eval                 the validation set on a checkpoint (auto: the run's newest); prints the metrics
                       and appends them to the run's eval.jsonl; trains and writes no checkpoint
  export               a checkpoint's (or a run's newest) model weights as safetensors, which
                       safetensors.torch.load_file reads; --names hf-gpt2 (gpt models) writes
                       Hugging Face GPT2LMHeadModel's names and layout, the vocabulary cut to
                       --vocab-size N (50257)
  --help-config        every configuration key with its type, default and meaning

Exit status: 0 success, 2 usage or configuration error (or a run directory in use or holding
a run), 1 failure while running, 128+N stopped by signal N after saving a checkpoint. With
--nproc-per-node: the status of the first rank that failed (named on stderr).
BRRR_DEBUG=1 prints libtorch's C++ stack trace with an error from libtorch.
)";
}

int run_cli(int argc, char** argv, const TrainerFactory& make_trainer) {
  return run_cli(std::vector<std::string>(argv + std::min(argc, 1), argv + std::max(argc, 0)),
                 make_trainer);
}

int run_cli(const std::vector<std::string>& args, const TrainerFactory& make_trainer) {
  try {
    if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
      std::cout << cli_usage();
      return args.empty() ? 2 : 0;
    }
    if (args[0] == "--help-config") {
      std::cout << help_config();
      return 0;
    }
    if (args[0] == "--version") {
      std::cout << fmt::format("brrr {} (libtorch {}, CUDA {})\n", BRRR_VERSION, BRRR_TORCH_VERSION,
                               BRRR_HAVE_CUDA ? "yes" : "no");
      return 0;
    }
    if (args[0] == "report") return run_report_command({args.begin() + 1, args.end()});
    if (args[0] == "export") return run_export_command({args.begin() + 1, args.end()});
    if (args[0] == "eval") return run_eval_command({args.begin() + 1, args.end()}, make_trainer);
    return run_train(args, make_trainer);
  } catch (const ConfigError& e) {
    log::error("config error: {}", e.what());
    return 2;
  } catch (const UsageError& e) {
    log::error("{}", e.what());
    return 2;
  } catch (const RunDirError& e) {
    log::error("{}", e.what());
    return 2;
  } catch (const c10::Error& e) {
    // libtorch's message carries a C++ stack trace: one line for the user, the trace on request.
    if (debug_requested()) {
      log::error("{}", e.what());
    } else {
      log::error("{} (set BRRR_DEBUG=1 for libtorch's stack trace)",
                 first_line(e.what_without_backtrace()));
    }
    return 1;
  } catch (const std::exception& e) {
    log::error("{}", e.what());
    return 1;
  }
}

}  // namespace brrr
