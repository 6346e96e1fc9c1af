"""Golden data for trainer/optimizer, trainer/lr_schedule, trainer/grad_clip and core/grad_scaler.

Everything here is computed by PyTorch (torch.optim, torch.optim.lr_scheduler, torch.nn.utils,
torch.amp.GradScaler). Schedules without a PyTorch class are LambdaLR with the Hugging Face
formulas (get_cosine_schedule_with_warmup, get_cosine_with_min_lr_schedule_with_warmup,
get_linear_schedule_with_warmup, get_constant_schedule_with_warmup) written out below, so
`transformers` is not needed. Files (torch.save, read in C++ with torch::pickle_load):
  optim_trajectories.pt, optim_schedules.pt, optim_clip.pt, optim_grad_scaler.pt
"""
import math
import pathlib

import torch

NUM_STEPS = 5


def _named_params(gen):
    # Two matrices (weight decay) and two vectors (no decay with no_decay_1d), in this order.
    return {
        "fc1.weight": torch.randn(4, 3, generator=gen, dtype=torch.float32),
        "fc1.bias": torch.randn(4, generator=gen, dtype=torch.float32),
        "fc2.weight": torch.randn(2, 4, generator=gen, dtype=torch.float32),
        "norm.weight": torch.randn(2, generator=gen, dtype=torch.float32) + 1.0,
    }


def _optimizer(case, params):
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": case["weight_decay"]},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    kind = {"foreach": True} if not case["fused"] else {"fused": True}
    if case["name"] == "sgd":
        return torch.optim.SGD(groups, lr=case["lr"], momentum=case["momentum"],
                               nesterov=case["nesterov"], **kind)
    cls = torch.optim.AdamW if case["name"] == "adamw" else torch.optim.Adam
    return cls(groups, lr=case["lr"], betas=tuple(case["betas"]), eps=case["eps"], **kind)


def _trajectories():
    gen = torch.Generator().manual_seed(20240611)
    init = _named_params(gen)
    grads = [{k: torch.randn(v.shape, generator=gen) for k, v in init.items()}
             for _ in range(NUM_STEPS)]
    base = {"lr": 0.1, "momentum": 0.0, "nesterov": False, "weight_decay": 0.0,
            "betas": [0.9, 0.999], "eps": 1e-8}
    configs = {
        "sgd_plain": dict(base, name="sgd"),
        "sgd_momentum_wd": dict(base, name="sgd", momentum=0.9, weight_decay=0.01),
        "sgd_nesterov_wd": dict(base, name="sgd", momentum=0.9, nesterov=True, weight_decay=0.05),
        "adam_l2": dict(base, name="adam", lr=0.01, weight_decay=0.01, betas=[0.8, 0.99]),
        "adamw": dict(base, name="adamw", lr=0.01, weight_decay=0.1, betas=[0.9, 0.95], eps=1e-6),
    }
    cases = {}
    for label, config in configs.items():
        for fused in (False, True):
            case = dict(config, fused=fused)
            params = {k: v.clone().requires_grad_(True) for k, v in init.items()}
            opt = _optimizer(case, params)
            trajectory = []
            for step_grads in grads:
                for k, p in params.items():
                    p.grad = step_grads[k].clone()
                opt.step()
                trajectory.append({k: p.detach().clone() for k, p in params.items()})
            case["trajectory"] = trajectory
            cases[label + ("_fused" if fused else "_foreach")] = case
    return {"param_names": list(init.keys()), "init": init, "grads": grads, "cases": cases}


def _hf_cosine(w, total, min_ratio):
    def f(step):
        if step < w:
            return float(step) / float(max(1, w))
        progress = float(step - w) / float(max(1, total - w))
        factor = 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress))
        return max(0.0, factor * (1.0 - min_ratio) + min_ratio)
    return f


def _hf_linear(w, total, min_ratio):
    def f(step):
        if step < w:
            return float(step) / float(max(1, w))
        factor = max(0.0, float(total - step) / float(max(1, total - w)))
        return factor * (1.0 - min_ratio) + min_ratio
    return f


def _constant(w):
    return lambda step: float(step) / float(max(1.0, w)) if step < w else 1.0


def _step_with_warmup(w, step_size, gamma):
    return lambda step: float(step) / float(max(1, w)) if step < w else gamma ** (step // step_size)


def _wsd(w, total, decay_ratio, min_ratio):
    decay = round(decay_ratio * (total - w))
    start = total - decay

    def f(step):
        if step < w:
            return float(step) / float(max(1, w))
        if step < start:
            return 1.0
        progress = min(1.0, float(step - start) / float(max(1, decay)))
        return max(0.0, (1.0 - progress) * (1.0 - min_ratio) + min_ratio)
    return f


def _run_scheduler(make, base_lr, total):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=base_lr)
    sched = make(opt)
    lrs = []
    for _ in range(total):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return torch.tensor(lrs, dtype=torch.float64)


