#include "core/checkpoint_io.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <regex>

#include "core/error.h"
#include "core/log.h"

namespace brrr {
namespace {

namespace fs = std::filesystem;

constexpr const char* kBestName = "best.pt";

// fsync through a read-only descriptor: Linux syncs the inode's dirty pages whatever the mode.
void fsync_path(const std::string& path, bool is_dir) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (is_dir ? O_DIRECTORY : 0));
  if (fd < 0) {
    throw CheckpointError(
        fmt::format("cannot open '{}' to sync it: {}", path, std::strerror(errno)));
  }
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some filesystems cannot sync a directory (EINVAL); the rename is still done, only its
  // durability across a power loss is not guaranteed there.
  if (rc != 0 && !(is_dir && (err == EINVAL || err == EBADF))) {
    throw CheckpointError(fmt::format("fsync of '{}' failed: {}", path, std::strerror(err)));
  }
}

std::string what_of(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

void write_archive(const std::string& path,
                   const std::function<void(torch::serialize::OutputArchive&)>& fill);

}  // namespace

void write_file_atomic(const std::string& path,
                       const std::function<void(const std::string& tmp_path)>& writer) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  try {
    writer(tmp);
    if (!fs::exists(tmp)) {
      throw CheckpointError(fmt::format("writing '{}': the writer did not create '{}'", path, tmp));
    }
    fsync_path(tmp, /*is_dir=*/false);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      throw CheckpointError(
          fmt::format("cannot rename '{}' to '{}': {}", tmp, path, std::strerror(errno)));
    }
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  const fs::path parent = fs::path(path).parent_path();
  fsync_path(parent.empty() ? "." : parent.string(), /*is_dir=*/true);
}

namespace {

void write_archive(const std::string& path,
                   const std::function<void(torch::serialize::OutputArchive&)>& fill) {
  torch::serialize::OutputArchive archive;
  fill(archive);
  write_file_atomic(path, [&](const std::string& tmp) {
    try {
      archive.save_to(tmp);
    } catch (const c10::Error& e) {
      throw CheckpointError(
          fmt::format("cannot write checkpoint '{}': {}", tmp, e.what_without_backtrace()));
    }
  });
}

}  // namespace

CheckpointStore::CheckpointStore(std::string run_dir, int64_t keep_last, bool writable)
    : dir_((fs::path(run_dir) / "checkpoints").string()),
      keep_last_(keep_last),
      writable_(writable) {
  if (keep_last < 0) {
    throw CheckpointError(fmt::format("keep_last must be >= 0 (0 keeps all), got {}", keep_last));
  }
  if (!writable_) return;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) {
    throw CheckpointError(
        fmt::format("cannot create checkpoint directory '{}': {}", dir_, ec.message()));
  }
  remove_stale_tmp_files();
}

std::string CheckpointStore::step_path(int64_t step) const {
  return (fs::path(dir_) / fmt::format("step_{:08d}.pt", step)).string();
}

std::string CheckpointStore::save(
    int64_t step, const std::function<void(torch::serialize::OutputArchive&)>& fill) const {
  if (!writable_) throw CheckpointError(fmt::format("checkpoint store '{}' is read-only", dir_));
  if (step < 0) throw CheckpointError(fmt::format("checkpoint step must be >= 0, got {}", step));
  const std::string path = step_path(step);
  write_archive(path, fill);
  prune(step);
  return path;
}

std::string CheckpointStore::save_best(
    const std::function<void(torch::serialize::OutputArchive&)>& fill) const {
  if (!writable_) throw CheckpointError(fmt::format("checkpoint store '{}' is read-only", dir_));
  const std::string path = (fs::path(dir_) / kBestName).string();
  write_archive(path, fill);
  return path;
}

std::vector<CheckpointFile> CheckpointStore::list() const {
  static const std::regex kStepFile(R"(step_(\d+)\.pt)");
  std::vector<CheckpointFile> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    std::smatch m;
    if (entry.is_regular_file() && std::regex_match(name, m, kStepFile)) {
      files.push_back({std::stoll(m[1].str()), entry.path().string()});
    }
  }
  std::sort(files.begin(), files.end(),
            [](const CheckpointFile& a, const CheckpointFile& b) { return a.step < b.step; });
  return files;
}

std::optional<std::string> CheckpointStore::latest() const {
  const auto files = list();
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    try {
      load(it->path, [](torch::serialize::InputArchive&) {});
      return it->path;
    } catch (const CheckpointError& e) {
      log::warn("skipping checkpoint '{}' (step {}): it does not load: {}", it->path, it->step,
                e.what());
    }
  }
  return std::nullopt;
}

std::optional<std::string> CheckpointStore::best() const {
  const fs::path path = fs::path(dir_) / kBestName;
  if (fs::is_regular_file(path)) return path.string();
  return std::nullopt;
}

void CheckpointStore::load(const std::string& path,
                           const std::function<void(torch::serialize::InputArchive&)>& read) {
  if (!fs::is_regular_file(path)) {
    throw CheckpointError(fmt::format("checkpoint '{}' does not exist", path));
  }
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    read(archive);
  } catch (const Error&) {
    throw;  // already names what went wrong
  } catch (const std::exception& e) {
    throw CheckpointError(fmt::format("cannot load checkpoint '{}': {}", path, what_of(e)));
  }
}

void CheckpointStore::prune(int64_t just_saved) const {
  if (keep_last_ == 0) return;
  auto files = list();
  auto excess = static_cast<int64_t>(files.size()) - keep_last_;
  for (const auto& file : files) {  // oldest first
    if (excess <= 0) break;
    if (file.step == just_saved) continue;
    std::error_code ec;
    fs::remove(file.path, ec);
    if (ec) {
      log::warn("could not delete old checkpoint '{}': {}", file.path, ec.message());
    } else {
      log::debug("deleted old checkpoint '{}'", file.path);
    }
    --excess;
  }
}

void CheckpointStore::remove_stale_tmp_files() const {
  // `<name>.tmp.<pid>` left by a save that crashed; a live writer's file (another process still
  // writing) is left alone.
  static const std::regex kTmpFile(R"(.+\.tmp\.(\d+))");
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    std::smatch m;
    if (!std::regex_match(name, m, kTmpFile)) continue;
    const auto pid = static_cast<pid_t>(std::stol(m[1].str()));
    if (pid == ::getpid() || (::kill(pid, 0) == 0 || errno != ESRCH)) continue;
    std::error_code rm;
    fs::remove(entry.path(), rm);
    if (!rm)
      log::info("removed '{}', left by an interrupted checkpoint save", entry.path().string());
  }
}

}  // namespace brrr
