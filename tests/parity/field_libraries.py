"""The field's sequence-parallel attention located against our one-rank probe: each block's
attention in python/examples/ulysses_torch.py's DiT (same weights, same batch) is replaced by a
library's, on the CPU with gloo, at 2 and 4 processes; each step's tape goes to `train locate`
against our float64 probe tape.

  yunchang-a2a        yunchang's all-to-all (SeqAllToAll4D) around this harness's attention
  yunchang-ulysses    yunchang's UlyssesAttention, torch attention backend
  yunchang-usp        yunchang's LongContextAttention (Ulysses x ring), ring_impl_type basic_pytorch
  diffusers-ulysses   diffusers' context-parallel attention, ContextParallelConfig(ulysses_degree=P), native backend
  diffusers-ring      ContextParallelConfig(ring_degree=P), _native_flash backend
  diffusers-unified   ring 2 x Ulysses 2 (4 processes)

On the CPU, as shipped:
- aten::_scaled_dot_product_flash_attention, which yunchang's torch backend and diffusers'
  _native_flash backend call, has no CPU kernel (its CPU twin is
  _scaled_dot_product_flash_attention_for_cpu, the same flash algorithm); diffusers' native backend
  runs Ulysses but refuses ring attention (it returns no log-sum-exp). cpu_flash_kernels() below
  registers the CPU twin as the op's CPU kernel, forward and backward, and is checked against
  scaled_dot_product_attention first; the libraries' code is not touched.
- yunchang's torch backend has no backward (pytorch_attn_backward raises): its layers run forward
  only, and the test checks that the backward still raises, so a release with one is noticed.
16 tokens (8x8 images, patch 2) and 4 heads: every layout divides them (yunchang and diffusers'
default modes need the tokens and heads to divide by the ranks; none of them masks padded keys).
Each verdict must be the expected one (EXPECT below; float32 tapes at --tol 1e-3).

usage: field_libraries.py TRAIN_F32 TRAIN_F64 WORKDIR
Prints "skipped: ..." and checks nothing of a library that is not installed.
"""
import functools
import importlib.metadata
import os
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "python", "examples"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ditsp_tape as tape  # noqa: E402
import ulysses_torch  # noqa: E402
from dit_torch import DiT  # noqa: E402

CFG = dict(input_size=8, patch_size=2, in_channels=3, hidden_size=16, depth=2, num_heads=4, mlp_ratio=2.0,
           num_classes=10, learn_sigma=False, class_dropout_prob=0.1)
