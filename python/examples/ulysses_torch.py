"""ulysses_torch.py: this project's DiT in PyTorch, its attention split along the sequence over N
processes the way DESIGN.md describes (the gather layout), with every tensor of one training step
recorded by python/ditsp_tape.py so that `train locate` compares it with our probe, op by op.

The sequence-parallel attention, per block, on each of the P processes:
  1. pad the T tokens to T_pad (a multiple of P) and keep this rank's n = T_pad / P of them;
  2. all-gather K and V along the sequence (all_gather_seq below: an autograd Function whose
     backward is the reduce-scatter, so the gradient of the gathered keys and values is summed
     over the ranks and each keeps its own rows; gloo lacks reduce_scatter before torch 2, so
     there it is an all-reduce and a slice);
  3. local queries attend to all T_pad keys, the padded ones masked;
  4. the output stays the local shard (B, n, D): "restore" is the identity here.
Everything else is per token and runs on the shard; the conditioning is replicated; the loss is
each rank's share of the mean over the global number of real elements, and the parameter
gradients are all-reduced (summed).

--bug plants one of three catalogue bugs in this file's attention:
  local-kv               attend to the local keys only (no gather)
  no-dkv-reduce-scatter  the gather's backward keeps this rank's own rows of dK/dV, unsummed
  wrong-restore          every rank gathers the queries too and takes rows [0, n) of the output
                         of all of them: right on rank 0, another rank's rows elsewhere

usage (CPU, gloo):
  python python/examples/ulysses_torch.py --procs 2 --ckpt M.safetensors --batch B.safetensors --tape their.tape
  torchrun --nproc-per-node 2 python/examples/ulysses_torch.py --ckpt M --batch B --tape their.tape
  (or any launcher that sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT: Debian's torch 1.13
  torchrun fails under Python 3.11 in its own launcher; --procs needs none)
then
  train/train locate their.tape ours.tape        (ours: train/train probe ... --dump-tape ours.tape)
--bug and --dtype take comma lists, run one after the other in the same processes; the tape path
then holds {bug} and {dtype}.
"""
import argparse
import math
import os
import sys
import tempfile

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # python/: ditsp_tape
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "parity"))  # dit_torch: the model's modules
import ditsp_tape as tape  # noqa: E402
from dit_torch import DiT, modulate  # noqa: E402

BUGS = ("none", "local-kv", "no-dkv-reduce-scatter", "wrong-restore")


# ---- differentiable collectives ------------------------------------------------------------------
def reduce_scatter_seq(g, group):
    """g (B, P n, X) on every rank -> the sum over ranks of rows [r n, (r+1) n) on rank r"""
    P, r = dist.get_world_size(group), dist.get_rank(group)
    parts = [c.contiguous() for c in g.chunk(P, dim=1)]
    if dist.get_backend(group) == "gloo":  # no reduce_scatter in gloo (torch < 2)
        g = g.contiguous()
        dist.all_reduce(g, group=group)
        return g.chunk(P, dim=1)[r].contiguous()
    out = torch.empty_like(parts[r])
    dist.reduce_scatter(out, parts, group=group)
    return out


class AllGatherSeq(torch.autograd.Function):
    """x (B, n, X) on each rank -> (B, P n, X), the ranks' shards in order. Backward: the
    reduce-scatter of the gradient (bug no-dkv-reduce-scatter: this rank's rows, unsummed)."""

    @staticmethod
    def forward(ctx, x, group, keep_local):
        ctx.group, ctx.keep_local = group, keep_local
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=1)

    @staticmethod
    def backward(ctx, g):
        if ctx.keep_local:  # the bug: the other ranks' shares of dK/dV are lost
            return g.chunk(dist.get_world_size(ctx.group), dim=1)[dist.get_rank(ctx.group)].contiguous(), None, None
        return reduce_scatter_seq(g, ctx.group), None, None


def all_gather_seq(x, group, keep_local=False):
    return AllGatherSeq.apply(x, group, keep_local)


