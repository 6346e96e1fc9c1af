#!/usr/bin/env python3
"""Loads DIR/model.safetensors (written by brrr's to_hf_gpt2) into transformers' GPT2LMHeadModel
with strict=True and compares its logits on DIR/expected.safetensors' tokens with brrr's.

Used by tests/models/weights_file_test.cpp; prints "strict load ok, max |diff| = X" and exits 0,
or exits 1 with the reason.
"""
import sys

import torch
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel


def main() -> int:
    out_dir = sys.argv[1]
    weights = load_file(f"{out_dir}/model.safetensors")
    expected = load_file(f"{out_dir}/expected.safetensors")
    n_embd = weights["transformer.wte.weight"].shape[1]
    n_layer = 1 + max(int(k.split(".")[2]) for k in weights if k.startswith("transformer.h."))
    config = GPT2Config(n_layer=n_layer, n_head=4, n_embd=n_embd,
                        n_positions=weights["transformer.wpe.weight"].shape[0],
                        vocab_size=weights["transformer.wte.weight"].shape[0],
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config).eval()
    model.load_state_dict(weights, strict=True)  # raises naming missing/unexpected keys
    with torch.no_grad():
        logits = model(expected["tokens"]).logits
    diff = (logits - expected["logits"]).abs().max().item()
    print(f"strict load ok, max |diff| = {diff:.3g}")
    return 0 if diff < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
