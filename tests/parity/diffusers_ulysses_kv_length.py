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
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import field_common as fc  # noqa: E402

B, H, N, M, D = 1, 12, 3, 2, 4  # N query tokens and M key tokens a rank; 12 heads: P = 2, 3, 4 divide them


def sdpa(q, k, v):  # (B, T, H, d), diffusers' layout
    return F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v))).transpose(1, 2)


def ulysses_step(rank, p, fixed, m):
    """This rank's out, dq, dk, dv errors against one process (None where backward raised), and
    the error's first line"""
    import field_models
    from diffusers.models.attention_dispatch import dispatch_attention_fn
    g = torch.Generator().manual_seed(35)
    q, dout = (torch.randn(B, p * N, H, D, dtype=torch.float64, generator=g) for _ in range(2))
    k, v = (torch.randn(B, p * m, H, D, dtype=torch.float64, generator=g) for _ in range(2))
    rows, keys = slice(rank * N, (rank + 1) * N), slice(rank * m, (rank + 1) * m)
    config = fc.parallel_config(rank, p, ulysses_degree=p)
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


def rank_rows(rank, p):
    """This rank's rows: ulysses_step as shipped and fixed with M key tokens a rank, and as shipped with N"""
    return [ulysses_step(rank, p, False, M), ulysses_step(rank, p, True, M), ulysses_step(rank, p, False, N)]


def cause():
    """The lines of the installed TemplatedUlyssesAttention that take the local lengths"""
    from diffusers.models import attention_dispatch as ad
    return fc.installed_lines(ad.TemplatedUlyssesAttention.forward, ("S_KV_LOCAL, _, _ = key.shape", "key = key.reshape(")) \
        + fc.installed_lines(ad.TemplatedUlyssesAttention.backward, ("B, S_LOCAL, H, D = grad_out.shape", "x.reshape(B, world_size, S_LOCAL"))


def judge(p, every):
    """The verdicts on every rank's rows at P: (ok, label, what was found, what is expected)"""
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
        yield ok, label, said, want


if __name__ == "__main__":
    sys.exit(fc.reproduction("diffusers' Ulysses attention", "TemplatedUlyssesAttention", cause, rank_rows, judge))
