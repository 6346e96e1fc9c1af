#!/usr/bin/env python3
"""Merges the loader benchmark CSVs of brrr (bench_loader_bench) and PyTorch
(bench/torch_loader_bench.py) into markdown tables with ratios.

Both CSVs have the columns impl,metric,workers,batch,value,unit ('#' lines are comments).

    python3 bench/compare_loaders.py brrr_loader.csv torch_loader.csv [--out table.md]
"""
import argparse
import csv
import pathlib
import sys

PEAK_TARGET = 0.80  # the goal: pinned host-to-device copies within 80 % of the bus peak


def read_rows(path):
    try:
        text = pathlib.Path(path).read_text()
    except OSError as e:
        sys.exit(f"compare_loaders.py: cannot read {path}: {e}")
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    rows = list(csv.DictReader(lines))
    need = {"impl", "metric", "workers", "batch", "value", "unit"}
    if not rows or not need <= set(rows[0]):
        sys.exit(f"compare_loaders.py: {path} has no rows with columns {sorted(need)}")
    for r in rows:
        try:
            r["workers"], r["batch"], r["value"] = int(r["workers"]), int(r["batch"]), float(r["value"])
        except ValueError as e:
            sys.exit(f"compare_loaders.py: {path}: bad row {r}: {e}")
    return rows


def ratio(a, b):
    return f"{a / b:.2f}" if a is not None and b not in (None, 0) else "-"


def fmt(v, digits=1):
    return "-" if v is None else f"{v:,.{digits}f}"


def tables(brrr_rows, torch_rows):
    def by_workers(rows):
        return {r["workers"]: r for r in rows if r["metric"] == "images_per_s"}

    def metric(rows, name):
        for r in rows:
            if r["metric"] == name:
                return r["value"]
        return None

    b, t = by_workers(brrr_rows), by_workers(torch_rows)
    timpl = next(iter(t.values()))["impl"] if t else "torch"
    out = ["### Loader throughput (images/s, batches handed to the caller)", "",
           f"| workers | batch | brrr | {timpl} | brrr / torch |", "|---:|---:|---:|---:|---:|"]
    for w in sorted(set(b) | set(t)):
        bv = b[w]["value"] if w in b else None
        tv = t[w]["value"] if w in t else None
        batch = (b.get(w) or t.get(w))["batch"]
        out.append(f"| {w} | {batch} | {fmt(bv)} | {fmt(tv)} | {ratio(bv, tv)} |")
    peak = metric(torch_rows, "h2d_peak_gbps") or metric(brrr_rows, "h2d_peak_gbps")
    copy = [("pinned", "h2d_pinned_gbps"), ("pageable", "h2d_pageable_gbps")]
    if any(metric(brrr_rows, m) or metric(torch_rows, m) for _, m in copy):
        out += ["", f"### Host-to-device copy (GB/s); bus peak (1 GiB pinned copy): {fmt(peak, 2)}", "",
                "| source | brrr | torch | brrr / torch | brrr / peak | within 80 % |",
                "|---|---:|---:|---:|---:|---|"]
        for label, m in copy:
            bv, tv = metric(brrr_rows, m), metric(torch_rows, m)
            ok = "-" if bv is None or not peak else ("yes" if bv >= PEAK_TARGET * peak else "no")
            out.append(f"| {label} | {fmt(bv, 2)} | {fmt(tv, 2)} | {ratio(bv, tv)} | "
                       f"{ratio(bv, peak)} | {ok if label == 'pinned' else '-'} |")
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("brrr_csv")
    ap.add_argument("torch_csv")
    ap.add_argument("--out", type=pathlib.Path, help="also write the markdown here")
    args = ap.parse_args(argv)
    text = tables(read_rows(args.brrr_csv), read_rows(args.torch_csv))
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
