// bench_export_fmnist_png: writes Fashion-MNIST (the IDX files) as PNG image folders,
// OUT/{train,test}/<class>/<index>.png, for configs/fashion_mnist_png.yaml. Called by
// scripts/prepare_data.sh; a thin command line over brrr::export_fashion_mnist_png.
//
//   bench_export_fmnist_png --idx-dir /usr/share/datasets/fashion-mnist --out DIR
//                           [--splits train,test] [--limit N]
// Exit codes: 0 success, 2 usage error, 1 data error.
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "data/fashion_mnist.h"

namespace {

constexpr const char* kUsage =
    "usage: bench_export_fmnist_png --idx-dir DIR --out DIR [--splits train,test] [--limit N]\n"
    "  Writes OUT/<split>/<class>/<index>.png for each split (limit > 0: the first N images).\n";

struct Args {
  std::string idx_dir = "/usr/share/datasets/fashion-mnist";
  std::string out;
  std::vector<std::string> splits = {"train", "test"};
  int64_t limit = 0;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") throw brrr::UsageError(kUsage);
    if (i + 1 >= argc) throw brrr::UsageError(fmt::format("{} needs a value\n{}", flag, kUsage));
    const std::string value = argv[++i];
    if (flag == "--idx-dir") {
      a.idx_dir = value;
    } else if (flag == "--out") {
      a.out = value;
    } else if (flag == "--splits") {
      a.splits.clear();
      for (size_t start = 0; start <= value.size();) {
        const size_t comma = value.find(',', start);
        const std::string split =
            value.substr(start, comma == std::string::npos ? comma : comma - start);
        if (split != "train" && split != "test") {
          throw brrr::UsageError(
              fmt::format("--splits {}: '{}' is not train or test", value, split));
        }
        a.splits.push_back(split);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else if (flag == "--limit") {
      try {
        a.limit = std::stoll(value);
      } catch (const std::exception&) {
        throw brrr::UsageError(fmt::format("--limit {}: not an integer", value));
      }
      if (a.limit < 0) throw brrr::UsageError(fmt::format("--limit {}: must be >= 0", value));
    } else {
      throw brrr::UsageError(fmt::format("unknown flag {}\n{}", flag, kUsage));
    }
  }
  if (a.out.empty()) throw brrr::UsageError(fmt::format("--out is required\n{}", kUsage));
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse_args(argc, argv);
    for (const std::string& split : a.splits) {
      const std::string dir = a.out + "/" + split;
      brrr::export_fashion_mnist_png(a.idx_dir, split, dir, a.limit);
      brrr::log::info("wrote Fashion-MNIST {} as PNG folders under {}", split, dir);
    }
    return 0;
  } catch (const brrr::UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_export_fmnist_png: %s\n", e.what());
    return 1;
  }
}
