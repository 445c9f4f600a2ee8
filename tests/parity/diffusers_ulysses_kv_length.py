"""diffusers' Ulysses attention backward where the keys are not as long as the queries (a cross-attention
on a split text: LTX's video-text attention, LTX2's audio-text one), alone, with and without the fix:
ContextParallelConfig(ulysses_degree=P), backend native, random q (N tokens a rank) and k, v (M != N
tokens a rank) in float64, against one process's scaled_dot_product_attention, at P = 2, 3 and 4
(gloo on the CPU).

The cause, in the installed attention_dispatch.py (printed with its line numbers):
TemplatedUlyssesAttention.backward takes S_LOCAL from grad_out (the queries' local length) and
reshapes dQ, dK and dV alike to (B, P, S_LOCAL, H/P, D) before the all-to-all that returns them to
their tokens; dK and dV have P M rows, not P N, so the reshape fails (the forward reshapes the keys
with their own S_KV_LOCAL). The fix (field_models.ulysses_kv_length) keeps the keys' local length
from the forward and brings dK and dV back with it.

Must hold: as shipped, the forward agrees and the backward raises; with the fix, out, dQ, dK and dV
agree within 1e-12, at every P; and where M = N the shipped backward agrees too.

usage: diffusers_ulysses_kv_length.py [P ...]      (default 2 3 4)
"""
import contextlib
import inspect
import os
import sys
import tempfile
import warnings

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

B, H, N, M, D = 1, 12, 3, 2, 4  # N query tokens and M key tokens a rank; 12 heads: P = 2, 3, 4 divide them


def sdpa(q, k, v):  # (B, T, H, d), diffusers' layout
    return F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v))).transpose(1, 2)


def ulysses_step(rank, p, fixed, m):
    """This rank's out, dq, dk, dv errors against one process (None where backward raised), and
    the error's first line"""
    import field_models
    from diffusers.models._modeling_parallel import ContextParallelConfig, ParallelConfig
    from diffusers.models.attention_dispatch import dispatch_attention_fn
    g = torch.Generator().manual_seed(35)
    q, dout = (torch.randn(B, p * N, H, D, dtype=torch.float64, generator=g) for _ in range(2))
    k, v = (torch.randn(B, p * m, H, D, dtype=torch.float64, generator=g) for _ in range(2))
    rows, keys = slice(rank * N, (rank + 1) * N), slice(rank * m, (rank + 1) * m)
    cp = ContextParallelConfig(ulysses_degree=p)
    config = ParallelConfig(context_parallel_config=cp)
    config.setup(rank, p, torch.device("cpu"),
                 mesh=dist.device_mesh.init_device_mesh("cpu", cp.mesh_shape, mesh_dim_names=cp.mesh_dim_names))
    local = [q[:, rows].clone().requires_grad_()] + [x[:, keys].clone().requires_grad_() for x in (k, v)]
    whole = [x.clone().requires_grad_() for x in (q, k, v)]
    ref = sdpa(*whole)
    ref.backward(dout)
    err = lambda a, b: (a - b).abs().max().item()  # noqa: E731
    with field_models.ulysses_kv_length() if fixed else contextlib.nullcontext():
        o = dispatch_attention_fn(*local, backend="native", parallel_config=config)
        try:
            o.backward(dout[:, rows])
        except RuntimeError as e:
            return [err(o, ref[:, rows]), None, None, None], f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return [err(o, ref[:, rows])] + [err(x.grad, w.grad[:, s]) for x, w, s in zip(local, whole, (rows, keys, keys))], None


def ranks_main(rank, p, init, out):
    warnings.filterwarnings("ignore")
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=p)
    rows = [ulysses_step(rank, p, False, M), ulysses_step(rank, p, True, M), ulysses_step(rank, p, False, N)]
    every = [None] * p
    dist.all_gather_object(every, rows)
    if rank == 0:
        with open(out, "w") as f:
            f.write(repr(every))
    dist.destroy_process_group()


def cause():
    """The lines of the installed TemplatedUlyssesAttention that take the local lengths"""
    from diffusers.models import attention_dispatch as ad
    path = inspect.getsourcefile(ad.TemplatedUlyssesAttention)
    path = path[path.rindex("diffusers" + os.sep):]
    out = []
    for fn, keep in ((ad.TemplatedUlyssesAttention.forward, ("S_KV_LOCAL, _, _ = key.shape", "key = key.reshape(")),
                     (ad.TemplatedUlyssesAttention.backward, ("B, S_LOCAL, H, D = grad_out.shape", "x.reshape(B, world_size, S_LOCAL"))):
        src, first = inspect.getsourcelines(fn)
        out += [f"{path}:{first + i}: {line.strip()}" for i, line in enumerate(src) if any(k in line for k in keep)]
    return out
    return [f"{path}:{first + i}: {line.strip()}" for i, line in enumerate(src) if any(k in line for k in keep)]


def main():
    ps = [int(a) for a in sys.argv[1:]] or [2, 3, 4]
    try:
        import diffusers  # noqa: F401
    except Exception as e:
        print(f"skipped: diffusers' Ulysses attention ({type(e).__name__}: {e})")
        return 0
    print("cause, TemplatedUlyssesAttention as installed:")
    for line in cause():
        print("  " + line)
    failures = 0
    for p in ps:
        with tempfile.TemporaryDirectory() as d:
            torch.multiprocessing.spawn(ranks_main, args=(p, f"file://{d}/rendezvous", f"{d}/rows"), nprocs=p)
            every = eval(open(f"{d}/rows").read())
        for label, i in ((f"{M} key tokens a rank, as shipped", 0), (f"{M} key tokens a rank, fixed", 1),
                         (f"{N} key tokens a rank (as many as queries), as shipped", 2)):
            errors = [r[i][1] for r in every if r[i][1]]
            worst = [max(r[i][0][j] for r in every) if not errors or j == 0 else None for j in range(4)]
            if i == 0:
                ok = worst[0] < 1e-12 and len(errors) == p and errors[0].startswith("RuntimeError: shape")
                want = "out within 1e-12, backward raises on every rank"
                said = f"|out| {worst[0]:.1e}; backward: {errors[0] if errors else 'no error'}"
            else:
                ok = not errors and max(worst) < 1e-12
                want = "all within 1e-12"
                said = f"|out| {worst[0]:.1e}, |dQ| {worst[1]:.1e}, |dK| {worst[2]:.1e}, |dV| {worst[3]:.1e}" if not errors \
                    else f"backward: {errors[0]}"
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} P = {p}, {label}: {said} (expected: {want})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