# ---- the model -----------------------------------------------------------------------------------
def attend(q, k, v, heads, key_mask):
    """q (B, nq, D), k and v (B, nk, D), key_mask (nk,) True for real keys -> (B, nq, D)"""
    b, nq, d = q.shape
    split = lambda u: u.reshape(b, u.shape[1], heads, d // heads).transpose(1, 2)  # noqa: E731
    s = split(q) @ split(k).transpose(-2, -1) / math.sqrt(d // heads)
    s = s.masked_fill(~key_mask, float("-inf"))
    return (torch.softmax(s, dim=-1) @ split(v)).transpose(1, 2).reshape(b, nq, d)


class SeqParallelAttention(torch.nn.Module):
    """The attention of q, k, v (B, n, D), this rank's shard of T real tokens padded to P n, over
    all keys; its output (B, n, D) is the tape's attn.out"""

    def __init__(self, heads, tokens, group, bug):
        super().__init__()
        self.heads, self.tokens, self.group, self.bug = heads, tokens, group, bug

    def forward(self, q, k, v):
        P, r, n = dist.get_world_size(self.group), dist.get_rank(self.group), q.shape[1]
        real = torch.arange(P * n) < self.tokens  # padded keys are masked
        if self.bug == "local-kv":
            return attend(q, k, v, self.heads, real[r * n:(r + 1) * n])
        keep_local = self.bug == "no-dkv-reduce-scatter"
        k_all, v_all = all_gather_seq(k, self.group, keep_local), all_gather_seq(v, self.group, keep_local)
        if self.bug == "wrong-restore":  # all queries attend; rows [0, n) "restored" on every rank
            return attend(all_gather_seq(q, self.group), k_all, v_all, self.heads, real)[:, :n]
        return attend(q, k_all, v_all, self.heads, real)


def patchify(img, p):
    """(B, C, H, W) -> (B, T, p p C), tokens row-major, each laid out (p, q, c) as the final layer's"""
    b, c, h, w = img.shape
    return img.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1).reshape(b, (h // p) * (w // p), p * p * c)


def step(model, batch, group, rec, backward=True):
    """One forward and backward of loss = mean((model(x, t, y) - target)^2) on this rank's shard,
    every named tensor marked in rec; then the parameter gradients summed over the group
    (backward=False: the forward alone). Returns this rank's share of the loss."""
    P, r = dist.get_world_size(group), dist.get_rank(group)
    T = model.pos_embed.shape[1]
    lo, hi, T_pad = tape.contiguous_shard(T, P, r)
    x = rec.tensor("x_embedder", tape.shard_tokens(model.x_embedder(batch["x"]) + model.pos_embed, lo, hi))
    c = rec.tensor("c", model.t_embedder(batch["t"]) + model.y_embedder(batch["y"]))
    for i, blk in enumerate(model.blocks):
        sa, ca, ga, sm, cm, gm = blk.adaLN_modulation(c).chunk(6, dim=1)  # watched: blocks.i.adaLN
        h = rec.tensor(f"blocks.{i}.norm1", modulate(blk.norm1(x), sa, ca))
        q, k, v = blk.attn.qkv(h).chunk(3, dim=2)  # watched: q, k, v
        a = blk.attn.proj(blk.attn.sp(q, k, v))  # watched: attn.out, attn.proj
        x = rec.tensor(f"blocks.{i}.residual1", x + ga[:, None] * a)
        h = rec.tensor(f"blocks.{i}.norm2", modulate(blk.norm2(x), sm, cm))
        x = rec.tensor(f"blocks.{i}.residual2", x + gm[:, None] * blk.mlp(h))  # watched: fc1, gelu, fc2
    fl = model.final_layer
    shift, scale = fl.adaLN_modulation(c).chunk(2, dim=1)  # watched: final_layer.adaLN
    out = fl.linear(rec.tensor("final_layer.norm", modulate(fl.norm_final(x), shift, scale)))  # watched
    target = tape.shard_tokens(patchify(batch["target"], model.p), lo, hi)
    real = (torch.arange(lo, hi) < T).to(out.dtype)[None, :, None]
    loss = ((out - target) ** 2 * real).sum() / (batch["target"].numel())  # this rank's share
    rec.tensor("loss", loss, kind="partial")
    if not backward:
        return loss
    loss.backward()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=group)
    rec.gradients({n: p.grad for n, p in model.named_parameters() if p.requires_grad})
    return loss


def build(ckpt, dtype, group, bug, attention=None):
    """The model with the checkpoint's weights, each block's attention sequence-parallel, and a
    recorder watching its modules. attention(heads, tokens, group) makes another attention module
    (q, k, v (B, n, D) -> (B, n, D), this rank's shard) in place of this file's"""
    state, cfg = tape.load_checkpoint(ckpt, dtype)
    if cfg["in_context"]:
        raise SystemExit("ulysses_torch.py: in-context checkpoints are not supported here")
    model = DiT(**cfg).to(dtype)
    model.load_state_dict(state, strict=True)
    T = model.pos_embed.shape[1]
    P, r = dist.get_world_size(group), dist.get_rank(group)
    lo, hi, _ = tape.contiguous_shard(T, P, r)
    rec = tape.TapeRecorder(tokens=T, token_range=(lo, hi), group=group)
    rec.watch(model.final_layer.adaLN_modulation, "final_layer.adaLN")
    rec.watch(model.final_layer.linear, "final_layer.out")
    for i, blk in enumerate(model.blocks):
        blk.attn.sp = (attention or (lambda h, t, g: SeqParallelAttention(h, t, g, bug)))(cfg["num_heads"], T, group)
        b = f"blocks.{i}."
        rec.watch(blk.adaLN_modulation, b + "adaLN")
        rec.watch(blk.attn.qkv, [b + "attn.q", b + "attn.k", b + "attn.v"])
        rec.watch(blk.attn.sp, b + "attn.out")
        rec.watch(blk.attn.proj, b + "attn.proj")
        rec.watch(blk.mlp.fc1, b + "mlp.fc1")
        rec.watch(blk.mlp.act, b + "mlp.gelu")
        rec.watch(blk.mlp.fc2, b + "mlp.fc2")
    return model, rec


def run(rank, world, args, init):
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    torch.set_num_threads(1)
    for dtype_name in args.dtype.split(","):
        dtype = getattr(torch, dtype_name)
        batch = tape.load_batch(args.batch, dtype)
        for bug in args.bug.split(","):
            model, rec = build(args.ckpt, dtype, None, bug)
            step(model, batch, None, rec)
            path = args.tape.format(bug=bug, dtype=dtype_name)
            if rec.write(path, layout=f"ulysses_torch.py, {world} processes, bug {bug}, {dtype_name}"):
                print(f"ulysses_torch: {world} processes, bug {bug}, {dtype_name}: wrote {path}", flush=True)
            rec.remove()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", required=True, help="a checkpoint of this project (safetensors)")
    ap.add_argument("--batch", required=True, help="a probe batch (train/train probe --make-batch)")
    ap.add_argument("--tape", required=True, help="the tape to write (with {bug}, {dtype} for lists)")
    ap.add_argument("--bug", default="none", help=f"one of {', '.join(BUGS)}, or a comma list")
    ap.add_argument("--dtype", default="float32", help="float32 or float64, or a comma list")
    ap.add_argument("--procs", type=int, default=0, help="spawn this many processes (else: torchrun's)")
    args = ap.parse_args()
    bad = [b for b in args.bug.split(",") if b not in BUGS] + \
          [d for d in args.dtype.split(",") if d not in ("float32", "float64")]
    if bad:
        ap.error(f"unknown --bug or --dtype: {', '.join(bad)} (bugs: {', '.join(BUGS)})")
    if ("," in args.bug and "{bug}" not in args.tape) or ("," in args.dtype and "{dtype}" not in args.tape):
        ap.error("several --bug or --dtype values need {bug} and {dtype} in --tape")
    if "RANK" in os.environ and not args.procs:  # torchrun
        return run(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args, "env://")
    if args.procs < 1:
        ap.error("--procs N, or run under torchrun")
    with tempfile.TemporaryDirectory() as d:  # a rendezvous file: no port to pick
        torch.multiprocessing.spawn(run, args=(args.procs, args, f"file://{d}/rendezvous"), nprocs=args.procs)


if __name__ == "__main__":
    main()
