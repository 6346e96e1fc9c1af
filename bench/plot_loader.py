#!/usr/bin/env python3
"""Bar chart of loader throughput, brrr vs PyTorch DataLoader + torchvision, by worker count, from the
CSVs bench_loader_bench and bench/torch_loader_bench.py write (scripts/gpu_check.sh loader stage).

    python3 bench/plot_loader.py bench/results/2026-11-29/loader_brrr.csv \
        bench/results/2026-11-29/loader_torch.csv --out bench/plots/loader_throughput.png
"""
import argparse
import csv
import pathlib
import sys


def images_per_s(path):
    rows = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            if r["metric"] == "images_per_s":
                rows[int(r["workers"])] = float(r["value"])
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("brrr_csv")
    ap.add_argument("torch_csv")
    ap.add_argument("--out", type=pathlib.Path, required=True)
    ap.add_argument("--title", default="JPEG loading, RandomResizedCrop 224 + flip, batch 64 (H200 host, 16 cores)")
    args = ap.parse_args(argv)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    brrr, torch_ = images_per_s(args.brrr_csv), images_per_s(args.torch_csv)
    workers = sorted(set(brrr) & set(torch_))
    if not workers:
        sys.exit("plot_loader.py: no worker count in both files")
    x = range(len(workers))
    fig, ax = plt.subplots(figsize=(8, 4.2), dpi=120)
    ax.bar([i - 0.2 for i in x], [torch_[w] for w in workers], 0.4, label="PyTorch DataLoader + torchvision",
           color="#9aa5b1")
    bars = ax.bar([i + 0.2 for i in x], [brrr[w] for w in workers], 0.4, label="brrr", color="#d9480f")
    for b, w in zip(bars, workers):
        ax.annotate(f"{brrr[w] / torch_[w]:.2f}×", (b.get_x() + b.get_width() / 2, b.get_height()),
                    ha="center", va="bottom", fontsize=9)
    ax.set_xticks(list(x), [str(w) for w in workers])
    ax.set_xlabel("workers")
    ax.set_ylabel("images/s")
    ax.set_title(args.title, fontsize=10)
    ax.legend(frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out)
    print(f"plot_loader.py: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
