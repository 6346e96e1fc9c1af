// The logger's live line: a line written by log::info while a progress line is shown erases it,
// prints, and redraws it, so nothing tears the progress line on a terminal.
#include "core/log.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>

namespace brrr {
namespace {

// What `fn` writes to stderr (file descriptor 2 pointed at a temporary file meanwhile).
std::string captured_stderr(const std::function<void()>& fn) {
  std::fflush(stderr);
  char path[] = "/tmp/brrr_log_test_XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  const int saved = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  fn();
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(fd);
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  unlink(path);
  return text.str();
}

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = log::level();
    log::set_level(log::Level::kInfo);
  }
  void TearDown() override { log::set_level(saved_); }
  log::Level saved_ = log::Level::kInfo;
};

TEST_F(LogTest, LiveLineIsErasedAndRedrawnAroundEveryLogLine) {
  const std::string out = captured_stderr([] {
    log::set_live_line("step 10 | loss 2.5");
    log::info("checkpoint {}", "saved");
    log::set_live_line("step 20 | loss 2.1");
    log::end_live_line();
    log::info("done");
  });
  const std::string stamp = R"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3})";
  const std::regex want(
      "\\rstep 10 \\| loss 2\\.5\\x1b\\[K"  // drawn
      "\\r\\x1b\\[K" +
      stamp +
      " INFO  checkpoint saved\\n"          // erased, the log line
      "step 10 \\| loss 2\\.5\\x1b\\[K"     // redrawn below it
      "\\rstep 20 \\| loss 2\\.1\\x1b\\[K"  // replaced
      "\\n"                                 // ended: stays on screen
      + stamp + " INFO  done\\n");          // no live line left to redraw
  EXPECT_TRUE(std::regex_match(out, want)) << "got: " << ::testing::PrintToString(out);
}

TEST_F(LogTest, ClearedLiveLineIsNotRedrawn) {
  const std::string out = captured_stderr([] {
    log::set_live_line("eval 3/20");
    log::clear_live_line();
    log::clear_live_line();  // nothing shown: no output
    log::warn("w");
  });
  EXPECT_EQ(out.substr(0, std::string("\reval 3/20\x1b[K\r\x1b[K").size()),
            "\reval 3/20\x1b[K\r\x1b[K");
  EXPECT_EQ(out.find("eval", 5), std::string::npos) << ::testing::PrintToString(out);
  EXPECT_NE(out.find(" WARN  w\n"), std::string::npos);
}

}  // namespace
}  // namespace brrr
