"""torch_works.py [VERSION]: exit 0 when this Python's torch is VERSION (any, without one) and
works on the CPU for the tests: import, scaled_dot_product_attention forward and backward against
its own formula, and a gloo all-reduce between 2 processes. Prints what it found."""
import os
import sys
import tempfile


def all_reduce(rank, init):
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    assert t.item() == 3.0, t
    dist.destroy_process_group()


def main():
    import torch
    import torch.nn.functional as F
    if len(sys.argv) > 1 and torch.__version__.split("+")[0] != sys.argv[1]:
        sys.exit(f"torch {torch.__version__} from {os.path.dirname(torch.__file__)}, not {sys.argv[1]}")
    q, k, v = (torch.randn(2, 3, 5, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    F.scaled_dot_product_attention(q, k, v).sum().backward()
    qr, kr, vr = (x.detach().clone().requires_grad_() for x in (q, k, v))
    (torch.softmax(qr @ kr.transpose(-2, -1) / 2, -1) @ vr).sum().backward()
    assert all(torch.allclose(a.grad, b.grad) for a, b in ((q, qr), (k, kr), (v, vr)))
    with tempfile.TemporaryDirectory() as d:
        torch.multiprocessing.spawn(all_reduce, args=(f"file://{d}/rendezvous",), nprocs=2)
    print(f"torch {torch.__version__} from {os.path.dirname(torch.__file__)}: attention forward and backward, gloo: ok")


if __name__ == "__main__":
    main()
