// Linked into every test executable: a fatal signal prints the test that was running and a stack
// trace to stderr before the process dies, so a crash on a machine without a debugger (the GPU
// machine has no gdb) still says where it happened.
#include <gtest/gtest.h>

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>

namespace {

void write_err(const char* s) {
  if (s != nullptr) (void)!write(STDERR_FILENO, s, std::strlen(s));
}

void on_fatal_signal(int sig) {
  write_err("\n*** fatal signal ");
  write_err(strsignal(sig));
  const testing::TestInfo* test = testing::UnitTest::GetInstance()->current_test_info();
  if (test != nullptr) {
    write_err(" in test ");
    write_err(test->test_suite_name());
    write_err(".");
    write_err(test->name());
  }
  write_err("; stack:\n");
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  signal(sig, SIG_DFL);  // die of the same signal (exit status and core as without the handler)
  raise(sig);
}

const bool installed = [] {
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) signal(sig, on_fatal_signal);
  return true;
}();

}  // namespace
