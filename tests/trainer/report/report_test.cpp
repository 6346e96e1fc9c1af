#include "trainer/report/report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "core/error.h"
#include "tests/test_fs.h"

namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = fs::path(BRRR_SOURCE_DIR) / "tests" / "trainer" / "fixtures";

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

// Scratch space of this test process; removed at the end of a passing test.
fs::path test_root() {
  return fs::temp_directory_path() / ("brrr_report_test_" + std::to_string(getpid()));
}

fs::path fresh_dir(const std::string& name) {
  fs::path dir = test_root() / name;
  brrr::test::remove_tree(dir);
  fs::create_directories(dir);
  return dir;
}

// The section of report.md from `heading` to the next heading of the same or higher level.
std::string section(const std::string& md, const std::string& heading) {
  size_t begin = md.find(heading);
  if (begin == std::string::npos) return "";
  size_t end = md.find("\n#", begin + heading.size());
  return md.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

}  // namespace

TEST(ReportTest, OverlaysTwoRecordedRuns) {
  fs::path out = fresh_dir("overlay");
  ASSERT_EQ(
      brrr::run_report({(kFixtures / "run_baseline").string(), (kFixtures / "run_tuned").string()},
                       out.string()),
      0);
  const char* plots[] = {"loss.svg",     "metric.svg",    "lr.svg",
                         "gpu_util.svg", "breakdown.svg", "throughput.svg"};
  std::string html = read(out / "report.html");
  for (const char* plot : plots) {
    std::string svg = read(out / plot);
    ASSERT_FALSE(svg.empty()) << plot;
    EXPECT_EQ(svg.rfind("<svg ", 0), 0u) << plot;
    EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n") << plot;
    EXPECT_NE(html.find(svg), std::string::npos) << plot << " is not inlined in report.html";
  }
  // A real XML parser accepts every SVG.
  std::string cmd = std::string(BRRR_PYTHON) +
                    " -c \"import sys, xml.dom.minidom as m; [m.parse(p) for p in sys.argv[1:]]\"";
  for (const char* plot : plots) cmd += fmt::format(" {}", (out / plot).string());
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;

  // Every line plot has one polyline per run and quantity; the second run is dashed.
  std::string loss = read(out / "loss.svg");
  EXPECT_EQ(count(loss, "<polyline class=\"series\""), 4);
  for (const char* label : {"run_baseline: train loss", "run_baseline: eval loss",
                            "run_tuned: train loss", "run_tuned: eval loss"}) {
    EXPECT_NE(loss.find(std::string("data-label=\"") + label + "\""), std::string::npos) << label;
  }
  EXPECT_TRUE(std::regex_search(
      loss, std::regex("data-label=\"run_tuned: train loss\"[^>]*stroke-dasharray")));
  EXPECT_EQ(count(read(out / "gpu_util.svg"), "<polyline class=\"series\""), 2);
  EXPECT_EQ(count(read(out / "metric.svg"), "data-label=\"run_tuned: val_accuracy\""), 1);
  std::string breakdown = read(out / "breakdown.svg");
  EXPECT_EQ(count(breakdown, "<rect class=\"segment\""), 12);     // 2 runs x 6 phases
  EXPECT_NE(breakdown.find(">42.00</text>"), std::string::npos);  // baseline: 17.2+3.1+...+0.8

  // The table matches the fixtures: the baseline's summary record, and for the tuned run (whose
  // summary has no GPU numbers) its gpu.jsonl: 6 samples at 70%, 34 at 96% -> mean 92.1, p10 70.
  std::string md = read(out / "report.md");
  EXPECT_NE(md.find("|  | run_baseline | run_tuned |"), std::string::npos) << md;
  EXPECT_NE(md.find("| steps | 100 | 100 |"), std::string::npos);
  EXPECT_NE(md.find("| time (s) | 4.2 | 1.6 |"), std::string::npos);
  EXPECT_NE(md.find("| samples/s | 1523.8 | 4062.5 |"), std::string::npos);
  EXPECT_NE(md.find("| data wait | 41.0% | 1.2% |"), std::string::npos);
  EXPECT_NE(md.find("| GPU util mean / p10 | 45.0% / 0.0% | 92.1% / 70.0% |"), std::string::npos);
  EXPECT_NE(md.find("| peak memory (MiB) | 31000 | 56000 |"), std::string::npos);
  EXPECT_NE(md.find("| GPU memory used | 23.0% | 40.0% |"), std::string::npos);
  EXPECT_NE(md.find("| precision | fp32 | bf16 |"), std::string::npos);
  EXPECT_NE(md.find("| final val_accuracy | 0.8000 | 0.8200 |"), std::string::npos);
  EXPECT_EQ(md.find("tokens/s"), std::string::npos);  // not an LM run

  // The doctor: the starved baseline gets its findings, the tuned run a single all-clear line.
  std::string baseline = section(md, "### run_baseline");
  for (const char* key :
       {"`data.num_workers`", "`data.pin_memory`", "`train.precision`", "`data.batch_size`"}) {
    EXPECT_NE(baseline.find(key), std::string::npos) << key << " in\n" << baseline;
  }
  EXPECT_NE(baseline.find("waited for data 41% of the time"), std::string::npos);
  EXPECT_NE(baseline.find("with a p10 of 0%"), std::string::npos);
  EXPECT_NE(baseline.find("host syncs per step: 3"), std::string::npos);
  EXPECT_EQ(section(md, "### run_tuned").find("- no problems found"), 15u);
  EXPECT_EQ(count(md, "no problems found"), 1);
  EXPECT_EQ(count(md, "config of run_"), 2);
  for (const char* plot : plots)
    EXPECT_NE(md.find(std::string("](") + plot + ")"), std::string::npos);
  if (!HasFailure()) brrr::test::remove_tree(test_root());  // kept for inspection on failure
}

