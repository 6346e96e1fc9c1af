#include "trainer/report/svg_plot.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "core/error.h"
#include "core/log.h"

extern char** environ;

namespace brrr {
namespace {

// Plot-area margins in pixels; the legend sits in a column right of the plot area.
constexpr double kMarginLeft = 72.0;
constexpr double kMarginTop = 40.0;
constexpr double kMarginBottom = 52.0;
constexpr double kLegendWidth = 200.0;
constexpr double kLegendRow = 18.0;
// Longer series are decimated to this many points (per-bucket min and max).
constexpr size_t kMaxPoints = 2000;
// Series with at most this many points also get a dot per point (sparse evals stay visible).
constexpr size_t kMaxMarkedPoints = 30;

struct Frame {  // pixel box of the plot area and the data range mapped onto it
  double x0, x1, y0, y1;
  double xlo, xhi, ylo, yhi;
  double px(double x) const { return x0 + (x - xlo) / (xhi - xlo) * (x1 - x0); }
  double py(double y) const {
    double v = y1 - (y - ylo) / (yhi - ylo) * (y1 - y0);
    return std::clamp(v, y0, y1);
  }
};

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

double nice_number(double range, bool round) {
  double exponent = std::floor(std::log10(range));
  double fraction = range / std::pow(10.0, exponent);
  double nice;
  if (round) {
    nice = fraction < 1.5 ? 1.0 : fraction < 3.0 ? 2.0 : fraction < 7.0 ? 5.0 : 10.0;
  } else {
    nice = fraction <= 1.0 ? 1.0 : fraction <= 2.0 ? 2.0 : fraction <= 5.0 ? 5.0 : 10.0;
  }
  return nice * std::pow(10.0, exponent);
}

// Finite (x, y) pairs of a series, decimated to at most ~kMaxPoints by keeping each bucket's min
// and max in their original order.
std::vector<std::pair<double, double>> plot_points(const PlotSeries& s) {
  std::vector<std::pair<double, double>> pts;
  for (size_t i = 0; i < s.x.size(); ++i) {
    if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) pts.emplace_back(s.x[i], s.y[i]);
  }
  if (pts.size() <= kMaxPoints) return pts;
  size_t bucket = (pts.size() + kMaxPoints / 2 - 1) / (kMaxPoints / 2);
  std::vector<std::pair<double, double>> out;
  for (size_t b = 0; b < pts.size(); b += bucket) {
    size_t e = std::min(b + bucket, pts.size());
    auto cmp = [](const auto& a, const auto& c) { return a.second < c.second; };
    size_t lo = std::min_element(pts.begin() + b, pts.begin() + e, cmp) - pts.begin();
    size_t hi = std::max_element(pts.begin() + b, pts.begin() + e, cmp) - pts.begin();
    out.push_back(pts[std::min(lo, hi)]);
    if (lo != hi) out.push_back(pts[std::max(lo, hi)]);
  }
  return out;
}

void open_svg(std::string& out, int width, int height, const std::string& title) {
  fmt::format_to(std::back_inserter(out),
                 "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
                 "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
                 "<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
                 "<text x=\"{2:.1f}\" y=\"24\" font-size=\"15\" font-weight=\"bold\">{3}</text>\n",
                 width, height, kMarginLeft, escape(title));
}

// Horizontal grid lines with y tick labels, the axis box, and the y axis title.
void draw_y_axis(std::string& out, const Frame& f, const std::vector<double>& ticks,
                 const std::string& label) {
  double step = ticks.size() > 1 ? ticks[1] - ticks[0] : 1.0;
  for (double t : ticks) {
    if (t < f.ylo - 1e-9 * step || t > f.yhi + 1e-9 * step) continue;
    double y = f.py(t);
    fmt::format_to(std::back_inserter(out),
                   "<line x1=\"{0:.1f}\" y1=\"{2:.1f}\" x2=\"{1:.1f}\" y2=\"{2:.1f}\" "
                   "stroke=\"#e3e3e3\"/>\n<text x=\"{3:.1f}\" y=\"{4:.1f}\" "
                   "text-anchor=\"end\">{5}</text>\n",
                   f.x0, f.x1, y, f.x0 - 6, y + 4, escape(format_tick(t, step)));
  }
  fmt::format_to(std::back_inserter(out),
                 "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" "
                 "stroke=\"#555\"/>\n<text transform=\"translate(16,{:.1f}) rotate(-90)\" "
                 "text-anchor=\"middle\">{}</text>\n",
                 f.x0, f.y0, f.x1 - f.x0, f.y1 - f.y0, (f.y0 + f.y1) / 2, escape(label));
}

void draw_legend_entry(std::string& out, double x, double y, const std::string& color, bool dashed,
                       bool box, const std::string& label) {
  if (box) {
    fmt::format_to(std::back_inserter(out),
                   "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"22\" height=\"10\" fill=\"{}\"/>\n", x,
                   y - 9, color);
  } else {
    fmt::format_to(
        std::back_inserter(out),
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"{3}\" "
        "stroke-width=\"2\"{4}/>\n",
        x, y - 4, x + 22, color, dashed ? " stroke-dasharray=\"6 4\"" : "");
  }
  fmt::format_to(std::back_inserter(out), "<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n", x + 28, y,
                 escape(label));
}

}  // namespace

