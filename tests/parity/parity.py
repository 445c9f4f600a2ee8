"""Parity of `train probe` with an independent PyTorch DiT (dit_torch.py), computed in float64.

For each config a random checkpoint (every tensor non-zero, pos_embed included) and a random batch
are written; the probe runs in the float32 and float64 builds; its output, loss and every
parameter gradient are compared with the reference by relative error ||a - b|| / ||b||.
Also checks that a checkpoint written by `train` loads into the reference with strict=True and
carries the reference's sin-cos pos_embed. Then a batch of packs (3 images of different sizes and
aspects, probed at 1-4 ranks in every layout) against the reference running each image alone;
a text-conditioned model (captions, a text encoder, cross-attention) at 1-4 ranks in every layout,
and with joint attention (SD3's MMDiT blocks) at 1-4 ranks in every layout.
Clips: a clip model (3 frames of patches, which 2 and 4 ranks cut apart) probed at 1-4 ranks, a
clip model with rotary positions and QK-norm (5 frames of patches, which no rank count divides) at
1-4 ranks, and a pack of two clips of different lengths and sizes against each clip run alone.
--precision bf16 at 1-4 ranks in every layout against the float64 reference and against the
reference under PyTorch's bf16 autocast, within stated bf16 bounds.

usage: parity.py TRAIN_F32 TRAIN_F64 WORKDIR
"""
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dit_torch  # noqa: E402
from dit_torch import (VOCAB, DiT, Tape, config_from_meta, named, sincos_pos_embed,  # noqa: E402
                       sincos_pos_embed_3d, st_read, st_write)

# (output, gradients). Float32's gradients: the full-width k-norm's scale gradient of clip_rope, a
# sum over every token with cancellations, measured 1.07e-4 with AVX-512 kernels (8e-5 with AVX2);
# the smallest planted bug below, the exact GELU, stands at 6e-4
TOL = {"float32": (1e-5, 2e-4), "float64": (1e-10, 1e-10)}

CONFIGS = {
    # odd sizes: 9 tokens, width 12 (not a power of two), 3 heads, mlp 2.5x, 5 channels
    "odd": dict(input_size=6, patch_size=2, in_channels=5, hidden_size=12, depth=2, num_heads=3,
                mlp_ratio=2.5, num_classes=7, learn_sigma=False, class_dropout_prob=0.0),
    # learn_sigma with the null class row, patch 4
    "learn_sigma": dict(input_size=16, patch_size=4, in_channels=4, hidden_size=32, depth=3,
                        num_heads=4, mlp_ratio=4.0, num_classes=10, learn_sigma=True,
                        class_dropout_prob=0.1),
    # patch 1, one head, depth 1
    "patch1": dict(input_size=5, patch_size=1, in_channels=3, hidden_size=8, depth=1, num_heads=1,
                   mlp_ratio=4.0, num_classes=3, learn_sigma=False, class_dropout_prob=0.0),
    # in-context conditioning: time and class tokens in the sequence instead of adaLN
    "in_context": dict(input_size=6, patch_size=2, in_channels=3, hidden_size=12, depth=2, num_heads=3,
                       mlp_ratio=2.0, num_classes=5, learn_sigma=True, class_dropout_prob=0.1,
                       in_context=True),
    # a clip: 6 frames of 4x4 in patches of 2 x 2 x 2, 12 tokens (3 frames of 4)
    "clip": dict(input_size=4, patch_size=2, in_channels=3, hidden_size=32, depth=2, num_heads=2,
                 mlp_ratio=2.0, num_classes=5, learn_sigma=True, class_dropout_prob=0.1, frames=6,
                 patch_t=2),
    # video DiTs: rotary positions (a head of 6: one pair each for frame, row and column) with the
    # per-head QK-norm on 5 heads; the full-width norm with rotary positions, heads of 12; the
    # per-head norm with sin-cos positions
    "rope_head": dict(input_size=10, patch_size=2, in_channels=3, hidden_size=30, depth=2, num_heads=5,
                      mlp_ratio=2.0, num_classes=5, learn_sigma=False, class_dropout_prob=0.1,
                      pos="rope", qk_norm="head"),
    "rope_full": dict(input_size=8, patch_size=2, in_channels=3, hidden_size=60, depth=1, num_heads=5,
                      mlp_ratio=2.0, num_classes=5, learn_sigma=True, class_dropout_prob=0.0,
                      pos="rope", qk_norm="full"),
    # in-context conditioning with both: its two tokens not turned
    "in_context_rope": dict(input_size=6, patch_size=2, in_channels=3, hidden_size=24, depth=2, num_heads=4,
                            mlp_ratio=2.0, num_classes=5, learn_sigma=False, class_dropout_prob=0.1,
                            in_context=True, pos="rope", qk_norm="full"),
    # a clip with rotary positions (heads of 12: 2 pairs each for frame, row and column) and the
    # full-width norm: 10 frames in patches of 2 x 2 x 2, 20 tokens, 5 frames of them (which 2, 3
    # and 4 ranks cut apart)
    "clip_rope": dict(input_size=4, patch_size=2, in_channels=3, hidden_size=36, depth=2, num_heads=3,
                      mlp_ratio=2.0, num_classes=5, learn_sigma=True, class_dropout_prob=0.1, frames=10,
                      patch_t=2, pos="rope", qk_norm="full"),
    "norm_sincos": dict(input_size=6, patch_size=2, in_channels=3, hidden_size=20, depth=1, num_heads=5,
                        mlp_ratio=2.0, num_classes=5, learn_sigma=False, class_dropout_prob=0.0,
                        qk_norm="head"),
}
# the video configs over ranks: 25 tokens (padded at 2 to 4 ranks), 5 heads (uneven over them)
VIDEO_RUNS = [(n, lay, b) for b in ("float32", "float64") for n in (2, 3, 4) for lay in ("gather", "all-to-all", "ring")
              if b == "float32" or n == 3] + [(4, "hybrid", "float32"), (4, "hybrid", "float64")]
