#!/usr/bin/env python3
"""Which of ATen's attention kernels give the same gradients run to run (bench/RESULTS.md section 6,
update 14). For each backend that brrr's `model.attention` names, with and without
torch.use_deterministic_algorithms(True), at GPT-2 124M's shape (B=16, 12 heads, T=1024, 64 per
head, bf16, causal): one forward and backward on fixed random inputs, then --repeats more, each
compared bit for bit with the first (dQ, dK, dV). Prints CSV `backend,deterministic,runs,equal_runs,
ms` (ms: median forward+backward time). A backend that refuses to run prints its error.

    python3 bench/attention_determinism.py [--repeats 10] [--csv FILE]
"""
import argparse
import statistics
import sys

import torch

ATEN = torch.ops.aten


def flash(q, k, v):
    return ATEN._scaled_dot_product_flash_attention(q, k, v, 0.0, True)[0]


def cudnn(q, k, v):
    return ATEN._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, True)[0]


def efficient(q, k, v):
    return ATEN._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, True)[0]


def math(q, k, v):
    return ATEN._scaled_dot_product_attention_math(q, k, v, None, 0.0, True)[0]


BACKENDS = {"flash": flash, "cudnn": cudnn, "efficient": efficient, "math": math}


def grads(fn, q, k, v, dout):
    qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    out = fn(qq, kk, vv)
    dq, dk, dv = torch.autograd.grad(out, (qq, kk, vv), dout)
    stop.record()
    stop.synchronize()
    return (dq, dk, dv), start.elapsed_time(stop)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--csv")
    args = ap.parse_args()
    torch.manual_seed(0)
    shape = (16, 12, 1024, 64)
    q, k, v, dout = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    rows = ["backend,deterministic,runs,equal_runs,ms"]
    for det in (False, True):
        torch.use_deterministic_algorithms(det)
        for name, fn in BACKENDS.items():
            try:
                first, _ = grads(fn, q, k, v, dout)
                equal, times = 0, []
                for _ in range(args.repeats):
                    g, ms = grads(fn, q, k, v, dout)
                    times.append(ms)
                    equal += all(torch.equal(a, b) for a, b in zip(first, g))
                rows.append(f"{name},{int(det)},{args.repeats},{equal},{statistics.median(times):.4f}")
            except RuntimeError as e:
                rows.append(f"{name},{int(det)},0,0,")
                print(f"# {name} deterministic={det}: {str(e).splitlines()[0]}", file=sys.stderr)
    torch.use_deterministic_algorithms(False)
    print("\n".join(rows))
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
