#pragma once
// The local launcher of `trainer --nproc-per-node N`: starts N ranks of a program on this
// machine with torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT), and stays in charge of them until the last one has ended.
//
// Invariants:
//  * Every line a rank prints reaches the launcher's stdout or stderr (as the rank printed it)
//    prefixed with "[rank R] ", whole lines only, never interleaved within a line.
//  * SIGINT, SIGTERM and SIGHUP to the launcher are forwarded once to every rank (which then
//    checkpoint and stop after the same step); the ranks run in a process group of their own,
//    so a terminal's Ctrl-C reaches them only through the launcher, once.
//  * When a rank dies or exits non-zero, the others get SIGTERM at once and SIGKILL after
//    `grace_s`; the launcher reports which rank ended first and how, and exits non-zero.
//  * No rank outlives the launcher: a rank dies with it (PR_SET_PDEATHSIG), even by SIGKILL.
#include <cstdint>
#include <string>
#include <vector>

namespace brrr {

struct LaunchOptions {
  /// Ranks to start (>= 1).
  int64_t nproc = 1;
  /// The program each rank runs ("" = this executable) and its arguments (without argv[0]).
  std::string program;
  std::vector<std::string> args;
  /// Where rank 0 serves the store; port 0 = a free port of this machine.
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 0;
  /// After the first failure: seconds the other ranks get to exit after SIGTERM.
  double grace_s = 5.0;
};

/// Runs the ranks to their end. Returns 0 when every rank exited 0; the exit code of the first
/// rank that failed (128+N for signal N); or, after a forwarded signal, the ranks' code (128+N).
/// Throws UsageError for nproc < 1, Error when a rank cannot be started.
int launch_local_ranks(const LaunchOptions& options);

}  // namespace brrr