T = (CFG["input_size"] // CFG["patch_size"]) ** 2
F32_TOL = "1e-3"  # as tests/parity/check_your_own.py: a correct float32 step is within 4.5e-4
AGREE = "no divergence: every tensor of the step is within tolerance"
FORWARD = "no divergence: every tensor both tapes hold"  # a forward-only tape
# the gradient of K and V summed in the wrong ring order from 3 ranks on (tests/parity/diffusers_ring_dkv.py):
# the first dK of backward (the last block's; dQ before it is right), every token, every rank
RING_DKV = "first divergence: grad.blocks.1.attn.k (backward, block 1, op attn.k), tokens 0-15 of 16 (ranks 0-{last} of {p} in A"
FIRST = "first divergence: blocks.0.attn.out (forward, block 0, op attn.out), tokens 0-15 of 16 (ranks 0-{last} of {p} in A"
# (library, layout, {processes: (ring, ulysses)}, dtypes, backward, {dtype: expected verdict})
VARIANTS = {
    "yunchang-a2a": ("yunchang", "SeqAllToAll4D + this harness's attention", {2: (1, 2), 4: (1, 4)},
                     ("float64",), True, {"float64": AGREE}),
    "diffusers-ulysses": ("diffusers", "ContextParallelConfig(ulysses_degree=P), backend native", {2: (1, 2), 4: (1, 4)},
                          ("float64", "float32"), True, {"float64": AGREE, "float32": AGREE}),
    "diffusers-ring": ("diffusers", "ContextParallelConfig(ring_degree=P), backend _native_flash", {2: (2, 1), 4: (4, 1)},
                       ("float32",), True, {"float32": {2: AGREE, 4: RING_DKV}}),
    "diffusers-unified": ("diffusers", "ContextParallelConfig(ring_degree=2, ulysses_degree=2), backend _native_flash",
                          {4: (2, 2)}, ("float32",), True, {"float32": AGREE}),
    "yunchang-usp": ("yunchang", "LongContextAttention(ring_impl_type='basic_pytorch'), ring x Ulysses",
                     {2: (2, 1), 4: (2, 2)}, ("float64", "float32"), False, {"float64": FIRST, "float32": FORWARD}),
    "yunchang-ulysses": ("yunchang", "UlyssesAttention(attn_type=AttnType.TORCH_FLASH)", {2: (1, 2), 4: (1, 4)},
                         ("float64", "float32"), False, {"float64": FIRST, "float32": FIRST}),
}
BACKWARD_ERROR = "Not implemented backward for PyTorch attention types"


def cpu_flash_kernels(zero_dim=False):
    """Registers _scaled_dot_product_flash_attention_for_cpu (forward, backward) as the CPU kernel of
    aten::_scaled_dot_product_flash_attention, which has none; returns the library (keep it alive).
    The outputs the CPU kernel has no use for (cumulative lengths, the random seed and offset) are
    empty tensors; with zero_dim, 0-dimensional ones, as DTensor's sharding rule for the op requires
    (torch_context_parallel.py)"""
    lib = torch.library.Library("aten", "IMPL")

    def forward(q, k, v, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, dropout_p, is_causal, scale=scale)
        none = torch.zeros((), dtype=torch.int64) if zero_dim else torch.empty(0, dtype=torch.int64)
        return out, lse, none, none, q.shape[2], k.shape[2], none, none, torch.empty(0, dtype=q.dtype)

    def backward(g, q, k, v, out, lse, cum_q, cum_k, max_q, max_k, dropout_p, is_causal, seed, offset, *, scale=None):
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            g, q, k, v, out, lse, dropout_p, is_causal, scale=scale)

    lib.impl("_scaled_dot_product_flash_attention", forward, "CPU")
    lib.impl("_scaled_dot_product_flash_attention_backward", backward, "CPU")
    return lib


def check_cpu_flash():
    """The registered kernel against scaled_dot_product_attention, forward and backward, float64"""
    g = torch.Generator().manual_seed(35)
    q, k, v, dout = (torch.randn(2, 4, 16, 4, dtype=torch.float64, generator=g) for _ in range(4))
    out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v)[0]
    grads = torch.ops.aten._scaled_dot_product_flash_attention_backward(
        dout, q, k, v, out, torch.ops.aten._scaled_dot_product_flash_attention(q, k, v)[1],
        torch.empty(0), torch.empty(0), 16, 16, 0.0, False, torch.empty(0), torch.empty(0))
    qkv = [x.clone().requires_grad_() for x in (q, k, v)]
    ref = F.scaled_dot_product_attention(*qkv)
    ref.backward(dout)
    err = max((a - b).abs().max().item() for a, b in zip((out, *grads), (ref, *(x.grad for x in qkv))))
    return err


