"""Golden data for tests/models: the brrr architectures written in plain PyTorch.

Each `models_<case>.pt` is a torch.save'd dict (read in C++ with torch::pickle_load):
  state          state_dict before any forward (parameter and buffer names = brrr's names)
  input, target  one batch and fixed labels (next-token targets for gpt)
  logits_train   forward output in train mode (BatchNorm uses batch statistics)
  loss           cross-entropy of logits_train against target
  grads          d loss / d parameter, one entry per distinct parameter (tied weights once)
  buffers_after  buffers after the train-mode forward (BatchNorm running statistics)
  logits_eval    forward output in eval mode, after the train-mode forward
  macs           multiply-adds of conv/linear layers per example (CNNs), counted with hooks
`models_counts.pt` holds parameter counts and per-example MACs of full-size configurations,
computed on the meta device (no memory, no init).
"""
import math
import pathlib

import torch
import torch.nn as nn
import torch.nn.functional as F


# --- mlp -------------------------------------------------------------------------------------
class Mlp(nn.Module):
    def __init__(self, in_features, hidden_sizes, num_classes, dropout=0.0):
        super().__init__()
        widths = [in_features] + list(hidden_sizes)
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.head = nn.Linear(widths[-1], num_classes)
        self.dropout = dropout

    def forward(self, x):
        x = x.flatten(1)
        for layer in self.hidden:
            x = F.dropout(F.relu(layer(x)), self.dropout, self.training)
        return self.head(x)


# --- convnet ---------------------------------------------------------------------------------
CONVNET_HIDDEN = 64


class ConvNet(nn.Module):
    """Per width: conv3x3 (no bias) - BN - ReLU - maxpool2; then dropout - fc - ReLU - dropout - head."""

    def __init__(self, in_channels, channels, num_classes, image_size, dropout=0.0):
        super().__init__()
        side, prev = image_size, in_channels
        for i, c in enumerate(channels):
            self.add_module(f"conv{i}", nn.Conv2d(prev, c, 3, padding=1, bias=False))
            self.add_module(f"bn{i}", nn.BatchNorm2d(c))
            prev, side = c, side // 2
        self.num_blocks = len(channels)
        self.fc = nn.Linear(prev * side * side, CONVNET_HIDDEN)
        self.head = nn.Linear(CONVNET_HIDDEN, num_classes)
        self.dropout = dropout

    def forward(self, x):
        for i in range(self.num_blocks):
            x = getattr(self, f"bn{i}")(getattr(self, f"conv{i}")(x))
            x = F.max_pool2d(F.relu(x), 2)
        x = F.dropout(x.flatten(1), self.dropout, self.training)
        x = F.dropout(F.relu(self.fc(x)), self.dropout, self.training)
        return self.head(x)


# --- resnet (torchvision v1.5 layout and names) ----------------------------------------------
def conv3x3(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


def conv1x1(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, width, stride, downsample):
        super().__init__()
        self.conv1, self.bn1 = conv3x3(cin, width, stride), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = conv3x3(width, width), nn.BatchNorm2d(width)
        self.downsample = downsample

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return F.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, width, stride, downsample):
        super().__init__()
        self.conv1, self.bn1 = conv1x1(cin, width), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = conv3x3(width, width, stride), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = conv1x1(width, width * 4), nn.BatchNorm2d(width * 4)
        self.downsample = downsample

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = x if self.downsample is None else self.downsample(x)
        return F.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, block, layers, num_classes, in_channels=3, stem="imagenet"):
        super().__init__()
        self.stem = stem
        if stem == "imagenet":
            self.conv1 = nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)
        else:
            self.conv1 = nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        cin = 64
        for i, (n, width) in enumerate(zip(layers, [64, 128, 256, 512])):
            stride = 1 if i == 0 else 2
            blocks = []
            for j in range(n):
                s = stride if j == 0 else 1
                down = None
                if s != 1 or cin != width * block.expansion:
                    down = nn.Sequential(conv1x1(cin, width * block.expansion, s),
                                         nn.BatchNorm2d(width * block.expansion))
                blocks.append(block(cin, width, s, down))
                cin = width * block.expansion
            self.add_module(f"layer{i + 1}", nn.Sequential(*blocks))
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        if self.stem == "imagenet":
            x = F.max_pool2d(x, 3, 2, 1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet18(**kw):
    return ResNet(BasicBlock, [2, 2, 2, 2], **kw)


def resnet50(**kw):
    return ResNet(Bottleneck, [3, 4, 6, 3], **kw)


# --- gpt (GPT-2 / nanoGPT layout and names) --------------------------------------------------
class LayerNorm(nn.Module):
    def __init__(self, n, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head, self.n_embd = c["n_head"], c["n_embd"]
        self.c_attn = nn.Linear(c["n_embd"], 3 * c["n_embd"], bias=c["bias"])
        self.c_proj = nn.Linear(c["n_embd"], c["n_embd"], bias=c["bias"])

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Mlp4(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c["n_embd"], 4 * c["n_embd"], bias=c["bias"])
        self.c_proj = nn.Linear(4 * c["n_embd"], c["n_embd"], bias=c["bias"])

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1, self.attn = LayerNorm(c["n_embd"], c["bias"]), Attention(c)
        self.ln_2, self.mlp = LayerNorm(c["n_embd"], c["bias"]), Mlp4(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c["vocab_size"], c["n_embd"]),
            wpe=nn.Embedding(c["block_size"], c["n_embd"]),
            h=nn.ModuleList(Block(c) for _ in range(c["n_layer"])),
            ln_f=LayerNorm(c["n_embd"], c["bias"])))
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        if c["tie"]:
            self.lm_head.weight = self.transformer.wte.weight

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


