#!/usr/bin/env python3
"""GPU-utilisation timelines of brrr runs (from each run's gpu.jsonl, sampled every 100 ms):
one PNG per run (utilisation and memory over time) and one overview PNG with every run stacked
on a common time axis, where a starved baseline shows as a sawtooth and a fed run as a flat line.
When the run's metrics.jsonl is there, its start-up (up to the end of the first logging window:
worker start, cuDNN autotuning) is shaded, and titles give the steady-state mean and p10 of the
summary record beside the whole-run mean.

    python3 bench/plot_gpu_timeline.py runs/blog_01_baseline runs/blog_05_large_batch \
        --out-dir plots [--overview gpu_timelines.png]
"""
import argparse
import json
import pathlib
import sys


def read_samples(run_dir):
    path = pathlib.Path(run_dir) / "gpu.jsonl"
    if not path.is_file():
        return None
    t, util, mem = [], [], []
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
                t.append(float(r["t_s"]))
                util.append(float(r["util_pct"]))
                mem.append(float(r.get("mem_used_mib", float("nan"))))
            except (ValueError, KeyError):
                continue  # torn last line of a killed run, or a record of another kind
    return (t, util, mem) if t else None


def read_steady(run_dir):
    """(start-up end in s, steady mean %, steady p10 %) from metrics.jsonl, or None."""
    path = pathlib.Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return None
    first_train, summary = None, None
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("kind") == "train" and first_train is None:
                first_train = r
            elif r.get("kind") == "summary":
                summary = r
    if not first_train or not summary or "gpu_util_mean" not in summary:
        return None
    return float(first_train["time_s"]), summary["gpu_util_mean"], summary.get("gpu_util_p10")


def title_of(name, util, steady):
    whole = sum(util) / len(util)
    if steady is None:
        return f"{name}: mean {whole:.0f} %"
    _, mean, p10 = steady
    p10 = "" if p10 is None else f" (p10 {p10:.0f} %)"
    return f"{name}: steady {mean:.0f} %{p10}, whole run {whole:.0f} %"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="run directories (runs/<name>)")
    ap.add_argument("--out-dir", type=pathlib.Path, default=pathlib.Path("."))
    ap.add_argument("--overview", default="gpu_timelines.png", help="file name in --out-dir")
    args = ap.parse_args(argv)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        sys.exit(f"plot_gpu_timeline.py: needs matplotlib ({e})")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    series = []
    for run in args.runs:
        s = read_samples(run)
        name = pathlib.Path(run).name
        if s is None:
            print(f"plot_gpu_timeline.py: {run}/gpu.jsonl missing or empty (CPU run?): skipped",
                  file=sys.stderr)
            continue
        steady = read_steady(run)
        series.append((name, s, steady))
        t, util, mem = s
        fig, ax = plt.subplots(figsize=(10, 3))
        ax.plot(t, util, lw=0.8, color="tab:green")
        if steady:
            ax.axvspan(0, steady[0], color="0.85", lw=0, label="start-up")
            ax.legend(loc="lower right", fontsize=8)
        ax.set(ylim=(0, 105), xlabel="time (s)", ylabel="GPU utilisation (%)",
               title=title_of(name, util, steady))
        ax2 = ax.twinx()
        ax2.plot(t, [m / 1024 for m in mem], lw=0.8, color="tab:blue", alpha=0.6)
        ax2.set_ylabel("memory used (GiB)", color="tab:blue")
        fig.tight_layout()
        out = args.out_dir / f"{name}_gpu.png"
        fig.savefig(out, dpi=100)
        plt.close(fig)
        print(out)
    if not series:
        print("plot_gpu_timeline.py: no run had GPU samples", file=sys.stderr)
        return 1
    fig, axes = plt.subplots(len(series), 1, figsize=(10, 1.6 * len(series) + 0.6), sharex=True,
                             squeeze=False)
    for ax, (name, (t, util, _), steady) in zip(axes[:, 0], series):
        if steady:
            ax.axvspan(0, steady[0], color="0.85", lw=0)
        ax.fill_between(t, util, lw=0, color="tab:green", alpha=0.7)
        ax.set_ylim(0, 105)
        ax.set_ylabel("%")
        ax.set_title(title_of(name, util, steady), fontsize=9, loc="left")
    axes[-1, 0].set_xlabel("time since start (s)")
    fig.suptitle("GPU utilisation (NVML, 100 ms samples; grey: start-up)")
    fig.tight_layout()
    out = args.out_dir / args.overview
    fig.savefig(out, dpi=100)
    plt.close(fig)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
