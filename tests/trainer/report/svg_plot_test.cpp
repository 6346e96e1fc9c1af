#include "trainer/report/svg_plot.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/test_fs.h"

namespace fs = std::filesystem;

namespace {

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

// The `points` attribute of every <polyline>, in order.
// The points="..." of every <polyline>. Plain searching, not std::regex: libstdc++'s regex
// recurses once per character of a match, which overflows the stack on a 20,000-character
// points list (seen under AddressSanitizer, whose frames are larger).
std::vector<std::string> polyline_points(const std::string& svg) {
  std::vector<std::string> out;
  for (size_t at = svg.find("<polyline"); at != std::string::npos;
       at = svg.find("<polyline", at + 1)) {
    const size_t end_tag = svg.find('>', at);
    const size_t key = svg.find(" points=\"", at);
    if (key == std::string::npos || key > end_tag) continue;
    const size_t begin = key + 9;
    out.push_back(svg.substr(begin, svg.find('"', begin) - begin));
  }
  return out;
}

brrr::PlotSeries series(std::string label, std::vector<double> x, std::vector<double> y) {
  brrr::PlotSeries s;
  s.label = std::move(label);
  s.x = std::move(x);
  s.y = std::move(y);
  return s;
}

}  // namespace

TEST(SvgPlotTest, NiceTicksCoverTheRangeWithRoundSteps) {
  EXPECT_EQ(brrr::nice_ticks(0.13, 9.7), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(brrr::nice_ticks(10, 1000), (std::vector<double>{0, 200, 400, 600, 800, 1000}));
  std::vector<double> t = brrr::nice_ticks(0.000031, 0.000298);
  ASSERT_GE(t.size(), 3u);
  EXPECT_LE(t.front(), 0.000031);
  EXPECT_GE(t.back(), 0.000298);
  double step = t[1] - t[0];
  double mantissa = step / std::pow(10.0, std::floor(std::log10(step)));
  EXPECT_TRUE(std::abs(mantissa - 1) < 1e-9 || std::abs(mantissa - 2) < 1e-9 ||
              std::abs(mantissa - 5) < 1e-9)
      << step;
}

TEST(SvgPlotTest, NiceTicksWidenAFlatRange) {
  std::vector<double> t = brrr::nice_ticks(5.0, 5.0);
  ASSERT_GE(t.size(), 2u);
  EXPECT_LT(t.front(), 5.0);
  EXPECT_GT(t.back(), 5.0);
}

TEST(SvgPlotTest, FormatsTicksWithTheDigitsTheStepNeeds) {
  EXPECT_EQ(brrr::format_tick(0.4, 0.2), "0.4");
  EXPECT_EQ(brrr::format_tick(0.05, 0.05), "0.05");
  EXPECT_EQ(brrr::format_tick(1000, 200), "1000");
  EXPECT_EQ(brrr::format_tick(1e-17, 0.1), "0");
  EXPECT_EQ(brrr::format_tick(0.00035, 0.00005), "0.00035");
  EXPECT_EQ(brrr::format_tick(0.0001, 0.00005), "0.00010");  // same decimals on one axis
  EXPECT_EQ(brrr::format_tick(2e6, 5e5), "2e+06");
}

TEST(SvgPlotTest, MapsDataCornersToThePlotAreaCorners) {
  brrr::LinePlot plot;
  plot.series.push_back(series("diag", {0, 10}, {0, 10}));
  std::string svg = brrr::render_svg(plot);
  // Ticks 0..10 on both axes; plot area x 72..560 (width 760 - legend 200), y 40..328.
  EXPECT_EQ(polyline_points(svg), (std::vector<std::string>{"72.0,328.0 560.0,40.0"}));
}

TEST(SvgPlotTest, DrawsEverySeriesWithLegendAndDashedOverlay) {
  brrr::LinePlot plot{"Loss", "step", "loss"};
  plot.series.push_back(series("baseline: train loss", {1, 2, 3}, {3, 2, 1}));
  auto tuned = series("tuned: train loss", {1, 2, 3}, {2.5, 1.5, 0.5});
  tuned.dashed = true;
  plot.series.push_back(tuned);
  std::string svg = brrr::render_svg(plot);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(count(svg, "<polyline class=\"series\""), 2);
  std::regex dashed("<polyline[^>]*data-label=\"tuned: train loss\"[^>]*stroke-dasharray");
  EXPECT_TRUE(std::regex_search(svg, dashed));
  std::regex solid("<polyline[^>]*data-label=\"baseline: train loss\"[^>]*stroke-dasharray");
  EXPECT_FALSE(std::regex_search(svg, solid));
  EXPECT_EQ(count(svg, ">baseline: train loss</text>"), 1);  // legend entry
  EXPECT_EQ(count(svg, ">Loss</text>"), 1);
}

TEST(SvgPlotTest, EscapesTextAndSkipsNonFinitePoints) {
  brrr::LinePlot plot{"a<b & \"c\"", "x", "y"};
  double nan = std::numeric_limits<double>::quiet_NaN();
  plot.series.push_back(series("s<1>", {0, 1, 2, 3}, {1, nan, 2, 3}));
  std::string svg = brrr::render_svg(plot);
  EXPECT_NE(svg.find("a&lt;b &amp; &quot;c&quot;"), std::string::npos);
  EXPECT_EQ(svg.find("s<1>"), std::string::npos);
  std::vector<std::string> pts = polyline_points(svg);
  ASSERT_EQ(pts.size(), 1u);
  EXPECT_EQ(count(pts[0], ","), 3);  // NaN point dropped
}

TEST(SvgPlotTest, DecimatesLongSeriesKeepingTheSawtooth) {
  brrr::PlotSeries s;
  for (int i = 0; i < 100000; ++i) {
    s.x.push_back(i * 0.1);
    s.y.push_back(i % 4 < 2 ? 0.0 : 100.0);
  }
  brrr::LinePlot plot;
  plot.y_min = 0.0;
  plot.y_max = 100.0;
  plot.series.push_back(s);
  std::string svg = brrr::render_svg(plot);
  std::vector<std::string> pts = polyline_points(svg);
  ASSERT_EQ(pts.size(), 1u);
  int n = count(pts[0], ",");
  EXPECT_LE(n, 2100);
  EXPECT_GE(n, 1000);
  EXPECT_GE(count(pts[0], ",40.0"), n / 3);   // util 100 at the top
  EXPECT_GE(count(pts[0], ",328.0"), n / 3);  // util 0 at the bottom
  EXPECT_LT(svg.size(), 100000u);
}

TEST(SvgPlotTest, RejectsSeriesOfDifferentLengths) {
  brrr::LinePlot plot;
  plot.series.push_back(series("bad", {1, 2, 3}, {1, 2}));
  EXPECT_THROW(brrr::render_svg(plot), brrr::Error);
}

TEST(SvgPlotTest, StacksBarSegmentsInProportion) {
  brrr::StackedBarPlot plot{
      "Breakdown", "ms", {"base", "tuned"}, {"data_wait", "forward"}, {{1.0, 3.0}, {2.0, 2.0}}};
  std::string svg = brrr::render_svg(plot);
  std::regex re("<rect class=\"segment\" data-label=\"([a-z_]+)\"[^>]* height=\"([0-9.]+)\"");
  std::vector<std::pair<std::string, double>> rects;
  for (std::sregex_iterator it(svg.begin(), svg.end(), re), end; it != end; ++it) {
    rects.emplace_back((*it)[1], std::stod((*it)[2]));
  }
  ASSERT_EQ(rects.size(), 4u);
  EXPECT_EQ(rects[0].first, "data_wait");
  EXPECT_EQ(rects[1].first, "forward");
  // Axis 0..5 over 288 px: 57.6 px per ms.
  EXPECT_NEAR(rects[0].second, 57.6, 0.11);
  EXPECT_NEAR(rects[1].second, 172.8, 0.11);
  EXPECT_NEAR(rects[2].second, 115.2, 0.11);
  EXPECT_NEAR(rects[3].second, 115.2, 0.11);
  EXPECT_NE(svg.find(">4.00</text>"), std::string::npos);  // totals above the bars
}

TEST(SvgPlotTest, RejectsBadBarValues) {
  brrr::StackedBarPlot negative{"B", "ms", {"a"}, {"x"}, {{-1.0}}};
  EXPECT_THROW(brrr::render_svg(negative), brrr::Error);
  brrr::StackedBarPlot ragged{"B", "ms", {"a"}, {"x", "y"}, {{1.0}}};
  EXPECT_THROW(brrr::render_svg(ragged), brrr::Error);
}

TEST(SvgPlotTest, SavesSvgAndPngOnlyWhenAConverterSucceeds) {
  fs::path dir = fs::temp_directory_path() / ("brrr_svg_plot_test_" + std::to_string(getpid()));
  brrr::test::remove_tree(dir);
  fs::create_directories(dir);
  brrr::LinePlot plot{"t", "x", "y"};
  plot.series.push_back(series("s", {0, 1}, {0, 1}));
  std::string svg = brrr::render_svg(plot);
  bool png = brrr::save_plot(svg, (dir / "p.svg").string());
  std::ifstream in(dir / "p.svg");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), svg);
  EXPECT_EQ(png, fs::exists(dir / "p.png"));  // no half-written PNG is left behind
  if (png) {
    std::ifstream p(dir / "p.png", std::ios::binary);
    char magic[4] = {};
    p.read(magic, 4);
    EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  }
  EXPECT_THROW(brrr::save_plot(svg, (dir / "missing" / "p.svg").string()), brrr::Error);
  if (!HasFailure()) brrr::test::remove_tree(dir);
}
