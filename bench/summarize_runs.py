#!/usr/bin/env python3
"""One line per trainer run directory under RUNS: its steady-state rate (median of the train
windows after the first), GPU utilisation (the summary's steady mean and p10), peak memory, host
syncs per step, the step-time breakdown (mean over those windows) and train.cuda_graph's outcome.

    python3 bench/summarize_runs.py RUNS [--csv OUT]
"""
import argparse
import json
import pathlib
import statistics
import sys


def summarize(run):
    recs = [json.loads(line) for line in (run / "metrics.jsonl").open() if line.strip()]
    train = [r for r in recs if r.get("kind") == "train"]
    steady = train[1:] or train
    summary = ([r for r in recs if r.get("kind") == "summary"] or [{}])[-1]
    row = {"run": run.name}
    for key in ("samples_per_s", "tokens_per_s"):
        values = [r[key] for r in steady if key in r]
        if values:
            row[key] = statistics.median(values)
    row["gpu_util_mean"] = summary.get("gpu_util_mean")
    row["gpu_util_p10"] = summary.get("gpu_util_p10")
    row["mem_peak_mib"] = max((r.get("mem_peak_mib", 0) for r in train), default=None)
    row["host_syncs_per_step"] = statistics.median(r.get("host_syncs_per_step", 0) for r in steady)
    phases = {}
    for r in steady:
        for key, value in r.get("breakdown_ms", {}).items():
            phases.setdefault(key, []).append(value)
    row["breakdown_ms"] = {k: round(statistics.fmean(v), 3) for k, v in sorted(phases.items())}
    row["step_time_ms"] = statistics.median(r["step_time_ms"] for r in steady) if steady else None
    row["cuda_graph"] = summary.get("cuda_graph", "")
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=pathlib.Path, help="folder of run directories")
    ap.add_argument("--csv", type=pathlib.Path)
    args = ap.parse_args(argv)
    rows = [summarize(r) for r in sorted(args.runs.iterdir()) if (r / "metrics.jsonl").is_file()]
    if not rows:
        sys.exit(f"summarize_runs.py: no run with metrics.jsonl under {args.runs}")
    for row in rows:
        rate = (f"{row['tokens_per_s']:,.0f} tokens/s" if "tokens_per_s" in row
                else f"{row.get('samples_per_s', 0):,.0f} samples/s")
        util = row["gpu_util_mean"]
        util = f"GPU {util:.1f}% (p10 {row['gpu_util_p10']:.0f}%)" if util is not None else "GPU n/a"
        print(f"{row['run']}: {rate}, step {row['step_time_ms']:.2f} ms, {util}, peak "
              f"{row['mem_peak_mib']:,.0f} MiB, syncs/step {row['host_syncs_per_step']:.2f}, "
              f"breakdown {row['breakdown_ms']}, cuda_graph: {row['cuda_graph']}")
    if args.csv:
        keys = ["run", "samples_per_s", "tokens_per_s", "step_time_ms", "gpu_util_mean",
                "gpu_util_p10", "mem_peak_mib", "host_syncs_per_step", "cuda_graph"]
        lines = [",".join(keys)]
        for row in rows:
            lines.append(",".join(f'"{row.get(k, "")}"' if k == "cuda_graph" else str(row.get(k, ""))
                                  for k in keys))
        args.csv.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
