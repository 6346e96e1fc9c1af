"""Probe (2026-12-07): can cuDNN's batch norm do the ReLU and the residual add in the same kernel
(cudnnBatchNormalizationForwardTrainingEx / BackwardEx with CUDNN_BATCHNORM_OPS_BN_ACTIVATION and
_BN_ADD_ACTIVATION) for ResNet-50's NHWC shapes in bf16 and fp16, and how fast against eager
PyTorch's batch_norm + add + relu. Answers whether a fused batch-norm op for brrr's ResNet can wrap
cuDNN or needs its own kernels. Loads cuDNN through ctypes (the library torch already loaded).

    python3 cudnn_bn_probe.py [--batch 256] [--repeats 20]
"""
import argparse
import ctypes as C

import torch
import torch.nn.functional as F

NHWC, RELU, NOT_PROPAGATE_NAN = 1, 1, 0
PERSISTENT = 2
OPS = {"bn": 0, "bn_relu": 1, "bn_add_relu": 2}
DT = {torch.float16: 2, torch.bfloat16: 9}


def load():
    for name in ("libcudnn.so.9", "libcudnn_ops.so.9"):
        try:
            lib = C.CDLL(name)
            lib.cudnnBatchNormalizationForwardTrainingEx  # noqa: B018 (probe the symbol)
            return lib, name
        except (OSError, AttributeError):
            continue
    raise SystemExit("no cuDNN with cudnnBatchNormalizationForwardTrainingEx found")


lib, libname = load()
lib.cudnnGetErrorString.restype = C.c_char_p


def chk(status, what):
    if status != 0:
        raise RuntimeError(f"{what}: {lib.cudnnGetErrorString(status).decode()} ({status})")


def ptr(t):
    return C.c_void_p(t.data_ptr()) if t is not None else None


handle = C.c_void_p()
chk(lib.cudnnCreate(C.byref(handle)), "cudnnCreate")
chk(lib.cudnnSetStream(handle, C.c_void_p(torch.cuda.current_stream().cuda_stream)), "stream")
act = C.c_void_p()
chk(lib.cudnnCreateActivationDescriptor(C.byref(act)), "act")
chk(lib.cudnnSetActivationDescriptor(act, RELU, NOT_PROPAGATE_NAN, C.c_double(0.0)), "act set")


def tdesc(dtype, n, c, h, w):
    d = C.c_void_p()
    chk(lib.cudnnCreateTensorDescriptor(C.byref(d)), "desc")
    chk(lib.cudnnSetTensor4dDescriptor(d, NHWC, DT[dtype], n, c, h, w), "desc set")
    return d


def bn_desc(xd):
    d = C.c_void_p()
    chk(lib.cudnnCreateTensorDescriptor(C.byref(d)), "bn desc")
    chk(lib.cudnnDeriveBNTensorDescriptor(d, xd, PERSISTENT), "derive")
    return d


ONE, ZERO = C.c_float(1.0), C.c_float(0.0)
EPS = 1e-5


class Fused:
    """One cuDNN BN(+add)(+ReLU) of a fixed shape: forward and backward through the Ex API."""

    def __init__(self, ops, x):
        n, c, h, w = x.shape
        self.ops = OPS[ops]
        self.xd = tdesc(x.dtype, n, c, h, w)
        self.bd = bn_desc(self.xd)
        self.act = act if self.ops else None
        zd = self.xd if self.ops == 2 else None
        ws, rs, bws = C.c_size_t(), C.c_size_t(), C.c_size_t()
        chk(lib.cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
            handle, PERSISTENT, self.ops, self.xd, zd, self.xd, self.bd, self.act, C.byref(ws)),
            "fwd workspace")
        chk(lib.cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
            handle, PERSISTENT, self.ops, self.act, self.xd, C.byref(rs)), "reserve")
        chk(lib.cudnnGetBatchNormalizationBackwardExWorkspaceSize(
            handle, PERSISTENT, self.ops, self.xd, self.xd, self.xd, zd, self.xd, self.bd,
            self.act, C.byref(bws)), "bwd workspace")
        dev = x.device
        self.ws = torch.empty(max(ws.value, bws.value, 1), dtype=torch.uint8, device=dev)
        self.rs = torch.empty(max(rs.value, 1), dtype=torch.uint8, device=dev)
        self.sizes = (ws.value, rs.value, bws.value)
        self.mean = torch.empty(c, device=dev)
        self.invstd = torch.empty(c, device=dev)
        self.rmean = torch.zeros(c, device=dev)
        self.rvar = torch.ones(c, device=dev)

    def forward(self, x, z, w, b, y):
        chk(lib.cudnnBatchNormalizationForwardTrainingEx(
            handle, PERSISTENT, self.ops, C.byref(ONE), C.byref(ZERO),
            self.xd, ptr(x), self.xd if self.ops == 2 else None, ptr(z) if self.ops == 2 else None,
            self.xd, ptr(y), self.bd, ptr(w), ptr(b), C.c_double(0.1), ptr(self.rmean),
            ptr(self.rvar), C.c_double(EPS), ptr(self.mean), ptr(self.invstd), self.act,
            ptr(self.ws), C.c_size_t(self.ws.numel()), ptr(self.rs), C.c_size_t(self.rs.numel())),
            "forward")

    def backward(self, x, y, dy, w, b, dx, dz, dw, db):
        chk(lib.cudnnBatchNormalizationBackwardEx(
            handle, PERSISTENT, self.ops, C.byref(ONE), C.byref(ZERO), C.byref(ONE),
            C.byref(ZERO), self.xd, ptr(x), self.xd if self.ops else None,
            ptr(y) if self.ops else None, self.xd, ptr(dy),
            self.xd if self.ops == 2 else None, ptr(dz) if self.ops == 2 else None,
            self.xd, ptr(dx), self.bd, ptr(w), ptr(b), ptr(dw), ptr(db), C.c_double(EPS),
            ptr(self.mean), ptr(self.invstd), self.act, ptr(self.ws),
            C.c_size_t(self.ws.numel()), ptr(self.rs), C.c_size_t(self.rs.numel())), "backward")


