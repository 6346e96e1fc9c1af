#pragma once
// Small hand-written SVG charts for `trainer report`: line/area charts with several series (a
// second run overlaid with a dashed stroke) and stacked bar charts, with "nice" axis ticks, axis
// labels and a legend. The output is plain SVG 1.1 text that browsers and Markdown viewers show.
//
// Invariants: every series is one <polyline class="series" data-label="..."> (plus a <polygon> for
// filled areas), every bar segment one <rect class="segment" data-label="...">; text is
// XML-escaped; non-finite points are skipped. Very long series are decimated to per-bucket min/max
// pairs, so a utilisation sawtooth stays visible while the file stays small.
#include <optional>
#include <string>
#include <vector>

namespace brrr {

/// One line of a LinePlot. x and y have the same length.
struct PlotSeries {
  /// Legend text, e.g. "baseline: train loss".
  std::string label;
  std::vector<double> x;
  std::vector<double> y;
  /// Palette index: one colour per quantity, so two runs of the same quantity share it.
  int color = 0;
  /// Dashed stroke (the second run of an overlay).
  bool dashed = false;
  /// Fill the area between the line and the bottom of the plot (translucent).
  bool fill = false;
};

/// A line (or area) chart.
struct LinePlot {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<PlotSeries> series;
  /// Fixed y range ends (e.g. 0 and 100 for a utilisation); unset ends follow the data.
  std::optional<double> y_min;
  std::optional<double> y_max;
  /// Picture size in pixels.
  int width = 760;
  int height = 380;
};

/// A stacked bar chart: one bar per category, each made of the same named segments.
struct StackedBarPlot {
  std::string title;
  std::string y_label;
  /// Bar names (x axis), e.g. run names.
  std::vector<std::string> bars;
  /// Segment names in stacking order, bottom first, e.g. "data_wait", "forward".
  std::vector<std::string> segments;
  /// values[bar][segment] >= 0; shape (bars.size(), segments.size()).
  std::vector<std::vector<double>> values;
  int width = 760;
  int height = 380;
};

/// Renders a line chart; throws brrr::Error when a series has x/y of different lengths.
std::string render_svg(const LinePlot& plot);
/// Renders a stacked bar chart; throws brrr::Error when `values` does not have the shape above
/// or holds a negative or non-finite value.
std::string render_svg(const StackedBarPlot& plot);

/// Round tick positions covering [lo, hi] with about `target_count` ticks at a step of 1, 2 or 5
/// times a power of ten; the first tick is <= lo and the last >= hi. lo == hi is widened.
std::vector<double> nice_ticks(double lo, double hi, int target_count = 6);

/// Tick label of `value` on an axis whose tick step is `step` (as few digits as tell ticks apart).
std::string format_tick(double value, double step);

/// The colour of palette index `index` (cycled), as "#rrggbb".
std::string plot_color(int index);

/// Writes `svg` to `svg_path`; then, best effort, a PNG beside it (same name, .png) with
/// rsvg-convert or ImageMagick when on PATH. Returns true when the PNG was written; a missing or
/// failing converter gives a debug line, not an error. Throws brrr::Error when the SVG cannot be
/// written.
bool save_plot(const std::string& svg, const std::string& svg_path);

}  // namespace brrr
