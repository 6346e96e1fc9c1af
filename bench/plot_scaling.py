#!/usr/bin/env python3
"""Data-parallel scaling plot: scaling efficiency (throughput at N GPUs / N x throughput at 1) and
throughput per GPU against the number of GPUs, one line per implementation, from the CSV the
gpu_check.sh stages `scaling` and `scaling_resnet` write (columns N, impl, tokens_per_s,
tokens_per_s_per_gpu, scaling_efficiency, brrr_over_impl; lines starting with # are notes).

    python3 bench/plot_scaling.py gpu_out/results/scaling/scaling.csv --out scaling.png
"""
import argparse
import csv
import pathlib
import sys

LABELS = {"brrr": "brrr (trainer --nproc-per-node N)", "torch_eager": "PyTorch DDP, eager",
          "torch_compile": "PyTorch DDP, torch.compile"}


def read(path):
    series = {}
    with open(path) as f:
        for r in csv.DictReader(line for line in f if not line.startswith("#")):
            n = int(r["N"])
            eff = float(r["scaling_efficiency"]) if r["scaling_efficiency"] else None
            series.setdefault(r["impl"], []).append((n, float(r["tokens_per_s_per_gpu"]), eff))
    for points in series.values():
        points.sort()
    return series


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", type=pathlib.Path)
    ap.add_argument("--out", type=pathlib.Path, required=True)
    ap.add_argument("--unit", default="tokens", help="what the throughput counts (tokens, images)")
    ap.add_argument("--title", default="data-parallel scaling")
    args = ap.parse_args(argv)
    series = read(args.csv)
    if not series:
        sys.exit(f"plot_scaling.py: no rows in {args.csv}")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_eff, ax_rate) = plt.subplots(1, 2, figsize=(11, 4.2))
    counts = sorted({n for points in series.values() for n, _, _ in points})
    for impl, points in series.items():
        label = LABELS.get(impl, impl)
        with_eff = [(n, e) for n, _, e in points if e is not None]
        if with_eff:
            ax_eff.plot([n for n, _ in with_eff], [100 * e for _, e in with_eff], "o-", label=label)
        ax_rate.plot([n for n, _, _ in points], [r for _, r, _ in points], "o-", label=label)
    ax_eff.axhline(95, color="grey", linestyle=":", linewidth=1)
    ax_eff.text(counts[0], 95.3, "goal: 95 %", color="grey", fontsize=8)
    ax_eff.set_ylabel("scaling efficiency (%)")
    ax_eff.set_ylim(min(80, ax_eff.get_ylim()[0]), 102)
    ax_rate.set_ylabel(f"{args.unit}/s per GPU")
    ax_rate.set_ylim(bottom=0)
    for ax in (ax_eff, ax_rate):
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, [str(n) for n in counts])
        ax.set_xlabel("GPUs")
        ax.grid(alpha=0.3)
    ax_rate.legend(fontsize=8, loc="lower left")
    fig.suptitle(args.title)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"plot_scaling.py: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
