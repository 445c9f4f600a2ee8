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

usage: diffusers_ring_dkv.py [P]      (default 3)
"""
import os
import sys
import tempfile
import warnings

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from field_libraries import cpu_flash_kernels  # noqa: E402

B, H, N, D = 1, 2, 4, 4  # N tokens a rank


def sdpa(q, k, v):  # (B, T, H, d) layout, as diffusers' backends take it
    return F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v))).transpose(1, 2)


def ranks_main(rank, P, init, out):
    warnings.filterwarnings("ignore")
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=P)
    kernels = cpu_flash_kernels()  # noqa: F841
    from diffusers.models._modeling_parallel import ContextParallelConfig, ParallelConfig
    from diffusers.models.attention_dispatch import dispatch_attention_fn
    g = torch.Generator().manual_seed(35)
    q, k, v, dout = (torch.randn(B, P * N, H, D, dtype=torch.float64, generator=g) for _ in range(4))
    mine = slice(rank * N, (rank + 1) * N)
    cp = ContextParallelConfig(ring_degree=P, convert_to_fp32=False)
    config = ParallelConfig(context_parallel_config=cp)
    config.setup(rank, P, torch.device("cpu"),
                 mesh=dist.device_mesh.init_device_mesh("cpu", cp.mesh_shape, mesh_dim_names=cp.mesh_dim_names))
    local = [x[:, mine].clone().requires_grad_() for x in (q, k, v)]
    o = dispatch_attention_fn(*local, backend="_native_flash", parallel_config=config)
    o.backward(dout[:, mine])
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
    row = (f"rank {rank} of {P}: |out - sdpa| {err(o, ref[:, mine]):.1e}, |dQ| {err(local[0].grad, whole[0].grad[:, mine]):.1e}, "
           f"|dK| {err(local[1].grad, whole[1].grad[:, mine]):.1e}, |dV| {err(local[2].grad, whole[2].grad[:, mine]):.1e}, "
           f"|dK - predicted| {err(local[1].grad, predicted):.1e}")
    rows = [None] * P
    dist.all_gather_object(rows, row)
    if rank == 0:
        with open(out, "w") as f:
            f.write("\n".join(rows) + "\n")
    dist.destroy_process_group()


def main():
    P = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with tempfile.TemporaryDirectory() as d:
        torch.multiprocessing.spawn(ranks_main, args=(P, f"file://{d}/rendezvous", f"{d}/rows"), nprocs=P)
        print(open(f"{d}/rows").read(), end="")


if __name__ == "__main__":
    main()
