// Checkpoint IO: atomic replacement (also under SIGKILL in the middle of a large write), pruning,
// recovery from a corrupt newest checkpoint, the content checksum (a flipped byte inside a
// tensor is caught), and a full disk (a clean error, no tmp file, the previous file intact).
#include "core/checkpoint_io.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <thread>

#include "core/crc32c.h"
#include "core/error.h"
#include "tests/test_fs.h"

namespace brrr {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("brrr_ckpt_{}_{}", name, getpid());
  brrr::test::remove_tree(dir);
  fs::create_directories(dir);
  brrr::test::remove_at_exit(dir);
  return dir;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::function<void(torch::serialize::OutputArchive&)> weights(float value, int64_t n = 16) {
  return [=](torch::serialize::OutputArchive& a) { a.write("w", torch::full({n}, value)); };
}

float weight_in(const std::string& path) {
  at::Tensor w;
  CheckpointStore::load(path, [&](torch::serialize::InputArchive& a) { a.read("w", w); });
  return w[0].item<float>();
}

bool has_tmp_files(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().find(".tmp.") != std::string::npos) return true;
  }
  return false;
}

TEST(WriteFileAtomicTest, ReplacesOnlyWhenTheWriterSucceeds) {
  const fs::path dir = fresh_dir("atomic");
  const std::string path = (dir / "state.txt").string();
  write_file_atomic(path, [](const std::string& tmp) { write_text(tmp, "old"); });
  EXPECT_EQ(read_text(path), "old");

  EXPECT_THROW(write_file_atomic(path,
                                 [](const std::string& tmp) {
                                   write_text(tmp, "half-writ");
                                   throw std::runtime_error("disk full");
                                 }),
               std::runtime_error);
  EXPECT_EQ(read_text(path), "old");
  EXPECT_FALSE(has_tmp_files(dir));

  std::string seen_tmp;
  write_file_atomic(path, [&](const std::string& tmp) {
    seen_tmp = tmp;
    write_text(tmp, "new");
  });
  EXPECT_EQ(read_text(path), "new");
  EXPECT_EQ(seen_tmp, fmt::format("{}.tmp.{}", path, getpid()));
  EXPECT_FALSE(has_tmp_files(dir));
  // A writer that creates nothing is an error, and the old file stays.
  EXPECT_THROW(write_file_atomic(path, [](const std::string&) {}), CheckpointError);
  EXPECT_EQ(read_text(path), "new");
}

TEST(WriteFileAtomicTest, SigkillMidWriteLeavesTheOldFile) {
  const fs::path dir = fresh_dir("atomic_kill");
  const std::string path = (dir / "state.txt").string();
  write_file_atomic(path, [](const std::string& tmp) { write_text(tmp, "old"); });
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      write_file_atomic(path, [&](const std::string& tmp) {
        std::ofstream out(tmp, std::ios::binary);
        out << "new but not fin";
        out.flush();
        const char byte = 1;
        (void)!write(ready[1], &byte, 1);  // tell the parent we are mid-write
        for (;;) pause();                  // until SIGKILL
      });
    } catch (...) {
    }
    _exit(1);
  }
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  close(ready[0]);
  close(ready[1]);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(read_text(path), "old");
  EXPECT_TRUE(fs::exists(fmt::format("{}.tmp.{}", path, child)));  // only the stale tmp remains
}

TEST(CheckpointStoreTest, SigkillDuringLargeSaveKeepsPreviousCheckpoint) {
  const fs::path run = fresh_dir("kill");
  CheckpointStore store(run.string(), 3);
  const std::string previous = store.save(1000, weights(1.0f));
  // 128 MiB, allocated before fork so the child only serializes.
  const at::Tensor big = torch::full({32 * 1024 * 1024}, 2.0f);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The parent's OpenMP pool (torch::full above) is not in this process: keep ATen single-threaded.
    at::set_num_threads(1);
    try {
      CheckpointStore(run.string(), 3).save(2000, [&](torch::serialize::OutputArchive& a) {
        a.write("w", big);
      });
    } catch (...) {
    }
    _exit(0);
  }
  // Kill once the tmp file is partly written: before the rename, by construction.
  const fs::path tmp = fmt::format("{}.tmp.{}", store.step_path(2000), child);
  bool killed_mid_write = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    const auto size = fs::file_size(tmp, ec);
    if (!ec && size > (1u << 20)) {
      kill(child, SIGKILL);
      killed_mid_write = !fs::exists(store.step_path(2000));
      break;
    }
    if (waitpid(child, nullptr, WNOHANG) == child) break;  // finished before we saw it: fail
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_TRUE(killed_mid_write) << "the child was not caught in the middle of its save";

  EXPECT_FALSE(fs::exists(store.step_path(2000)));
  CheckpointStore reopened(run.string(), 3);  // as a restarted trainer would
  EXPECT_FALSE(fs::exists(tmp)) << "stale tmp of the dead writer not cleaned up";
  ASSERT_TRUE(reopened.latest().has_value());
  EXPECT_EQ(*reopened.latest(), previous);
  EXPECT_EQ(weight_in(previous), 1.0f);
}