std::string plot_color(int index) {
  // Okabe-Ito: distinguishable with the common colour-vision deficiencies.
  static const char* kPalette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                   "#E69F00", "#56B4E9", "#000000", "#F0E442"};
  constexpr int n = sizeof(kPalette) / sizeof(kPalette[0]);
  return kPalette[((index % n) + n) % n];
}

std::vector<double> nice_ticks(double lo, double hi, int target_count) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) {
    throw Error(fmt::format("nice_ticks: non-finite range [{}, {}]", lo, hi));
  }
  if (lo > hi) std::swap(lo, hi);
  if (hi - lo <= 1e-12 * std::max(1.0, std::abs(hi))) {  // flat data: widen around it
    double pad = lo == 0.0 ? 1.0 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  target_count = std::max(target_count, 2);
  double step = nice_number(nice_number(hi - lo, false) / (target_count - 1), true);
  double start = std::floor(lo / step) * step;
  int count = static_cast<int>(std::ceil(hi / step - 1e-9) - std::floor(lo / step) + 0.5);
  std::vector<double> ticks;
  for (int i = 0; i <= count; ++i) {
    double t = start + i * step;
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);  // no "-0" or 1e-17 ticks
  }
  return ticks;
}

std::string format_tick(double value, double step) {
  if (std::abs(value) < std::abs(step) * 1e-6) return "0";
  step = std::abs(step);
  if (step >= 1e-6 && std::abs(value) < 1e6) {  // fixed decimals: labels of one axis align
    int decimals = step >= 1.0 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
    return fmt::format("{:.{}f}", value, decimals);
  }
  int digits =
      static_cast<int>(std::floor(std::log10(std::abs(value))) - std::floor(std::log10(step)) + 1);
  return fmt::format("{:.{}g}", value, std::clamp(digits, 1, 6));
}

