"""PyTorch's scaled_dot_product_attention, forward + backward, float32, on the shapes that
bench_kernels times our CUDA attention on (batch 1, 8 heads of 64, 1k/4k/16k tokens); the same
FLOP count (backward 2.5x forward), so the TFLOP/s compare directly."""
import time

import torch
import torch.nn.functional as F


def timed(fn, budget=0.5):
    fn()
    torch.cuda.synchronize()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < budget:
        fn()
        n += 1
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / n


torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
for T in (1024, 4096, 16384):
    q, k, v = (torch.randn(1, 8, T, 64, device="cuda", requires_grad=True) for _ in range(3))
    g = torch.randn(1, 8, T, 64, device="cuda")
    fwd = timed(lambda: F.scaled_dot_product_attention(q, k, v))
    out = F.scaled_dot_product_attention(q, k, v)
    both = timed(lambda: F.scaled_dot_product_attention(q, k, v).backward(g))
    flops = 4.0 * 8 * T * T * 64
    print(f"attention torch SDPA T{T:<5d} H8 dh64 fwd+bwd: {both * 1e3:.3f} ms, "
          f"{3.5 * flops / both / 1e12:.3f} TFLOP/s (fwd {flops / fwd / 1e12:.3f})")
