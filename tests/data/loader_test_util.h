#pragma once
// Small datasets and process/shared-memory probes for the DataLoader tests.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "core/error.h"
#include "data/dataset.h"

namespace brrr::testing {

/// Deterministic samples from (index, rng): "x" float (3, 4) = index * 100 + k + u, "label" int64
/// () = index, "noise" uint8 (5,) drawn from rng. Any mix-up of index or rng shows in the values.
class PatternDataset : public Dataset {
 public:
  explicit PatternDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Sample get(int64_t index, Rng& rng) const override {
    if (index < 0 || index >= n_) throw DataError(fmt::format("index {} out of range", index));
    const double u = rng.uniform();
    at::Tensor noise = at::empty({5}, at::kByte);
    for (int64_t k = 0; k < 5; ++k) noise[k] = static_cast<int64_t>(rng.next_u64() & 0xff);
    return {
        {"x", at::arange(12, at::kFloat).reshape({3, 4}) + static_cast<double>(index * 100) + u},
        {"label", at::scalar_tensor(index, at::kLong)},
        {"noise", noise}};
  }
  std::string describe() const override { return fmt::format("pattern: {} samples", n_); }

 private:
  int64_t n_;
};

/// Throws DataError("corrupt record <i>") for sample `bad`.
class ThrowingDataset : public PatternDataset {
 public:
  ThrowingDataset(int64_t n, int64_t bad) : PatternDataset(n), bad_(bad) {}
  Sample get(int64_t index, Rng& rng) const override {
    if (index == bad_) throw DataError(fmt::format("corrupt record {}", index));
    return PatternDataset::get(index, rng);
  }

 private:
  int64_t bad_;
};

/// Sleeps `millis` per sample (except sample 0 in the constructing process: the layout probe).
class SleepingDataset : public PatternDataset {
 public:
  SleepingDataset(int64_t n, int64_t millis) : PatternDataset(n), millis_(millis) {}
  Sample get(int64_t index, Rng& rng) const override {
    std::this_thread::sleep_for(std::chrono::milliseconds(millis_));
    return PatternDataset::get(index, rng);
  }

 private:
  int64_t millis_;
};

/// SIGKILLs the process loading sample `victim`, but only in a forked worker (never the test).
class KillingDataset : public PatternDataset {
 public:
  KillingDataset(int64_t n, int64_t victim)
      : PatternDataset(n), victim_(victim), owner_(getpid()) {}
  Sample get(int64_t index, Rng& rng) const override {
    if (index == victim_ && getpid() != owner_) raise(SIGKILL);
    return PatternDataset::get(index, rng);
  }

 private:
  int64_t victim_;
  pid_t owner_;
};

/// Sample `bad` has "x" of shape (3, 5) instead of (3, 4).
class ShapeMismatchDataset : public PatternDataset {
 public:
  ShapeMismatchDataset(int64_t n, int64_t bad) : PatternDataset(n), bad_(bad) {}
  Sample get(int64_t index, Rng& rng) const override {
    Sample s = PatternDataset::get(index, rng);
    if (index == bad_) s["x"] = at::zeros({3, 5});
    return s;
  }

 private:
  int64_t bad_;
};

/// Pids of the live (or zombie) children of this process, from /proc/*/stat.
inline std::vector<pid_t> child_pids() {
  std::vector<pid_t> out;
  const pid_t self = getpid();
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in("/proc/" + name + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto close_paren = stat.rfind(')');  // comm may hold spaces and parentheses
    if (close_paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(close_paren + 1));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == self) out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  closedir(dir);
  return out;
}

/// Names in /dev/shm (a shared-memory object the loader leaked would show up here).
inline std::set<std::string> shm_entries() {
  std::set<std::string> out;
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* e = readdir(dir)) out.insert(e->d_name);
    closedir(dir);
  }
  return out;
}

}  // namespace brrr::testing
