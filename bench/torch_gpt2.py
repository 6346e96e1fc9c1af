#!/usr/bin/env python3
"""GPT-2 124M in plain PyTorch, built like brrr's `gpt` model, trained on a token file: the
reference for brrr's GPT throughput.

Model: token + learned position embeddings, n_layer pre-LN blocks (LayerNorm -> causal
self-attention through scaled_dot_product_attention(is_causal=True) -> residual; LayerNorm -> MLP
4x with GELU(tanh) -> residual), final LayerNorm, head tied to the token embedding, biases,
dropout 0; init N(0, 0.02), residual projections N(0, 0.02/sqrt(2 n_layer)).
Step: micro-batches of B x T tokens from random windows of the uint16 token file (copied through
pinned memory), bf16 autocast, TF32, loss / accum backward, clip 1.0, fused AdamW (lr 6e-4,
wd 0.1 on 2-D weights, betas 0.9/0.95).

Reports tokens/s and MFU: flops per token = 6 N + 12 L T d (N = parameters without the position
embedding, as in the PaLM appendix / nanoGPT), against the H200's 989 TFLOP/s dense bf16 peak
and, with --matmul-peak, against the measured bf16 matmul peak.

Writes CSV rows `impl,mode,batch,block,accum,tokens_per_s,step_ms,mfu_pct,mfu_measured_pct`.

    python3 bench/torch_gpt2.py --tokens data_cache/fortunes_train.bin --modes eager,compile \
        --accum 1,4 --steps 20 --warmup 5 --matmul-peak

Started by torchrun (WORLD_SIZE set), each rank trains on its GPU (cuda:LOCAL_RANK) under
DistributedDataParallel over NCCL (no_sync on accumulation micro-steps; compile wraps the DDP
module), --batch is per rank, tokens/s are the whole job's (the slowest rank's time), and rank 0
alone prints and writes the CSV (impl `torch_ddp<N>`):

    torchrun --nproc-per-node 8 bench/torch_gpt2.py --modes eager,compile --accum 1 --batch 16
"""
import contextlib
import os
import argparse
import math
import pathlib
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

H200_BF16_DENSE_TFLOPS = 989.0


class Block(nn.Module):
    def __init__(self, d, n_head, bias):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(d, bias=bias)
        self.c_attn = nn.Linear(d, 3 * d, bias=bias)
        self.attn_proj = nn.Linear(d, d, bias=bias)
        self.ln_2 = nn.LayerNorm(d, bias=bias)
        self.c_fc = nn.Linear(d, 4 * d, bias=bias)
        self.mlp_proj = nn.Linear(4 * d, d, bias=bias)

    def forward(self, x):  # (B, T, C)
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        # (B, nh, T, hs)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, n_layer, n_head, n_embd, block_size, vocab_size, bias=True):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head, bias) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, bias=bias)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):  # idx, targets: (B, T) int64
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))


def load_tokens(path, dtype):
    p = pathlib.Path(path)
    if not p.is_file():
        sys.exit(f"torch_gpt2.py: token file {p} not found (scripts/prepare_data.sh makes it)")
    tokens = np.fromfile(p, dtype=np.dtype(dtype))
    if tokens.size < 2:
        sys.exit(f"torch_gpt2.py: token file {p} holds {tokens.size} tokens")
    return torch.from_numpy(tokens.astype(np.int64))


class Batches:
    """Random (B, T+1) windows, staged in pinned memory and copied non_blocking."""

    def __init__(self, tokens, batch, block, device, seed):
        if tokens.numel() <= block + 1:
            sys.exit(f"torch_gpt2.py: {tokens.numel()} tokens < block {block} + 1")
        self.tokens, self.batch, self.block, self.device = tokens, batch, block, device
        self.g = torch.Generator().manual_seed(seed)
        self.offsets = torch.arange(block + 1)
        self.pin = device.type == "cuda"

    def next(self):
        starts = torch.randint(0, self.tokens.numel() - self.block - 1, (self.batch,),
                               generator=self.g)
        w = self.tokens[starts[:, None] + self.offsets]  # (B, T+1)
        if self.pin:
            w = w.pin_memory()
        w = w.to(self.device, non_blocking=True)
        return w[:, :-1], w[:, 1:]


def measured_matmul_tflops(device, n=8192, iters=20):
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        a @ b
    torch.cuda.synchronize()
    return 2 * n ** 3 * iters / (time.perf_counter() - t0) / 1e12


def trace_kernels(args, step, sync, tag):
    """Records --profile-steps steps with the Kineto profiler into PROFILE_DIR/<tag>.json (with
    --profile-memory, every allocation and free too: scripts/memory_peak.py reads them)."""
    from torch.profiler import ProfilerActivity, profile
    args.profile.mkdir(parents=True, exist_ok=True)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 profile_memory=args.profile_memory) as prof:
        for _ in range(args.profile_steps):
            step()
        sync()
    path = args.profile / f"{tag}.json"
    prof.export_chrome_trace(str(path))
    print(f"# trace of {args.profile_steps} steps: {path}", file=sys.stderr)


def join_ddp():
    """The torchrun process group (NCCL), or None when not started by torchrun."""
    if "WORLD_SIZE" not in os.environ:
        return None
    import torch.distributed as dist
    if not torch.cuda.is_available():  # Gloo on CPU: only to try the script without a GPU
        dist.init_process_group("gloo")
        return dist
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    return dist