def _schedules():
    defaults = {"name": "constant", "warmup_steps": 0, "min_lr_ratio": 0.0, "step_size": 1000,
                "gamma": 0.1, "decay_ratio": 0.2, "mode": "min", "patience": 3, "factor": 0.1,
                "threshold": 1e-4}
    lam = torch.optim.lr_scheduler.LambdaLR
    specs = {
        "cosine": (dict(name="cosine", warmup_steps=10), 3e-4, 100, _hf_cosine(10, 100, 0.0)),
        "cosine_min": (dict(name="cosine", warmup_steps=7, min_lr_ratio=0.1), 1e-3, 57,
                       _hf_cosine(7, 57, 0.1)),
        "linear": (dict(name="linear", warmup_steps=10), 0.5, 50, _hf_linear(10, 50, 0.0)),
        "linear_min": (dict(name="linear", warmup_steps=0, min_lr_ratio=0.2), 0.5, 40,
                       _hf_linear(0, 40, 0.2)),
        "constant_warmup": (dict(name="constant", warmup_steps=8), 0.01, 30, _constant(8)),
        "step_warmup": (dict(name="step", warmup_steps=4, step_size=6, gamma=0.5), 0.2, 40,
                        _step_with_warmup(4, 6, 0.5)),
        "wsd": (dict(name="wsd", warmup_steps=5, decay_ratio=0.25, min_lr_ratio=0.1), 1e-3, 61,
                _wsd(5, 61, 0.25, 0.1)),
        "wsd_no_warmup": (dict(name="wsd", decay_ratio=0.5), 2e-3, 20, _wsd(0, 20, 0.5, 0.0)),
    }
    cases = {}
    for label, (opts, base_lr, total, fn) in specs.items():
        cases[label] = {"options": dict(defaults, **opts), "base_lr": base_lr, "max_steps": total,
                        "lrs": _run_scheduler(lambda o, fn=fn: lam(o, fn), base_lr, total)}
    # Plain torch.optim.lr_scheduler.StepLR (no warm-up).
    cases["step"] = {"options": dict(defaults, name="step", step_size=7, gamma=0.3),
                     "base_lr": 0.1, "max_steps": 50,
                     "lrs": _run_scheduler(
                         lambda o: torch.optim.lr_scheduler.StepLR(o, 7, gamma=0.3), 0.1, 50)}
    # ReduceLROnPlateau: the lr after each reported metric.
    plateau = {
        "plateau_min": (dict(name="plateau", mode="min", patience=2, factor=0.5, threshold=0.01,
                             min_lr_ratio=0.05),
                        [1.0, 0.9, 0.895, 0.894, 0.893, 0.5, 0.6, 0.7, 0.8, 0.9, 0.49, 0.48,
                         0.48, 0.48, 0.48, 0.48, 0.48, 0.48, 0.48, 0.48, 0.48, 0.48, 0.48]),
        "plateau_max": (dict(name="plateau", mode="max", patience=0, factor=0.1,
                             threshold=1e-4),
                        [0.1, 0.2, 0.2, 0.3, 0.25, 0.31, 0.31, 0.5]),
    }
    for label, (opts, metrics) in plateau.items():
        opts = dict(defaults, **opts)
        p = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([p], lr=0.1)
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(
            opt, mode=opts["mode"], factor=opts["factor"], patience=opts["patience"],
            threshold=opts["threshold"], threshold_mode="rel", min_lr=opts["min_lr_ratio"] * 0.1)
        lrs = []
        for m in metrics:
            sched.step(m)
            lrs.append(opt.param_groups[0]["lr"])
        cases[label] = {"options": opts, "base_lr": 0.1, "max_steps": 100,
                        "metrics": torch.tensor(metrics, dtype=torch.float64),
                        "lrs": torch.tensor(lrs, dtype=torch.float64)}
    return cases


def _clip():
    gen = torch.Generator().manual_seed(7)
    shapes = [(5, 3), (3,), (2, 2, 2), (1,)]
    cases = {}
    for label, max_norm in (("clipped", 1.0), ("unclipped", 100.0)):
        params = [torch.zeros(s, requires_grad=True) for s in shapes]
        grads = [torch.randn(s, generator=gen) * 2.0 for s in shapes]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        total = torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
        cases[label] = {"max_norm": max_norm, "grads": grads, "total_norm": total,
                        "clipped": [p.grad.clone() for p in params]}
    return cases


def _grad_scaler():
    # fp16-style loop on CPU with loss = sum(p * g), so p.grad = scale * g; steps 2 and 5 hold an
    # inf/NaN and must be skipped with a backoff.
    gen = torch.Generator().manual_seed(3)
    options = {"init_scale": 8.0, "growth_factor": 2.0, "backoff_factor": 0.5,
               "growth_interval": 2}
    p = torch.nn.Parameter(torch.randn(6, generator=gen))
    init = p.detach().clone()
    opt = torch.optim.SGD([p], lr=0.1, foreach=True)
    scaler = torch.amp.GradScaler("cpu", init_scale=options["init_scale"],
                                  growth_factor=options["growth_factor"],
                                  backoff_factor=options["backoff_factor"],
                                  growth_interval=options["growth_interval"])
    true_grads, params, scales = [], [], []
    for step in range(8):
        g = torch.randn(6, generator=gen)
        if step == 2:
            g[1] = float("inf")
        if step == 5:
            g[4] = float("nan")
        true_grads.append(g.clone())
        opt.zero_grad()
        scaler.scale((p * g).sum()).backward()  # p.grad = scale * g
        scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()
        params.append(p.detach().clone())
        scales.append(scaler.get_scale())
    return {"options": options, "init": init, "grads": true_grads, "params": params,
            "scales": torch.tensor(scales, dtype=torch.float64), "lr": 0.1}


def generate(out_dir: pathlib.Path) -> None:
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.save(_trajectories(), out_dir / "optim_trajectories.pt")
    torch.save(_schedules(), out_dir / "optim_schedules.pt")
    torch.save(_clip(), out_dir / "optim_clip.pt")
    torch.save(_grad_scaler(), out_dir / "optim_grad_scaler.pt")


if __name__ == "__main__":
    import sys

    generate(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "golden"))
