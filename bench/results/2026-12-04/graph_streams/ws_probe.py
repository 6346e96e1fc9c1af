# How much does each stream's cuBLAS / cuBLASLt workspace add to memory_allocated?
import torch, torch.nn.functional as F
torch.backends.cuda.matmul.allow_tf32 = True
a = torch.randn(2048, 768, device='cuda', dtype=torch.bfloat16)
w = torch.randn(3072, 768, device='cuda', dtype=torch.bfloat16)
b = torch.randn(3072, device='cuda', dtype=torch.bfloat16)
def alloc():
    torch.cuda.synchronize(); return torch.cuda.memory_allocated() / 2**20
def probe(tag):
    m0 = alloc(); y = a @ w.t(); del y; m1 = alloc()
    y = F.linear(a, w, b); del y; m2 = alloc()
    with torch.autocast('cuda', dtype=torch.bfloat16):
        y = F.linear(a.float(), w.float(), b.float()); del y
    m3 = alloc()
    print(f"{tag}: matmul +{m1-m0:.2f} MiB, linear+bias +{m2-m1:.2f} MiB, autocast linear +{m3-m2:.2f} MiB, total {m3:.2f}")
print("base", alloc())
probe("main stream")
probe("main stream again")
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    probe("side stream")
    probe("side stream again")
import os; print("CUBLAS_WORKSPACE_CONFIG", os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
