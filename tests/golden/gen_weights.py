"""Weight files as PyTorch users write them, for brrr's model.init_from and export tests.

  weights_mlp_state_dict.pt   torch.save(model.state_dict()) of an Mlp(8, [16], 3): an OrderedDict
  weights_mlp.safetensors     the same tensors through safetensors.torch.save_file (when installed)
  weights_mlp_expected.pt     {"x": input (4, 8), "logits": the model's output (4, 3)}
  weights_many_state_dict.pt  the state_dict of 150 Linear layers (300 entries), and in
  weights_many_expected.pt    {"sum": each entry's sum, in state_dict order}
  hf_gpt2/model.safetensors   a GPT-2-shaped GPT2LMHeadModel with random weights, saved by
                              transformers' save_pretrained (when transformers is installed)
  hf_gpt2_expected.pt         {"tokens": (2, 16), "logits": (2, 16, 50257)} from that model
"""
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from gen_models import Mlp  # noqa: E402


def generate(out_dir: pathlib.Path) -> None:
    out_dir = pathlib.Path(out_dir)
    torch.manual_seed(31)
    mlp = Mlp(8, [16], 3).eval()
    x = torch.randn(4, 8)
    with torch.no_grad():
        logits = mlp(x)
    torch.save(mlp.state_dict(), out_dir / "weights_mlp_state_dict.pt")
    torch.save({"x": x, "logits": logits}, out_dir / "weights_mlp_expected.pt")
    # 300 entries: the pickle's memo passes 255 (LONG_BINPUT), as in any real model.
    many = torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(150)])
    torch.save(many.state_dict(), out_dir / "weights_many_state_dict.pt")
    torch.save({"sum": torch.stack([p.sum() for p in many.state_dict().values()])},
               out_dir / "weights_many_expected.pt")
    try:
        from safetensors.torch import save_file
    except ImportError:
        print("golden: safetensors not installed; no weights_mlp.safetensors")
    else:
        save_file(mlp.state_dict(), str(out_dir / "weights_mlp.safetensors"))

    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        print("golden: transformers not installed; no hf_gpt2 files")
        return
    config = GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=16, vocab_size=50257,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config).eval()
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in model.parameters():  # non-trivial LayerNorm weights and biases
            p.copy_((1.0 if p.dim() == 1 else 0.0) + 0.05 * torch.randn(p.shape, generator=gen))
    model.save_pretrained(out_dir / "hf_gpt2", safe_serialization=True)
    tokens = torch.randint(0, 50257, (2, 16), generator=gen)
    with torch.no_grad():
        hf_logits = model(tokens).logits
    torch.save({"tokens": tokens, "logits": hf_logits}, out_dir / "hf_gpt2_expected.pt")