def cl(t):
    return t.contiguous(memory_format=torch.channels_last)


def eager(ops, x, z, w, b):
    y = F.batch_norm(x, None, None, w, b, training=True, eps=EPS)
    if ops == "bn_add_relu":
        y = y + z
    return torch.relu(y) if ops != "bn" else y


def timed(fn, repeats):
    for _ in range(3):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / repeats * 1e3  # us


def rel(a, b):
    return ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-6)).item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=20)
    a = ap.parse_args()
    n = a.batch
    shapes = [(64, 112), (64, 56), (256, 56), (128, 28), (512, 28), (256, 14), (1024, 14),
              (512, 7), (2048, 7)]
    print(f"# {libname} version {lib.cudnnGetVersion()}, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name()}, batch {n}")
    # Which kernels eager bf16 NHWC batch norm runs (cuDNN or ATen's own).
    x = cl(torch.randn(n, 256, 56, 56, device="cuda", dtype=torch.bfloat16)).requires_grad_()
    w = torch.ones(256, device="cuda", requires_grad=True)
    b = torch.zeros(256, device="cuda", requires_grad=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        F.batch_norm(x, None, None, w, b, training=True).sum().backward()
        torch.cuda.synchronize()
    names = sorted({e.name[:90] for e in prof.events() if e.device_type.name == "CUDA"})
    print("# eager bf16 NHWC batch_norm kernels:", " | ".join(names))
    print("dtype,ops,C,HW,status,fwd_ws,reserve,bwd_ws,fwd_us,eager_fwd_us,fwd_bwd_us,"
          "eager_fwd_bwd_us,y_err,dx_err,dw_err,db_err,dz_err")
    for dtype in (torch.bfloat16, torch.float16):
        for c, hw in shapes:
            for ops in ("bn", "bn_relu", "bn_add_relu"):
                g = torch.Generator(device="cuda").manual_seed(c * 1000 + hw)
                shape = (n, c, hw, hw)
                x = cl(torch.randn(shape, device="cuda", generator=g).mul_(2).add_(0.5).to(dtype))
                z = cl(torch.randn(shape, device="cuda", generator=g).to(dtype))
                dy = cl(torch.randn(shape, device="cuda", generator=g).to(dtype))
                w = torch.rand(c, device="cuda", generator=g) + 0.5
                b = torch.randn(c, device="cuda", generator=g)
                row = f"{str(dtype)[6:]},{ops},{c},{hw}"
                try:
                    f = Fused(ops, x)
                    y = torch.full_like(x, float("nan"))
                    dx, dz = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
                    dw, db = torch.full_like(w, float("nan")), torch.full_like(b, float("nan"))
                    f.forward(x, z, w, b, y)
                    f.backward(x, y, dy, w, b, dx, dz, dw, db)
                    torch.cuda.synchronize()
                except RuntimeError as e:
                    print(f"{row},error: {e}", flush=True)
                    continue
                # Reference in float32 through autograd.
                xr, zr = x.float().requires_grad_(), z.float().requires_grad_()
                wr, br = w.clone().requires_grad_(), b.clone().requires_grad_()
                yr = eager(ops, xr, zr, wr, br)
                gx, gz, gw, gb = torch.autograd.grad(yr, (xr, zr, wr, br), dy.float(),
                                                     allow_unused=True)
                errs = [rel(y, yr), rel(dx, gx), rel(dw, gw), rel(db, gb),
                        rel(dz, gz) if ops == "bn_add_relu" else 0.0]
                t_fwd = timed(lambda: f.forward(x, z, w, b, y), a.repeats)
                t_fb = timed(lambda: (f.forward(x, z, w, b, y),
                                      f.backward(x, y, dy, w, b, dx, dz, dw, db)), a.repeats)
                xe, ze = x.detach().requires_grad_(), z.detach().requires_grad_()
                we, be = w.clone().requires_grad_(), b.clone().requires_grad_()
                t_efwd = timed(lambda: eager(ops, xe, ze, we, be), a.repeats)

                def eager_fb():
                    ye = eager(ops, xe, ze, we, be)
                    ins = (xe, ze, we, be) if ops == "bn_add_relu" else (xe, we, be)
                    torch.autograd.grad(ye, ins, dy)

                t_efb = timed(eager_fb, a.repeats)
                print(f"{row},ok,{f.sizes[0]},{f.sizes[1]},{f.sizes[2]},{t_fwd:.1f},{t_efwd:.1f},"
                      f"{t_fb:.1f},{t_efb:.1f}," + ",".join(f"{e:.2e}" for e in errs), flush=True)


if __name__ == "__main__":
    main()