std::string render_svg(const LinePlot& plot) {
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin;
  double ymin = xmin, ymax = -xmin;
  std::vector<std::vector<std::pair<double, double>>> points;
  for (const PlotSeries& s : plot.series) {
    if (s.x.size() != s.y.size()) {
      throw Error(fmt::format("plot '{}': series '{}' has {} x values but {} y values", plot.title,
                              s.label, s.x.size(), s.y.size()));
    }
    points.push_back(plot_points(s));
    for (const auto& [x, y] : points.back()) {
      xmin = std::min(xmin, x), xmax = std::max(xmax, x);
      ymin = std::min(ymin, y), ymax = std::max(ymax, y);
    }
  }
  if (!std::isfinite(xmin)) xmin = 0.0, xmax = 1.0, ymin = 0.0, ymax = 1.0;  // no data at all
  if (plot.y_min) ymin = *plot.y_min;
  if (plot.y_max) ymax = *plot.y_max;
  std::vector<double> xt = nice_ticks(xmin, xmax);
  std::vector<double> yt = nice_ticks(ymin, ymax);
  Frame f{kMarginLeft,
          plot.width - kLegendWidth,
          kMarginTop,
          plot.height - kMarginBottom,
          xt.front(),
          xt.back(),
          plot.y_min.value_or(yt.front()),
          plot.y_max.value_or(yt.back())};

  std::string out;
  open_svg(out, plot.width, plot.height, plot.title);
  draw_y_axis(out, f, yt, plot.y_label);
  double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1.0;
  for (double t : xt) {
    fmt::format_to(std::back_inserter(out),
                   "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", f.px(t),
                   f.y1 + 16, escape(format_tick(t, xstep)));
  }
  fmt::format_to(std::back_inserter(out),
                 "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
                 (f.x0 + f.x1) / 2, f.y1 + 38, escape(plot.x_label));

  for (size_t i = 0; i < plot.series.size(); ++i) {
    const PlotSeries& s = plot.series[i];
    std::string color = plot_color(s.color);
    std::string pts;
    for (const auto& [x, y] : points[i]) {
      fmt::format_to(std::back_inserter(pts), "{}{:.1f},{:.1f}", pts.empty() ? "" : " ", f.px(x),
                     f.py(y));
    }
    if (s.fill && !points[i].empty()) {
      fmt::format_to(std::back_inserter(out),
                     "<polygon class=\"area\" points=\"{:.1f},{:.1f} {} {:.1f},{:.1f}\" "
                     "fill=\"{}\" fill-opacity=\"0.15\" stroke=\"none\"/>\n",
                     f.px(points[i].front().first), f.y1, pts, f.px(points[i].back().first), f.y1,
                     color);
    }
    fmt::format_to(std::back_inserter(out),
                   "<polyline class=\"series\" data-label=\"{}\" points=\"{}\" fill=\"none\" "
                   "stroke=\"{}\" stroke-width=\"1.8\" stroke-linejoin=\"round\"{}/>\n",
                   escape(s.label), pts, color, s.dashed ? " stroke-dasharray=\"6 4\"" : "");
    if (points[i].size() <= kMaxMarkedPoints) {
      for (const auto& [x, y] : points[i]) {
        fmt::format_to(std::back_inserter(out),
                       "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"{}\"/>\n", f.px(x),
                       f.py(y), color);
      }
    }
    draw_legend_entry(out, f.x1 + 14, f.y0 + 10 + kLegendRow * i, color, s.dashed, false, s.label);
  }
  out += "</svg>\n";
  return out;
}

