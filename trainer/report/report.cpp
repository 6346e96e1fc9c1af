#include "trainer/report/report.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/gpu_monitor.h"
#include "core/json_lines.h"
#include "core/log.h"
#include "trainer/observe/doctor.h"
#include "trainer/report/svg_plot.h"

namespace fs = std::filesystem;

namespace brrr {
namespace {

// Breakdown phases in pipeline order; keys the trainer adds later are appended after these.
const std::vector<std::string> kPhaseOrder = {"data_wait", "copy",  "forward", "backward",
                                              "optimizer", "graph", "gpu_idle"};
const std::string kBreakdownPrefix = "breakdown_ms/";
const std::string kDash = "—";

struct RunData {
  std::string name;  // run directory's last component
  std::vector<MetricRecord> train, eval;
  RunStats stats;
  std::vector<GpuSample> gpu;  // empty when gpu.jsonl is absent or empty
  std::string config_yaml;     // "" when config.yaml is absent
  std::vector<Finding> findings;
};

struct Plot {  // one written plot: file name and its SVG text (inlined into the HTML)
  std::string file, title, svg;
};

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("trainer report: cannot read '{}'", path.string()));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw Error(fmt::format("trainer report: cannot write '{}'", path.string()));
}

RunData load_run(const std::string& dir) {
  fs::path metrics = fs::path(dir) / "metrics.jsonl";
  if (!fs::is_regular_file(metrics)) {
    throw Error(fmt::format("trainer report: '{}' is not a run directory: '{}' does not exist", dir,
                            metrics.string()));
  }
  RunData run;
  run.name = fs::path(dir).lexically_normal().filename().string();
  if (run.name.empty()) run.name = fs::path(dir).lexically_normal().parent_path().filename();
  std::vector<MetricRecord> records = read_metric_records(metrics.string());
  for (const MetricRecord& r : records) {
    if (r.kind == RecordKind::kTrain) run.train.push_back(r);
    if (r.kind == RecordKind::kEval) run.eval.push_back(r);
  }
  run.stats = stats_from_records(records);
  if (fs::path gpu = fs::path(dir) / "gpu.jsonl"; fs::is_regular_file(gpu)) {
    for (const JsonRecord& r : read_json_lines(gpu.string())) {
      auto get = [&](const char* key) {
        auto it = r.numbers.find(key);
        return it == r.numbers.end() ? 0.0 : it->second;
      };
      run.gpu.push_back({get("t_s"), get("util_pct"), get("mem_used_mib"), get("mem_total_mib"),
                         get("sm_clock_mhz"), get("power_w")});
    }
  }
  if (!run.gpu.empty()) {  // the trainer's summary wins; the samples fill what it lacks
    GpuSummary g = summarize_gpu_samples(run.gpu);
    if (!run.stats.gpu_util_mean) run.stats.gpu_util_mean = g.util_mean;
    if (!run.stats.gpu_util_p10) run.stats.gpu_util_p10 = g.util_p10;
    if (!run.stats.gpu_mem_used_pct && g.mem_total_mib > 0) {
      run.stats.gpu_mem_used_pct = g.mem_used_pct;
    }
    if (!run.stats.mem_peak_mib) run.stats.mem_peak_mib = g.mem_used_max_mib;
  }
  if (fs::path config = fs::path(dir) / "config.yaml"; fs::is_regular_file(config)) {
    run.config_yaml = read_text(config);
  }
  run.findings = diagnose(run.stats);
  return run;
}

// (x, y) of the records holding both keys, as a plot series.
PlotSeries series_of(const std::vector<MetricRecord>& records, const std::string& x_key,
                     const std::string& y_key) {
  PlotSeries s;
  for (const MetricRecord& r : records) {
    auto x = r.values.find(x_key);
    auto y = r.values.find(y_key);
    if (x != r.values.end() && y != r.values.end()) {
      s.x.push_back(x->second);
      s.y.push_back(y->second);
    }
  }
  return s;
}

class ReportBuilder {
 public:
  ReportBuilder(std::vector<RunData> runs, fs::path out_dir)
      : runs_(std::move(runs)), out_dir_(std::move(out_dir)) {}

  void build_plots();
  std::string markdown() const;
  std::string html() const;

