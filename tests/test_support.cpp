// Linked into every test executable.
//
// Scratch directories registered with brrr::test::remove_at_exit are removed when the test program
// ends with every test passed (kept, and named, when one failed).
//
// A fatal signal prints the test that was running, the faulting
// instruction and fault address, a stack trace, the words at the top of the stack (after a jump
// through a bad pointer the unwinder stops at once, but the caller's return address is usually
// there) and the executable mappings, so a crash on a machine without a debugger still says where
// it happened. scripts/gpu_check.sh turns the addresses into function names with addr2line.
#include <gtest/gtest.h>

#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <vector>

#include "tests/test_fs.h"

namespace {

std::mutex scratch_mutex;
std::vector<std::filesystem::path>& scratch_dirs() {
  static auto* dirs = new std::vector<std::filesystem::path>();  // outlives every test
  return *dirs;
}

class ScratchCleaner : public testing::EmptyTestEventListener {
  void OnTestProgramEnd(const testing::UnitTest& unit) override {
    std::lock_guard<std::mutex> lock(scratch_mutex);
    for (const auto& dir : scratch_dirs()) {
      if (unit.Passed()) {
        brrr::test::remove_tree(dir);
      } else if (std::filesystem::exists(dir)) {
        std::cerr << "kept for inspection: " << dir.string() << "\n";
      }
    }
    scratch_dirs().clear();
  }
};

void write_err(const char* s) {
  if (s != nullptr) (void)!write(STDERR_FILENO, s, std::strlen(s));
}

void write_hex(const char* label, uintptr_t value) {
  char line[64];
  std::snprintf(line, sizeof(line), "%s0x%" PRIxPTR "\n", label, value);
  write_err(line);
}

void on_fatal_signal(int sig, siginfo_t* info, void* context) {
  write_err("\n*** fatal signal ");
  write_err(strsignal(sig));
  const testing::TestInfo* test = testing::UnitTest::GetInstance()->current_test_info();
  if (test != nullptr) {
    write_err(" in test ");
    write_err(test->test_suite_name());
    write_err(".");
    write_err(test->name());
  }
  write_err("\n");
  write_hex("fault address: ", reinterpret_cast<uintptr_t>(info->si_addr));
#if defined(__x86_64__)
  const auto* uc = static_cast<const ucontext_t*>(context);
  write_hex("pc: ", static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]));
  const auto* sp = reinterpret_cast<const uintptr_t*>(uc->uc_mcontext.gregs[REG_RSP]);
  write_err("top of stack:\n");
  for (int i = 0; i < 24; ++i) write_hex("  ", sp[i]);
#else
  (void)context;
#endif
  write_err("stack:\n");
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  write_err("maps:\n");
  const int fd = open("/proc/self/maps", O_RDONLY);
  if (fd >= 0) {
    char buf[4096];
    ssize_t n = 0;
    while ((n = read(fd, buf, sizeof(buf))) > 0)
      (void)!write(STDERR_FILENO, buf, static_cast<size_t>(n));
    close(fd);
  }
  signal(sig, SIG_DFL);  // die of the same signal (exit status and core as without the handler)
  raise(sig);
}

const bool installed = [] {
  testing::UnitTest::GetInstance()->listeners().Append(new ScratchCleaner);
  struct sigaction action {};
  action.sa_sigaction = on_fatal_signal;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &action, nullptr);
  return true;
}();

}  // namespace

std::string brrr::test::run_command(const std::string& command, int* status) {
  std::string out;
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *status = -1;
    return out;
  }
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  *status = pclose(pipe);
  return out;
}

std::string brrr::test::run_source_script(const std::string& script, const std::string& args,
                                          int* status) {
  return run_command(
      std::string(BRRR_PYTHON) + " " + BRRR_SOURCE_DIR + "/" + script + " " + args + " 2>&1",
      status);
}

bool brrr::test::python_imports(const std::string& module) {
  int status = 0;
  run_command(std::string(BRRR_PYTHON) + " -c 'import " + module + "' >/dev/null 2>&1", &status);
  return status == 0;
}

void brrr::test::remove_at_exit(const std::filesystem::path& dir) {
  std::lock_guard<std::mutex> lock(scratch_mutex);
  scratch_dirs().push_back(dir);
}
