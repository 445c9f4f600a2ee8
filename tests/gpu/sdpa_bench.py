"""PyTorch's scaled_dot_product_attention, forward and backward, on the shapes that bench_kernels
times our CUDA attention on (batch 1, 8 heads of 64 and 128, 1k/4k/16k tokens), in float32, with
TF32 allowed, and in bf16; lines in bench_kernels' format, for tests/gpu/attention_table.py."""
import time

import torch
import torch.nn.functional as F


def timed(fn, budget=0.3):
    fn()
    torch.cuda.synchronize()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < budget:
        fn()
        n += 1
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / n


for name, dtype, tf32 in (("float32", torch.float32, False), ("tf32", torch.float32, True),
                          ("bf16", torch.bfloat16, False)):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    for dh in (64, 128):
        for T in (1024, 4096, 16384):
            q, k, v = (torch.randn(1, 8, T, dh, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
            g = torch.randn(1, 8, T, dh, device="cuda", dtype=dtype)
            with torch.no_grad():
                fwd = timed(lambda: F.scaled_dot_product_attention(q, k, v))
            both = timed(lambda: F.scaled_dot_product_attention(q, k, v).backward(g))
            flops = 4.0 * 8 * T * T * dh
            print(f"attention torch {name} T{T} H8 dh{dh}: fwd {fwd * 1e3:.4f} ms, bwd {(both - fwd) * 1e3:.4f} ms, "
                  f"fwd+bwd {both * 1e3:.4f} ms, {3.5 * flops / both / 1e12:.2f} TFLOP/s", flush=True)
            del q, k, v, g
