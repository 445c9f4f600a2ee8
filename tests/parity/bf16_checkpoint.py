"""bf16_checkpoint.py TRAIN CKPT WORK: a checkpoint written in bf16 (and in float16) by PyTorch with
the official safetensors package, as the field shares models, loads into our program and probes.
Independent of our 16-bit readers: PyTorch also writes the same values, rounded to bf16 (float16)
and widened back, as float32, and both files must give the same probe bit for bit: the same
output, loss and every gradient. And the rounding is visible: the bf16 probe differs from the
float32 checkpoint's.

usage: bf16_checkpoint.py TRAIN CKPT.safetensors WORK   (prints "skipped" without the packages)
"""
import os
import subprocess
import sys

try:
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
except ImportError as e:
    print(f"bf16 checkpoint check: skipped ({e.name} is not installed)")
    sys.exit(0)

train, ckpt, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
with safe_open(ckpt, framework="pt") as f:
    meta = f.metadata()
tensors = load_file(ckpt)
batch = os.path.join(work, "batch.safetensors")
subprocess.run([train, "probe", "--ckpt", ckpt, "--make-batch", "2", "--out", batch], check=True,
               stdout=subprocess.DEVNULL)


def probe(path):
    out = path.replace(".safetensors", ".probe.safetensors")
    r = subprocess.run([train, "probe", "--ckpt", path, "--batch", batch, "--out", out],
                       capture_output=True, text=True)
    if r.returncode:
        print(f"FAIL probe --ckpt {os.path.basename(path)}: exit {r.returncode}: {r.stderr.strip()[:300]}")
        return None
    return load_file(out)


failures = 0
plain = probe(ckpt)
for dtype, name in ((torch.bfloat16, "BF16"), (torch.float16, "F16")):
    low = os.path.join(work, f"model.{name}.safetensors")
    wide = os.path.join(work, f"model.{name}-widened.safetensors")
    save_file({k: v.to(dtype).contiguous() for k, v in tensors.items()}, low, metadata=meta)
    save_file({k: v.to(dtype).float().contiguous() for k, v in tensors.items()}, wide, metadata=meta)
    with safe_open(low, framework="pt") as f:
        stored = {str(f.get_slice(k).get_dtype()) for k in f.keys()}
    a, b = probe(low), probe(wide)
    if a is None or b is None:
        failures += 1
        continue
    same = sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
    moved = plain is not None and not torch.equal(a["out"], plain["out"])
    ok = same and moved and stored == {name}
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} a {name} checkpoint written by PyTorch ({len(tensors)} tensors, stored as "
          f"{', '.join(sorted(stored))}): probe {'identical to' if same else 'DIFFERENT from'} the widened float32 "
          f"file's ({len(a)} tensors); {'differs' if moved else 'does NOT differ'} from the float32 checkpoint's "
          f"(out: largest difference {(a['out'] - plain['out']).abs().max().item():.2e})" if plain is not None else "")
print(f"bf16 checkpoint check: {2 - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
