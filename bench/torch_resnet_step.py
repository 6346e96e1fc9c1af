#!/usr/bin/env python3
"""PyTorch's side of the ResNet-50 step ceiling (the C++ side is bench/resnet_step_bench.cpp).

One training step of torchvision's ResNet-50 on a batch ALREADY ON THE GPU (synthetic uint8
images + labels, made once): normalise on the device (as brrr's trainer does), forward under bf16
autocast, cross-entropy, backward, clip the gradient norm, fused AdamW step; TF32 on; optionally
channels-last, torch.compile, or the whole step captured in one CUDA graph and replayed
(`--graph`: PyTorch's whole-network capture recipe, warm-up on a side stream, static input, fused
AdamW with a tensor lr). Images/s over timed steps after a warm-up, synchronised at the ends only.

Writes CSV rows `impl,mode,batch,channels_last,images_per_s,step_ms`.

    python3 bench/torch_resnet_step.py --batches 64,256 --steps 30 --warmup 10 [--compile]
"""
import argparse
import pathlib
import sys
import time

import torch
import torch.nn.functional as F

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def bench_one(batch, steps, warmup, channels_last, mode, num_classes, size, clip, device):
    compile_ = mode == "compile"
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet50(num_classes=num_classes).to(device)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=memory_format)
    graph = mode == "graph"
    # A tensor lr: a captured step reads its value on every replay (as brrr's does).
    lr = torch.tensor(1e-3, device=device) if graph else 1e-3
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05,
                            fused=device.type == "cuda", capturable=graph)
    fwd = torch.compile(model) if compile_ else model
    images = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8, device=device)
    labels = torch.randint(0, num_classes, (batch,), device=device)
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255

    def step(zero_grad=True):
        x = ((images.float() - mean) / std).contiguous(memory_format=memory_format)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(fwd(x), labels)
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip, foreach=True)
        opt.step()
        if zero_grad:
            opt.zero_grad(set_to_none=True)

    if graph:
        # torch.cuda.graphs' whole-network recipe: warm up on a side stream, capture, replay.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                step()
        torch.cuda.current_stream().wait_stream(side)
        # The gradients are allocated by the capture and rewritten by every replay: no zeroing.
        opt.zero_grad(set_to_none=True)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step(zero_grad=False)
        step = g.replay
    else:
        for _ in range(warmup):
            step()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    elapsed = time.perf_counter() - t0
    return batch * steps / elapsed, elapsed / steps * 1e3


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="64,256", help="comma-separated batch sizes")
    ap.add_argument("--steps", type=int, default=30, help="timed steps")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first (cuDNN autotune)")
    ap.add_argument("--channels-last", choices=["true", "false", "both"], default="both")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile(model)")
    ap.add_argument("--graph", action="store_true",
                    help="also time the whole step captured in one CUDA graph")
    ap.add_argument("--num-classes", type=int, default=12)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--clip", type=float, default=1.0, help="max grad norm (0 = off)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--csv", type=pathlib.Path)
    args = ap.parse_args(argv)
    try:
        batches = [int(b) for b in args.batches.split(",") if b]
    except ValueError:
        ap.error(f"--batches {args.batches!r}: expected integers like 64,256")
    try:
        import torchvision  # noqa: F401
    except ImportError as e:
        sys.exit(f"torch_resnet_step.py: needs torchvision ({e})")
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    cl_opts = {"true": [True], "false": [False], "both": [False, True]}[args.channels_last]
    modes = ["eager"] + (["compile"] if args.compile else []) + (["graph"] if args.graph else [])
    lines = ["impl,mode,batch,channels_last,images_per_s,step_ms"]
    for mode in modes:
        for cl in cl_opts:
            for b in batches:
                ips, ms = bench_one(b, args.steps, args.warmup, cl, mode,
                                    args.num_classes, args.size, args.clip, device)
                lines.append(f"torch,{mode},{b},{int(cl)},{ips:.1f},{ms:.2f}")
                print(f"# torch {mode} batch {b} channels_last {cl}: {ips:.1f} images/s, "
                      f"{ms:.2f} ms/step", file=sys.stderr)
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    print("\n".join(lines))
    if args.csv:
        args.csv.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
