#!/usr/bin/env python3
"""The ops of bench/ops_bench.cpp in PyTorch: eager and torch.compile (Inductor's Triton kernels),
at the same shapes and dtypes, timed the same way (CUDA events, median of --repeats runs after 3
warm-up runs; backward passes through torch.autograd.grad, no accumulation into .grad). Prints CSV `op,impl,pass,ms,gb_per_s` with impl `torch_eager` / `torch_compile`.

    python3 bench/torch_ops.py [--repeats 20] [--csv FILE] [--only NAME,...]

--only runs those benches alone (classifier, lm_head,
residual_layernorm, residual_bias, bias_gelu, bias_grad, image_input, batch_norm_act).
"""
import argparse
import statistics
import sys

import torch
import torch.nn.functional as F

ROWS, C, V = 16 * 1024, 768, 50304
DEV = "cuda"
bf16 = torch.bfloat16


def time_ms(fn, repeats, prepare=lambda: None):
    for _ in range(3):
        prepare()
        fn()
    times = []
    for _ in range(repeats):
        prepare()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def layernorm_inputs():
    """GPT's residual stream (float32) and branch, a LayerNorm's parameters, the gradients."""
    res = torch.randn(ROWS, C, device=DEV, requires_grad=True)
    x = torch.randn(ROWS, C, device=DEV, requires_grad=True)
    lw = torch.randn(C, device=DEV, requires_grad=True)
    lb = torch.randn(C, device=DEV, requires_grad=True)
    dy = torch.randn(ROWS, C, device=DEV, dtype=bf16)
    dres = torch.randn(ROWS, C, device=DEV)
    return res, x, lw, lb, dy, dres


def bench_classifier(row, repeats):
    """F.cross_entropy on the bf16 logits (GPT code calls it on logits.float())."""
    source = torch.randn(ROWS, V, device=DEV, dtype=bf16)
    targets = torch.randint(0, V, (ROWS,), device=DEV)
    logits = source.clone().requires_grad_(True)

    def ce(z, t):
        return F.cross_entropy(z.float(), t)

    ce_compiled = torch.compile(ce)
    nbytes = source.numel() * 2
    for impl, f in (("torch_eager", ce), ("torch_compile", ce_compiled)):
        def fwd():
            with torch.no_grad():
                f(logits, targets)

        def fwd_bwd():
            f(logits, targets).backward()

        def reset():
            logits.grad = None

        row("classifier", impl, "fwd", time_ms(fwd, repeats, reset), nbytes)
        row("classifier", impl, "fwd+bwd", time_ms(fwd_bwd, repeats, reset), 3 * nbytes)


def bench_lm_head(row, repeats):
    """Head + loss: y @ W^T -> cross-entropy -> d(y), d(W)."""
    targets = torch.randint(0, V, (ROWS,), device=DEV)
    y = torch.randn(ROWS, C, device=DEV, dtype=bf16, requires_grad=True)
    w = torch.randn(V, C, device=DEV, dtype=bf16, requires_grad=True)

    def head(y, w, t):
        return F.cross_entropy((y @ w.t()).float(), t)

    head_compiled = torch.compile(head)
    for impl, f in (("torch_eager", head), ("torch_compile", head_compiled)):
        def go():
            f(y, w, targets).backward()

        def reset():
            y.grad = None
            w.grad = None

        row("head+loss", impl, "fwd+bwd", time_ms(go, repeats, reset), 0)


