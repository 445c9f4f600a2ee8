"""Files written by `train` read with the official `safetensors` package (not packaged for Debian;
the GPU machines have it): every checkpoint loads into the PyTorch reference DiT with
load_state_dict(strict=True), and the package reads exactly the bytes our own reader does.

usage: load_with_safetensors.py FILE.safetensors...   (prints "skipped" without the package)
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file
except ImportError as e:
    print(f"skipped: the safetensors package check ({e.name} is not installed)")
    sys.exit(0)
from dit_torch import DiT, config_from_meta, st_read  # noqa: E402

failures = 0
for path in sys.argv[1:]:
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
    tensors = load_file(path)
    ours, _ = st_read(path)
    same = sorted(tensors) == sorted(ours) and all(np.array_equal(tensors[k].numpy(), ours[k]) for k in ours)
    ok = same
    what = "same tensors as our reader"
    if "hidden_size" in meta:  # a model checkpoint
        model = DiT(**config_from_meta(meta))
        model.load_state_dict({k: v.float() for k, v in tensors.items()}, strict=True)
        what += ", load_state_dict(strict=True) ok"
    failures += not ok
    print(f"{os.path.basename(path)}: {len(tensors)} tensors, {what if ok else 'DIFFERENT from our reader'}")
print(f"safetensors package check: {len(sys.argv) - 1 - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
