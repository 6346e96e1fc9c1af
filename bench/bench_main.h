#pragma once
// What the benchmark programs' main functions share around their measurement: the CSV they
// measured goes to stdout and, with --csv FILE, to that file; errors become exit codes (bad usage
// 2, anything else 1) with a message on stderr.
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <fstream>
#include <string>

#include "core/error.h"

namespace brrr::bench {

/// Prints `csv`, and writes it to `path` unless that is empty (an Error naming the file when it
/// cannot be written).
inline void emit_csv(const std::string& csv, const std::string& path) {
  fmt::print("{}", csv);
  if (path.empty()) return;
  std::ofstream out(path);
  out << csv;
  if (!out) throw Error(fmt::format("cannot write --csv {}", path));
}

/// Runs `body` and returns main's exit code: 0, 2 for a UsageError (its message alone), 1 for
/// any other exception (after `program`'s name).
template <typename Body>
int run_main(const char* program, Body&& body) {
  try {
    body();
    return 0;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace brrr::bench
