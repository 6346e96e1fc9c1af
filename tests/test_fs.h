#pragma once
// Test helper: recursive removal of a scratch directory through libc's nftw, not
// std::filesystem::remove_all. libtorch's pip wheels export their own copy of
// std::filesystem::remove_all; a test binary linked with libtorch ahead of libstdc++ binds to it,
// and that copy jumped to a null pointer on the GPU machine (torch 2.11, Ubuntu 24.04), while the
// same call through the system libstdc++ (LD_PRELOAD) passed. brrr's library code never calls
// remove_all.
#include <ftw.h>
#include <stdio.h>

#include <filesystem>
#include <string>

namespace brrr::test {

/// Removes `path` and everything under it (no error when it does not exist).
inline void remove_tree(const std::filesystem::path& path) {
  nftw(
      path.c_str(),
      [](const char* p, const struct stat*, int, struct FTW*) {
        ::remove(p);  // a file, or a directory already emptied (FTW_DEPTH visits children first)
        return 0;
      },
      16, FTW_DEPTH | FTW_PHYS);
}

/// Runs `command` through the shell and returns what it printed on stdout; `*status` is its
/// wait status (0 = exit 0), -1 when it could not be started. tests/test_support.cpp.
std::string run_command(const std::string& command, int* status);

/// Runs `script` (a path in the source tree) with the build's Python, `args` appended, and returns
/// its output and errors together; `*status` as run_command's.
std::string run_source_script(const std::string& script, const std::string& args, int* status);

/// Whether the Python of the build (BRRR_PYTHON) imports `module`.
bool python_imports(const std::string& module);

/// Removes `dir` (recursively) when the test program ends, if every test passed;
/// tests/test_support.cpp.
void remove_at_exit(const std::filesystem::path& dir);

}  // namespace brrr::test