TEST(CheckpointStoreTest, KeepsTheLastKAndNeverPrunesBest) {
  const fs::path run = fresh_dir("prune");
  CheckpointStore store(run.string(), 2);
  const std::string best = store.save_best(weights(9.0f));
  EXPECT_EQ(best, (run / "checkpoints" / "best.pt").string());
  for (int64_t step : {100, 200, 300, 400}) store.save(step, weights(static_cast<float>(step)));
  const auto files = store.list();
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].step, 300);
  EXPECT_EQ(files[1].step, 400);
  EXPECT_EQ(files[1].path, (run / "checkpoints" / "step_00000400.pt").string());
  EXPECT_EQ(store.best(), best);
  EXPECT_EQ(weight_in(best), 9.0f);
  EXPECT_EQ(store.latest(), files[1].path);
  EXPECT_EQ(weight_in(*store.latest()), 400.0f);

  // Saving an older step (a resumed run) keeps the file just written even though it is oldest.
  store.save(50, weights(50.0f));
  EXPECT_TRUE(fs::exists(store.step_path(50)));
  EXPECT_EQ(store.list().size(), 2u);

  CheckpointStore keep_all(fresh_dir("keep_all").string(), 0);
  for (int64_t step : {1, 2, 3, 4, 5}) keep_all.save(step, weights(1.0f));
  EXPECT_EQ(keep_all.list().size(), 5u);
  EXPECT_THROW(CheckpointStore(run.string(), -1), CheckpointError);
}

// latest() trusts a checksum that matches (the bytes brrr's writer wrote) and leaves parsing to
// the load, so a resume parses its checkpoint once: a checksummed file that is no archive at all
// is the one chosen, and loading it is the error that names it.
TEST(CheckpointStoreTest, LatestTrustsAMatchingChecksumWithoutParsing) {
  const fs::path run = fresh_dir("unparsed");
  CheckpointStore store(run.string(), 5);
  store.save(100, weights(1.0f));
  // An end-of-central-directory record (comment length zero) after bytes that are no archive,
  // then the comment length and the checksum comment, as the writer stamps a file.
  std::string bytes = "not a zip archive, checksummed all the same";
  std::string eocd(22, '\0');
  eocd.replace(0, 4, std::string{'P', 'K', 5, 6});
  bytes += eocd;
  const uint32_t crc = crc32c(bytes.data(), bytes.size(), 0);
  bytes[bytes.size() - 2] = 20;
  bytes += fmt::format("brrr-crc32c:{:08x}", crc);
  const std::string stamped = store.step_path(200);
  write_text(stamped, bytes);
  ASSERT_EQ(verify_checkpoint_checksum(stamped), ChecksumStatus::kVerified);

  EXPECT_EQ(store.latest(), stamped);
  try {
    CheckpointStore::load(stamped, [](torch::serialize::InputArchive&) {});
    ADD_FAILURE() << "a file that is no archive loaded";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot load checkpoint '" + stamped), std::string::npos)
        << e.what();
  }
}

TEST(CheckpointStoreTest, CorruptNewestIsSkippedWithAWarningNamingIt) {
  const fs::path run = fresh_dir("corrupt");
  CheckpointStore store(run.string(), 5);
  store.save(100, weights(1.0f, 4096));
  const std::string truncated = store.save(200, weights(2.0f, 4096));
  fs::resize_file(truncated, fs::file_size(truncated) / 2);
  const std::string garbage = store.step_path(300);
  write_text(garbage, "this is not a zip archive");

  testing::internal::CaptureStderr();
  const auto latest = store.latest();
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(*latest, store.step_path(100));
  EXPECT_NE(err.find("WARN"), std::string::npos) << err;
  EXPECT_NE(err.find(truncated), std::string::npos) << err;
  EXPECT_NE(err.find(garbage), std::string::npos) << err;

  EXPECT_FALSE(CheckpointStore(fresh_dir("empty").string(), 3).latest().has_value());
}