 private:
  std::string prefix(size_t run) const { return runs_.size() > 1 ? runs_[run].name + ": " : ""; }
  // Adds one quantity of every run to `plot` (run i > 0 dashed).
  void add_records(LinePlot& plot, bool eval, const std::string& key, const std::string& label,
                   int color) const;
  void emit(const std::string& file, const LinePlot& plot, const std::string& missing);
  std::vector<std::vector<std::string>> table() const;

  std::vector<RunData> runs_;
  fs::path out_dir_;
  std::vector<Plot> plots_;
  std::vector<std::string> notes_;
};

void ReportBuilder::add_records(LinePlot& plot, bool eval, const std::string& key,
                                const std::string& label, int color) const {
  for (size_t i = 0; i < runs_.size(); ++i) {
    PlotSeries s = series_of(eval ? runs_[i].eval : runs_[i].train, "step", key);
    if (s.x.empty()) continue;
    s.label = prefix(i) + label;
    s.color = color;
    s.dashed = i > 0;
    plot.series.push_back(std::move(s));
  }
}

void ReportBuilder::emit(const std::string& file, const LinePlot& plot,
                         const std::string& missing) {
  if (plot.series.empty()) {
    notes_.push_back(fmt::format("{} skipped: {}", file, missing));
    return;
  }
  Plot p{file, plot.title, render_svg(plot)};
  save_plot(p.svg, (out_dir_ / file).string());
  plots_.push_back(std::move(p));
}

void ReportBuilder::build_plots() {
  LinePlot loss{"Loss", "step", "loss"};
  add_records(loss, false, "loss", "train loss", 0);
  add_records(loss, true, "val_loss", "eval loss", 1);
  emit("loss.svg", loss, "no loss or val_loss in metrics.jsonl");

  std::string metric;
  for (const char* key : {"val_accuracy", "val_ppl"}) {
    for (const RunData& r : runs_) {
      for (const MetricRecord& e : r.eval) {
        if (metric.empty() && e.has(key)) metric = key;
      }
    }
  }
  LinePlot metric_plot{"Validation " + metric.substr(metric.find('_') + 1), "step", metric};
  if (!metric.empty()) add_records(metric_plot, true, metric, metric, 2);
  emit("metric.svg", metric_plot, "no val_accuracy or val_ppl in the eval records");

  LinePlot lr{"Learning rate", "step", "lr"};
  add_records(lr, false, "lr", "lr", 0);
  emit("lr.svg", lr, "no lr in the train records");

  LinePlot util{"GPU utilisation", "time (s)", "utilisation (%)"};
  util.y_min = 0.0;
  util.y_max = 100.0;
  for (size_t i = 0; i < runs_.size(); ++i) {
    if (runs_[i].gpu.empty()) {
      notes_.push_back(
          fmt::format("{}: no gpu.jsonl samples, so no GPU utilisation timeline", runs_[i].name));
      continue;
    }
    PlotSeries s;
    for (const GpuSample& g : runs_[i].gpu) s.x.push_back(g.t_s), s.y.push_back(g.util_pct);
    s.label = prefix(i) + "GPU util";
    s.color = static_cast<int>(i);
    s.dashed = i > 0;
    s.fill = runs_.size() == 1;
    util.series.push_back(std::move(s));
  }
  emit("gpu_util.svg", util, "no run has gpu.jsonl");

  LinePlot speed{"Throughput", "step", "samples/s"};
  add_records(speed, false, "samples_per_s", "samples/s", 0);
  emit("throughput.svg", speed, "no samples_per_s in the train records");

  // Mean breakdown per run over the steady windows (all but the first, which holds start-up, when
  // there are more); phases in pipeline order, then any others alphabetically.
  StackedBarPlot bars{"Mean step time breakdown (steady state)", "ms per step"};
  std::set<std::string> seen;
  for (const RunData& r : runs_) {
    for (const MetricRecord& t : r.train) {
      for (const auto& [key, value] : t.values) {
        if (key.rfind(kBreakdownPrefix, 0) == 0) seen.insert(key.substr(kBreakdownPrefix.size()));
      }
    }
  }
  for (const std::string& phase : kPhaseOrder) {
    if (seen.erase(phase)) bars.segments.push_back(phase);
  }
  bars.segments.insert(bars.segments.end(), seen.begin(), seen.end());
  for (const RunData& r : runs_) {
    bars.bars.push_back(r.name);
    bars.values.emplace_back();
    for (const std::string& phase : bars.segments) {
      const PlotSeries s = series_of(r.train, "step", kBreakdownPrefix + phase);
      const size_t first = s.y.size() > 1 ? 1 : 0;
      double sum = 0.0;
      for (size_t i = first; i < s.y.size(); ++i) sum += s.y[i];
      bars.values.back().push_back(s.y.empty() ? 0.0
                                               : sum / static_cast<double>(s.y.size() - first));
    }
  }
  if (bars.segments.empty()) {
    notes_.push_back("breakdown.svg skipped: no breakdown_ms in the train records");
  } else {
    Plot p{"breakdown.svg", bars.title, render_svg(bars)};
    save_plot(p.svg, (out_dir_ / p.file).string());
    plots_.push_back(std::move(p));
  }
}

