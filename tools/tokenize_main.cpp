// brrr_tokenize: byte-level tokenizer for the token_file dataset.
//   brrr_tokenize INPUT... -o OUT.bin [--dtype uint16|uint32] [--allow-invalid]
// Exit codes: 0 success, 2 usage error, 1 data error (unreadable or invalid input).
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "data/token_file.h"

namespace {

constexpr const char* kUsage =
    "usage: brrr_tokenize INPUT... -o OUT.bin [--dtype uint16|uint32] [--allow-invalid]\n"
    "  Writes every byte of the inputs (concatenated, in order) as one token 0..255.\n"
    "  Inputs must be valid UTF-8 unless --allow-invalid is given.\n";

struct Args {
  std::vector<std::string> inputs;
  std::string out;
  brrr::TokenDtype dtype = brrr::TokenDtype::kUint16;
  bool allow_invalid = false;
  bool help = false;
};

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) throw brrr::UsageError(std::string(flag) + " needs a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      args.help = true;
    } else if (a == "-o" || a == "--output") {
      args.out = value("-o");
    } else if (a == "--dtype") {
      const std::string d = value("--dtype");
      if (d != "uint16" && d != "uint32") {
        throw brrr::UsageError("--dtype must be uint16 or uint32, got '" + d + "'");
      }
      args.dtype = d == "uint16" ? brrr::TokenDtype::kUint16 : brrr::TokenDtype::kUint32;
    } else if (a == "--allow-invalid") {
      args.allow_invalid = true;
    } else if (a.size() > 1 && a[0] == '-') {
      throw brrr::UsageError("unknown option '" + a + "'");
    } else {
      args.inputs.push_back(a);
    }
  }
  if (!args.help && args.inputs.empty()) throw brrr::UsageError("no input files");
  if (!args.help && args.out.empty()) throw brrr::UsageError("missing -o OUT.bin");
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = parse_args(argc, argv);
    if (args.help) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    const int64_t count =
        brrr::write_byte_tokens(args.inputs, args.out, args.dtype, args.allow_invalid);
    fmt::print("{} tokens written to {} ({})\n", count, args.out,
               args.dtype == brrr::TokenDtype::kUint16 ? "uint16" : "uint32");
    return 0;
  } catch (const brrr::UsageError& e) {
    brrr::log::error("brrr_tokenize: {}", e.what());
    std::fputs(kUsage, stderr);
    return 2;
  } catch (const std::exception& e) {
    brrr::log::error("brrr_tokenize: {}", e.what());
    return 1;
  }
}
