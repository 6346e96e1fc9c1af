#pragma once
// Crash-safe checkpoint files. Invariant: a checkpoint path either holds the previous complete
// file or the new complete file, never a partial one: bytes go to `<path>.tmp.<pid>`, which is
// fsynced, renamed over `path` (atomic on POSIX), and the directory is fsynced so the rename
// itself survives a power loss. A crash mid-write leaves only a stale tmp file, removed later.
// A write that fails (a full disk) is a CheckpointError naming the file and the cause; its tmp
// file is removed and the previous checkpoint is untouched.
//
// Every checkpoint carries the CRC-32C of its content, in the zip archive's comment field (so
// the file stays a plain PyTorch archive that torch.jit.load reads). load() verifies it first:
// a flipped byte anywhere is an error naming the file, never a silently different state.
//
// Layout under the run directory:  checkpoints/step_00001000.pt ...  checkpoints/best.pt
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

namespace brrr {

/// Calls `writer(tmp_path)` to write the whole file at `<path>.tmp.<pid>`, then fsyncs it, renames
/// it over `path` and fsyncs the directory. If `writer` throws (or the file cannot be synced or
/// renamed) the tmp file is removed, `path` is left as it was, and the exception propagates
/// (IO failures as CheckpointError naming the file).
void write_file_atomic(const std::string& path,
                       const std::function<void(const std::string& tmp_path)>& writer);

/// What verify_checkpoint_checksum() found.
enum class ChecksumStatus {
  kVerified,  // the recorded CRC-32C matches the content
  kMissing,   // no checksum recorded (a checkpoint written before brrr stamped them)
};

/// Reads the whole file at `path` and checks its recorded CRC-32C. Throws CheckpointError
/// naming the file when it cannot be read or the checksum does not match.
ChecksumStatus verify_checkpoint_checksum(const std::string& path);

/// One step checkpoint on disk.
struct CheckpointFile {
  int64_t step = 0;
  std::string path;
};

/// The checkpoints of one run: numbered step files, pruning, and a separate best slot.
/// Not thread-safe; only one process (rank 0) may write a run's checkpoints.
class CheckpointStore {
 public:
  /// `run_dir`/checkpoints/ is created if needed. keep_last = step checkpoints kept (0 = all).
  /// Stale tmp files of dead processes (crashed saves) are removed. A store that is not
  /// `writable` (a rank that only reads) touches nothing on disk, and its save() throws.
  CheckpointStore(std::string run_dir, int64_t keep_last, bool writable = true);

  /// Serializes `fill`'s archive to checkpoints/step_<8 digits>.pt atomically, then deletes the
  /// oldest step files beyond keep_last (never the one just written, never best.pt).
  /// Returns the path written.
  std::string save(int64_t step,
                   const std::function<void(torch::serialize::OutputArchive&)>& fill) const;
  /// Same for checkpoints/best.pt (not counted in keep_last, never pruned).
  std::string save_best(const std::function<void(torch::serialize::OutputArchive&)>& fill) const;

  /// The highest-step checkpoint that passes its checksum (one without a checksum: that loads).
  /// A newer one that does not (truncated, corrupt) is skipped with a warning naming the file and
  /// what is wrong with it. A checksummed file is read through but not parsed.
  /// nullopt when none is valid (list() tells whether there were any at all).
  std::optional<std::string> latest() const;
  /// best.pt if it exists.
  std::optional<std::string> best() const;
  /// Step checkpoints present, by increasing step (files are not opened).
  std::vector<CheckpointFile> list() const;

  /// Verifies `path`'s checksum, opens it and hands its archive to `read`. Any failure (missing
  /// file, a directory, checksum mismatch, bad format, missing key inside `read`) becomes a
  /// CheckpointError naming the file. A file without a checksum loads with a warning.
  static void load(const std::string& path,
                   const std::function<void(torch::serialize::InputArchive&)>& read);

  /// checkpoints/ of the run.
  const std::string& dir() const { return dir_; }
  /// Path of the step checkpoint for `step` (whether or not it exists).
  std::string step_path(int64_t step) const;

 private:
  void prune(int64_t just_saved) const;
  void remove_stale_tmp_files() const;

  std::string dir_;
  int64_t keep_last_;
  bool writable_ = true;
};

}  // namespace brrr