# --- helpers ---------------------------------------------------------------------------------
def count_macs(model, x):
    """Multiply-adds of Conv2d and Linear layers for one forward of x, per example."""
    total = [0]

    def hook(m, inp, out):
        if isinstance(m, nn.Conv2d):
            k = m.weight.shape[1] * m.weight.shape[2] * m.weight.shape[3]
            total[0] += out.numel() // out.shape[0] * k
        else:
            total[0] += out.numel() // out.shape[0] * m.in_features

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, (nn.Conv2d, nn.Linear))]
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    return total[0]


def randomize_bn(model, gen):
    """Non-trivial BN affine parameters and running stats, so loading them is actually checked."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5, generator=gen)
                m.bias.uniform_(-0.2, 0.2, generator=gen)
                m.running_mean.uniform_(-0.1, 0.1, generator=gen)
                m.running_var.uniform_(0.8, 1.2, generator=gen)


def snapshot(model, x, target, macs=None):
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.train()
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
    loss.backward()
    out = {
        "state": state,
        "input": x,
        "target": target,
        "logits_train": logits.detach(),
        "loss": loss.detach(),
        "grads": {n: p.grad.detach().clone() for n, p in model.named_parameters()},
        "buffers_after": {n: b.detach().clone() for n, b in model.named_buffers()},
    }
    model.eval()
    with torch.no_grad():
        out["logits_eval"] = model(x)
    if macs is not None:
        out["macs"] = torch.tensor(macs, dtype=torch.int64)
    return out


def gpt_config(**kw):
    c = dict(n_layer=2, n_head=4, n_embd=64, block_size=16, vocab_size=96, bias=True, tie=True)
    c.update(kw)
    return c


def generate(out_dir: pathlib.Path) -> None:
    out_dir = pathlib.Path(out_dir)
    torch.manual_seed(20240611)
    gen = torch.Generator().manual_seed(7)

    mlp = Mlp(1 * 8 * 8, [32, 16], 5)
    x = torch.randn(4, 1, 8, 8)
    torch.save(snapshot(mlp, x, torch.tensor([0, 3, 4, 1]), count_macs(mlp, x)),
               out_dir / "models_mlp.pt")

    convnet = ConvNet(1, [8, 16], 10, 28)
    randomize_bn(convnet, gen)
    x = torch.randn(4, 1, 28, 28)
    torch.save(snapshot(convnet, x, torch.tensor([9, 0, 5, 2]), count_macs(convnet, x)),
               out_dir / "models_convnet.pt")

    for name, ctor, stem, size in [("resnet18", resnet18, "imagenet", 64),
                                   ("resnet50", resnet50, "imagenet", 64)]:
        model = ctor(num_classes=7, in_channels=3, stem=stem)
        randomize_bn(model, gen)
        x = torch.randn(2, 3, size, size)
        torch.save(snapshot(model, x, torch.tensor([6, 1]), count_macs(model, x)),
                   out_dir / f"models_{name}.pt")

    for name, cfg in [("gpt", gpt_config()),
                      ("gpt_nobias_untied", gpt_config(bias=False, tie=False, n_layer=1))]:
        model = Gpt(cfg)
        with torch.no_grad():
            for p in model.parameters():  # GPT-2-like scale, non-trivial LN weights and biases
                p.copy_((1.0 if p.dim() == 1 else 0.0) + 0.05 * torch.randn(p.shape, generator=gen))
        tokens = torch.randint(0, cfg["vocab_size"], (2, cfg["block_size"] + 1), generator=gen)
        torch.save(snapshot(model, tokens[:, :-1], tokens[:, 1:]), out_dir / f"models_{name}.pt")

    counts = {}
    with torch.device("meta"):
        for name, ctor in [("resnet18", resnet18), ("resnet50", resnet50)]:
            m = ctor(num_classes=1000, in_channels=3, stem="imagenet")
            counts[f"{name}_params"] = sum(p.numel() for p in m.parameters())
            counts[f"{name}_macs_224"] = count_macs(m, torch.empty(1, 3, 224, 224))
            m = ctor(num_classes=10, in_channels=3, stem="small")
            counts[f"{name}_small_params"] = sum(p.numel() for p in m.parameters())
            counts[f"{name}_small_macs_32"] = count_macs(m, torch.empty(1, 3, 32, 32))
        m = ConvNet(1, [32, 64], 10, 28)
        counts["convnet_params"] = sum(p.numel() for p in m.parameters())
        counts["convnet_macs_28"] = count_macs(m, torch.empty(1, 1, 28, 28))
        m = Mlp(784, [256, 256], 10)
        counts["mlp_params"] = sum(p.numel() for p in m.parameters())
        m = Gpt(gpt_config(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50257))
        counts["gpt2_params"] = sum(p.numel() for p in m.parameters())  # tied lm_head counted once
        counts["gpt2_wpe"] = m.transformer.wpe.weight.numel()
    torch.save({k: torch.tensor(v, dtype=torch.int64) for k, v in counts.items()},
               out_dir / "models_counts.pt")


if __name__ == "__main__":
    import sys
    generate(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "."))
