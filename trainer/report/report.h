#pragma once
// `trainer report RUN_DIR [RUN_DIR2]`: plots and a summary of finished runs, read from their run
// directories (metrics.jsonl required; gpu.jsonl and config.yaml used when present).
//
// Writes into out_dir: loss.svg, metric.svg (val_accuracy or val_ppl), lr.svg, gpu_util.svg,
// breakdown.svg (mean step-time breakdown, one stacked bar per run), throughput.svg (+ .png of each
// when a converter is on PATH), report.md and report.html (the same content, SVGs inlined). With
// two runs (baseline, tuned) every plot overlays them (second run dashed) and the summary table
// has a column per run. A plot without data is skipped with a note in the report.
#include <string>
#include <vector>

namespace brrr {

/// Writes the report of `run_dirs` (one or more; the first is the reference) into `out_dir`
/// ("" = RUN_DIR/report of the first run). Returns 0 (the CLI exit code). Throws brrr::Error
/// naming the path when a run has no metrics.jsonl or a file cannot be read or written.
int run_report(const std::vector<std::string>& run_dirs, const std::string& out_dir = "");

}  // namespace brrr
