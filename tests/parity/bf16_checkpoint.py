"""bf16_checkpoint.py TRAIN CKPT WORK: a checkpoint written in bf16 (and in float16) by PyTorch with
the official safetensors package, as the field shares models, loads into our program and probes.
Independent of our 16-bit readers: PyTorch also writes the same values, rounded to bf16 (float16)
and widened back, as float32, and both files must give the same probe bit for bit: the same
output, loss and every gradient. And the rounding is visible: the bf16 probe differs from the
float32 checkpoint's.
Then our own writer: a run saved with --save-dtype bf16 against the same run saved in float32
(saving does not change the training): each parameter of its model and EMA files is stored as
BF16 and equals PyTorch's rounding of the float32 file's (torch's .to(torch.bfloat16), round to
nearest even: independent of ours), bit for bit; pos_embed stays F32; the optimizer file holds
the float32 masters, equal to the float32 files'; and it probes as PyTorch's bf16 file of the
float32 model does.

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
    print(f"skipped: the bf16 checkpoint check ({e.name} is not installed)")
    sys.exit(0)

train, ckpt, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
with safe_open(ckpt, framework="pt") as f:
    meta = f.metadata()
tensors = load_file(ckpt)
batch = os.path.join(work, "batch.safetensors")
subprocess.run([train, "probe", "--ckpt", ckpt, "--make-batch", "2", "--out", batch], check=True,
               stdout=subprocess.DEVNULL)


def probe(path, batch=batch):
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

# our writer: the same run saved in float32 and in bf16
flags = ["--model", "DiT-tiny/2", "--input-size", "10", "--batch", "4", "--steps", "5",
         "--samples-per-class", "0"]
runs = {}
for dtype in ("fp32", "bf16"):
    runs[dtype] = os.path.join(work, f"ours-{dtype}")
    subprocess.run(["rm", "-rf", runs[dtype]], check=True)
    subprocess.run([train, *flags, "--save-dtype", dtype, "--out", runs[dtype]], check=True,
                   stdout=subprocess.DEVNULL)
problems = []
for file in ("model", "ema"):
    wide = load_file(os.path.join(runs["fp32"], f"{file}.safetensors"))
    low = load_file(os.path.join(runs["bf16"], f"{file}.safetensors"))
    if sorted(wide) != sorted(low):
        problems.append(f"{file}: other tensor names")
        continue
    for k in wide:
        want = wide[k] if k == "pos_embed" else wide[k].to(torch.bfloat16)
        if low[k].dtype != want.dtype or not torch.equal(low[k].view(torch.int16) if want.dtype == torch.bfloat16
                                                        else low[k], want.view(torch.int16) if want.dtype == torch.bfloat16 else want):
            problems.append(f"{file}: {k} ({low[k].dtype}) is not PyTorch's rounding of the float32 file's")
opt = load_file(os.path.join(runs["bf16"], "optimizer.safetensors"))
model32 = load_file(os.path.join(runs["fp32"], "model.safetensors"))
count = sum(v.numel() for k, v in model32.items() if k != "pos_embed")
if opt.get("master.params") is None or opt["master.params"].dtype != torch.float32 or opt["master.params"].numel() != count:
    problems.append("the optimizer file has no float32 master.params of the model's size")
elif sorted(opt["master.params"].tolist()) != sorted(torch.cat([v.flatten() for k, v in model32.items() if k != "pos_embed"]).tolist()):
    problems.append("master.params does not hold the float32 file's values")
ours_batch = os.path.join(work, "ours-batch.safetensors")
subprocess.run([train, "probe", "--ckpt", os.path.join(runs["fp32"], "model.safetensors"), "--make-batch", "2",
                "--out", ours_batch], check=True, stdout=subprocess.DEVNULL)
ours = probe(os.path.join(runs["bf16"], "model.safetensors"), ours_batch)
torch_low = os.path.join(work, "ours-fp32.BF16.safetensors")
with safe_open(os.path.join(runs["fp32"], "model.safetensors"), framework="pt") as f:
    meta32 = f.metadata()
save_file({k: v if k == "pos_embed" else v.to(torch.bfloat16).contiguous() for k, v in model32.items()}, torch_low,
          metadata=meta32)
theirs = probe(torch_low, ours_batch)
if ours is None or theirs is None or sorted(ours) != sorted(theirs) or not all(torch.equal(ours[k], theirs[k]) for k in ours):
    problems.append("our bf16 file does not probe as PyTorch's bf16 file of the float32 model")
failures += bool(problems)
print(f"{'FAIL' if problems else 'ok  '} --save-dtype bf16: the model and EMA files BF16 ({len(model32)} tensors, "
      f"pos_embed F32), PyTorch's rounding of the float32 run's bit for bit, the float32 masters in the optimizer "
      f"file ({count} values), probing as PyTorch's bf16 file" + ("".join("\n  " + p for p in problems)))
print(f"bf16 checkpoint check: {3 - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