TEST(ReportTest, SingleRunWithoutGpuFileSkipsTheUtilisationPlot) {
  fs::path run = fresh_dir("single") / "run_cpu";
  fs::copy(kFixtures / "run_cpu", run);
  ASSERT_EQ(brrr::run_report({run.string()}), 0);
  fs::path out = run / "report";  // the default output folder
  ASSERT_TRUE(fs::exists(out / "report.md"));
  ASSERT_TRUE(fs::exists(out / "report.html"));
  EXPECT_FALSE(fs::exists(out / "gpu_util.svg"));
  std::string md = read(out / "report.md");
  EXPECT_NE(md.find("run_cpu: no gpu.jsonl"), std::string::npos) << md;
  EXPECT_NE(md.find("| tokens/s | 10752 |"), std::string::npos);
  EXPECT_NE(md.find("| GPU util mean / p10 | — |"), std::string::npos);
  EXPECT_NE(md.find("| final val_ppl | 13.4600 |"), std::string::npos);
  EXPECT_NE(md.find("num_workers 0: data is loaded in the training process"), std::string::npos);
  // One run: no name prefixes, and the breakdown holds the four host-clock phases only.
  std::string metric = read(out / "metric.svg");
  EXPECT_NE(metric.find("data-label=\"val_ppl\""), std::string::npos);
  EXPECT_EQ(count(read(out / "breakdown.svg"), "<rect class=\"segment\""), 4);
  if (!HasFailure()) brrr::test::remove_tree(test_root());  // kept for inspection on failure
}

TEST(ReportTest, MissingMetricsIsAnErrorNamingThePath) {
  fs::path run = fresh_dir("empty_run");
  try {
    brrr::run_report({run.string()});
    FAIL() << "expected brrr::Error";
  } catch (const brrr::Error& e) {
    EXPECT_NE(std::string(e.what()).find((run / "metrics.jsonl").string()), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(run / "report"));
  if (!HasFailure()) brrr::test::remove_tree(test_root());  // kept for inspection on failure
}
