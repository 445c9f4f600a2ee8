"""diffusers' ring attention (ContextParallelConfig(ring_degree=P)) against one process's
scaled_dot_product_attention, alone: random q, k, v, float64, P processes on the CPU (gloo).

At P = 2 everything agrees. From P = 3 on the output and dQ agree and dK, dV do not: in
TemplatedRingAttention.backward, step i on rank r computes the gradient for the key/value chunk
of rank r + i (the order of the forward pass), but the accumulator it adds it to arrived from
rank r - 1 and holds chunk r - i's sum; the two chunks are the same only when 2 i = 0 mod P. So
rank s ends with sum_j G[s + j][s + 2 j] instead of sum_a G[a][s], where G[a][c] is the
gradient that rank a's queries give chunk c's keys. This script computes G by one process's
autograd and checks that prediction too: it must match diffusers' dK to rounding, which names
the cause (and that it is theirs: the harness's flash kernel is checked against
scaled_dot_product_attention in tests/parity/field_libraries.py, and the same ring agrees at P = 2).
The ring runs as diffusers_ring_accumulator.py runs it (ring_inputs, ring_attention: backend
_native_flash, convert_to_fp32=False), without the fix.

usage: diffusers_ring_dkv.py [P]      (default 3)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import field_common as fc  # noqa: E402
from diffusers_ring_accumulator import ring_attention, ring_inputs, sdpa  # noqa: E402

N = 4  # tokens a rank


def rank_rows(rank, P):
    """This rank's row: its errors against one process, and its dK against the prediction"""
    q, k, v, dout = ring_inputs(P, N)
    o, local = ring_attention(rank, P, q, k, v, dout)
    mine = slice(rank * N, (rank + 1) * N)
    # one process: the whole attention, and G[a][c], rank a's queries' gradient for chunk c's keys
    whole = [x.clone().requires_grad_() for x in (q, k, v)]
    ref = sdpa(*whole)
    ref.backward(dout)
    G = []
    for a in range(P):
        kk = k.clone().requires_grad_()
        sdpa(q, kk, v)[:, a * N:(a + 1) * N].backward(dout[:, a * N:(a + 1) * N])
        G.append([kk.grad[:, c * N:(c + 1) * N] for c in range(P)])
    predicted = sum(G[(rank + j) % P][(rank + 2 * j) % P] for j in range(P))
    err = lambda a, b: (a - b).abs().max().item()  # noqa: E731
    return (f"rank {rank} of {P}: |out - sdpa| {err(o, ref[:, mine]):.1e}, |dQ| {err(local[0].grad, whole[0].grad[:, mine]):.1e}, "
            f"|dK| {err(local[1].grad, whole[1].grad[:, mine]):.1e}, |dV| {err(local[2].grad, whole[2].grad[:, mine]):.1e}, "
            f"|dK - predicted| {err(local[1].grad, predicted):.1e}")


def main():
    P = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    print("\n".join(fc.on_ranks(P, rank_rows, flash=True)))


if __name__ == "__main__":
    main()
