#!/usr/bin/env python3
"""The final tables of scripts/gpu_check.sh, from what its stages left in the results folder:

  meta.txt                                 date, commit, device (written by gpu_check.sh)
  loader/compare.md                        bench/compare_loaders.py
  resnet/{brrr,torch}_step.csv             step ceilings (bench_resnet_step_bench, torch_resnet_step.py)
  resnet/runs/resnet_jpeg_b<B>/            trainer on the JPEG folder
  gpt/{torch_gpt2,hf_gpt2}.csv             PyTorch eager/compile and HF Trainer
  gpt/runs/gpt2_accum<A>/                  brrr trainer on configs/gpt2-124m.yaml
  blog/blog_table.md                       scripts/run_blog.sh

A missing part is left out. Goals checked: trainer from JPEGs >= 90 % of the step ceiling.

    python3 bench/summarize_gpu_check.py RESULTS_DIR [--out summary.txt]
"""
import argparse
import csv
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from blog_table import run_stats  # noqa: E402

H200_BF16_DENSE_TFLOPS = 989.0
CEILING_GOAL = 0.90


def read_csv(path):
    if not path.is_file():
        return []
    lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    return list(csv.DictReader(lines))


def resnet_table(d):
    brrr, torch_ = read_csv(d / "brrr_step.csv"), read_csv(d / "torch_step.csv")
    runs = sorted((d / "runs").glob("resnet_jpeg_b*")) if (d / "runs").is_dir() else []
    if not (brrr or torch_ or runs):
        return ""

    def ips(rows, batch, cl, mode="eager"):
        for r in rows:
            if int(r["batch"]) == batch and int(r["channels_last"]) == cl and r["mode"] == mode:
                return float(r["images_per_s"])
        return None

    trainer, trainer_cl = {}, {}
    for run in runs:
        m = re.search(r"_b(\d+)$", run.name)
        if m:
            trainer[int(m.group(1))] = run_stats(run)
            cfg = run / "config.yaml"
            trainer_cl[int(m.group(1))] = cfg.is_file() and re.search(
                r"^\s*channels_last:\s*true", cfg.read_text(), re.M) is not None
    batches = sorted({int(r["batch"]) for r in brrr + torch_} | set(trainer))
    out = ["### ResNet-50 training step, images/s (bf16 autocast, TF32, fused AdamW)", "",
           "| batch | brrr ceiling NCHW | brrr ceiling NHWC | torch eager NCHW | torch eager NHWC "
           "| torch compile NHWC | brrr / torch (best) | trainer on JPEGs | data wait % "
           "| GPU util % | trainer / brrr ceiling (same layout) | goal >= 90 % |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    f = lambda v: "-" if v is None else f"{v:,.0f}"  # noqa: E731
    for b in batches:
        b0, b1 = ips(brrr, b, 0), ips(brrr, b, 1)
        t0, t1, tc = ips(torch_, b, 0), ips(torch_, b, 1), ips(torch_, b, 1, "compile")
        best_b = max([v for v in (b0, b1) if v] or [0]) or None
        best_t = max([v for v in (t0, t1) if v] or [0]) or None
        tr = trainer.get(b, {})
        sps = tr.get("samples_per_s")
        ceiling = b1 if trainer_cl.get(b) else b0
        ratio = sps / ceiling if sps and ceiling else None
        goal = "-" if ratio is None else ("yes" if ratio >= CEILING_GOAL else "no")
        util = tr.get("gpu_util_mean")
        wait = tr.get("data_wait_pct")
        cells = [str(b), f(b0), f(b1), f(t0), f(t1), f(tc),
                 "-" if not (best_b and best_t) else f"{best_b / best_t:.2f}", f(sps),
                 "-" if wait is None else f"{wait:.1f}", "-" if util is None else f"{util:.0f}",
                 "-" if ratio is None else
                 f"{ratio:.3f} ({'NHWC' if trainer_cl.get(b) else 'NCHW'})", goal]
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    out.append("(the trainer is held against the ceiling of its own memory layout, model.channels_last)")
    return "\n".join(out) + "\n"


def gpt_table(d):
    rows = read_csv(d / "torch_gpt2.csv") + read_csv(d / "hf_gpt2.csv")
    runs = sorted((d / "runs").glob("gpt2_accum*")) if (d / "runs").is_dir() else []
    measured = None
    text = (d / "torch_gpt2.csv").read_text() if (d / "torch_gpt2.csv").is_file() else ""
    m = re.search(r"measured_matmul_peak_tflops,([\d.]+)", text)
    if m:
        measured = float(m.group(1))
    entries = [(r["impl"], r["mode"], int(r["accum"]), float(r["tokens_per_s"])) for r in rows]
    for run in runs:
        st = run_stats(run)
        acc = re.search(r"accum(\d+)$", run.name)
        if st.get("tokens_per_s") and acc:
            entries.append(("brrr", "trainer", int(acc.group(1)), st["tokens_per_s"]))
    if not entries:
        return ""
    # 6 N + 12 L T d per token for GPT-2 124M (N = 123.6 M without wpe: 124.4 M - 1024 * 768)
    flops_per_token = 6 * (124_475_904 - 1024 * 768) + 12 * 12 * 1024 * 768
    eager = {a: t for i, mo, a, t in entries if i == "torch" and mo == "eager"}
    out = ["### GPT-2 124M, 8 x 1024 tokens per micro-batch, bf16, fused AdamW", "",
           "| impl | mode | accum | tokens/s | MFU % (989 TFLOP/s) | MFU % (measured peak) "
           "| vs torch eager |", "|---|---|---:|---:|---:|---:|---:|"]
    for impl, mode, accum, tps in sorted(entries, key=lambda e: (e[2], e[0], e[1])):
        tflops = tps * flops_per_token / 1e12
        meas = f"{100 * tflops / measured:.1f}" if measured else "-"
        vs = f"{tps / eager[accum]:.2f}" if accum in eager else "-"
        out.append(f"| {impl} | {mode} | {accum} | {tps:,.0f} | "
                   f"{100 * tflops / H200_BF16_DENSE_TFLOPS:.1f} | {meas} | {vs} |")
    if measured:
        out += ["", f"measured bf16 matmul peak: {measured:.0f} TFLOP/s"]
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=pathlib.Path)
    ap.add_argument("--out", type=pathlib.Path)
    args = ap.parse_args(argv)
    r = args.results
    parts = []
    if (r / "meta.txt").is_file():
        parts.append("```\n" + (r / "meta.txt").read_text().strip() + "\n```\n")
    if (r / "stages.txt").is_file():
        parts.append("### Stages (name, exit status, seconds)\n\n```\n"
                     + (r / "stages.txt").read_text().strip() + "\n```\n")
    if (r / "loader/compare.md").is_file():
        parts.append((r / "loader/compare.md").read_text())
    parts.append(resnet_table(r / "resnet"))
    parts.append(gpt_table(r / "gpt"))
    if (r / "blog/blog_table.md").is_file():
        parts.append("### Blog ladder\n\n" + (r / "blog/blog_table.md").read_text())
    text = "\n".join(p for p in parts if p)
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
