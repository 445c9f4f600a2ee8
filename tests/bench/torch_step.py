"""Step time of the independent PyTorch DiT (tests/parity/dit_torch.py) on the same config as a
`train/train` benchmark run: forward, MSE loss, backward and an AdamW step in float32, with a
given number of threads. Prints one line: `torch <threads> threads: <seconds> s/step`.
usage: torch_step.py HIDDEN DEPTH HEADS INPUT PATCH BATCH THREADS [STEPS]"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "parity"))
from dit_torch import DiT  # noqa: E402

D, L, H, S, P, B, threads = (int(a) for a in sys.argv[1:8])
steps = int(sys.argv[8]) if len(sys.argv) > 8 else 5
torch.set_num_threads(threads)
torch.manual_seed(0)
model = DiT(S, P, 3, D, L, H, 4.0, 10, False, 0.1)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0)
x, target = torch.randn(B, 3, S, S), torch.randn(B, 3, S, S)
t, y = torch.rand(B) * 1000, torch.randint(0, 10, (B,))
best = float("inf")
for i in range(steps + 1):  # the first step warms up and is not counted
    start = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = torch.mean((model(x, t, y) - target) ** 2)
    loss.backward()
    opt.step()
    if i:
        best = min(best, time.perf_counter() - start)
print(f"torch {threads} threads: {best:.4f} s/step")