std::string opt(const std::optional<double>& v, const char* format) {
  return v ? fmt::format(fmt::runtime(format), *v) : kDash;
}

std::vector<std::vector<std::string>> ReportBuilder::table() const {
  std::vector<std::vector<std::string>> rows = {{""}};
  for (const RunData& r : runs_) rows[0].push_back(r.name);
  auto row = [&](const std::string& name, auto cell) {
    rows.push_back({name});
    for (const RunData& r : runs_) rows.back().push_back(cell(r));
  };
  row("steps", [](const RunData& r) { return std::to_string(r.stats.steps); });
  row("time (s)", [](const RunData& r) { return fmt::format("{:.1f}", r.stats.time_s); });
  row("samples/s", [](const RunData& r) { return opt(r.stats.samples_per_s, "{:.1f}"); });
  bool lm = false;
  for (const RunData& r : runs_) lm = lm || r.stats.tokens_per_s.has_value();
  if (lm) row("tokens/s", [](const RunData& r) { return opt(r.stats.tokens_per_s, "{:.0f}"); });
  row("data wait", [](const RunData& r) { return opt(r.stats.data_wait_pct, "{:.1f}%"); });
  row("GPU util mean / p10", [](const RunData& r) {
    if (!r.stats.gpu_util_mean) return kDash;
    return fmt::format("{:.1f}% / {}", *r.stats.gpu_util_mean,
                       opt(r.stats.gpu_util_p10, "{:.1f}%"));
  });
  row("peak memory (MiB)", [](const RunData& r) { return opt(r.stats.mem_peak_mib, "{:.0f}"); });
  row("GPU memory used", [](const RunData& r) { return opt(r.stats.gpu_mem_used_pct, "{:.1f}%"); });
  row("device", [](const RunData& r) {
    std::string d = r.stats.device_name.empty() ? r.stats.device
                                                : r.stats.device_name + " (" + r.stats.device + ")";
    return d.empty() ? kDash : d;
  });
  row("precision",
      [](const RunData& r) { return r.stats.precision.empty() ? kDash : r.stats.precision; });
  auto last = [](const std::vector<MetricRecord>& recs, const std::string& key) {
    std::optional<double> v;
    for (const MetricRecord& x : recs) {
      if (auto it = x.values.find(key); it != x.values.end()) v = it->second;
    }
    return v;
  };
  row("final train loss", [&](const RunData& r) { return opt(last(r.train, "loss"), "{:.4f}"); });
  for (const char* key : {"val_loss", "val_accuracy", "val_ppl"}) {
    bool any = false;
    for (const RunData& r : runs_) any = any || last(r.eval, key).has_value();
    if (any) {
      row(std::string("final ") + key,
          [&](const RunData& r) { return opt(last(r.eval, key), "{:.4f}"); });
    }
  }
  return rows;
}