TEST(CheckpointStoreTest, LoadFailuresAreCheckpointErrorsNamingTheFile) {
  const fs::path run = fresh_dir("load");
  CheckpointStore store(run.string(), 3);
  const std::string good = store.save(1, weights(1.0f));
  const std::string missing = store.step_path(99);
  const std::string bad = (run / "bad.pt").string();
  write_text(bad, "garbage");
  const auto noop = [](torch::serialize::InputArchive&) {};
  const auto read_missing_key = [](torch::serialize::InputArchive& a) {
    at::Tensor t;
    a.read("no_such_key", t);
  };
  for (const auto& [path, fn] :
       std::vector<std::pair<std::string, std::function<void(torch::serialize::InputArchive&)>>>{
           {missing, noop}, {bad, noop}, {good, read_missing_key}}) {
    try {
      CheckpointStore::load(path, fn);
      ADD_FAILURE() << "expected CheckpointError for " << path;
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
}

// Flips 64 bytes inside the data of a tensor filled with `value` (found by its bytes).
void flip_tensor_bytes(const std::string& path, float value) {
  std::string bytes = read_text(path);
  std::string pattern;
  for (int i = 0; i < 16; ++i) pattern.append(reinterpret_cast<const char*>(&value), sizeof value);
  const size_t at = bytes.find(pattern);
  ASSERT_NE(at, std::string::npos) << "no tensor data of " << value << " in " << path;
  for (size_t i = 0; i < pattern.size(); ++i) bytes[at + i] ^= 0x5a;
  write_text(path, bytes);
}

TEST(CheckpointChecksumTest, EveryCheckpointIsStampedAndVerified) {
  const fs::path run = fresh_dir("crc");
  CheckpointStore store(run.string(), 3);
  const std::string path = store.save(1, weights(3.0f, 1024));
  EXPECT_EQ(verify_checkpoint_checksum(path), ChecksumStatus::kVerified);
  const std::string bytes = read_text(path);
  EXPECT_NE(bytes.find("brrr-crc32c:"), std::string::npos);
  // Still a plain PyTorch archive: it loads, with the value written.
  EXPECT_EQ(weight_in(path), 3.0f);
}

TEST(CheckpointChecksumTest, FlippedBytesInsideATensorAreCaughtNamingTheFile) {
  const fs::path run = fresh_dir("crc_flip");
  CheckpointStore store(run.string(), 3);
  const std::string older = store.save(1, weights(1.0f, 1024));
  const std::string newest = store.save(2, weights(2.0f, 1024));
  flip_tensor_bytes(newest, 2.0f);
  // Without the checksum the archive itself does not notice: the tensor reads back, wrong.
  try {
    torch::serialize::InputArchive raw;
    raw.load_from(newest);
    at::Tensor w;
    raw.read("w", w);
    EXPECT_NE(w[0].item<float>(), 2.0f);
  } catch (const c10::Error&) {
    // A libtorch that checks the zip entries' CRC-32 itself: fine, the point stands below.
  }

  try {
    CheckpointStore::load(newest, [](torch::serialize::InputArchive&) {});
    ADD_FAILURE() << "a corrupt checkpoint loaded";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(newest), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("corrupt"), std::string::npos) << e.what();
  }
  testing::internal::CaptureStderr();
  const auto latest = store.latest();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(latest, older);
  EXPECT_NE(err.find(newest), std::string::npos) << err;
  EXPECT_NE(err.find("CRC-32C"), std::string::npos) << err;
}

TEST(CheckpointChecksumTest, ACheckpointWithoutChecksumLoadsWithAWarning) {
  // What brrr wrote before it stamped checkpoints: a bare PyTorch archive.
  const fs::path run = fresh_dir("crc_legacy");
  const std::string path = (run / "legacy.pt").string();
  torch::serialize::OutputArchive archive;
  archive.write("w", torch::full({4}, 7.0f));
  archive.save_to(path);
  EXPECT_EQ(verify_checkpoint_checksum(path), ChecksumStatus::kMissing);
  testing::internal::CaptureStderr();
  EXPECT_EQ(weight_in(path), 7.0f);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("no checksum"), std::string::npos) << err;
}

TEST(CheckpointChecksumTest, ADirectoryIsNamedAsOne) {
  const fs::path run = fresh_dir("crc_dir");
  try {
    CheckpointStore::load(run.string(), [](torch::serialize::InputArchive&) {});
    ADD_FAILURE() << "loading a directory did not fail";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
}

TEST(CheckpointStoreTest, AFullDiskIsACleanErrorThatKeepsThePreviousCheckpoint) {
  // The tmp file of the next save is a link to /dev/full, whose writes fail with ENOSPC: the
  // kernel's own "No space left on device", reached through the real write path.
  const fs::path run = fresh_dir("full");
  CheckpointStore store(run.string(), 3);
  const std::string previous = store.save(1, weights(1.0f, 1 << 16));
  const std::string next = store.step_path(2);
  const fs::path tmp = fmt::format("{}.tmp.{}", next, getpid());
  fs::create_symlink("/dev/full", tmp);
  try {
    store.save(2, weights(2.0f, 1 << 16));
    ADD_FAILURE() << "a save to a full disk succeeded";
  } catch (const CheckpointError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("No space left on device"), std::string::npos) << what;
    EXPECT_NE(what.find(tmp.string()), std::string::npos) << what;
  }
  EXPECT_FALSE(fs::exists(fs::symlink_status(tmp))) << "the tmp file was left behind";
  EXPECT_FALSE(fs::exists(next));
  EXPECT_EQ(verify_checkpoint_checksum(previous), ChecksumStatus::kVerified);
  EXPECT_EQ(weight_in(previous), 1.0f);
  EXPECT_EQ(store.latest(), previous);
  // The disk has room again: the next save works.
  EXPECT_EQ(weight_in(store.save(2, weights(2.0f, 1 << 16))), 2.0f);
}

}  // namespace
}  // namespace brrr
