"""PyTorch's own context parallelism, torch.distributed.tensor.experimental.context_parallel, on a
tiny attention model (2 blocks: LayerNorm, qkv, scaled_dot_product_attention, output projection,
residual; a linear head), float64, gloo on the CPU, at P = 2, 3 and 4, with both rotate methods
(set_rotate_method "allgather" and "alltoall"): one training step on P processes against the same
step on one, op by op (python/ditsp_tape.py's ModuleTape and `train locate`, as
tests/parity/field_models.py does for diffusers' models).

On the CPU, as shipped: scaled_dot_product_attention runs aten::_scaled_dot_product_flash_attention_for_cpu,
which context_parallel's ring does not handle (it replaces the flash, efficient and cuDNN kernels of
CUDA only): the forward goes through DTensor's own sharding rule for the CPU kernel, and the backward
is refused, the kernel's backward having no sharding rule. The "ring" rows call
aten::_scaled_dot_product_flash_attention instead (a function named scaled_dot_product_attention, in
torch.nn.functional, before context_parallel wraps it), with the CPU flash kernel registered as its
CPU kernel (field_libraries.cpu_flash_kernels(zero_dim=True): with the 0-dimensional outputs
DTensor's sharding rule for that op asks for), so that context_parallel's ring runs; a counter shows
it ran.

Rows: the ring accumulates in float32 by default (_cp_options.convert_to_f32): float64 steps part
by float32 rounding, by design; with convert_to_f32 False they agree to float64 rounding. Token
counts: 3P tokens (odd multiples of P, so no load balancing); 2P multiples turn on the default
head-tail load balancer, which refuses attention without a causal mask; a count P does not divide.
Each verdict must be the expected one (ROWS).

usage: torch_context_parallel.py TRAIN_F64 WORKDIR [--table FILE] [--quick]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import ditsp_tape as tape  # noqa: E402
import field_common as fc  # noqa: E402
from field_libraries import cpu_flash_kernels  # noqa: E402

D, HEADS, C = 16, 2, 3
SHIPPED_SDPA = F.scaled_dot_product_attention


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.qkv, self.proj = nn.LayerNorm(D), nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.attend = Attend()

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (u.reshape(b, t, HEADS, D // HEADS).transpose(1, 2) for u in self.qkv(self.norm(x)).chunk(3, -1))
        return x + self.proj(self.attend(q, k, v).transpose(1, 2).reshape(b, t, D))


class Attend(nn.Module):
    """(B, H, T, d) q, k, v -> attention; a module so that its output is recorded"""

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.blocks, self.head = nn.Linear(C, D), nn.ModuleList([Block(), Block()]), nn.Linear(D, C)

    def forward(self, x):
        x = self.embed(x)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def build(tokens, seed=35):
    torch.manual_seed(seed)
    model = Tiny().double()
    g = torch.Generator().manual_seed(seed + 1)
    x, target = (torch.randn(1, tokens, C, generator=g, dtype=torch.float64) for _ in range(2))
    return model, x, target


def flash_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """scaled_dot_product_attention by aten::_scaled_dot_product_flash_attention, the op context_parallel's
    ring replaces; its name is the one context_parallel puts its wrapper under"""
    assert attn_mask is None and not enable_gqa
    return torch.ops.aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, scale=scale)[0]


flash_sdpa.__name__ = "scaled_dot_product_attention"

# (name, P, tokens, rotate method, ring (flash_sdpa), convert_to_f32, expected kind, pattern)
BY_DESIGN = r"^first divergence: "
AGREES = r"^no divergence: every tensor of the step is within tolerance"
CPU_BACKWARD = "backward: NotImplementedError: Operator aten._scaled_dot_product_flash_attention_for_cpu_backward.default " \
               "does not have a sharding strategy registered."
LOAD_BALANCE = "forward: RuntimeError: Load balancing requires `is_causal=True`."


def rows(quick=False):
    out = []
    for p in ((2, 3) if quick else (2, 3, 4)):
        t = 3 * p
        out.append(("as shipped (CPU kernel)", p, t, "allgather", False, True, "forward", "^no divergence.*" + re.escape(CPU_BACKWARD)))
        for method in ("allgather", "alltoall"):
            out.append((f"ring, {method}", p, t, method, True, True, "departs", BY_DESIGN))
            out.append((f"ring, {method}, convert_to_f32=False", p, t, method, True, False, "agrees", AGREES))
        if quick:
            continue
        out.append(("ring, allgather, 2P-multiple tokens (load balancer)", p, 4 * p, "allgather", True, False, "refused",
                    re.escape(LOAD_BALANCE)))
        out.append(("ring, allgather, tokens P does not divide", p, 3 * p + 1, "allgather", True, False, "uneven", ""))
    return out


def ranks_main(rank, p, init, out, todo, log=None):
    warnings.filterwarnings("ignore")
    if log:  # a row that may end the process: its stderr kept for the verdict
        fd = os.open(f"{log}.{rank}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 2)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import set_rotate_method
    import torch.distributed.tensor.experimental._context_parallel._attention as cp
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=p)
    torch.set_num_threads(1)
    kernels = cpu_flash_kernels(zero_dim=True)  # noqa: F841 (registered while it lives)
    mesh = init_device_mesh("cpu", (p,), mesh_dim_names=("cp",))
    calls = {"forward": 0, "backward": 0}
    ring, ring_backward = cp._templated_ring_attention, cp._templated_ring_attention_backward

    def counted(fn, key):
        def f(*a, **k):
            calls[key] += 1
            return fn(*a, **k)
        return f
    cp._templated_ring_attention = counted(ring, "forward")
    cp._templated_ring_attention_backward = counted(ring_backward, "backward")
    results = []
    for name, _, tokens, method, use_ring, f32, _, _ in todo:
        model, x, target = build(tokens)
        set_rotate_method(method)
        cp._cp_options.convert_to_f32 = f32
        calls.update(forward=0, backward=0)
        F.scaled_dot_product_attention = flash_sdpa if use_ring else SHIPPED_SDPA
        rec = tape.ModuleTape(model)
        error, phase = None, "forward"
        try:
            with context_parallel(mesh, buffers=[x, target], buffer_seq_dims=[1, 1]):
                out_ = rec.tensor("output", model(x))
                loss = ((out_ - target) ** 2).sum() / (tokens * C)  # this rank's share of the mean
                total = loss.detach().clone()
                dist.all_reduce(total)
                rec.records.append(("loss", total.numpy().copy()))
                phase = "backward"
                loss.backward()
            for prm in model.parameters():  # the gradient all-reduce of a training step
                dist.all_reduce(prm.grad)
            rec.parameters(model)
        except Exception as e:
            error = f"{phase}: {type(e).__name__}: {str(e).strip().splitlines()[0]}"
        finally:
            F.scaled_dot_product_attention = SHIPPED_SDPA
            rec.remove()
        every = [None] * p if rank == 0 else None
        dist.gather_object((rec.records, error, dict(calls)), every, dst=0)
        if rank == 0:
            model, x, target = build(tokens)
            ref = tape.ModuleTape(model)
            o = ref.tensor("output", model(x))
            loss = ((o - target) ** 2).mean()
            ref.records.append(("loss", loss.detach().numpy().copy()))
            loss.backward()
            ref.parameters(model)
            ref.remove()
            results.append((name, every, ref.records))
        dist.barrier()
    if rank == 0:
        import pickle
        with open(out, "wb") as f:
            pickle.dump(results, f)
    dist.destroy_process_group()


def verdict(p, tokens, every, ref, train64, work, tag):
    """(kind, text, worst)"""
    errors = [e for _, e, _ in every if e]
    records = [r for r, _, _ in every]
    if errors and not errors[0].startswith("backward"):
        return "refused", errors[0], None
    if errors:
        ref = [r for r in ref if not r[0].startswith("grad.")]
        records = [[r for r in rs if not r[0].startswith("grad.")] for rs in records]
    # parameter gradients: all-reduced already (the same on every rank)
    whole = lambda n: n == "loss" or n.startswith("param.")  # noqa: E731
    try:
        theirs, ours, meta, notes = tape.lay_out(ref, records, [("tokens", tokens)], (), whole)
    except ValueError as e:
        return "refused", f"lay_out: {e}", None
    if notes:
        return "departs", f"not laid out: {'; '.join(notes[:2])}", None
    a, b = os.path.join(work, f"{tag}.tape"), os.path.join(work, f"{tag}.one.tape")
    tape.write_tape(a, theirs, meta["tokens"], meta["ranks"], meta["shards"], f"context_parallel, {p} processes")
    tape.write_tape(b, {**ours, **{n: x for n, x in ref if n not in ours}}, meta["tokens"])
    worst = max((np.linalg.norm(theirs[n] - ours[n]) / (np.linalg.norm(ours[n]) or 1), n) for n in theirs)
    got = subprocess.run([train64, "locate", a, b], capture_output=True, text=True)
    text = got.stdout.strip() or got.stderr.strip()
    if errors:
        return "forward", f"{text}; {errors[0]}", worst
    return ("agrees" if got.returncode == 0 else "departs"), text, worst


def short(kind, text, worst):
    if kind == "aborted":
        return f"aborted ({text})"
    if kind == "refused":
        return f"refused ({text})"
    if kind == "agrees":
        return f"agrees ({worst[0]:.1e})"
    if kind == "forward":
        return f"forward agrees ({worst[0]:.1e}); backward refused ({text.split('; ')[-1][len('backward: '):]})"
    m = re.match(r"first divergence: (\S+) \((\w+)[^)]*\)(?:, tokens (\d+-\d+) of (\d+) \((ranks? [\d, -]+ of \d+) in A)?", text)
    if not m:
        return f"departs ({text})"
    name, direction, toks, total, ranks = m.groups()
    where = f", tokens {toks} of {total}, {ranks}" if toks else ""
    return f"departs at `{name}` ({direction}){where}; worst {worst[0]:.1e} at `{worst[1]}`"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("train64")
    ap.add_argument("work")
    ap.add_argument("--table")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    start = time.time()
    if int(torch.__version__.split(".")[0]) < 2:
        print(f"skipped: PyTorch's context_parallel (torch {torch.__version__}; it needs PyTorch 2.x, which 'make deps' "
              "installs from PyPI into build/venv)")
        return 0
    os.makedirs(a.work, exist_ok=True)
    todo = rows(a.quick)
    found = []
    import pickle
    for p in sorted({r[1] for r in todo}):
        here = [r for r in todo if r[1] == p and r[6] != "uneven"]
        t0 = time.time()
        with tempfile.TemporaryDirectory() as d:
            torch.multiprocessing.spawn(ranks_main, args=(p, f"file://{d}/rendezvous", f"{d}/results", here), nprocs=p)
            with open(f"{d}/results", "rb") as f:
                found += [(r, res) for r, res in zip(here, pickle.load(f))]
        for r in (r for r in todo if r[1] == p and r[6] == "uneven"):  # alone: gloo may abort the processes
            with tempfile.TemporaryDirectory() as d:
                try:
                    torch.multiprocessing.spawn(ranks_main, args=(p, f"file://{d}/rendezvous", f"{d}/results", [r], f"{d}/log"),
                                                nprocs=p)
                    with open(f"{d}/results", "rb") as f:
                        found.append((r, pickle.load(f)[0]))
                except Exception as e:  # a process ended by a signal: what it said last
                    said = [ln for q in range(p) if os.path.exists(f"{d}/log.{q}") for ln in open(f"{d}/log.{q}")
                            if "what():" in ln or "Error" in ln]
                    found.append((r, (r[0], str(e).strip().splitlines()[-1] + (f": {said[0].strip()}" if said else ""))))
        print(f"{p} processes, {len([r for r in todo if r[1] == p])} runs: {time.time() - t0:.0f} s", flush=True)
    check = fc.Checks()
    table = {}
    for i, ((name, p, tokens, method, use_ring, f32, kind, pattern), res) in enumerate(found):
        if len(res) == 2:  # the processes ended
            got, calls = ("aborted", res[1], None), {"forward": 1, "backward": 0}
        else:
            got = verdict(p, tokens, res[1], res[2], a.train64, a.work, f"row{i}-{p}")
            calls = res[1][0][2]
        if kind == "uneven":  # whatever it does is stated
            ok = got[0] in ("refused", "agrees", "departs", "aborted")
        else:
            ok = got[0] == kind and re.search(pattern, got[1]) is not None
            if kind == "departs":  # float32 accumulation: within float32 rounding, not more
                ok = ok and got[2][0] < 1e-6
        ring_ran = calls["forward"] > 0
        ok = ok and ring_ran == use_ring  # the ring ran where the rows say it does, and only there
        what = f"{name}, {p} processes, {tokens} tokens: {short(*got)} (ring calls: {calls['forward']} forward, " \
               f"{calls['backward']} backward)"
        check(ok, what + ("" if ok else f"\n     expected {kind} {pattern!r}: {got[1][:500]}"))
        table.setdefault(name, {})[p] = short(*got) + ("" if use_ring else "; ring not used")
    ps = sorted({r[1] for r in todo})
    lines = [f"torch {torch.__version__}, float64, gloo on the CPU, {D} wide, {HEADS} heads, 2 blocks; tokens 3P (P = 2, 3, 4: "
             "6, 9, 12) unless the row says otherwise", "",
             "| context_parallel | " + " | ".join(f"P = {p}" for p in ps) + " |", "|---|" + "---|" * len(ps)]
    for name, by_p in table.items():
        lines.append(f"| {name} | " + " | ".join(by_p.get(p, "—") for p in ps) + " |")
    return check.end("PyTorch's context_parallel", "\n".join(lines), a.table, start)


if __name__ == "__main__":
    sys.exit(main())
