#!/usr/bin/env python3
"""The Hugging Face Trainer baseline: GPT-2 124M with the articles' TrainingArguments recipe.

GPT2LMHeadModel(GPT2Config(n_positions=1024, n_embd=768, n_layer=12, n_head=12, vocab 50304,
dropout 0, gelu_new, tied)) built from the config (no hub access: HF_HUB_OFFLINE=1), SDPA attention,
trained by transformers.Trainer on non-overlapping 1024-token windows of the same uint16 token file
brrr uses (labels = input_ids; the model shifts them). Recipe: per_device_train_batch_size 8,
gradient_accumulation_steps 4, bf16, tf32, torch_compile, dataloader_num_workers 4,
dataloader_pin_memory, dataloader_prefetch_factor 2, AdamW fused (lr 6e-4, wd 0.1, betas
0.9/0.95), cosine, max_steps N, report_to none.

tokens/s come from the Trainer's own steps, timed by a TrainerCallback between the end of step
--warmup (compilation done) and the end of the last step, with a CUDA sync at both ends. The
Trainer's own train_runtime (compilation included) is printed too.

Writes one CSV row `impl,mode,batch,block,accum,tokens_per_s,step_ms,mfu_pct,mfu_measured_pct`.

    HF_HUB_OFFLINE=1 python3 bench/hf_gpt2.py --tokens data_cache/fortunes_train.bin \
        --max-steps 30 --warmup 10
"""
import argparse
import dataclasses
import os
import pathlib
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

H200_BF16_DENSE_TFLOPS = 989.0


class TokenWindows(torch.utils.data.Dataset):
    """Non-overlapping windows of `block` tokens (the file is memory-mapped; fork-safe)."""

    def __init__(self, path, block, dtype):
        self.path, self.block, self.dtype = str(path), block, np.dtype(dtype)
        n = os.path.getsize(self.path) // self.dtype.itemsize
        self.count = n // block
        if self.count < 1:
            sys.exit(f"hf_gpt2.py: {path} holds {n} tokens < one window of {block}")
        self.tokens = None

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        if self.tokens is None:  # opened lazily, in the worker that uses it
            self.tokens = np.memmap(self.path, dtype=self.dtype, mode="r")
        ids = torch.from_numpy(self.tokens[i * self.block:(i + 1) * self.block].astype(np.int64))
        return {"input_ids": ids, "labels": ids}


def make_args(out_dir, a):
    from transformers import TrainingArguments
    wanted = dict(
        output_dir=out_dir, per_device_train_batch_size=a.batch,
        gradient_accumulation_steps=a.accum, bf16=True, tf32=torch.cuda.is_available(), torch_compile=not a.no_compile,
        dataloader_num_workers=a.workers, dataloader_pin_memory=True,
        dataloader_prefetch_factor=2 if a.workers > 0 else None, max_steps=a.max_steps,
        report_to="none", learning_rate=6e-4, weight_decay=0.1, adam_beta1=0.9, adam_beta2=0.95,
        adam_epsilon=1e-8, max_grad_norm=1.0, lr_scheduler_type="cosine", warmup_steps=a.warmup,
        optim="adamw_torch_fused", logging_steps=10, save_strategy="no", seed=1234,
        disable_tqdm=True)
    if not torch.cuda.is_available():
        wanted["use_cpu"] = True  # a CPU smoke run (bf16 autocast on the CPU)
    known = {f.name for f in dataclasses.fields(TrainingArguments)}
    dropped = sorted(k for k in wanted if k not in known)
    if dropped:  # e.g. an argument removed in a later transformers: say so, apply it by hand
        print(f"# TrainingArguments of this transformers lacks {dropped} (left out; TF32 is "
              "also set through torch.backends)", file=sys.stderr)
    return TrainingArguments(**{k: v for k, v in wanted.items() if k in known}), dropped


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", default="data_cache/fortunes_train.bin")
    ap.add_argument("--dtype", choices=["uint16", "uint32"], default="uint16")
    ap.add_argument("--max-steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10, help="steps excluded from timing")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--accum", type=int, default=4)
    ap.add_argument("--block", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-head", type=int, default=12)
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--no-compile", action="store_true", help="torch_compile False")
    ap.add_argument("--peak-tflops", type=float, default=H200_BF16_DENSE_TFLOPS)
    ap.add_argument("--csv", type=pathlib.Path)
    args = ap.parse_args(argv)
    if args.max_steps <= args.warmup:
        ap.error(f"--max-steps {args.max_steps} must exceed --warmup {args.warmup}")
    try:
        from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback
        import accelerate  # noqa: F401  (Trainer needs it; fail here with a clear message)
    except ImportError as e:
        sys.exit(f"hf_gpt2.py: needs transformers and accelerate ({e})")
    if not pathlib.Path(args.tokens).is_file():
        sys.exit(f"hf_gpt2.py: token file {args.tokens} not found (scripts/prepare_data.sh)")

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    cuda = torch.cuda.is_available()
    config = GPT2Config(vocab_size=args.vocab, n_positions=args.block, n_embd=args.n_embd,
                        n_layer=args.n_layer, n_head=args.n_head, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu_new",
                        tie_word_embeddings=True, bos_token_id=None, eos_token_id=None)
    torch.manual_seed(1234)
    try:
        model = GPT2LMHeadModel(config, attn_implementation="sdpa")
    except TypeError:  # older signature: the attribute on the config instead
        config._attn_implementation = "sdpa"
        model = GPT2LMHeadModel(config)
    dataset = TokenWindows(args.tokens, args.block, args.dtype)

    class Timer(TrainerCallback):
        def __init__(self):
            self.t = {}

        def on_step_end(self, targs, state, control, **kw):
            if state.global_step in (args.warmup, args.max_steps):
                if cuda:
                    torch.cuda.synchronize()
                self.t[state.global_step] = time.perf_counter()

    timer = Timer()
    with tempfile.TemporaryDirectory(prefix="hf_gpt2_") as out_dir:
        targs, _ = make_args(out_dir, args)
        trainer = Trainer(model=model, args=targs, train_dataset=dataset, callbacks=[timer])
        result = trainer.train()
    timed = args.max_steps - args.warmup
    elapsed = timer.t[args.max_steps] - timer.t[args.warmup]
    tps = timed * args.batch * args.accum * args.block / elapsed
    n_params = sum(p.numel() for p in model.parameters()) - model.transformer.wpe.weight.numel()
    tflops = tps * (6 * n_params + 12 * args.n_layer * args.block * args.n_embd) / 1e12
    mfu = 100 * tflops / args.peak_tflops
    mode = "hf_trainer_eager" if args.no_compile else "hf_trainer_compile"
    print(f"# HF Trainer: {tps:,.0f} tokens/s over steps {args.warmup}..{args.max_steps}, "
          f"{elapsed / timed * 1e3:.1f} ms/step, MFU {mfu:.1f} %; train_runtime "
          f"{result.metrics.get('train_runtime', float('nan')):.1f} s for {args.max_steps} steps "
          f"(compilation included), final loss {result.training_loss:.3f}", file=sys.stderr)
    lines = ["impl,mode,batch,block,accum,tokens_per_s,step_ms,mfu_pct,mfu_measured_pct",
             f"hf,{mode},{args.batch},{args.block},{args.accum},{tps:.0f},"
             f"{elapsed / timed * 1e3:.2f},{mfu:.1f},"]
    print("\n".join(lines))
    if args.csv:
        args.csv.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
