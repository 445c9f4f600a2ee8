"""Step time and peak memory of the independent PyTorch DiT (tests/parity/dit_torch.py) on a GPU,
in eager mode, for tests/gpu/step_bench.sh: the model built and stepped as tests/bench/torch_step.py
does on the CPU (DiT(S, P, 3, D, L, H, 4.0, 10, False, 0.1), AdamW, MSE against a random target),
first in float32 (TF32 off for matmuls and cuDNN), then with TF32 on. Each precision: WARMUP
steps, then STEPS steps each timed alone between torch.cuda.synchronize() calls; prints the median
and the peak of torch.cuda.max_memory_allocated() over that precision's steps, one line each:
  torch fp32 cuda: 0.012345 s/step (median of 10 after 3 warm-up), peak 1234.5 MiB
  torch tf32 cuda: ...
and first `torch model: N trainable parameters`. --device cpu runs the same on the CPU (to check
the script where no GPU is; no peak memory there: `peak - MiB`).
usage: torch_step_cuda.py HIDDEN DEPTH HEADS INPUT PATCH BATCH [--steps N] [--warmup W] [--device cuda|cpu]"""
import argparse
import math
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "parity"))
import dit_torch  # noqa: E402


def timestep_forward(self, t):
    """dit_torch's TimestepEmbedder.forward with its frequencies made on t's device (the
    reference builds them on the CPU); the same values"""
    half = self.freq // 2
    f = torch.exp(-math.log(10000) * torch.arange(half, dtype=t.dtype, device=t.device) / half)
    a = t[:, None] * f[None]
    return self.mlp(torch.cat([torch.cos(a), torch.sin(a)], dim=-1))


dit_torch.TimestepEmbedder.forward = timestep_forward

p = argparse.ArgumentParser()
for name in ("hidden", "depth", "heads", "input", "patch", "batch"):
    p.add_argument(name, type=int)
p.add_argument("--steps", type=int, default=10)
p.add_argument("--warmup", type=int, default=3)
p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
a = p.parse_args()
dev = torch.device(a.device)
cuda = dev.type == "cuda"


def sync():
    if cuda:
        torch.cuda.synchronize()


torch.manual_seed(0)
model = dit_torch.DiT(a.input, a.patch, 3, a.hidden, a.depth, a.heads, 4.0, 10, False, 0.1).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0)
B, S = a.batch, a.input
x, target = torch.randn(B, 3, S, S, device=dev), torch.randn(B, 3, S, S, device=dev)
t, y = torch.rand(B, device=dev) * 1000, torch.randint(0, 10, (B,), device=dev)
print(f"torch model: {sum(q.numel() for q in model.parameters() if q.requires_grad)} trainable parameters",
      flush=True)


def step():
    opt.zero_grad(set_to_none=True)
    loss = torch.mean((model(x, t, y) - target) ** 2)
    loss.backward()
    opt.step()


for mode, tf32 in (("fp32", False), ("tf32", True)):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    for _ in range(a.warmup):
        step()
    times = []
    for _ in range(a.steps):
        sync()
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    peak = f"{torch.cuda.max_memory_allocated() / 1048576:.1f}" if cuda else "-"
    print(f"torch {mode} {a.device}: {statistics.median(times):.6f} s/step (median of {a.steps} after "
          f"{a.warmup} warm-up), peak {peak} MiB", flush=True)