CLIP_RUNS = [(2, "all-to-all"), (3, "ring"), (4, "hybrid")]  # the clip config beyond one rank
# the clip_rope config beyond one rank: its 3 heads uneven over all-to-all's 2 and hybrid's 2 x 2
CLIP_ROPE_RUNS = [(2, "all-to-all"), (3, "gather"), (4, "ring"), (4, "hybrid")]


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def random_case(cfg, seed, work, name, std=0.3):
    rng = np.random.default_rng(seed)
    model = DiT(**cfg).double()
    sd = {k: rng.normal(0, std, v.shape) for k, v in model.state_dict().items()}
    meta = {k: ("true" if v is True else "false" if v is False else v) for k, v in cfg.items()}
    ckpt = os.path.join(work, f"{name}.ckpt.safetensors")
    st_write(ckpt, {k: v.astype(np.float32) for k, v in sd.items()}, meta)
    b, s, c = 3, cfg["input_size"], cfg["in_channels"]
    c_out, h = 2 * c if cfg["learn_sigma"] else c, cfg.get("frames", 1) * s  # clips: frames stacked
    rows = cfg["num_classes"] + (cfg["class_dropout_prob"] > 0)
    batch = {"x": rng.normal(0, 1, (b, c, h, s)).astype(np.float32),
             "t": rng.uniform(0, 999, b).astype(np.float32),
             "y": rng.integers(0, rows, b).astype(np.int64),
             "target": rng.normal(0, 1, (b, c_out, h, s)).astype(np.float32)}
    path = os.path.join(work, f"{name}.batch.safetensors")
    st_write(path, batch)
    return ckpt, path


def still_frames(run):
    """run() with the reference's rotary angles of every frame those of frame 0"""
    angles = dit_torch.rope_angles
    dit_torch.rope_angles = lambda dh, gf, gh, gw: np.tile(angles(dh, 1, gh, gw), (gf, 1))
    try:
        return run()
    finally:
        dit_torch.rope_angles = angles


