#include "core/checkpoint_io.h"

#include <c10/util/ScopeExit.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <regex>

#include "core/crc32c.h"
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

// The checksum rides in the zip archive's own comment field, so a checkpoint stays a plain
// PyTorch archive (torch.jit.load and torch.load read it as before). PyTorch ends the archive
// with a 22-byte end-of-central-directory record whose last two bytes, the comment length, are
// zero; the writer sets that length and appends "brrr-crc32c:XXXXXXXX", the CRC-32C of the
// archive exactly as PyTorch wrote it (comment length zero).
constexpr size_t kEocdSize = 22;
constexpr char kEocdSignature[] = {'P', 'K', 5, 6};
constexpr std::string_view kChecksumTag = "brrr-crc32c:";
constexpr size_t kCommentSize = 20;  // the tag and 8 hex digits
static_assert(kChecksumTag.size() + 8 == kCommentSize);

bool write_all(int fd, const char* data, size_t n, int* err) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      *err = w < 0 ? errno : EIO;
      return false;
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// The file PyTorch's archive writer streams into. It never reports a failure back to PyTorch's
// writer: a failure there is raised again from that writer's destructor, which is noexcept, and
// ends the process with std::terminate (what a full disk used to do). The first error is kept,
// later bytes are dropped, and finish() raises it as a CheckpointError.
class ChecksummedFile {
 public:
  explicit ChecksummedFile(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) err_ = errno;
  }
  ~ChecksummedFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  ChecksummedFile(const ChecksummedFile&) = delete;
  ChecksummedFile& operator=(const ChecksummedFile&) = delete;

  size_t write(const void* data, size_t n) {
    const auto* bytes = static_cast<const char*>(data);
    crc_ = crc32c(bytes, n, crc_);
    size_ += n;
    tail_.append(bytes + (n > kEocdSize ? n - kEocdSize : 0), std::min(n, kEocdSize));
    if (tail_.size() > kEocdSize) tail_.erase(0, tail_.size() - kEocdSize);
    if (err_ == 0) write_all(fd_, bytes, n, &err_);
    return n;
  }

  // Stamps the checksum into the archive's comment and closes the file.
  void finish() {
    if (err_ == 0) {
      if (tail_.size() != kEocdSize || tail_.compare(0, 4, kEocdSignature, 4) != 0 ||
          tail_[20] != 0 || tail_[21] != 0) {
        throw CheckpointError(fmt::format(
            "cannot write checkpoint '{}': the archive does not end as a PyTorch zip archive "
            "does (no end record without comment); cannot add its checksum",
            path_));
      }
      const char length[2] = {static_cast<char>(kCommentSize), 0};
      const std::string comment = fmt::format("{}{:08x}", kChecksumTag, crc_);
      if (::pwrite(fd_, length, 2, static_cast<off_t>(size_ - 2)) != 2) err_ = errno ? errno : EIO;
      if (err_ == 0) write_all(fd_, comment.data(), comment.size(), &err_);
    }
    if (fd_ >= 0 && ::close(fd_) != 0 && err_ == 0) err_ = errno;
    fd_ = -1;
    if (err_ != 0) {
      throw CheckpointError(
          fmt::format("cannot write checkpoint '{}': {}", path_, std::strerror(err_)));
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  int err_ = 0;
  uint32_t crc_ = 0;
  uint64_t size_ = 0;
  std::string tail_;
};

void write_archive(const std::string& path,
                   const std::function<void(torch::serialize::OutputArchive&)>& fill) {
  torch::serialize::OutputArchive archive;
  fill(archive);
  write_file_atomic(path, [&](const std::string& tmp) {
    ChecksummedFile file(tmp);
    try {
      archive.save_to([&](const void* data, size_t n) { return file.write(data, n); });
    } catch (const c10::Error& e) {
      throw CheckpointError(
          fmt::format("cannot write checkpoint '{}': {}", tmp, e.what_without_backtrace()));
    }
    file.finish();
  });
}

}  // namespace

ChecksumStatus verify_checkpoint_checksum(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw CheckpointError(
        fmt::format("cannot open checkpoint '{}': {}", path, std::strerror(errno)));
  }
  const auto close_fd = c10::make_scope_exit([fd] { ::close(fd); });
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    throw CheckpointError(
        fmt::format("cannot stat checkpoint '{}': {}", path, std::strerror(errno)));
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < kEocdSize + kCommentSize) return ChecksumStatus::kMissing;
  std::string end(kEocdSize + kCommentSize, '\0');
  if (::pread(fd, end.data(), end.size(), static_cast<off_t>(size - end.size())) !=
      static_cast<ssize_t>(end.size())) {
    throw CheckpointError(
        fmt::format("cannot read checkpoint '{}': {}", path, std::strerror(errno)));
  }
  const bool stamped = end.compare(0, 4, kEocdSignature, 4) == 0 &&
                       static_cast<unsigned char>(end[20]) == kCommentSize && end[21] == 0 &&
                       end.compare(kEocdSize, kChecksumTag.size(), kChecksumTag) == 0;
  if (!stamped) return ChecksumStatus::kMissing;
  const std::string hex = end.substr(kEocdSize + kChecksumTag.size());
  uint32_t expected = 0;
  const auto [ptr, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), expected, 16);
  if (ec != std::errc() || ptr != hex.data() + hex.size()) {
    throw CheckpointError(fmt::format(
        "checkpoint '{}' is corrupt: its checksum field '{}' is not hexadecimal", path, hex));
  }
  // The archive as written had a zero comment length: [0, size - comment - 2) then two zeros.
  const uint64_t covered = size - kCommentSize - 2;
  std::vector<char> buffer(size_t{8} << 20);
  uint32_t crc = 0;
  for (uint64_t offset = 0; offset < covered;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buffer.size(), covered - offset));
    const ssize_t got = ::pread(fd, buffer.data(), want, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      throw CheckpointError(fmt::format("cannot read checkpoint '{}': {}", path,
                                        got < 0 ? std::strerror(errno) : "unexpected end of file"));
    }
    crc = crc32c(buffer.data(), static_cast<size_t>(got), crc);
    offset += static_cast<uint64_t>(got);
  }
  const char zeros[2] = {0, 0};
  crc = crc32c(zeros, 2, crc);
  if (crc != expected) {
    throw CheckpointError(fmt::format(
        "checkpoint '{}' is corrupt: its content's CRC-32C is {:08x}, the file records {:08x}",
        path, crc, expected));
  }
  return ChecksumStatus::kVerified;
}

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
      // A matching CRC-32C means these are the bytes brrr's writer wrote, so the archive is not
      // parsed here: the load that follows (a resume) parses it once. A file without a checksum
      // is parsed to find out whether it loads.
      if (verify_checkpoint_checksum(it->path) == ChecksumStatus::kVerified) return it->path;
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
  if (fs::is_directory(path)) {
    throw CheckpointError(fmt::format(
        "checkpoint '{}' is a directory; give a checkpoint file (e.g. {}/step_00001000.pt), or "
        "--resume auto to take the run's newest valid checkpoint",
        path, (fs::path(path) / "checkpoints").string()));
  }
  if (!fs::is_regular_file(path)) {
    throw CheckpointError(fmt::format("checkpoint '{}' does not exist", path));
  }
  if (verify_checkpoint_checksum(path) == ChecksumStatus::kMissing) {
    log::warn(
        "checkpoint '{}' carries no checksum (written by an older brrr); loading it unverified",
        path);
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
