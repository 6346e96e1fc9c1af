#include "trainer/cli/cli.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <c10/util/Exception.h>

#include "core/build_info.h"
#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "trainer/cli/embedded_configs.h"
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
};

std::string take_value(const std::vector<std::string>& args, size_t& i, const std::string& flag) {
  const std::string& arg = args[i];
  const std::string prefix = flag + "=";
  if (arg.rfind(prefix, 0) == 0) return arg.substr(prefix.size());
  if (i + 1 >= args.size()) throw UsageError(fmt::format("{} needs a value (see trainer --help)", flag));
  return args[++i];
}

bool is_flag(const std::string& arg, const std::string& flag) {
  return arg == flag || arg.rfind(flag + "=", 0) == 0;
}

Args parse_args(const std::vector<std::string>& args) {
  Args out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
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
    } else {
      throw UsageError(fmt::format("unknown argument '{}' (see trainer --help)", a));
    }
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

int run_train(const std::vector<std::string>& argv) {
  const Args args = parse_args(argv);
  const ExperimentConfig config = load(args);
  if (args.print_config) {
    std::cout << to_yaml(config);
    return 0;
  }
  Trainer trainer(config);
  if (args.dry_run) {
    std::cout << trainer.plan();
    return 0;
  }
  trainer.fit(args.resume);
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

}  // namespace

std::string cli_usage() {
  return R"(usage:
  trainer --config FILE [--set KEY=VALUE]... [--resume auto|PATH] [--print-config] [--dry-run]
  trainer report RUN_DIR [RUN_DIR_2] [--out DIR]
  trainer --help | --help-config | --version

Trains the experiment described by a YAML file (see configs/ and the README's configuration reference).
FILE may also name a config built into the binary: quickstart.

  --config FILE        experiment file (`base: other.yaml` inside it extends another file)
  --set KEY=VALUE      override any key after loading, e.g. --set train.precision=bf16 (repeatable)
  --resume auto|PATH   continue from the newest checkpoint of the run, or from PATH
  --print-config       print the fully resolved config as YAML and exit
  --dry-run            build everything, print the plan (device, precision, model, batch, loader) and exit
  report               plots and a summary of finished runs (two runs are overlaid: baseline vs tuned)
  --help-config        every configuration key with its type, default and meaning

Exit status: 0 success, 2 usage or configuration error (or a run directory in use or holding
a run), 1 failure while running, 128+N stopped by signal N after saving a checkpoint.
BRRR_DEBUG=1 prints libtorch's C++ stack trace with an error from libtorch.
)";
}

int run_cli(const std::vector<std::string>& args) {
  try {
    if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
      std::cout << cli_usage();
      return args.empty() ? 2 : 0;
    }
    if (args[0] == "--help-config") {
      std::cout << config_reference();
      return 0;
    }
    if (args[0] == "--version") {
      std::cout << fmt::format("brrr {} (libtorch {}, CUDA {})\n", BRRR_VERSION, BRRR_TORCH_VERSION,
                               BRRR_HAVE_CUDA ? "yes" : "no");
      return 0;
    }
    if (args[0] == "report") return run_report_command({args.begin() + 1, args.end()});
    return run_train(args);
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