def reference(ckpt, batch, planted_bug=False, dump=None):
    sd, meta = st_read(ckpt)
    model = DiT(**config_from_meta(meta)).double()
    if planted_bug == "rope-frames-still":  # rotary positions that ignore the frame: a clip turned as one image
        return still_frames(lambda: reference(ckpt, batch, dump=dump))
    if planted_bug == "text-padding" and model.joint:  # the captions' padding taken for words
        for b in model.blocks:
            f = b.forward
            b.forward = lambda x, ctx, c, words, at="", grid=None, f=f: f(x, ctx, c, torch.ones_like(words), at, grid)
    elif planted_bug == "text-padding":  # the captions' padding taken for words by the cross-attention
        for b in model.blocks:
            f = b.cross_attn.forward
            b.cross_attn.forward = lambda x, text, words, at="", f=f: f(x, text, torch.ones_like(words), at)
    elif planted_bug:  # the classic slip: exact GELU where DiT uses the tanh approximation
        for b in model.blocks:
            b.mlp.act = torch.nn.GELU()
    model.load_state_dict({k: torch.from_numpy(v.astype(np.float64)) for k, v in sd.items()}, strict=True)
    bt, _ = st_read(batch)
    Tape.current = Tape() if dump else None  # the named tensors, for `train locate`
    x = torch.from_numpy(bt["x"].astype(np.float64))
    if model.frames > 1:  # the probe's clips have their frames stacked along the height
        x = x.reshape(x.shape[0], x.shape[1], model.frames, x.shape[2] // model.frames, x.shape[3])
    out = model(x, torch.from_numpy(bt["t"].astype(np.float64)), torch.from_numpy(bt["y"]))
    out = out.reshape(out.shape[0], out.shape[1], -1, out.shape[-1])
    loss = named("loss", ((out - torch.from_numpy(bt["target"].astype(np.float64))) ** 2).mean())
    loss.backward()
    if dump:
        Tape.current.dump(dump, model, out.shape[2] * out.shape[3] // model.p ** 2)
        Tape.current = None
    grads = {k: p.grad.numpy() for k, p in model.named_parameters() if p.requires_grad}
    return out.detach().numpy(), loss.item(), grads


# Packs (README, "Mixed resolutions"): 3 images of different sizes and aspects in 2 rows of 127
# tokens (a prime: every rank count pads, and shards cut images), the second row's image after 40
# tokens of padding; probed at 1-4 ranks in every layout against each image run alone.
PACK_CONFIG = dict(input_size=24, patch_size=2, in_channels=3, hidden_size=16, depth=2, num_heads=4,
                   mlp_ratio=2.0, num_classes=5, learn_sigma=True, class_dropout_prob=0.1)
PACK_T = 127
PACK_IMAGES = [(0, 0, 6, 10), (0, 60, 8, 8), (1, 40, 4, 12)]  # row, first token, patch rows, columns
# a pack of two clips in one row of 31 tokens: 2 frames (of patches) of 2x3 patches, and 1 of 3x4
# after 3 tokens of padding; patches of 2 x 2 x 2 (the fifth column: the clip's patch frames)
CLIP_PACK_CONFIG = dict(input_size=8, patch_size=2, in_channels=3, hidden_size=32, depth=2, num_heads=2,
                        mlp_ratio=2.0, num_classes=5, learn_sigma=True, class_dropout_prob=0.1, frames=4,
                        patch_t=2)
CLIP_PACK_T = 31
CLIP_PACK_IMAGES = [(0, 0, 2, 3, 2), (0, 15, 3, 4, 1)]
CLIP_PACK_RUNS = [(1, "gather"), (2, "all-to-all"), (3, "ring"), (4, "hybrid")]
LAYOUTS = {"gather": [], "all-to-all": ["--sp-attention", "all-to-all"], "ring": ["--sp-attention", "ring"],
           "hybrid": ["--sp-attention", "hybrid", "--ulysses-degree", "2"]}
PACK_RUNS = [(1, "gather")] + [(n, lay) for n in (2, 3, 4) for lay in LAYOUTS if lay != "hybrid" or n == 4]
PROBES_AT_ONCE = 4  # their ranks' start-up overlaps: about half the wall time of one at a time
MPIRUN = ["mpirun", "-q", "--oversubscribe"] + (["--allow-run-as-root"] if os.getuid() == 0 else [])


def launch(cmd, **kw):
    """subprocess.run with an Open MPI session folder of the command's own: the probes run several
    at once, and one job's cleanup of a shared folder made another's start fail now and then
    ("orte_session_dir failed")"""
    with tempfile.TemporaryDirectory(prefix="parity-mpi-") as folder:
        return subprocess.run(cmd, env=dict(os.environ, OMPI_MCA_orte_tmpdir_base=folder), **kw)


def strip_get(strip, row, start, gh, gw, p, gf=None, pt=1):
    """The image (C, gh p, gw p) at token `start` of row `row` of the rows' strips (B, C, p, T p):
    its patch at (a, b) is token start + a gw + b, the strip's columns [p token, p token + p).
    A clip (gf given): (C, gf pt, gh p, gw p) from strips (B, C, pt p, T p) of pt frames, its patch
    at (f, a, b) token start + (f gh + a) gw + b."""
    c = strip.shape[1]
    if gf is None:
        return strip[row, :, :, start * p:(start + gh * gw) * p].reshape(c, p, gh, gw, p) \
            .transpose(0, 2, 1, 3, 4).reshape(c, gh * p, gw * p)
    return strip[row, :, :, start * p:(start + gf * gh * gw) * p].reshape(c, pt, p, gf, gh, gw, p) \
        .transpose(0, 3, 1, 4, 2, 5, 6).reshape(c, gf * pt, gh * p, gw * p)


def pack_get(strip, im, cfg):
    """Pack image im (row, start, gh, gw[, gf]) of the strips under cfg"""
    return strip_get(strip, *im[:4], cfg["patch_size"], *((im[4], cfg["patch_t"]) if len(im) > 4 else ()))


def pack_case(work, cfg=PACK_CONFIG, T=PACK_T, pack=PACK_IMAGES, name="packs"):
    """A random checkpoint and a batch of packs; returns their paths and the images, times,
    labels and targets one by one. Padding tokens hold noise too: no output may depend on it."""
    p = cfg["patch_size"]
    rng = np.random.default_rng(2000)
    model = DiT(**cfg).double()
    sd = {k: rng.normal(0, 0.3, v.shape) for k, v in model.state_dict().items()}
    meta = {k: ("true" if v is True else "false" if v is False else v) for k, v in cfg.items()}
    ckpt = os.path.join(work, f"{name}.ckpt.safetensors")
    st_write(ckpt, {k: v.astype(np.float32) for k, v in sd.items()}, meta)
    c, n, rows, pt = cfg["in_channels"], len(pack), 1 + max(i[0] for i in pack), cfg.get("patch_t", 1)
    c_out = 2 * c if cfg["learn_sigma"] else c
    x = rng.normal(0, 1, (rows, c, pt * p, T * p)).astype(np.float32)
    target = rng.normal(0, 1, (rows, c_out, pt * p, T * p)).astype(np.float32)
    images = [pack_get(x, im, cfg) for im in pack]
    targets = [pack_get(target, im, cfg) for im in pack]
    batch = {"x": x, "target": target, "pack": np.array(pack, np.int64),
             "t": rng.uniform(0, 999, n).astype(np.float32),
             "y": rng.integers(0, cfg["num_classes"] + 1, n).astype(np.int64)}
    path = os.path.join(work, f"{name}.batch.safetensors")
    st_write(path, batch)
    return ckpt, path, images, batch["t"], batch["y"], targets


def pack_reference(ckpt, images, t, y, targets, planted_bug=False):
    """Each image's forward alone (DiT.forward_varlen); loss: the mean over all real elements of
    all images; gradients by autograd. Returns the outputs one by one, the loss and gradients."""
    # the planted bug: a grid's rows and columns swapped in its position embedding, which only a
    # non-square image shows
    swapped = (lambda d, gh, gw: sincos_pos_embed(d, gw, gh)) if planted_bug else None
    sd, meta = st_read(ckpt)
    model = DiT(**config_from_meta(meta)).double()
    model.load_state_dict({k: torch.from_numpy(v.astype(np.float64)) for k, v in sd.items()}, strict=True)
    f64 = lambda a: torch.from_numpy(np.asarray(a, np.float64))  # noqa: E731
    out = model.forward_varlen([f64(x) for x in images], f64(t), torch.from_numpy(y), swapped)
    sq = sum(((o - f64(g)) ** 2).sum() for o, g in zip(out, targets))
    loss = sq / sum(g.size for g in targets)
    loss.backward()
    grads = {k: p.grad.numpy() for k, p in model.named_parameters() if p.requires_grad}
    return [o.detach().numpy() for o in out], float(loss), grads


def pack_probe(exe, ranks, layout, ckpt, batch, res, bug=None, cfg=PACK_CONFIG, pack=PACK_IMAGES):
    """The probe of the batch of packs at `ranks` in `layout` into res: (output of every image,
    flattened in order; loss; gradients)"""
    cmd = [exe, "probe", "--ckpt", ckpt, "--batch", batch, "--out", res] + LAYOUTS[layout]
    cmd += ["--inject-bug", bug] if bug else []
    launch((MPIRUN + ["-np", str(ranks)] if ranks > 1 else []) + cmd, check=True,
                   stdout=subprocess.DEVNULL)
    got, _ = st_read(res)
    out = np.concatenate([pack_get(got["out"], im, cfg).ravel() for im in pack])
    return out, float(got["loss"][0]), {k[5:]: v for k, v in got.items() if k.startswith("grad.")}


def pack_errors(got, ref):
    """Relative errors of a probe against the reference: output, loss, worst gradient and its name
    (a gradient the probe lacks counts as infinite)"""
    out, loss, grads = got
    e_grads = {k: rel(grads[k], g) if k in grads else float("inf") for k, g in ref[2].items()}
    worst = max(e_grads, key=e_grads.get)
    return rel(out, ref[0]), rel(loss, ref[1]), e_grads[worst], worst


def check_packs(train32, train64, work):
    """The parity table of packs: every rank count and layout, both builds; then the two pack
    bugs planted in the float32 probe, and one in the reference, must exceed the tolerance.
    Returns (checks, failures)."""
    ckpt, batch, images, t, y, targets = pack_case(work)
    ref_out, ref_loss, ref_grads = pack_reference(ckpt, images, t, y, targets)
    ref = (np.concatenate([o.ravel() for o in ref_out]), ref_loss, ref_grads)
    tokens, batch_rows = sum(gh * gw for _, _, gh, gw in PACK_IMAGES), {i[0] for i in PACK_IMAGES}
    print(f"packs: {len(PACK_IMAGES)} images of "
          f"{', '.join(f'{gh}x{gw}' for _, _, gh, gw in PACK_IMAGES)} patches ({tokens} tokens) in "
          f"{len(batch_rows)} rows of {PACK_T}, against each image run alone")
    print(f"{'ranks':>5} {'layout':<11} {'build':<8} {'output':>9} {'loss':>9} {'worst gradient':>16}")
    # every run, then the two bugs planted in the float32 probe
    runs = [(build, exe, ranks, layout, None) for build, exe in (("float32", train32), ("float64", train64))
            for ranks, layout in PACK_RUNS]
    runs += [("float32", train32, 1, "gather", "pack-mask-crosses-images"),
             ("float32", train32, 2, "gather", "pack-positions-from-shard")]
    with ThreadPoolExecutor(PROBES_AT_ONCE) as pool:
        results = list(pool.map(lambda r: pack_probe(r[1], r[2], r[3], ckpt, batch, os.path.join(
            work, f"packs.{r[0]}.{r[2]}.{r[3]}.{r[4]}.result.safetensors"), r[4]), runs))
    failures = 0
    for (build, _, ranks, layout, bug), got in zip(runs, results):
        e_out, e_loss, e_grad, worst = pack_errors(got, ref)
        tol_out, tol_grad = TOL[build]
        if bug:
            caught = e_out > tol_out or e_grad > tol_grad
            failures += not caught
            print(f"planted bug {bug} ({ranks} rank{'s' if ranks > 1 else ''}, {build}): output "
                  f"{e_out:.2e}, worst gradient {e_grad:.2e} {'caught' if caught else 'NOT CAUGHT'}")
            continue
        ok = e_out <= tol_out and e_loss <= tol_out and e_grad <= tol_grad
        failures += not ok
        print(f"{ranks:>5} {layout:<11} {build:<8} {e_out:9.2e} {e_loss:9.2e} {e_grad:9.2e} {worst:<32}"
              f" {'ok' if ok else 'FAIL'}")
    # the comparison catches a planted bug in the reference too: the float64 probe against it
    bug_out, bug_loss, bug_grads = pack_reference(ckpt, images, t, y, targets, planted_bug=True)
    bug = (np.concatenate([o.ravel() for o in bug_out]), bug_loss, bug_grads)
    e_out, _, e_grad, _ = pack_errors(results[len(PACK_RUNS)], bug)  # float64, 1 rank
    caught = max(e_out, e_grad) > TOL["float64"][1]
    failures += not caught
    print(f"planted bug in the reference (rows and columns of a grid swapped in its position embedding): "
          f"output {e_out:.2e}, worst gradient {e_grad:.2e} against the float64 probe "
          f"{'caught' if caught else 'NOT CAUGHT'}")
    return 2 * len(PACK_RUNS) + 3, failures


# Text conditioning (docs/text.md): 25 tokens, 5 heads of 4 (uneven over 2-4 ranks), captions of 7
# tokens (no rank count divides them), one empty and one full; probed at 1-4 ranks in every layout
TEXT_CONFIG = dict(input_size=10, patch_size=2, in_channels=3, hidden_size=20, depth=2, num_heads=5,
                   mlp_ratio=2.0, num_classes=10, learn_sigma=False, class_dropout_prob=0.0)
TEXT_META = dict(cond="text", text_len=7, text_depth=1, text_attn="cross")
TEXT_WORDS = [0, 3, 7]  # words in each image's caption
# joint attention (SD3's MMDiT blocks): the same rank counts and layouts
JOINT_RUNS = PACK_RUNS


def text_case(work, attn="cross"):
    rng = np.random.default_rng(3000)
    meta = {**{k: ("true" if v is True else "false" if v is False else v) for k, v in TEXT_CONFIG.items()},
            **TEXT_META, "text_attn": attn}
    model = DiT(**config_from_meta(meta)).double()
    sd = {k: rng.normal(0, 0.3, v.shape) for k, v in model.state_dict().items()}
    ckpt = os.path.join(work, f"text.{attn}.ckpt.safetensors")
    st_write(ckpt, {k: v.astype(np.float32) for k, v in sd.items()}, meta)
    b, s, c, L = len(TEXT_WORDS), TEXT_CONFIG["input_size"], TEXT_CONFIG["in_channels"], TEXT_META["text_len"]
    y = np.zeros((b, L), np.int64)
    for i, n in enumerate(TEXT_WORDS):
        y[i, :n] = rng.integers(1, VOCAB + 1, n)
    batch = {"x": rng.normal(0, 1, (b, c, s, s)).astype(np.float32), "t": rng.uniform(0, 999, b).astype(np.float32),
             "y": y, "target": rng.normal(0, 1, (b, c, s, s)).astype(np.float32)}
    path = os.path.join(work, f"text.{attn}.batch.safetensors")
    st_write(path, batch)
    return ckpt, path


def text_probe(exe, ranks, layout, ckpt, batch, res):
    cmd = [exe, "probe", "--ckpt", ckpt, "--batch", batch, "--out", res] + LAYOUTS[layout]
    launch((MPIRUN + ["-np", str(ranks)] if ranks > 1 else []) + cmd, check=True, stdout=subprocess.DEVNULL)
    got, _ = st_read(res)
    return got["out"], float(got["loss"][0]), {k[5:]: v for k, v in got.items() if k.startswith("grad.")}


def check_text(train32, train64, work):
    """The parity table of text conditioning: every rank count and layout, both builds; then a
    reference whose cross-attention lets padding through must differ. Returns (checks, failures)."""
    ckpt, batch = text_case(work)
    ref = reference(ckpt, batch)
    print(f"text: captions of {TEXT_META['text_len']} tokens holding {TEXT_WORDS} words, "
          f"{(TEXT_CONFIG['input_size'] // TEXT_CONFIG['patch_size']) ** 2} image tokens, {TEXT_CONFIG['num_heads']} heads")
    runs = [(build, exe, ranks, layout) for build, exe in (("float32", train32), ("float64", train64))
            for ranks, layout in PACK_RUNS]
    with ThreadPoolExecutor(PROBES_AT_ONCE) as pool:
        results = list(pool.map(lambda r: text_probe(r[1], r[2], r[3], ckpt, batch, os.path.join(
            work, f"text.{r[0]}.{r[2]}.{r[3]}.result.safetensors")), runs))
    failures = 0
    for (build, _, ranks, layout), got in zip(runs, results):
        e_out, e_loss, e_grad, worst = pack_errors(got, ref)
        tol_out, tol_grad = TOL[build]
        ok = e_out <= tol_out and e_loss <= tol_out and e_grad <= tol_grad
        failures += not ok
        print(f"{ranks:>5} {layout:<11} {build:<8} {e_out:9.2e} {e_loss:9.2e} {e_grad:9.2e} {worst:<40}"
              f" {'ok' if ok else 'FAIL'}")
    # the comparison catches a planted bug in the reference: cross-attention that sees padding
    bug = reference(ckpt, batch, planted_bug="text-padding")
    e_out, _, e_grad, _ = pack_errors(results[len(PACK_RUNS)], bug)  # float64, 1 rank
    caught = max(e_out, e_grad) > TOL["float64"][1]
    failures += not caught
    print(f"planted bug in the reference (the cross-attention sees the captions' padding): output {e_out:.2e}, "
          f"worst gradient {e_grad:.2e} against the float64 probe {'caught' if caught else 'NOT CAUGHT'}")
    # locate: the float64 probe's tape at 3 ranks against the reference's, name by name
    tapes = [os.path.join(work, f"text.{k}.tape.safetensors") for k in ("reference", "probe")]
    res = os.path.join(work, "text.tape-probe.safetensors")
    for f in tapes + [res]:
        if os.path.exists(f):
            os.remove(f)
    reference(ckpt, batch, dump=tapes[0])
    launch(MPIRUN + ["-np", "3", train64, "probe", "--ckpt", ckpt, "--batch", batch, "--out", res,
                             "--dump-tape", tapes[1], "--sp-attention", "all-to-all"], check=True, stdout=subprocess.DEVNULL)
    v = launch([train64, "locate", tapes[1], tapes[0]], capture_output=True, text=True)
    ok = v.stdout.startswith("no divergence")
    failures += not ok
    print(f"locate, the 3-rank all-to-all probe's tape against the reference's: {v.stdout.strip()[:150]} "
          f"{'ok' if ok else 'FAIL'}")
    return 2 * len(PACK_RUNS) + 2, failures


def check_joint(train32, train64, work):
    """The parity table of joint attention (SD3's MMDiT blocks) on the text case: every rank count and
    layout, both builds; then a reference whose joint attention lets the captions' padding through
    must differ, and locate finds no divergence between the 3-rank ring probe's tape and the
    reference's. Returns (checks, failures)."""
    ckpt, batch = text_case(work, "joint")
    ref = reference(ckpt, batch)
    print(f"joint attention: the same captions ({TEXT_WORDS} words of {TEXT_META['text_len']}) and image")
    runs = [(build, exe, ranks, layout) for build, exe in (("float32", train32), ("float64", train64))
            for ranks, layout in JOINT_RUNS]
    with ThreadPoolExecutor(PROBES_AT_ONCE) as pool:
        results = list(pool.map(lambda r: text_probe(r[1], r[2], r[3], ckpt, batch, os.path.join(
            work, f"joint.{r[0]}.{r[2]}.{r[3]}.result.safetensors")), runs))
    failures = 0
    for (build, _, ranks, layout), got in zip(runs, results):
        e_out, e_loss, e_grad, worst = pack_errors(got, ref)
        tol_out, tol_grad = TOL[build]
        ok = e_out <= tol_out and e_loss <= tol_out and e_grad <= tol_grad
        failures += not ok
        print(f"{ranks:>5} {layout:<11} {build:<8} {e_out:9.2e} {e_loss:9.2e} {e_grad:9.2e} {worst:<40}"
              f" {'ok' if ok else 'FAIL'}")
    bug = reference(ckpt, batch, planted_bug="text-padding")
    e_out, _, e_grad, _ = pack_errors(results[len(JOINT_RUNS)], bug)  # float64, 1 rank
    caught = max(e_out, e_grad) > TOL["float64"][1]
    failures += not caught
    print(f"planted bug in the reference (the joint attention sees the captions' padding): output {e_out:.2e}, "
          f"worst gradient {e_grad:.2e} against the float64 probe {'caught' if caught else 'NOT CAUGHT'}")
    tapes = [os.path.join(work, f"joint.{k}.tape.safetensors") for k in ("reference", "probe")]
    res = os.path.join(work, "joint.tape-probe.safetensors")
    for f in tapes + [res]:
        if os.path.exists(f):
            os.remove(f)
    reference(ckpt, batch, dump=tapes[0])
    launch(MPIRUN + ["-np", "3", train64, "probe", "--ckpt", ckpt, "--batch", batch, "--out", res,
                             "--dump-tape", tapes[1], "--sp-attention", "ring"], check=True, stdout=subprocess.DEVNULL)
    v = launch([train64, "locate", tapes[1], tapes[0]], capture_output=True, text=True)
    ok = v.stdout.startswith("no divergence")
    failures += not ok
    print(f"locate, the 3-rank ring probe's tape against the reference's: {v.stdout.strip()[:150]} "
          f"{'ok' if ok else 'FAIL'}")
    return len(runs) + 2, failures


def check_clips(train32, train64, work):
    """Clips beyond one rank: the clip config probed at 2-4 ranks (3 frames of patches, which 2
    and 4 ranks cut apart) against the reference; a pack of two clips of different lengths and
    sizes probed at 1-4 ranks against each clip run alone (positions from the 3-D table of each
    clip's own grid). Both builds. Returns (checks, failures)."""
    ckpt, batch = random_case(CONFIGS["clip"], 1000 + list(CONFIGS).index("clip"), work, "clip")
    ref = reference(ckpt, batch)
    pck, pbatch, images, t, y, targets = pack_case(work, CLIP_PACK_CONFIG, CLIP_PACK_T, CLIP_PACK_IMAGES, "clip-pack")
    pref_out, pref_loss, pref_grads = pack_reference(pck, images, t, y, targets)
    pref = (np.concatenate([o.ravel() for o in pref_out]), pref_loss, pref_grads)
    runs = [(build, exe, ranks, layout, "clip") for build, exe in (("float32", train32), ("float64", train64))
            for ranks, layout in CLIP_RUNS]
    runs += [(build, exe, ranks, layout, "pack") for build, exe in (("float32", train32), ("float64", train64))
             for ranks, layout in CLIP_PACK_RUNS]
    rckpt, rbatch = random_case(CONFIGS["clip_rope"], 1000 + list(CONFIGS).index("clip_rope"), work, "clip_rope")
    rref = reference(rckpt, rbatch)
    runs += [(build, exe, ranks, layout, "rope") for build, exe in (("float32", train32), ("float64", train64))
             for ranks, layout in CLIP_ROPE_RUNS]

    def probe(r):
        build, exe, ranks, layout, kind = r
        res = os.path.join(work, f"clip.{kind}.{build}.{ranks}.{layout}.result.safetensors")
        if kind == "pack":
            return pack_probe(exe, ranks, layout, pck, pbatch, res, cfg=CLIP_PACK_CONFIG, pack=CLIP_PACK_IMAGES)
        c, b = (rckpt, rbatch) if kind == "rope" else (ckpt, batch)
        launch(MPIRUN + ["-np", str(ranks), exe, "probe", "--ckpt", c, "--batch", b, "--out", res]
                       + LAYOUTS[layout], check=True, stdout=subprocess.DEVNULL)
        got, _ = st_read(res)
        return got["out"].ravel(), float(got["loss"][0]), {k[5:]: v for k, v in got.items() if k.startswith("grad.")}
    with ThreadPoolExecutor(PROBES_AT_ONCE) as pool:
        results = list(pool.map(probe, runs))
    cc = CONFIGS["clip"]
    gf, g = cc["frames"] // cc["patch_t"], cc["input_size"] // cc["patch_size"]
    print(f"clips: {cc['frames']} frames in {cc['patch_t']}x{cc['patch_size']}x{cc['patch_size']} patches "
          f"({gf * g * g} tokens, {gf} frames of them) at 2-4 ranks; a pack of clips of "
          f"{' and '.join(f'{gf}x{gh}x{gw}' for _, _, gh, gw, gf in CLIP_PACK_IMAGES)} patches in a row of "
          f"{CLIP_PACK_T} tokens, against each clip run alone")
    failures = 0
    rc = CONFIGS["clip_rope"]
    print(f"clip_rope: {rc['frames']} frames in {rc['patch_t']}x{rc['patch_size']}x{rc['patch_size']} patches "
          f"({rc['frames'] // rc['patch_t']} frames of them), rotary positions, the {rc['qk_norm']}-width "
          f"QK-norm, {rc['num_heads']} heads, at 2-4 ranks")
    for (build, _, ranks, layout, kind), got in zip(runs, results):
        want = pref if kind == "pack" else (rref[0].ravel(), rref[1], rref[2]) if kind == "rope" else \
            (ref[0].ravel(), ref[1], ref[2])
        e_out, e_loss, e_grad, worst = pack_errors(got, want)
        tol_out, tol_grad = TOL[build]
        ok = e_out <= tol_out and e_loss <= tol_out and e_grad <= tol_grad
        failures += not ok
        print(f"{kind:<5} {ranks:>5} {layout:<11} {build:<8} {e_out:9.2e} {e_loss:9.2e} {e_grad:9.2e} "
              f"{worst:<32} {'ok' if ok else 'FAIL'}")
    # the comparison catches a planted bug in the reference: rotary angles that ignore the frame
    bug = reference(rckpt, rbatch, planted_bug="rope-frames-still")
    e_out, _, e_grad, _ = pack_errors(results[runs.index(next(r for r in runs if r[4] == "rope" and
                                                              r[0] == "float64"))], (bug[0].ravel(), *bug[1:]))
    caught = max(e_out, e_grad) > TOL["float64"][1]
    failures += not caught
    print(f"planted bug in the reference (rotary positions that ignore the frame): output {e_out:.2e}, "
          f"worst gradient {e_grad:.2e} against the float64 probe {'caught' if caught else 'NOT CAUGHT'}")
    # a clip model written by train loads strictly and has the reference's 3-D table
    run = os.path.join(work, "clip-run")
    shutil.rmtree(run, ignore_errors=True)
    launch([train32, "--model", "DiT-tiny/2", "--input-size", "8", "--frames", "4", "--patch-t", "2",
                    "--data", "moving-shapes", "--steps", "1", "--batch", "2", "--out", run,
                    "--samples-per-class", "1", "--sample-steps", "1"], check=True, stdout=subprocess.DEVNULL)
    sd, meta = st_read(os.path.join(run, "model.safetensors"))
    model = DiT(**config_from_meta(meta))
    model.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=True)
    g = int(meta["input_size"]) // int(meta["patch_size"])
    e_pos = rel(sd["pos_embed"][0], sincos_pos_embed_3d(int(meta["hidden_size"]), 2, g, g))
    ok = e_pos < 1e-6
    failures += not ok
    print(f"clip checkpoint of train loads with strict=True; pos_embed vs the 3-D formula: {e_pos:.2e} "
          f"{'ok' if ok else 'FAIL'}")
    return len(runs) + 2, failures


# --precision bf16: bounds on the relative errors (output and loss, every gradient) of the bf16
# probe against the float64 reference and against PyTorch's autocast in bf16, about 3 times the
# largest measured at 1-4 ranks (output 4.0e-3, gradients 1.2e-2: docs/precision.md). The weights
# are drawn at a trained model's scale (std 0.1): at the other cases' 0.3 the attention's logits are
# so large that bf16's rounding of Q and K moves the worst gradient by 40 % under autocast too
BF16_TOL = (1e-2, 3e-2)


def reference_autocast(ckpt, batch):
    """The reference in float32 under torch.autocast(dtype=torch.bfloat16): its linears and matrix
    products in bf16, as the field trains; the loss in float32"""
    sd, meta = st_read(ckpt)
    model = DiT(**config_from_meta(meta)).float()
    model.load_state_dict({k: torch.from_numpy(v.astype(np.float32)) for k, v in sd.items()}, strict=True)
    bt, _ = st_read(batch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(torch.from_numpy(bt["x"]), torch.from_numpy(bt["t"]), torch.from_numpy(bt["y"]))
    out = out.float().reshape(out.shape[0], out.shape[1], -1, out.shape[-1])
    loss = ((out - torch.from_numpy(bt["target"])) ** 2).mean()
    loss.backward()
    grads = {k: p.grad.numpy() for k, p in model.named_parameters() if p.requires_grad}
    return out.detach().numpy(), loss.item(), grads


def check_bf16(train32, work):
    """--precision bf16 at 1-4 ranks in every layout against the float64 reference and against the
    reference under PyTorch's bf16 autocast, within BF16_TOL; the rounding must show (each bf16
    probe departs from the float64 reference by more than float32's bound), and a sequence-parallel
    bug (the padding's keys unmasked, 3 ranks) must exceed the bound. With --grad-wire bf16 (the
    attention's gradients sent rounded) at 2 and 4 ranks in every layout: the same bounds, and the
    wire's rounding must show (its gradients depart from the float wire's run by more than
    float32's bound). Returns (checks, failures)."""
    name = "learn_sigma"
    ckpt, batch = random_case(CONFIGS[name], 1000 + list(CONFIGS).index(name), work, "bf16", std=0.1)
    ref64, autocast = reference(ckpt, batch), reference_autocast(ckpt, batch)
    wire = ["--grad-wire", "bf16"]
    runs = ([(ranks, layout, []) for ranks, layout in PACK_RUNS] + [(3, "gather", ["--inject-bug", "no-pad-mask"])] +
            [(ranks, layout, wire) for ranks, layout in PACK_RUNS if ranks in (2, 4)])

    def probe(run):
        ranks, layout, extra = run
        kind = "" if not extra else ".wire" if extra == wire else ".bug"
        res = os.path.join(work, f"bf16.{ranks}.{layout}{kind}.result.safetensors")
        launch(MPIRUN + ["-np", str(ranks), train32, "probe", "--ckpt", ckpt, "--batch", batch, "--out", res,
                         "--precision", "bf16"] + LAYOUTS[layout] + extra, check=True, stdout=subprocess.DEVNULL)
        got, _ = st_read(res)
        return got["out"], float(got["loss"][0]), {k[5:]: v for k, v in got.items() if k.startswith("grad.")}
    with ThreadPoolExecutor(PROBES_AT_ONCE) as pool:
        results = list(pool.map(probe, runs))
    e_auto = pack_errors(autocast, ref64)
    print(f"bf16: {name}, autocast against the float64 reference: output {e_auto[0]:.2e}, loss {e_auto[1]:.2e}, "
          f"worst gradient {e_auto[2]:.2e} ({e_auto[3]})")
    print(f"{'ranks':>5} {'layout':<20} {'vs float64: out':>15} {'loss':>9} {'gradient':>9} "
          f"{'vs autocast: out':>16} {'loss':>9} {'gradient':>9}  (bounds {BF16_TOL[0]:.0e}, {BF16_TOL[1]:.0e})")
    failures = 0
    float_wire = {(ranks, layout): got for (ranks, layout, extra), got in zip(runs, results) if not extra}
    for (ranks, layout, extra), got in zip(runs, results):
        a, b = pack_errors(got, ref64), pack_errors(got, autocast)
        within = all(e[0] <= BF16_TOL[0] and e[1] <= BF16_TOL[0] and e[2] <= BF16_TOL[1] for e in (a, b))
        rounded = a[0] > TOL["float32"][0]  # bf16, not float32's arithmetic
        moved = pack_errors(got, float_wire[(ranks, layout)])[2] if extra == wire else 0
        if extra == wire:  # and the wire's rounding, not the float wire's sums
            rounded = moved > TOL["float32"][1]
        bug = extra and extra != wire
        ok = a[2] > BF16_TOL[1] if bug else within and rounded
        failures += not ok
        label = layout + (" bf16-wire" if extra == wire else "")
        print(f"{ranks:>5} {label:<20} {a[0]:15.2e} {a[1]:9.2e} {a[2]:9.2e} {b[0]:16.2e} {b[1]:9.2e} {b[2]:9.2e}"
              f"  {'ok' if ok else 'FAIL'}" + (f" (--inject-bug no-pad-mask: {'caught' if ok else 'NOT caught'})" if bug
                                              else (f" (the wire moved the worst gradient by {moved:.1e})" if moved else "")
                                              if rounded else " (no bf16 rounding to be seen)"))
    return len(runs), failures


def main():
    train32, train64, work = sys.argv[1:4]
    torch.set_num_threads(2)
    os.makedirs(work, exist_ok=True)
    failures = 0
    print(f"{'config':<12} {'build':<8} {'output':>9} {'loss':>9} {'worst gradient':>16}  (relative errors)")
    for i, (name, cfg) in enumerate(CONFIGS.items()):
        ckpt, batch = random_case(cfg, 1000 + i, work, name)
        ref_out, ref_loss, ref_grads = reference(ckpt, batch)
        for build, exe in (("float32", train32), ("float64", train64)):
            res = os.path.join(work, f"{name}.{build}.result.safetensors")
            launch([exe, "probe", "--ckpt", ckpt, "--batch", batch, "--out", res], check=True,
                           stdout=subprocess.DEVNULL)
            got, _ = st_read(res)
            e_out, e_loss = rel(got["out"], ref_out), rel(got["loss"][0], ref_loss)
            missing = sorted(set(ref_grads) - {k[5:] for k in got if k.startswith("grad.")})
            e_grads = {k: rel(got["grad." + k], g) for k, g in ref_grads.items() if k not in missing}
            worst = max(e_grads, key=e_grads.get)
            tol_out, tol_grad = TOL[build]
            ok = not missing and e_out <= tol_out and e_loss <= tol_out and e_grads[worst] <= tol_grad
            failures += not ok
            print(f"{name:<12} {build:<8} {e_out:9.2e} {e_loss:9.2e} {e_grads[worst]:9.2e} {worst:<40}"
                  f" {'ok' if ok else 'FAIL'}" + (f" missing gradients: {missing}" if missing else ""))
    # the comparison must catch a planted bug: a reference with exact GELU differs from the probe
    ckpt, batch = random_case(CONFIGS["odd"], 1000, work, "odd")
    bug_out, _, bug_grads = reference(ckpt, batch, planted_bug=True)
    got, _ = st_read(os.path.join(work, "odd.float64.result.safetensors"))
    e_bug = max(rel(got["out"], bug_out), max(rel(got["grad." + k], g) for k, g in bug_grads.items()))
    caught = e_bug > TOL["float64"][1]
    failures += not caught
    print(f"planted bug (exact GELU in the reference): worst relative error {e_bug:.2e} "
          f"{'caught' if caught else 'NOT CAUGHT'}")
    # locate: the reference's tensors under the probe's names; the float64 probe's dump of the same
    # step agrees with them, and the planted bug is placed at its op
    tapes = {k: os.path.join(work, f"odd.{k}.tape.safetensors") for k in ("reference", "planted", "probe")}
    res = os.path.join(work, "odd.tape-probe.safetensors")
    for f in list(tapes.values()) + [res]:
        if os.path.exists(f):
            os.remove(f)
    reference(ckpt, batch, dump=tapes["reference"])
    reference(ckpt, batch, planted_bug=True, dump=tapes["planted"])
    launch([train64, "probe", "--ckpt", ckpt, "--batch", batch, "--out", res, "--dump-tape",
                    tapes["probe"]], check=True, stdout=subprocess.DEVNULL)
    for against, want in (("reference", "no divergence"), ("planted", "first divergence: blocks.0.mlp.gelu (forward")):
        v = launch([train64, "locate", tapes["probe"], tapes[against]], capture_output=True, text=True)
        ok = v.stdout.startswith(want)
        failures += not ok
        print(f"locate, the probe's tape against the {'' if against == 'reference' else 'planted-bug '}reference's: "
              f"{v.stdout.strip()[:150]} "
              f"{'ok' if ok else 'FAIL (expected: ' + want + ')'}")
    # a checkpoint written by train loads strictly and has the reference's pos_embed
    run = os.path.join(work, "run")
    shutil.rmtree(run, ignore_errors=True)  # train refuses to start over an earlier run
    launch([train32, "--model", "DiT-tiny/2", "--input-size", "8", "--steps", "1", "--batch", "2",
                    "--out", run, "--samples-per-class", "1", "--sample-steps", "1"], check=True,
                   stdout=subprocess.DEVNULL)
    sd, meta = st_read(os.path.join(run, "model.safetensors"))
    model = DiT(**config_from_meta(meta))
    model.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=True)
    g = int(meta["input_size"]) // int(meta["patch_size"])
    e_pos = rel(sd["pos_embed"][0], sincos_pos_embed(int(meta["hidden_size"]), g, g))
    ok = e_pos < 1e-6
    failures += not ok
    print(f"train checkpoint loads with strict=True; pos_embed vs the reference formula: {e_pos:.2e} "
          f"{'ok' if ok else 'FAIL'}")
    # the video configs over ranks, every layout, uneven heads, both builds
    ckpt, batch = random_case(CONFIGS["rope_head"], 1000 + list(CONFIGS).index("rope_head"), work, "rope_head")
    ref_out, ref_loss, ref_grads = reference(ckpt, batch)
    exe = {"float32": train32, "float64": train64}

    def video_probe(run):
        ranks, layout, build = run
        res = os.path.join(work, f"rope_head.{build}.{ranks}.{layout}.result.safetensors")
        launch(MPIRUN + ["-np", str(ranks), exe[build], "probe", "--ckpt", ckpt, "--batch", batch,
                                 "--out", res] + LAYOUTS[layout], check=True, stdout=subprocess.DEVNULL)
        return st_read(res)[0]
    with ThreadPoolExecutor(PROBES_AT_ONCE) as pool:
        results = list(pool.map(video_probe, VIDEO_RUNS))
    for (ranks, layout, build), got in zip(VIDEO_RUNS, results):
        e_out, e_loss = rel(got["out"], ref_out), rel(got["loss"][0], ref_loss)
        e_grad = max(rel(got["grad." + k], g) if "grad." + k in got else float("inf") for k, g in ref_grads.items())
        tol_out, tol_grad = TOL[build]
        ok = e_out <= tol_out and e_loss <= tol_out and e_grad <= tol_grad
        failures += not ok
        print(f"rope_head {ranks} ranks {layout:<10} {build:<8} {e_out:9.2e} {e_loss:9.2e} {e_grad:9.2e} "
              f"{'ok' if ok else 'FAIL'}")
    checks, pack_failures = check_packs(train32, train64, work)
    checks += len(VIDEO_RUNS)
    failures += pack_failures
    text_checks, text_failures = check_text(train32, train64, work)
    joint_checks, joint_failures = check_joint(train32, train64, work)
    text_checks, text_failures = text_checks + joint_checks, text_failures + joint_failures
    clip_checks, clip_failures = check_clips(train32, train64, work)
    bf16_checks, bf16_failures = check_bf16(train32, work)
    checks = checks + text_checks + clip_checks + bf16_checks
    failures = failures + text_failures + clip_failures + bf16_failures
    print(f"parity: {2 * len(CONFIGS) + 4 + checks - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