std::string ReportBuilder::markdown() const {
  std::string md = "# brrr report: ";
  for (size_t i = 0; i < runs_.size(); ++i) md += (i ? " vs " : "") + runs_[i].name;
  md += "\n\n## Summary\n\n";
  std::vector<std::vector<std::string>> rows = table();
  for (size_t i = 0; i < rows.size(); ++i) {
    md += "|";
    for (const std::string& cell : rows[i]) md += " " + cell + " |";
    md += "\n";
    if (i == 0) {
      md += "|---|";
      for (size_t c = 1; c < rows[0].size(); ++c) md += "---:|";
      md += "\n";
    }
  }
  md +=
      "\nRates, data wait (the share of the step the GPU waited for the loader) and GPU "
      "utilisation are the steady state: the logging windows after the first, which holds "
      "start-up.\n";
  md += "\n## Doctor\n";
  for (const RunData& r : runs_) {
    md += fmt::format("\n### {}\n\n", r.name);
    if (r.findings.empty()) md += "- no problems found\n";
    for (const Finding& f : r.findings) {
      md += fmt::format("- **{}** {}{}\n", f.severity, f.message,
                        f.config_key.empty() ? "" : " (`" + f.config_key + "`)");
    }
  }
  md += "\n## Plots\n\n";
  for (const Plot& p : plots_) md += fmt::format("![{}]({})\n\n", p.title, p.file);
  for (const std::string& note : notes_) md += "- " + note + "\n";
  for (const RunData& r : runs_) {
    if (r.config_yaml.empty()) continue;
    md +=
        fmt::format("\n<details><summary>config of {}</summary>\n\n```yaml\n{}```\n\n</details>\n",
                    r.name, r.config_yaml);
  }
  return md;
}

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else
      out += c;
  }
  return out;
}

std::string ReportBuilder::html() const {
  std::string title = "brrr report";
  for (size_t i = 0; i < runs_.size(); ++i) title += (i ? " vs " : ": ") + runs_[i].name;
  std::string h = fmt::format(
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{0}</title><style>"
      "body{{font-family:sans-serif;max-width:980px;margin:auto}}table{{border-collapse:collapse}}"
      "td,th{{border:1px solid #ccc;padding:3px 10px;text-align:right}}"
      "td:first-child{{text-align:left}}</style></head><body>\n<h1>{0}</h1>\n<h2>Summary</h2>\n"
      "<table>\n",
      html_escape(title));
  std::vector<std::vector<std::string>> rows = table();
  for (size_t i = 0; i < rows.size(); ++i) {
    h += "<tr>";
    for (const std::string& cell : rows[i]) {
      h += fmt::format("<{0}>{1}</{0}>", i == 0 ? "th" : "td", html_escape(cell));
    }
    h += "</tr>\n";
  }
  h += "</table>\n<h2>Doctor</h2>\n";
  for (const RunData& r : runs_) {
    h += fmt::format("<h3>{}</h3>\n<ul>\n", html_escape(r.name));
    if (r.findings.empty()) h += "<li>no problems found</li>\n";
    for (const Finding& f : r.findings) {
      h += fmt::format("<li><b>{}</b> {}{}</li>\n", f.severity, html_escape(f.message),
                       f.config_key.empty() ? "" : " (<code>" + f.config_key + "</code>)");
    }
    h += "</ul>\n";
  }
  h += "<h2>Plots</h2>\n";
  for (const Plot& p : plots_) h += "<div>\n" + p.svg + "</div>\n";
  if (!notes_.empty()) h += "<ul>\n";
  for (const std::string& note : notes_) h += "<li>" + html_escape(note) + "</li>\n";
  if (!notes_.empty()) h += "</ul>\n";
  for (const RunData& r : runs_) {
    if (r.config_yaml.empty()) continue;
    h += fmt::format("<details><summary>config of {}</summary><pre>{}</pre></details>\n",
                     html_escape(r.name), html_escape(r.config_yaml));
  }
  return h + "</body></html>\n";
}

}  // namespace

int run_report(const std::vector<std::string>& run_dirs, const std::string& out_dir) {
  if (run_dirs.empty()) throw UsageError("trainer report: give at least one run directory");
  std::vector<RunData> runs;
  for (const std::string& dir : run_dirs) runs.push_back(load_run(dir));
  fs::path out = out_dir.empty() ? fs::path(run_dirs[0]) / "report" : fs::path(out_dir);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) {
    throw Error(fmt::format("trainer report: cannot create '{}': {}", out.string(), ec.message()));
  }
  ReportBuilder builder(std::move(runs), out);
  builder.build_plots();
  write_text(out / "report.md", builder.markdown());
  write_text(out / "report.html", builder.html());
  log::info("report written to {}", (out / "report.md").string());
  return 0;
}

}  // namespace brrr