def bench_residual_layernorm(row, repeats):
    """Residual add + LayerNorm (float32 stream, bf16 output for the next matmul)."""
    res, x, lw, lb, dy, dres = layernorm_inputs()

    def res_ln(res, x, lw, lb):
        h = res + x
        return h, F.layer_norm(h, (C,), lw, lb, 1e-5).to(bf16)

    res_ln_compiled = torch.compile(res_ln)
    n = ROWS * C
    for impl, f in (("torch_eager", res_ln), ("torch_compile", res_ln_compiled)):
        def fwd():
            with torch.no_grad():
                f(res, x, lw, lb)

        def fwd_bwd():
            h, out = f(res, x, lw, lb)
            torch.autograd.grad([out, h], [res, x, lw, lb], [dy, dres])

        row("residual_layernorm", impl, "fwd", time_ms(fwd, repeats), n * 14)
        row("residual_layernorm", impl, "fwd+bwd", time_ms(fwd_bwd, repeats), n * 28)


def bench_residual_bias(row, repeats):
    """The same with the branch in bf16 plus its linear's bias (GPT's c_proj)."""
    # the bias's gradient is the column sum of d x: torch.compile sees the bias add and may fuse
    # that reduction
    res, _, lw, lb, dy, dres = layernorm_inputs()
    n = ROWS * C
    xh = torch.randn(ROWS, C, device=DEV, dtype=bf16, requires_grad=True)
    xb = torch.randn(C, device=DEV, requires_grad=True)

    def res_bias_ln(res, x, xb, lw, lb):
        h = res + (x + xb)
        return h, F.layer_norm(h, (C,), lw, lb, 1e-5).to(bf16)

    res_bias_ln_compiled = torch.compile(res_bias_ln)
    for impl, f in (("torch_eager", res_bias_ln), ("torch_compile", res_bias_ln_compiled)):
        def fwd():
            with torch.no_grad():
                f(res, xh, xb, lw, lb)

        def fwd_bwd():
            h, out = f(res, xh, xb, lw, lb)
            torch.autograd.grad([out, h], [res, xh, xb, lw, lb], [dy, dres])

        row("residual_bias", impl, "fwd", time_ms(fwd, repeats), n * 12)
        row("residual_bias", impl, "fwd+bwd", time_ms(fwd_bwd, repeats), n * 28)


def bench_bias_gelu(row, repeats):
    """Bias + GELU(tanh) on the (N, 4C) activations."""
    xg = torch.randn(ROWS, 4 * C, device=DEV, dtype=bf16, requires_grad=True)
    bg = torch.randn(4 * C, device=DEV, requires_grad=True)
    dyg = torch.randn(ROWS, 4 * C, device=DEV, dtype=bf16)

    def bias_gelu(x, b):
        return F.gelu(x + b.to(bf16), approximate="tanh")

    bias_gelu_compiled = torch.compile(bias_gelu)
    n = ROWS * 4 * C
    for impl, f in (("torch_eager", bias_gelu), ("torch_compile", bias_gelu_compiled)):
        def fwd():
            with torch.no_grad():
                f(xg, bg)

        def fwd_bwd():
            torch.autograd.grad(f(xg, bg), [xg, bg], dyg)

        row("bias_gelu", impl, "fwd", time_ms(fwd, repeats), n * 4)
        row("bias_gelu", impl, "fwd+bwd", time_ms(fwd_bwd, repeats), n * 10)


def bench_bias_grad(row, repeats):
    """A linear's bias gradient: column sums of d y, (N, C) bf16 -> (C,)."""
    def bias_grad(g):
        return g.sum(0)

    bias_grad_compiled = torch.compile(bias_grad)
    for cols in (C, 3 * C):
        g = torch.randn(ROWS, cols, device=DEV, dtype=bf16)
        for impl, f in (("torch_eager", bias_grad), ("torch_compile", bias_grad_compiled)):
            row(f"bias_grad_{cols}", impl, "bwd", time_ms(lambda: f(g), repeats), g.numel() * 2)