class Heads(torch.nn.Module):
    """q, k, v (B, n, D) -> fn(q, k, v) on (B, n, H, d) -> (B, n, D)"""

    def __init__(self, heads, fn):
        super().__init__()
        self.heads, self.fn = heads, fn

    def forward(self, q, k, v):
        b, n, d = q.shape
        split = lambda u: u.reshape(b, n, self.heads, d // self.heads)  # noqa: E731
        return self.fn(split(q), split(k), split(v)).reshape(b, n, d)


def attention_of(variant, ring, ulysses):
    """The attention module factory (heads, tokens, group) for ulysses_torch.build; sets up the
    library's process groups (collective: every rank calls it)"""
    rank, world = dist.get_rank(), dist.get_world_size()
    if variant.startswith("yunchang"):
        import yunchang
        from yunchang.comm.all_to_all import SeqAllToAll4D
        from yunchang.kernels import AttnType
        if variant == "yunchang-a2a":
            def a2a(q, k, v):  # (B, n, H, d) -> (B, T, H/P, d), attend, and back
                q, k, v = (SeqAllToAll4D.apply(None, x, 2, 1) for x in (q, k, v))
                b, t, h, d = q.shape
                o = ulysses_torch.attend(*(x.reshape(b, t, h * d) for x in (q, k, v)), h, torch.ones(t, dtype=torch.bool))
                return SeqAllToAll4D.apply(None, o.reshape(b, t, h, d), 1, 2)
            return lambda h, t, g: Heads(h, a2a)
        if variant == "yunchang-ulysses":
            return lambda h, t, g: Heads(h, yunchang.UlyssesAttention(None, attn_type=AttnType.TORCH_FLASH))
        yunchang.set_seq_parallel_pg(ulysses, ring, rank, world)
        return lambda h, t, g: Heads(h, yunchang.LongContextAttention(ring_impl_type="basic_pytorch",
                                                                       attn_type=AttnType.TORCH_FLASH))
    from diffusers.models._modeling_parallel import ContextParallelConfig, ParallelConfig
    from diffusers.models.attention_dispatch import dispatch_attention_fn
    cp = ContextParallelConfig(ring_degree=ring, ulysses_degree=ulysses)
    config = ParallelConfig(context_parallel_config=cp)
    mesh = dist.device_mesh.init_device_mesh("cpu", cp.mesh_shape, mesh_dim_names=cp.mesh_dim_names)
    config.setup(rank, world, torch.device("cpu"), mesh=mesh)
    backend = "native" if ring == 1 else "_native_flash"
    return lambda h, t, g: Heads(h, functools.partial(dispatch_attention_fn, backend=backend, parallel_config=config))


def ranks_main(rank, world, ckpt, batch_path, work, variants, init):
    warnings.filterwarnings("ignore")
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    torch.set_num_threads(1)
    kernels = cpu_flash_kernels()  # noqa: F841 (registered while it lives)
    for v in variants:
        ring, ulysses = VARIANTS[v][2][world]
        for dtype_name in VARIANTS[v][3]:
            dtype = getattr(torch, dtype_name)
            model, rec = ulysses_torch.build(ckpt, dtype, None, "none", attention_of(v, ring, ulysses))
            ulysses_torch.step(model, tape.load_batch(batch_path, dtype), None, rec, backward=VARIANTS[v][4])
            rec.write(os.path.join(work, f"{v}-{world}.{dtype_name}.tape"), layout=f"{v}, {world} processes")
            rec.remove()
    dist.barrier()
    dist.destroy_process_group()


def yunchang_backward(work):
    """The error each of yunchang's two layers raises in backward (torch backend), in this one
    process: its ring has no peer to post sends to before the backward kernel is called (on more
    processes the raise leaves them posted, and the next collective waits for ever)"""
    from yunchang import LongContextAttention, UlyssesAttention, set_seq_parallel_pg
    from yunchang.kernels import AttnType
    dist.init_process_group("gloo", init_method=f"file://{os.path.abspath(work)}/rendezvous-1", rank=0, world_size=1)
    set_seq_parallel_pg(1, 1, 0, 1)
    errors = []
    for layer in (UlyssesAttention(None, attn_type=AttnType.TORCH_FLASH),
                  LongContextAttention(ring_impl_type="basic_pytorch", attn_type=AttnType.TORCH_FLASH)):
        q = torch.randn(1, 4, 2, 4, requires_grad=True)
        try:
            layer(q, q, q).sum().backward()
            errors.append("none")
        except RuntimeError as e:
            errors.append(str(e).splitlines()[0])
    dist.destroy_process_group()
    return errors


def main():
    train32, train64, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    start = time.time()
    if int(torch.__version__.split(".")[0]) < 2:
        print(f"skipped: the field's libraries (torch {torch.__version__}; they need PyTorch 2, which 'make deps' "
              "installs from PyPI into build/venv)")
        return 0
    versions = {}
    for lib in ("yunchang", "diffusers"):
        try:
            __import__(lib)
            versions[lib] = importlib.metadata.version(lib)
        except Exception as e:  # not installed, or not importable with this torch
            print(f"skipped: {lib} ({type(e).__name__}: {e}; 'make deps' installs it from PyPI into build/venv)")
    variants = [v for v in VARIANTS if VARIANTS[v][0] in versions]
    if not variants:
        return 0
    failures = checks = 0

    def check(ok, what):
        nonlocal failures, checks
        checks += 1
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {what}")

    kernels = cpu_flash_kernels()  # noqa: F841
    err = check_cpu_flash()
    check(err < 1e-12, f"the CPU flash kernel against scaled_dot_product_attention, float64: max |diff| {err:.1e}")
    rng = np.random.default_rng(35)
    sd = {k: rng.normal(0, 0.3, v.shape) for k, v in DiT(**CFG).state_dict().items()}
    ckpt, batch, ours = (os.path.join(work, f) for f in ("model.safetensors", "batch.safetensors", "ours.tape"))
    for f in os.listdir(work):
        os.remove(os.path.join(work, f))
    tape.write_checkpoint(ckpt, sd, CFG)
    subprocess.run([train32, "probe", "--make-batch", "2", "--ckpt", ckpt, "--out", batch], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([train64, "probe", "--ckpt", ckpt, "--batch", batch, "--out", os.path.join(work, "probe.safetensors"),
                    "--dump-tape", ours], check=True, stdout=subprocess.DEVNULL)
    rows = []
    for p in (2, 4):
        here = [v for v in variants if p in VARIANTS[v][2]]
        t0 = time.time()
        with tempfile.TemporaryDirectory() as d:
            torch.multiprocessing.spawn(ranks_main, args=(p, ckpt, batch, work, here, f"file://{d}/rendezvous"), nprocs=p)
        print(f"{p} processes, {len(here)} layouts: {time.time() - t0:.1f} s")
        for v in here:
            lib, layout, shape, dtypes, backward, expect = VARIANTS[v]
            for dtype in dtypes:
                cmd = [train64, "locate", os.path.join(work, f"{v}-{p}.{dtype}.tape"), ours]
                cmd += ["--tol", F32_TOL] if dtype == "float32" else []
                got = subprocess.run(cmd, capture_output=True, text=True)
                want = expect[dtype] if isinstance(expect[dtype], str) else expect[dtype][p]
                want = want.format(last=p - 1, p=p)
                ok = got.stdout.startswith(want) and got.returncode == (0 if want.startswith("no divergence") else 1)
                check(ok, f"{v}, {p} processes, {dtype}: {got.stdout.strip()[:300]}"
                      + ("" if ok else f"\n     expected: {want}\n     {got.stderr.strip()}"))
                rows.append((lib, versions[lib], layout, shape[p], p, dtype, got.stdout.strip()))
    if "yunchang" in versions:
        errors = yunchang_backward(work)
        check(errors == [BACKWARD_ERROR] * 2, f"yunchang's UlyssesAttention and LongContextAttention backward, torch backend: {errors}")
    print("\n| library | layout | processes (ring x Ulysses) | dtype | verdict |\n|---|---|---|---|---|")
    for lib, version, layout, (ring, ulysses), p, dtype, verdict in rows:
        print(f"| {lib} {version} | {layout} | {p} ({ring} x {ulysses}) | {dtype} | {verdict} |")
    print(f"\nthe field's libraries: {checks - failures} passed, {failures} failed ({time.time() - start:.0f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
