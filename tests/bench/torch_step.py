"""Step time of the independent PyTorch DiT (tests/parity/dit_torch.py) on the same config as a
`train/train` benchmark run: forward, MSE loss, backward and an AdamW step in float32, with a
given number of threads. MODE: eager (the reference's attention formula, any torch), sdpa (PyTorch 2's
scaled_dot_product_attention), compile (sdpa, the model under torch.compile; its compilation is in
the first, uncounted step). Prints one line: `torch <threads> threads <mode>: <seconds> s/step`.
usage: torch_step.py HIDDEN DEPTH HEADS INPUT PATCH BATCH THREADS [STEPS [MODE]]"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "parity"))
from dit_torch import Attention, DiT  # noqa: E402

D, L, H, S, P, B, threads = (int(a) for a in sys.argv[1:8])
steps = int(sys.argv[8]) if len(sys.argv) > 8 else 5
mode = sys.argv[9] if len(sys.argv) > 9 else "eager"
if mode not in ("eager", "sdpa", "compile"):
    sys.exit(f"torch_step.py: mode {mode!r}: expected eager, sdpa or compile")
Attention.fused = mode != "eager"
torch.set_num_threads(threads)
torch.manual_seed(0)
model = DiT(S, P, 3, D, L, H, 4.0, 10, False, 0.1)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0)
forward = torch.compile(model) if mode == "compile" else model
x, target = torch.randn(B, 3, S, S), torch.randn(B, 3, S, S)
t, y = torch.rand(B) * 1000, torch.randint(0, 10, (B,))
best = float("inf")
for i in range(steps + 1):  # the first step warms up and is not counted
    start = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = torch.mean((forward(x, t, y) - target) ** 2)
    loss.backward()
    opt.step()
    if i:
        best = min(best, time.perf_counter() - start)
print(f"torch {threads} threads {mode}: {best:.4f} s/step")