def bench(args, tokens, mode, accum, device, dist=None):
    torch.manual_seed(1234)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    model = GPT(args.n_layer, args.n_head, args.n_embd, args.block, args.vocab).to(device)
    core = model
    if dist:
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda")
    fwd = torch.compile(model) if mode == "compile" else model
    data = Batches(tokens, args.batch, args.block, device, seed=dist.get_rank() if dist else 0)

    def step():
        for i in range(accum):
            x, y = data.next()
            # DDP: only the last micro-batch's backward all-reduces.
            quiet = model.no_sync() if dist and i + 1 < accum else contextlib.nullcontext()
            with quiet:
                with torch.autocast(device.type, dtype=torch.bfloat16):
                    loss = fwd(x, y)
                (loss / accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    t_compile = time.perf_counter()
    if args.profile and args.profile_at == "start":  # the first steps: compilation, optimizer state
        trace_kernels(args, step, sync, f"{mode}_accum{accum}")
    for _ in range(args.warmup):
        step()
    sync()
    warm_s = time.perf_counter() - t_compile
    if args.profile and args.profile_at == "warm":
        trace_kernels(args, step, sync, f"{mode}_accum{accum}")
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    sync()
    elapsed = time.perf_counter() - t0
    world = 1
    if dist:  # the job's time is its slowest rank's
        t = torch.tensor([elapsed], device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        elapsed, world = t.item(), dist.get_world_size()
    n_params = sum(p.numel() for p in core.parameters()) - core.wpe.weight.numel()
    flops_per_token = 6 * n_params + 12 * args.n_layer * args.block * args.n_embd
    tps = world * args.steps * accum * args.batch * args.block / elapsed
    peak_mib = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else 0.0
    print(f"# {mode} accum {accum}: warm-up {warm_s:.1f} s, last loss {loss.item():.3f}, "
          f"N = {n_params / 1e6:.1f} M, {flops_per_token / 1e9:.3f} GFLOP/token, "
          f"peak memory {peak_mib:.0f} MiB", file=sys.stderr)
    del model, core, opt, fwd
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return tps, elapsed / args.steps * 1e3, tps * flops_per_token / 1e12


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", default="data_cache/fortunes_train.bin")
    ap.add_argument("--dtype", choices=["uint16", "uint32"], default="uint16")
    ap.add_argument("--modes", default="eager,compile", help="eager and/or compile")
    ap.add_argument("--accum", default="1,4", help="comma-separated accumulation steps")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--block", type=int, default=1024)
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-head", type=int, default=12)
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps (compilation included)")
    ap.add_argument("--matmul-peak", action="store_true", help="measure the bf16 matmul peak")
    ap.add_argument("--peak-tflops", type=float, default=H200_BF16_DENSE_TFLOPS)
    ap.add_argument("--profile", type=pathlib.Path, metavar="DIR",
                    help="also write a Kineto trace of --profile-steps steps per run into DIR")
    ap.add_argument("--profile-steps", type=int, default=3)
    ap.add_argument("--profile-at", choices=("warm", "start"), default="warm",
                    help="trace after the warm-up steps (default) or the first steps, before it")
    ap.add_argument("--profile-memory", action="store_true",
                    help="the traces also hold every allocation and free")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--csv", type=pathlib.Path)
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if not set(modes) <= {"eager", "compile"}:
        ap.error(f"--modes {args.modes!r}: expected eager and/or compile")
    try:
        accums = [int(a) for a in args.accum.split(",") if a]
    except ValueError:
        ap.error(f"--accum {args.accum!r}: expected integers like 1,4")
    if args.n_embd % args.n_head:
        ap.error(f"--n-embd {args.n_embd} is not a multiple of --n-head {args.n_head}")
    dist = join_ddp()
    if dist and torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    else:
        device = torch.device(args.device)
    main_rank = not dist or dist.get_rank() == 0
    impl = f"torch_ddp{dist.get_world_size()}" if dist else "torch"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    tokens = load_tokens(args.tokens, args.dtype)
    if int(tokens.max()) >= args.vocab:
        sys.exit(f"torch_gpt2.py: token {int(tokens.max())} in {args.tokens} >= --vocab {args.vocab}")
    measured = measured_matmul_tflops(device) if args.matmul_peak and device.type == "cuda" else None
    if measured:
        print(f"# measured bf16 matmul peak: {measured:.1f} TFLOP/s", file=sys.stderr)
    lines = ["impl,mode,batch,block,accum,tokens_per_s,step_ms,mfu_pct,mfu_measured_pct"]
    for mode in modes:
        for accum in accums:
            tps, ms, tflops = bench(args, tokens, mode, accum, device, dist)
            world = dist.get_world_size() if dist else 1
            mfu = 100 * tflops / (args.peak_tflops * world)
            mfu_m = f"{100 * tflops / (measured * world):.1f}" if measured else ""
            lines.append(f"{impl},{mode},{args.batch},{args.block},{accum},{tps:.0f},{ms:.2f},"
                         f"{mfu:.1f},{mfu_m}")
            if main_rank:
                print(f"# {impl} {mode} accum {accum}: {tps:,.0f} tokens/s, {ms:.1f} ms/step, "
                      f"{tflops:.1f} TFLOP/s, MFU {mfu:.1f} % of {args.peak_tflops:g} per GPU",
                      file=sys.stderr)
    if measured:
        lines.append(f"# measured_matmul_peak_tflops,{measured:.1f}")
    if main_rank:
        print("\n".join(lines))
        if args.csv:
            args.csv.write_text("\n".join(lines) + "\n")
    if dist:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
