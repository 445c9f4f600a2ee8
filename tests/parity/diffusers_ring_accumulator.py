"""diffusers' ring attention backward, alone, with and without the fix: ContextParallelConfig(ring_degree=P),
backend _native_flash (the CPU flash kernel registered by field_libraries.cpu_flash_kernels), random
q, k, v in float64 (convert_to_fp32=False), against one process's scaled_dot_product_attention, at
P = 2, 3 and 4 (gloo on the CPU).

The cause, in the installed attention_dispatch.py (printed with its line numbers):
TemplatedRingAttention.backward at step i on rank r computes the gradient of key/value chunk
r + i (the forward's order: kv_buffer[next_rank], next_rank from r + 1 up), and adds it to the
accumulator that arrived from rank r - 1 (funcol.permute_tensor with next_ranks = [1, .., P-1, 0]:
every rank sends to the next), which holds the sum for chunk r + i - 2; the two are the same chunk
only where 2 = 0 mod P. The fix (field_models.ring_accumulator) sends the accumulator the other way,
to rank r - 1, in the loop and in the last rotation: the accumulator that reaches rank r at step i
then holds chunk r + i, and after the last step the sum of chunk r - 1 goes to its owner.

Must hold: as shipped, P = 2 agrees and P = 3, 4 give the right output and dQ but wrong dK and dV;
with the fix, every P agrees (out, dQ, dK, dV within 1e-12). diffusers_ring_dkv.py runs the same
ring (ring_inputs, ring_attention).

usage: diffusers_ring_accumulator.py [P ...]      (default 2 3 4)
"""
import contextlib
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import field_common as fc  # noqa: E402

B, H, N, D = 1, 2, 3, 4  # N tokens a rank


def sdpa(q, k, v):  # (B, T, H, d), diffusers' layout
    return F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v))).transpose(1, 2)


def ring_inputs(p, n):
    """Random q, k, v and the output's gradient, (B, P n, H, D) float64, the same on every rank"""
    g = torch.Generator().manual_seed(35)
    return [torch.randn(B, p * n, H, D, dtype=torch.float64, generator=g) for _ in range(4)]


def ring_attention(rank, p, q, k, v, dout, fixed=False):
    """This rank's share of diffusers' ring attention (ring_degree P, backend _native_flash, no
    float32 cast), forward and backward, with the fix where fixed: its output and its q, k, v,
    their .grad set"""
    import field_models
    from diffusers.models.attention_dispatch import dispatch_attention_fn
    n = q.shape[1] // p
    mine = slice(rank * n, (rank + 1) * n)
    config = fc.parallel_config(rank, p, ring_degree=p, convert_to_fp32=False)
    local = [x[:, mine].clone().requires_grad_() for x in (q, k, v)]
    with field_models.ring_accumulator() if fixed else contextlib.nullcontext():
        o = dispatch_attention_fn(*local, backend="_native_flash", parallel_config=config)
        o.backward(dout[:, mine])
    return o, local


def ring_step(rank, p, fixed):
    """This rank's out, dq, dk, dv errors against one process"""
    q, k, v, dout = ring_inputs(p, N)
    o, local = ring_attention(rank, p, q, k, v, dout, fixed)
    mine = slice(rank * N, (rank + 1) * N)
    whole = [x.clone().requires_grad_() for x in (q, k, v)]
    ref = sdpa(*whole)
    ref.backward(dout)
    err = lambda a, b: (a - b).abs().max().item()  # noqa: E731
    return [err(o, ref[:, mine])] + [err(x.grad, w.grad[:, mine]) for x, w in zip(local, whole)]


def rank_rows(rank, p):
    """This rank's rows: its errors as shipped and fixed (ring_step)"""
    return [ring_step(rank, p, False), ring_step(rank, p, True)]


def cause():
    """The lines of the installed TemplatedRingAttention.backward that choose the chunk and the
    accumulator's direction"""
    from diffusers.models import attention_dispatch as ad
    return fc.installed_lines(ad.TemplatedRingAttention.backward,
                              ("next_ranks = ", "kv = kv_buffer[next_rank]", "grad_key += grad_key_op", "permute_tensor("))


def judge(p, every):
    """The verdicts on every rank's rows at P: (ok, label, what was found, what is expected)"""
    for label, i in (("as shipped", 0), ("fixed", 1)):
        worst = [max(r[i][j] for r in every) for j in range(4)]
        if i == 1 or p == 2:
            ok = max(worst) < 1e-12
            want = "all within 1e-12"
        else:
            ok = max(worst[:2]) < 1e-12 and min(worst[2:]) > 0.1
            want = "out and dQ within 1e-12, dK and dV off by more than 0.1"
        yield ok, label, f"|out| {worst[0]:.1e}, |dQ| {worst[1]:.1e}, |dK| {worst[2]:.1e}, |dV| {worst[3]:.1e}", want


if __name__ == "__main__":
    sys.exit(fc.reproduction("diffusers' ring attention", "TemplatedRingAttention.backward", cause, rank_rows, judge, flash=True))