def bench_image_input(row, repeats):
    """Image input: uint8 NCHW -> normalised bf16 channels-last."""
    img = torch.randint(0, 256, (256, 3, 224, 224), device=DEV, dtype=torch.uint8)
    scale = torch.rand(3, device=DEV).view(1, 3, 1, 1)
    shift = torch.rand(3, device=DEV).view(1, 3, 1, 1)

    def image_input(x):
        x = x.contiguous(memory_format=torch.channels_last)
        return (x.float() * scale + shift).to(bf16)

    image_input_compiled = torch.compile(image_input)
    for impl, f in (("torch_eager", image_input), ("torch_compile", image_input_compiled)):
        row("image_input", impl, "fwd", time_ms(lambda: f(img), repeats), img.numel() * 3)


def bench_batch_norm_act(row, repeats):
    """ResNet-50's batch norms at batch 256 (bf16 channels-last, training), then the shortcut's add
    where a block ends, then ReLU: the shapes and bytes of ops_bench.cpp's bench."""
    for c, hw, residual in ((64, 112, False), (64, 56, False), (256, 56, True), (1024, 14, True)):
        shape = (256, c, hw, hw)

        def nhwc(t):
            return t.contiguous(memory_format=torch.channels_last)

        x = nhwc(torch.randn(shape, device=DEV, dtype=bf16)).requires_grad_(True)
        r = nhwc(torch.randn(shape, device=DEV, dtype=bf16)).requires_grad_(True) if residual else None
        dy = nhwc(torch.randn(shape, device=DEV, dtype=bf16))
        w = (torch.randn(c, device=DEV) * 0.1 + 1).requires_grad_(True)
        b = torch.randn(c, device=DEV, requires_grad=True)
        mean, var = torch.zeros(c, device=DEV), torch.ones(c, device=DEV)
        inputs = [x, w, b] + ([r] if residual else [])

        def bn_act(x, r, w, b):
            y = F.batch_norm(x, mean, var, w, b, training=True, momentum=0.1, eps=1e-5)
            return F.relu(y + r if r is not None else y)

        bn_act_compiled = torch.compile(bn_act)
        op = f"batch_norm_act_{c}x{hw}" + ("_add" if residual else "")
        n, extra = x.numel(), 1 if residual else 0
        for impl, f in (("torch_eager", bn_act), ("torch_compile", bn_act_compiled)):
            def fwd():
                with torch.no_grad():
                    f(x, r, w, b)

            def fwd_bwd():
                torch.autograd.grad(f(x, r, w, b), inputs, dy)

            row(op, impl, "fwd", time_ms(fwd, repeats), 2 * n * (2 + extra))
            row(op, impl, "fwd+bwd", time_ms(fwd_bwd, repeats), 2 * n * (6 + 2 * extra))


BENCHES = {
    "classifier": bench_classifier,
    "lm_head": bench_lm_head,
    "residual_layernorm": bench_residual_layernorm,
    "residual_bias": bench_residual_bias,
    "bias_gelu": bench_bias_gelu,
    "bias_grad": bench_bias_grad,
    "image_input": bench_image_input,
    "batch_norm_act": bench_batch_norm_act,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--csv")
    ap.add_argument("--only", default="", help="comma-separated: " + ",".join(BENCHES))
    args = ap.parse_args()
    only = [name for name in args.only.split(",") if name]
    unknown = [name for name in only if name not in BENCHES]
    if unknown:
        sys.exit(f"torch_ops.py: --only: unknown bench {','.join(unknown)} "
                 f"(known: {','.join(BENCHES)})")
    if not torch.cuda.is_available():
        sys.exit("torch_ops.py: needs a CUDA device")
    rows = []

    def row(op, impl, pas, ms, nbytes):
        gbs = nbytes / (ms * 1e-3) / 1e9 if nbytes else 0.0
        rows.append(f"{op},{impl},{pas},{ms:.4f},{gbs:.1f}")
        print(rows[-1], flush=True)

    for name, bench in BENCHES.items():
        if not only or name in only:
            bench(row, args.repeats)
    if args.csv:
        with open(args.csv, "w") as out:
            out.write("op,impl,pass,ms,gb_per_s\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