std::string render_svg(const StackedBarPlot& plot) {
  if (plot.values.size() != plot.bars.size()) {
    throw Error(fmt::format("plot '{}': {} bars but {} rows of values", plot.title,
                            plot.bars.size(), plot.values.size()));
  }
  double top = 0.0;
  std::vector<double> totals;
  for (size_t b = 0; b < plot.values.size(); ++b) {
    if (plot.values[b].size() != plot.segments.size()) {
      throw Error(fmt::format("plot '{}': bar '{}' has {} values for {} segments", plot.title,
                              plot.bars[b], plot.values[b].size(), plot.segments.size()));
    }
    double total = 0.0;
    for (size_t k = 0; k < plot.segments.size(); ++k) {
      double v = plot.values[b][k];
      if (!std::isfinite(v) || v < 0.0) {
        throw Error(
            fmt::format("plot '{}': bar '{}' segment '{}' has value {} (must be finite "
                        "and >= 0)",
                        plot.title, plot.bars[b], plot.segments[k], v));
      }
      total += v;
    }
    totals.push_back(total);
    top = std::max(top, total);
  }
  std::vector<double> yt = nice_ticks(0.0, top > 0.0 ? top * 1.08 : 1.0);  // room for totals
  Frame f{kMarginLeft, plot.width - kLegendWidth,
          kMarginTop,  plot.height - kMarginBottom,
          0.0,         1.0,
          0.0,         yt.back()};

  std::string out;
  open_svg(out, plot.width, plot.height, plot.title);
  draw_y_axis(out, f, yt, plot.y_label);
  double slot = (f.x1 - f.x0) / std::max<size_t>(plot.bars.size(), 1);
  double bar_width = std::min(90.0, slot * 0.6);
  for (size_t b = 0; b < plot.bars.size(); ++b) {
    double x = f.x0 + slot * (b + 0.5) - bar_width / 2;
    double base = 0.0;
    for (size_t k = 0; k < plot.segments.size(); ++k) {
      double v = plot.values[b][k];
      fmt::format_to(std::back_inserter(out),
                     "<rect class=\"segment\" data-label=\"{}\" x=\"{:.1f}\" y=\"{:.1f}\" "
                     "width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"><title>{}: {:.2f}</title>"
                     "</rect>\n",
                     escape(plot.segments[k]), x, f.py(base + v), bar_width,
                     f.py(base) - f.py(base + v), plot_color(static_cast<int>(k)),
                     escape(plot.segments[k]), v);
      base += v;
    }
    fmt::format_to(std::back_inserter(out),
                   "<text x=\"{0:.1f}\" y=\"{1:.1f}\" text-anchor=\"middle\">{2:.2f}</text>\n"
                   "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
                   x + bar_width / 2, f.py(totals[b]) - 5, totals[b], f.y1 + 18,
                   escape(plot.bars[b]));
  }
  for (size_t k = 0; k < plot.segments.size(); ++k) {
    draw_legend_entry(out, f.x1 + 14, f.y0 + 10 + kLegendRow * k, plot_color(static_cast<int>(k)),
                      false, true, plot.segments[k]);
  }
  out += "</svg>\n";
  return out;
}

namespace {

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  std::string dirs = path;
  size_t begin = 0;
  while (begin <= dirs.size()) {
    size_t end = dirs.find(':', begin);
    if (end == std::string::npos) end = dirs.size();
    std::string candidate = dirs.substr(begin, end - begin) + "/" + name;
    if (end > begin && access(candidate.c_str(), X_OK) == 0) return candidate;
    begin = end + 1;
  }
  return "";
}

// Runs argv[0] with stdout/stderr discarded; returns its exit status (-1 when it did not run).
int run_quietly(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

bool save_plot(const std::string& svg, const std::string& svg_path) {
  {
    std::ofstream file(svg_path, std::ios::binary | std::ios::trunc);
    file << svg;
    if (!file) throw Error(fmt::format("cannot write plot '{}'", svg_path));
  }
  std::filesystem::path png = std::filesystem::path(svg_path).replace_extension(".png");
  std::vector<std::vector<std::string>> commands;
  if (std::string exe = find_on_path("rsvg-convert"); !exe.empty()) {
    commands.push_back({exe, "-b", "white", "-o", png.string(), svg_path});
  }
  for (const char* name : {"magick", "convert"}) {
    if (std::string exe = find_on_path(name); !exe.empty()) {
      commands.push_back({exe, svg_path, png.string()});
    }
  }
  for (const auto& command : commands) {
    int rc = run_quietly(command);
    std::error_code ec;
    if (rc == 0 && std::filesystem::file_size(png, ec) > 0 && !ec) return true;
    log::debug("plot: '{}' did not convert {} to PNG (exit {})", command[0], svg_path, rc);
    std::filesystem::remove(png, ec);
  }
  if (commands.empty()) log::debug("plot: no rsvg-convert or ImageMagick on PATH; SVG only");
  return false;
}

}  // namespace brrr
