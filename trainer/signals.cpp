#include "trainer/signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace brrr {
namespace {

std::atomic<int> g_pending{0};
struct sigaction g_old_int;
struct sigaction g_old_term;

void on_signal(int sig) {
  int expected = 0;
  if (!g_pending.compare_exchange_strong(expected, sig)) {
    // Second signal: leave now. Only async-signal-safe calls here.
    static const char kMsg[] = "\nbrrr: second signal, exiting immediately\n";
    ssize_t ignored = write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
    (void)ignored;
    _exit(128 + sig);
  }
  static const char kMsg[] =
      "\nbrrr: stop requested; finishing the current step and saving a checkpoint "
      "(signal again to exit at once)\n";
  ssize_t ignored = write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
  (void)ignored;
}

}  // namespace

StopSignalGuard::StopSignalGuard() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking reads in the loader resume; the flag is checked per step
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

StopSignalGuard::~StopSignalGuard() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

int StopSignalGuard::pending() {
  return g_pending.load();
}

void StopSignalGuard::reset() {
  g_pending.store(0);
}

}  // namespace brrr
