"""Check your own implementation: python/examples/ulysses_torch.py (a PyTorch DiT whose attention
is split over 2 and 3 processes, gloo on the CPU) records its step with python/ditsp_tape.py, and
`train locate` compares its tape with our one-rank float64 probe's.
Without a bug it must locate no divergence (float64 at locate's own tolerance; float32 with
--tol); each planted bug must be placed where its construction puts it:
  local-kv               blocks.0.attn.out, forward, every token (each rank's queries miss the
                         other ranks' keys), every rank
  no-dkv-reduce-scatter  grad.blocks.<last>.attn.k, backward (the first dK of backward; dQ before
                         it is right), every token, every rank
  wrong-restore          blocks.0.attn.out, forward, the tokens of ranks 1 .. P-1 (rank 0's rows
                         [0, n) are its own)
25 tokens: 2 ranks pad to 26, 3 ranks to 27. Also: one process without torch.distributed, the
plain reference model recorded by forward hooks alone with its rows in reverse order (the
recorder's token index puts them back), agrees on what both tapes hold and is told the 37
tensors it lacks; and the diffusers name mapping round-trips.

usage: check_your_own.py TRAIN_F32 TRAIN_F64 WORKDIR
"""
import os
import subprocess
import sys
import time

import numpy as np
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ditsp_tape as tape  # noqa: E402
from dit_torch import DiT  # noqa: E402

CFG = dict(input_size=10, patch_size=2, in_channels=3, hidden_size=16, depth=2, num_heads=2, mlp_ratio=2.0,
           num_classes=10, learn_sigma=False, class_dropout_prob=0.1)
