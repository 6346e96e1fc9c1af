// The console progress line: pure formatting, the plain (non-terminal) mode, and the in-place
// redraw protocol on a terminal (erase before a log line, redraw after).
#include "trainer/observe/progress.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>

namespace brrr {
namespace {

TEST(ProgressFormatTest, DurationUsesTwoUnits) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(45.4), "45s");
  EXPECT_EQ(format_duration(59.6), "1m00s");
  EXPECT_EQ(format_duration(134), "2m14s");
  EXPECT_EQ(format_duration(3599), "59m59s");
  EXPECT_EQ(format_duration(3720), "1h02m");
  EXPECT_EQ(format_duration(90061), "1d01h");
  EXPECT_EQ(format_duration(-1), "?");
  EXPECT_EQ(format_duration(std::nan("")), "?");
  EXPECT_EQ(format_duration(INFINITY), "?");
}

TEST(ProgressFormatTest, ThousandsSeparators) {
  EXPECT_EQ(format_thousands(0), "0");
  EXPECT_EQ(format_thousands(999.4), "999");
  EXPECT_EQ(format_thousands(999.6), "1,000");
  EXPECT_EQ(format_thousands(5120.4), "5,120");
  EXPECT_EQ(format_thousands(123456), "123,456");
  EXPECT_EQ(format_thousands(1234567.8), "1,234,568");
  EXPECT_EQ(format_thousands(-1234567), "-1,234,567");
}

TEST(ProgressFormatTest, LearningRateIsScientific) {
  EXPECT_EQ(format_lr(3e-4), "3.0e-04");
  EXPECT_EQ(format_lr(0.00025), "2.5e-04");
  EXPECT_EQ(format_lr(1.0), "1.0e+00");
  EXPECT_EQ(format_lr(0.0), "0.0e+00");
}

TEST(ProgressFormatTest, FullLineMatchesTheDocumentedLayout) {
  ProgressStats s;
  s.step = 120;
  s.loss = 0.41234;
  s.lr = 3e-4;
  s.samples_per_s = 5120.2;
  s.data_wait_pct = 3.2;
  EXPECT_EQ(
      format_progress_line(s, 1000, 134.0),
      "step 120/1000 | loss 0.4123 | lr 3.0e-04 | 5,120 samples/s | data-wait 3% | ETA 2m14s");
}

TEST(ProgressFormatTest, AbsentFieldsAreLeftOut) {
  ProgressStats s;
  s.step = 7;
  s.tokens_per_s = 1.5e6;
  EXPECT_EQ(format_progress_line(s, 0, std::nullopt), "step 7 | 1,500,000 tokens/s");
}

TEST(ProgressLineTest, PlainModeWritesLogLines) {
  ProgressLine line(ProgressOptions{100, 0, ProgressMode::kPlain, 0});
  EXPECT_FALSE(line.is_terminal());
  ProgressStats s;
  s.step = 10;
  s.loss = 1.5;
  testing::internal::CaptureStderr();
  line.update(s);
  line.clear();  // nothing drawn in place: writes nothing
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("INFO"), std::string::npos) << err;
  EXPECT_NE(err.find("step 10/100 | loss 1.5000"), std::string::npos) << err;
  EXPECT_EQ(err.find('\r'), std::string::npos) << err;
  EXPECT_EQ(err.back(), '\n');
}

TEST(ProgressLineTest, TerminalModeRedrawsInPlaceAndClearsAroundLogLines) {
  ProgressLine line(ProgressOptions{100, 0, ProgressMode::kTerminal, 200});
  ProgressStats s;
  s.step = 5;
  s.loss = 2.0;
  testing::internal::CaptureStderr();
  line.update(s);
  const std::string text = line.last_text();
  line.log(log::Level::kWarn, "checkpoint saved");
  line.clear();
  line.clear();  // already erased: no second erase
  const std::string err = testing::internal::GetCapturedStderr();

  const std::string erase = "\r\033[K";
  const size_t drawn = err.find("\r" + text + "\033[K");
  ASSERT_EQ(drawn, 0u) << err;
  const size_t erased = err.find(erase, drawn + 1);
  const size_t logged = err.find("WARN  checkpoint saved\n");
  const size_t redrawn = err.find(text + "\033[K", logged);
  ASSERT_NE(erased, std::string::npos) << err;
  ASSERT_NE(logged, std::string::npos) << err;
  ASSERT_NE(redrawn, std::string::npos) << err;
  EXPECT_LT(erased, logged);                         // the log line starts on a clean line...
  EXPECT_EQ(err.rfind('\n', redrawn), redrawn - 1);  // ...and the line is redrawn below it
  EXPECT_EQ(err.substr(err.size() - erase.size()), erase);
  EXPECT_EQ(err.find(erase, redrawn), err.size() - erase.size());  // cleared exactly once
}

TEST(ProgressLineTest, TerminalLineIsCutToTheWidth) {
  ProgressLine line(ProgressOptions{1000, 0, ProgressMode::kTerminal, 20});
  ProgressStats s;
  s.step = 120;
  s.loss = 0.5;
  s.lr = 1e-3;
  testing::internal::CaptureStderr();
  line.update(s);
  line.finish();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, fmt::format("\r{}\033[K\n", line.last_text().substr(0, 19)));
  EXPECT_GT(line.last_text().size(), 19u);
}

TEST(ProgressLineTest, EtaFollowsTheMeasuredPace) {
  ProgressLine line(ProgressOptions{100010, 0, ProgressMode::kPlain, 0});
  ProgressStats s;
  s.step = 10;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  testing::internal::CaptureStderr();
  line.update(s);
  testing::internal::GetCapturedStderr();
  // >= 10 ms per step measured, 100000 steps left: at least 1000 s = 16m40s.
  const std::string text = line.last_text();
  const size_t at = text.find("ETA ");
  ASSERT_NE(at, std::string::npos) << text;
  const std::string eta = text.substr(at + 4);
  int minutes = 0, seconds = 0, hours = 0;
  if (std::sscanf(eta.c_str(), "%dm%ds", &minutes, &seconds) != 2) {
    ASSERT_EQ(std::sscanf(eta.c_str(), "%dh%dm", &hours, &minutes), 2) << eta;
  }
  EXPECT_GE(hours * 3600 + minutes * 60 + seconds, 1000) << eta;
  EXPECT_LT(hours * 3600 + minutes * 60 + seconds, 6 * 3600) << eta;
}

}  // namespace
}  // namespace brrr
