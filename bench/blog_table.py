#!/usr/bin/env python3
"""Markdown table of finished brrr runs, from each run's metrics.jsonl (the `"kind": "summary"`
record, falling back to the train records for keys it lacks).

Columns: run, samples/s, tokens/s, step time (median of the logged train records), data-wait %,
GPU utilisation mean (p10), peak GPU memory, steps. Runs are listed in the order given.

    python3 bench/blog_table.py runs/blog_01_baseline runs/blog_02_workers ... [--csv t.csv]
"""
import argparse
import json
import pathlib
import statistics
import sys


def read_records(path):
    records = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except ValueError as e:
                # a run killed mid-write leaves a torn last line: keep what is whole
                print(f"blog_table.py: {path}:{n}: skipped unreadable line ({e})", file=sys.stderr)
    return records


def run_stats(run_dir):
    """One row of numbers (None when unknown) for the run in `run_dir`."""
    path = pathlib.Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return {"run": pathlib.Path(run_dir).name, "error": f"no {path}"}
    records = read_records(path)
    train = [r for r in records if r.get("kind", "train") == "train" and "step" in r]
    summaries = [r for r in records if r.get("kind") == "summary"]
    summary = summaries[-1] if summaries else {}

    def pick(key, reduce=statistics.mean):
        if isinstance(summary.get(key), (int, float)):
            return float(summary[key])
        values = [float(r[key]) for r in train if isinstance(r.get(key), (int, float))]
        # the first logged interval holds start-up (worker fork, cuDNN autotune): leave it out
        if len(values) > 2:
            values = values[1:]
        return reduce(values) if values else None

    step_ms = [float(r["step_time_ms"]) for r in train[1:] or train
               if isinstance(r.get("step_time_ms"), (int, float))]
    mem = [float(r["mem_peak_mib"]) for r in train + [summary]
           if isinstance(r.get("mem_peak_mib"), (int, float))]
    tokens = pick("tokens_per_s")
    return {
        "run": pathlib.Path(run_dir).name,
        "samples_per_s": pick("samples_per_s"),
        "tokens_per_s": tokens if tokens else None,
        "step_time_ms": statistics.median(step_ms) if step_ms else None,
        "data_wait_pct": pick("data_wait_pct"),
        "gpu_util_mean": summary.get("gpu_util_mean"),
        "gpu_util_p10": summary.get("gpu_util_p10"),
        "mem_peak_mib": max(mem) if mem else None,
        "steps": int(max(r["step"] for r in train)) if train else None,
        "error": None if summary else "no summary record (run unfinished?)",
    }


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def markdown(rows):
    out = ["| run | samples/s | tokens/s | step time (ms) | data wait % | GPU util mean (p10) % "
           "| peak mem (MiB) | steps |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "samples_per_s" not in r:
            out.append(f"| {r['run']} | {r['error']} | | | | | | |")
            continue
        util = "-" if r["gpu_util_mean"] is None else (
            f"{r['gpu_util_mean']:.0f} ({fmt(r['gpu_util_p10'], '.0f')})")
        note = f" ({r['error']})" if r["error"] else ""
        out.append(f"| {r['run']}{note} | {fmt(r['samples_per_s'], ',.1f')} | "
                   f"{fmt(r['tokens_per_s'], ',.0f')} | {fmt(r['step_time_ms'], '.1f')} | "
                   f"{fmt(r['data_wait_pct'], '.1f')} | {util} | {fmt(r['mem_peak_mib'], ',.0f')} | "
                   f"{fmt(r['steps'], 'd')} |")
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="run directories (runs/<name>)")
    ap.add_argument("--out", type=pathlib.Path, help="also write the markdown here")
    ap.add_argument("--csv", type=pathlib.Path, help="also write the numbers as CSV")
    args = ap.parse_args(argv)
    rows = [run_stats(r) for r in args.runs]
    text = markdown(rows)
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    if args.csv:
        keys = ["run", "samples_per_s", "tokens_per_s", "step_time_ms", "data_wait_pct",
                "gpu_util_mean", "gpu_util_p10", "mem_peak_mib", "steps"]
        lines = [",".join(keys)] + [",".join("" if r.get(k) is None else str(r[k]) for k in keys)
                                    for r in rows]
        args.csv.write_text("\n".join(lines) + "\n")
    return 0 if all("samples_per_s" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