T = (CFG["input_size"] // CFG["patch_size"]) ** 2
BUGS = ["none", "local-kv", "no-dkv-reduce-scatter", "wrong-restore"]
# float32 against float64: the largest per-tensor ||a - b|| / ||b|| of a correct float32 step of
# this random checkpoint was 4.5e-4 (the gradient of the patch embedding's bias)
F32_TOL = "1e-3"
failures = checks = 0


def check(ok, what):
    global failures, checks
    checks += 1
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {what}")


def ranks(lo, hi, p):
    return f"rank {lo} of {p}" if lo == hi else f"ranks {lo}-{hi} of {p}"


def expected(bug, p):
    """What locate must print first, by construction of the bug, for p processes"""
    n = tape.contiguous_shard(T, p, 0)[1]
    last = CFG["depth"] - 1
    where = {"local-kv": ("blocks.0.attn.out (forward, block 0, op attn.out)", 0, p - 1, 0),
             "no-dkv-reduce-scatter": (f"grad.blocks.{last}.attn.k (backward, block {last}, op attn.k)", 0, p - 1, 0),
             "wrong-restore": ("blocks.0.attn.out (forward, block 0, op attn.out)", 1, p - 1, n)}
    if bug == "none":
        return "no divergence: every tensor of the step is within tolerance"
    op, r0, r1, t0 = where[bug]
    return f"first divergence: {op}, tokens {t0}-{T - 1} of {T} ({ranks(r0, r1, p)} in A, rank 0 of 1 in B);"


def main():
    train32, train64, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    start = time.time()
    # a random checkpoint (every gate non-zero, so backward reaches every op), a batch, our tape
    rng = np.random.default_rng(35)
    sd = {k: rng.normal(0, 0.3, v.shape) for k, v in DiT(**CFG).state_dict().items()}
    ckpt, batch, ours = (os.path.join(work, f) for f in ("model.safetensors", "batch.safetensors", "ours.tape"))
    for f in (batch, ours, os.path.join(work, "probe.safetensors")):
        if os.path.exists(f):
            os.remove(f)
    tape.write_checkpoint(ckpt, sd, CFG)
    subprocess.run([train32, "probe", "--make-batch", "2", "--ckpt", ckpt, "--out", batch], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([train64, "probe", "--ckpt", ckpt, "--batch", batch, "--out", os.path.join(work, "probe.safetensors"),
                    "--dump-tape", ours], check=True, stdout=subprocess.DEVNULL)
    example = os.path.join(ROOT, "python", "examples", "ulysses_torch.py")
    for p, dtypes in ((2, "float64,float32"), (3, "float64")):
        t0 = time.time()
        subprocess.run([sys.executable, example, "--procs", str(p), "--ckpt", ckpt, "--batch", batch, "--bug", ",".join(BUGS),
                        "--dtype", dtypes, "--tape", os.path.join(work, f"their-{p}.{{bug}}.{{dtype}}.tape")],
                       check=True, stdout=subprocess.DEVNULL)
        print(f"ulysses_torch.py, {p} processes, {len(BUGS)} variants in {dtypes}: {time.time() - t0:.1f} s")
        for dtype in dtypes.split(","):
            for bug in BUGS:
                cmd = [train64, "locate", os.path.join(work, f"their-{p}.{bug}.{dtype}.tape"), ours]
                cmd += ["--tol", F32_TOL] if dtype == "float32" else []
                v = subprocess.run(cmd, capture_output=True, text=True)
                want = expected(bug, p)
                ok = v.stdout.startswith(want) and v.returncode == (0 if bug == "none" else 1)
                check(ok, f"{p} processes, {dtype}, bug {bug}: {v.stdout.strip()[:170]}"
                      + ("" if ok else f"\n     expected (exit {0 if bug == 'none' else 1}): {want}\n     got exit {v.returncode}: {v.stderr.strip()}"))
    # one process, no torch.distributed: the plain reference model with its modules watched
    # (hooks only: no tensor marked by hand), its tokens recorded in reverse row order; locate
    # compares what both tapes hold and names what this one lacks
    state, cfg = tape.load_checkpoint(ckpt, torch.float64)
    model = DiT(**cfg).double()
    model.load_state_dict(state, strict=True)
    rec = tape.TapeRecorder(tokens=T, token_index=range(T - 1, -1, -1))
    for i, blk in enumerate(model.blocks):
        rec.watch(blk.attn.qkv, [f"blocks.{i}.attn.{x}" for x in "qkv"], view=lambda u: [w.flip(1) for w in u.chunk(3, -1)])
        for mod, name in ((blk.adaLN_modulation, "adaLN"), (blk.mlp.fc1, "mlp.fc1"), (blk.mlp.fc2, "mlp.fc2")):
            rec.watch(mod, f"blocks.{i}.{name}", view=(lambda u: u.flip(1)) if name != "adaLN" else None)
    rec.watch(model.final_layer.linear, "final_layer.out", view=lambda u: u.flip(1))
    b = tape.load_batch(batch, torch.float64)
    out = model(b["x"], b["t"], b["y"])
    ((out - b["target"]) ** 2).mean().backward()
    rec.gradients({n: p.grad for n, p in model.named_parameters() if p.requires_grad})
    one = os.path.join(work, "their-1.hooks.tape")
    rec.write(one)
    v = subprocess.run([train64, "locate", one, ours], capture_output=True, text=True)
    want = "no divergence: every tensor both tapes hold (57) is within tolerance; 37 tensors of B are not in A (x_embedder, c, blocks.0.norm1, ...)"
    check(v.returncode == 0 and v.stdout.strip() == want, f"1 process, hooks only, rows reversed: {v.stdout.strip()}"
          + ("" if v.stdout.strip() == want else f"\n     expected: {want}\n     {v.stderr.strip()}"))
    # diffusers: every name maps, qkv splits in three and joins again, the embedders are copied
    d = CFG["depth"]
    ours_sd = {k: torch.from_numpy(v) for k, v in sd.items()}
    theirs = tape.to_diffusers(ours_sd)
    back = tape.from_diffusers(theirs, d)
    same = set(back) == set(ours_sd) and all(torch.equal(back[k], ours_sd[k]) for k in ours_sd)
    # the 5 embedder tensors copied into each block, each block's qkv pair split into 3 pairs
    count = len(ours_sd) + 5 * (d - 1) + 4 * d
    names = ["pos_embed.proj.weight", f"transformer_blocks.{d - 1}.norm1.emb.timestep_embedder.linear_2.bias",
             "transformer_blocks.0.attn1.to_v.bias", "transformer_blocks.0.attn1.to_out.0.weight",
             "transformer_blocks.0.ff.net.0.proj.weight", "transformer_blocks.0.ff.net.2.bias",
             "transformer_blocks.0.norm1.linear.weight", "proj_out_1.weight", "proj_out_2.bias"]
    split = torch.equal(torch.cat([theirs[f"transformer_blocks.1.attn1.to_{x}.weight"] for x in "qkv"]),
                        ours_sd["blocks.1.attn.qkv.weight"])
    check(same and split and len(theirs) == count and all(n in theirs for n in names),
          f"diffusers names: {len(ours_sd)} tensors -> {len(theirs)} of DiTTransformer2DModel (expected {count}) and back")
    print(f"check your own implementation: {checks - failures} passed, {failures} failed ({time.time() - start:.0f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
