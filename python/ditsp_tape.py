"""ditsp_tape: check your own PyTorch DiT against this project's, op by op.

`train/train probe --dump-tape T` writes one training step's every named tensor and its gradient
in the *one-rank layout* (all tokens in order, all heads, no padding): a "tape". This module
writes the same kind of tape from any PyTorch implementation, on one process or on N
(torch.distributed, any backend), so that

    train/train locate their.tape ours.tape [--tol 1e-4]

names the first tensor, in your execution order, where the two steps part: its op, block,
direction (forward or backward), token range and the ranks owning those tokens.

Contents (numpy and torch only):

* Files: `read_safetensors` / `write_safetensors` (the format of checkpoints, batches and tapes),
  `load_checkpoint` (this project's checkpoint: tensors by the facebookresearch DiT names and the
  config from its metadata), `write_checkpoint`, `load_batch` (a probe batch: x, t, y, target).
* diffusers: `diffusers_names(depth)`, the mapping of every checkpoint name to the parameter
  name(s) of diffusers' `DiTTransformer2DModel`; `to_diffusers` / `from_diffusers` convert state
  dicts (and gradients) both ways; `diffusers_tape_names(depth)` names the modules whose outputs
  are tape tensors.
* Sharding: `contiguous_shard(tokens, ranks, rank)`, the layout of this project (pad T to a
  multiple of P; rank r holds [r n, (r+1) n)); `shard_tokens` pads and slices a (B, T, X) tensor.
* `TapeRecorder`: mark modules (`watch`) or tensors (`tensor`) by their tape name; forward hooks
  record each output and tensor hooks its gradient, in the order your step makes them; `write`
  gathers every rank's shard onto rank 0 and writes the tape.
* A model against itself (another library's model on 1 and N processes, no name map):
  `ModuleTape` records every module's output and gradient by its path, as each process holds it;
  `lay_out` puts N ranks' records in the one-process layout, reading each tensor's split from its
  shapes (docs/check-your-own.md, "The field's models"); `write_tape` writes a tape.

Tape names (those of probe --dump-tape; `train locate` compares by name, so record what you have):

    x_embedder               patch embedding + pos_embed           (B, T, D)
    c                        t_emb + y_emb                         (B, D)
    blocks.{i}.adaLN         adaLN_modulation output               (B, 6D)
    blocks.{i}.norm1         modulate(LN(x), shift, scale)         (B, T, D)
    blocks.{i}.attn.q/k/v    the three thirds of qkv(norm1)        (B, T, D), heads side by side
    blocks.{i}.attn.out      softmax(q k^T / sqrt(d)) v, heads joined, before proj   (B, T, D)
    blocks.{i}.attn.proj     proj(attn.out)                        (B, T, D)
    blocks.{i}.residual1     x + gate_msa * attn.proj              (B, T, D)
    blocks.{i}.norm2, mlp.fc1, mlp.gelu, mlp.fc2, residual2        likewise for the MLP half
    final_layer.adaLN, final_layer.norm, final_layer.out           (B, 2D), (B, T, D), (B, T, p*p*C_out)
    loss                     mean((out - target)^2) over every real element     scalar
    grad.<any of those>      its gradient, recorded when backward reaches it
    grad.<parameter name>    parameter gradients (TapeRecorder.gradients), last

A token tensor is recorded as (B, rows, X): this rank's rows, in the order of its token index.
"""
import json
import struct

import numpy as np
import torch

__all__ = ["read_safetensors", "write_safetensors", "load_checkpoint", "write_checkpoint", "load_batch",
           "diffusers_names", "to_diffusers", "from_diffusers", "diffusers_tape_names",
           "contiguous_shard", "shard_tokens", "TapeRecorder", "ModuleTape", "lay_out", "write_tape"]

# ---- safetensors -------------------------------------------------------------------------------
# 8-byte little-endian header length N, N bytes of JSON ({name: {dtype, shape, data_offsets}},
# optional "__metadata__": {str: str}), then the data
_DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64, "F16": np.float16}


def read_safetensors(path):
    """(dict name -> numpy array, metadata dict of strings)"""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {}) or {}
    data = memoryview(raw)[8 + n:]
    out = {}
    for name, e in header.items():
        if e["dtype"] not in _DTYPES:
            raise ValueError(f"{path}: tensor {name} has dtype {e['dtype']}; this reader takes {sorted(_DTYPES)}")
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(data[b:end], dtype=_DTYPES[e["dtype"]]).reshape(e["shape"]).copy()
    return out, meta


def write_safetensors(path, tensors, meta=None):
    """Writes numpy arrays (float32, float64, int32, int64) by name; meta: str -> str-able"""
    names = {np.dtype(v): k for k, v in _DTYPES.items()}
    header, offset, blobs = {}, 0, []
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        if a.dtype not in names:
            raise ValueError(f"tensor {name}: dtype {a.dtype} cannot be written; convert it to float32 or float64")
        blob = a.tobytes()
        header[name] = {"dtype": names[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    if meta:
        header["__metadata__"] = {k: str(v) for k, v in meta.items()}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ---- this project's checkpoints and batches ----------------------------------------------------
_INT_KEYS = ("input_size", "patch_size", "in_channels", "hidden_size", "depth", "num_heads", "num_classes")


def _config(meta):
    cfg = {k: int(meta[k]) for k in _INT_KEYS}
    cfg["mlp_ratio"] = float(meta["mlp_ratio"])
    cfg["learn_sigma"] = meta["learn_sigma"] in ("true", "True", "1")
    cfg["class_dropout_prob"] = float(meta.get("class_dropout_prob", "0"))
    cfg["in_context"] = meta.get("in_context", "false") in ("true", "True", "1")
    return cfg


def load_checkpoint(path, dtype=torch.float32):
    """A checkpoint of this project: (dict name -> torch tensor, config dict). Names are the
    facebookresearch DiT ones (x_embedder.proj.weight, pos_embed, t_embedder.mlp.0.weight,
    y_embedder.embedding_table.weight, blocks.{i}.attn.qkv.weight, ..., final_layer.linear.bias);
    the config keys are DiT's constructor arguments (input_size, patch_size, in_channels,
    hidden_size, depth, num_heads, mlp_ratio, num_classes, learn_sigma, class_dropout_prob) and
    in_context. Training checkpoints may hold more metadata; it is ignored here."""
    arrays, meta = read_safetensors(path)
    missing = [k for k in _INT_KEYS + ("mlp_ratio", "learn_sigma") if k not in meta]
    if missing:
        raise ValueError(f"{path} is no checkpoint of this project: its metadata lacks {', '.join(missing)}")
    return {k: torch.from_numpy(v).to(dtype) for k, v in arrays.items()}, _config(meta)


def write_checkpoint(path, state, config):
    """Writes a state dict (our names) and its config as a checkpoint `train` reads (float32)."""
    meta = {k: ("true" if v is True else "false" if v is False else v) for k, v in config.items()}
    write_safetensors(path, {k: torch.as_tensor(v).detach().cpu().numpy().astype(np.float32)
                             for k, v in state.items()}, meta)


def load_batch(path, dtype=torch.float32):
    """A probe batch (probe --make-batch writes one): dict with x (B, C, H, W), t (B,), y (B,)
    int64, target (B, C_out, H, W), and for a batch of packs pack (n, 4)."""
    arrays, _ = read_safetensors(path)
    for k in ("x", "t", "y", "target"):
        if k not in arrays:
            raise ValueError(f"{path} is no probe batch: it lacks '{k}'")
    return {k: torch.from_numpy(v).to(torch.int64 if v.dtype.kind == "i" else dtype) for k, v in arrays.items()}


# ---- diffusers' DiTTransformer2DModel ----------------------------------------------------------
# Written from diffusers' module structure (its DiT conversion script maps the reference the same
# way): pos_embed = PatchEmbed (proj; its sin-cos table a non-persistent buffer, pos_embed.pos_embed),
# transformer_blocks.{i} = BasicTransformerBlock with norm1 = AdaLayerNormZero (emb =
# CombinedTimestepLabelEmbeddings, one copy per block; linear -> 6D, chunked shift, scale, gate of
# the attention then of the MLP, as DiT), attn1 = Attention (to_q, to_k, to_v, to_out.0),
# ff = FeedForward (net.0 = GELU(tanh) with proj, net.2 = Linear); the final layer is norm_out
# (no affine), proj_out_1 (-> shift, scale) and proj_out_2.
# Known difference: diffusers' Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=1)
# divides the frequency exponent by 127 where DiT divides by 128, so even with these weights the
# two models part at `c`: that is what `train locate` will say, and it is right.
def diffusers_names(depth):
    """dict: our checkpoint name -> tuple of diffusers parameter names. One name: the same tensor.
    Three names for blocks.{i}.attn.qkv.{weight,bias}: to_q, to_k, to_v, our tensor split in three
    along dim 0. `depth` names for the timestep and label embedders: diffusers holds one copy in
    each block's norm1.emb (from_diffusers takes block 0's values, or sums gradients)."""
    m = {"x_embedder.proj.weight": ("pos_embed.proj.weight",),
         "x_embedder.proj.bias": ("pos_embed.proj.bias",),
         "pos_embed": ("pos_embed.pos_embed",)}  # a non-persistent buffer in diffusers
    emb = {"t_embedder.mlp.0": "timestep_embedder.linear_1", "t_embedder.mlp.2": "timestep_embedder.linear_2"}
    for ours, theirs in emb.items():
        for p in ("weight", "bias"):
            m[f"{ours}.{p}"] = tuple(f"transformer_blocks.{i}.norm1.emb.{theirs}.{p}" for i in range(depth))
    m["y_embedder.embedding_table.weight"] = tuple(
        f"transformer_blocks.{i}.norm1.emb.class_embedder.embedding_table.weight" for i in range(depth))
    for i in range(depth):
        b, d = f"blocks.{i}.", f"transformer_blocks.{i}."
        for p in ("weight", "bias"):
            m[f"{b}adaLN_modulation.1.{p}"] = (f"{d}norm1.linear.{p}",)
            m[f"{b}attn.qkv.{p}"] = tuple(f"{d}attn1.to_{x}.{p}" for x in "qkv")
            m[f"{b}attn.proj.{p}"] = (f"{d}attn1.to_out.0.{p}",)
            m[f"{b}mlp.fc1.{p}"] = (f"{d}ff.net.0.proj.{p}",)
            m[f"{b}mlp.fc2.{p}"] = (f"{d}ff.net.2.{p}",)
    for p in ("weight", "bias"):
        m[f"final_layer.adaLN_modulation.1.{p}"] = (f"proj_out_1.{p}",)
        m[f"final_layer.linear.{p}"] = (f"proj_out_2.{p}",)
    return m


def _is_qkv(name):
    return ".attn.qkv." in name


def to_diffusers(state, depth=None):
    """Our state dict (torch tensors or numpy arrays) -> diffusers' names (qkv split in three,
    the embedders copied into every block). pos_embed becomes pos_embed.pos_embed: diffusers
    computes that buffer itself and leaves it out of its state dict, so load with strict=False
    or drop it."""
    depth = depth if depth is not None else 1 + max(int(k.split(".")[1]) for k in state if k.startswith("blocks."))
    out = {}
    for ours, theirs in diffusers_names(depth).items():
        if ours not in state:
            continue
        v = state[ours]
        if not _is_qkv(ours):
            parts = (v,) * len(theirs)
        else:
            parts = v.chunk(3, dim=0) if torch.is_tensor(v) else np.split(np.asarray(v), 3, axis=0)
        for name, part in zip(theirs, parts):
            out[name] = part.clone() if torch.is_tensor(part) else np.copy(part)
    return out


def from_diffusers(state, depth, copies="first"):
    """diffusers' names -> ours: to_q, to_k, to_v joined into qkv; the embedders' per-block copies
    taken from block 0 (copies="first", for weights) or summed (copies="sum", for gradients: each
    copy's gradient is its block's share). Names absent from `state` are left out."""
    out = {}
    for ours, theirs in diffusers_names(depth).items():
        have = [state[n] for n in theirs if n in state]
        if not have:
            continue
        if _is_qkv(ours):
            out[ours] = torch.cat(have, 0) if torch.is_tensor(have[0]) else np.concatenate(have, 0)
        elif len(theirs) > 1 and copies == "sum":
            out[ours] = sum(have[1:], have[0])
        else:
            out[ours] = have[0]
    return out


def diffusers_tape_names(depth):
    """dict: diffusers module path -> tape name, for TapeRecorder.watch (each module's output).
    diffusers has no module whose output is attn.out (its attention processor joins the heads
    inside attn1) nor the norms and residuals: record those with TapeRecorder.tensor where you
    can, or leave them out; locate names what one tape lacks and compares the rest."""
    m = {"proj_out_1": "final_layer.adaLN", "proj_out_2": "final_layer.out"}
    for i in range(depth):
        d, b = f"transformer_blocks.{i}.", f"blocks.{i}."
        m.update({f"{d}norm1.linear": f"{b}adaLN", f"{d}attn1.to_q": f"{b}attn.q", f"{d}attn1.to_k": f"{b}attn.k",
                  f"{d}attn1.to_v": f"{b}attn.v", f"{d}attn1.to_out.0": f"{b}attn.proj",
                  f"{d}ff.net.0.proj": f"{b}mlp.fc1", f"{d}ff.net.0": f"{b}mlp.gelu", f"{d}ff.net.2": f"{b}mlp.fc2"})
    return m


# ---- sharding ----------------------------------------------------------------------------------
def contiguous_shard(tokens, ranks, rank, multiple=1):
    """This project's layout: T padded to T_pad = ceil(T / (P m)) P m; rank r holds tokens
    [r n, (r+1) n) with n = T_pad / P (those at T and beyond are padding).
    Returns (lo, hi, T_pad)."""
    step = ranks * multiple
    padded = -(-tokens // step) * step
    n = padded // ranks
    return rank * n, (rank + 1) * n, padded


def shard_tokens(x, lo, hi):
    """Rows [lo, hi) of x (B, T, X), zeros past T (the padding)"""
    t = x.shape[1]
    if hi > t:
        x = torch.cat([x, x.new_zeros(x.shape[0], hi - t, *x.shape[2:])], 1)
    return x[:, lo:hi]


# ---- the recorder ------------------------------------------------------------------------------
KINDS = ("tokens", "replicated", "whole", "partial")


def _dist():
    import torch.distributed as dist
    return dist if dist.is_available() and dist.is_initialized() else None


def _runs(index, limit):
    """The runs "lo-hi" of the sorted indices in [0, limit), joined by '+'"""
    idx = sorted(int(i) for i in index if 0 <= i < limit)
    runs, start = [], None
    for k, i in enumerate(idx):
        if start is None:
            start = i
        if k + 1 == len(idx) or idx[k + 1] != i + 1:
            runs.append(f"{start}-{i + 1}")
            start = None
    return "+".join(runs)


class TapeRecorder:
    """Records one step's named tensors and their gradients, and writes them as a tape.

        rec = TapeRecorder(tokens=T)                     # one process, or this rank's contiguous shard
        rec = TapeRecorder(tokens=T, token_range=(lo, hi))   # the rows this rank holds
        rec.watch(model.blocks[3].attn.proj, "blocks.3.attn.proj")
        rec.watch(model.blocks[3].attn.qkv, ["blocks.3.attn.q", "blocks.3.attn.k", "blocks.3.attn.v"])
        x = rec.tensor("blocks.3.residual1", x + gate * a)   # a value that is no module's output
        loss = rec.tensor("loss", loss, kind="partial")      # each rank's share of the mean
        loss.backward(); all_reduce the parameter gradients
        rec.gradients({name: p.grad for name, p in model.named_parameters()})
        rec.write("their.tape")                          # on every rank; rank 0 writes

    tokens: T, the real (unpadded) tokens of one image. This rank's rows map to global tokens by
    token_index (an int sequence, one per row; < 0 or >= T marks a padding row), or token_range
    (lo, hi): rows are tokens lo .. hi - 1; by default the contiguous shard of this rank
    (contiguous_shard with `multiple`). group: the sequence-parallel process group (default: the
    world when torch.distributed is initialized; else one process).

    Kinds of tensor (`kind=`; guessed when None: "tokens" for (B, rows, X) with rows this rank's
    row count, else "replicated"):
      tokens      (B, rows, X): this rank's rows; gathered in token order, padding dropped
      replicated  the same value on every rank (conditioning, adaLN vectors); each rank's gradient
                  is its tokens' share, so the shares are summed
      whole       value and gradient the same on every rank (parameter gradients after their
                  all-reduce): rank 0's
      partial     each rank holds a share of the value (the loss as its tokens' part of the
                  global mean): summed; no gradient recorded
    Gradients are recorded by tensor hooks, so in the order backward produces them; a tensor
    backward does not reach has no gradient on the tape (locate then names it as missing).
    Scalars get no gradient. Values are copied to the host as float32 or float64 when recorded.
    """

    def __init__(self, tokens, token_index=None, token_range=None, group=None, multiple=1):
        self.dist = _dist()
        self.group = group
        self.ranks = self.dist.get_world_size(group) if self.dist else 1
        self.rank = self.dist.get_rank(group) if self.dist else 0
        self.tokens = int(tokens)
        if token_index is None:
            lo, hi = token_range if token_range is not None else \
                contiguous_shard(tokens, self.ranks, self.rank, multiple)[:2]
            token_index = range(lo, hi)
        self.index = np.asarray(list(token_index), dtype=np.int64)
        self.records = []  # (name, kind, numpy array), in the order made
        self.names = set()
        self.handles = []

    # -- marking ---------------------------------------------------------------------------------
    def watch(self, module, name, view=None, kind=None):
        """Records the module's output (each call) as `name`, and its gradient when backward
        reaches it. name: a tape name, or a list of them when view splits the output (by default
        a list splits the last dimension in equal parts: qkv -> q, k, v). view: a function from the
        output (a tuple's first element) to the tensor(s) in the one-rank layout's shape (B, rows,
        X); it is applied to the gradient too. Returns the hook's handle (remove() to stop)."""
        def hook(mod, inputs, output):
            out = output[0] if isinstance(output, (tuple, list)) else output
            self._mark(name, out, view, kind)
        h = module.register_forward_hook(hook)
        self.handles.append(h)
        return h

    def tensor(self, name, t, view=None, kind=None):
        """Records tensor t now as `name` (and its gradient when backward reaches it); returns t,
        so that it can wrap an expression: x = rec.tensor("blocks.0.residual1", x + g * a)."""
        self._mark(name, t, view, kind)
        return t

    def gradients(self, grads, kind="whole"):
        """Records parameter gradients {our name: gradient} now, as grad.<name>; kind "whole" when
        they are already summed over the ranks (after the all-reduce), "replicated" when each rank
        holds its share (they are summed here). diffusers' names: from_diffusers(grads, depth,
        copies="sum") first."""
        for name, g in grads.items():
            if g is not None:
                self._add("grad." + name, kind, g)

    def clear(self):
        """Forgets what was recorded (a new step)"""
        self.records, self.names = [], set()

    def remove(self):
        """Removes the forward hooks of watch()"""
        for h in self.handles:
            h.remove()
        self.handles = []

    def _mark(self, name, t, view, kind):
        names = [name] if isinstance(name, str) else list(name)
        split = view or ((lambda u: list(u.chunk(len(names), dim=-1))) if len(names) > 1 else (lambda u: u))
        parts = split(t.detach())
        parts = [parts] if torch.is_tensor(parts) else list(parts)
        if len(parts) != len(names):
            raise ValueError(f"TapeRecorder: view made {len(parts)} tensors for the {len(names)} names {names}")
        kinds = [kind or self._guess(p) for p in parts]
        for n, k, p in zip(names, kinds, parts):
            self._add(n, k, p)
        if t.requires_grad and t.dim() > 0:
            def on_grad(g):
                gs = split(g.detach())
                for n, k, p in zip(names, kinds, [gs] if torch.is_tensor(gs) else list(gs)):
                    if k != "partial":
                        self._add("grad." + n, k, p)
            t.register_hook(on_grad)

    def _guess(self, t):
        return "tokens" if t.dim() == 3 and t.shape[1] == len(self.index) else "replicated"

    def _add(self, name, kind, t):
        if kind not in KINDS:
            raise ValueError(f"TapeRecorder: kind {kind!r} of {name} is none of {KINDS}")
        if name in self.names:
            raise ValueError(f"TapeRecorder: {name} recorded twice in one step (a module called twice? "
                             f"give each call its own name, or clear() between steps)")
        t = t.detach()
        if kind == "tokens" and (t.dim() != 3 or t.shape[1] != len(self.index)):
            raise ValueError(f"TapeRecorder: {name} of shape {tuple(t.shape)} is no (B, {len(self.index)}, X) "
                             f"tensor of this rank's tokens; pass view= to bring it to that layout, or another kind")
        if t.dtype not in (torch.float32, torch.float64):
            t = t.float()
        self.names.add(name)
        self.records.append((name, kind, t.cpu().numpy().copy()))

    # -- writing ---------------------------------------------------------------------------------
    def write(self, path, layout="PyTorch (ditsp_tape)"):
        """Collective: every rank of the group calls it. Rank 0 gathers the records, puts the
        tokens of every rank in order with the padding dropped, sums the shares, and writes the
        tape with the metadata `train locate` reads (ranks, tokens, padded_tokens, shards:
        each rank's token runs, exact 0, layout). Returns the path on rank 0, None elsewhere.
        With NCCL, set each rank's device (torch.cuda.set_device) first: gather_object moves
        its bytes through it."""
        mine = (self.index, self.records)
        if self.dist and self.ranks > 1:
            every = [None] * self.ranks if self.rank == 0 else None
            dst = 0 if self.group is None else _global_rank(self.dist, self.group, 0)
            self.dist.gather_object(mine, every, dst=dst, group=self.group)
        else:
            every = [mine]
        if self.rank != 0:
            return None
        T, P = self.tokens, self.ranks
        padded = max([T] + [int(ix.max()) + 1 for ix, _ in every if len(ix)])
        by_rank = [{n: (k, a) for n, k, a in recs} for _, recs in every]
        names = [n for n, _, _ in every[0][1]]
        for r, d in enumerate(by_rank[1:], 1):
            if set(d) != set(names):
                extra, lack = sorted(set(d) - set(names)), sorted(set(names) - set(d))
                raise ValueError(f"TapeRecorder: rank {r} recorded other tensors than rank 0 "
                                 f"(more: {extra[:5]}, fewer: {lack[:5]}); every rank must mark the same")
        out = {}
        for pos, name in enumerate(names):
            kind, a0 = by_rank[0][name]
            if kind == "tokens":
                whole = np.zeros((a0.shape[0], T) + a0.shape[2:], a0.dtype)
                seen = np.zeros(T, np.int64)
                for (index, _), d in zip(every, by_rank):
                    a = d[name][1]
                    real = (index >= 0) & (index < T)
                    whole[:, index[real]] = a[:, real]
                    np.add.at(seen, index[real], 1)
                if not (seen == 1).all():
                    bad = np.flatnonzero(seen != 1)[:8].tolist()
                    raise ValueError(f"TapeRecorder: the ranks' token indices cover tokens {bad} (the first) "
                                     f"{'never' if (seen == 0).any() else 'twice'}; each token must be one rank's")
                value = whole
            elif kind == "whole" or (kind == "replicated" and not name.startswith("grad.")):
                value = a0
            else:  # a share on each rank: replicated tensors' gradients, partial values
                value = sum(d[name][1].astype(np.float64) for d in by_rank).astype(a0.dtype)
            out[f"{pos:04d} {name}"] = value.reshape(1) if value.ndim == 0 else value
        meta = {"ranks": P, "tokens": T, "padded_tokens": padded, "exact": 0, "context_tokens": 0,
                "layout": layout, "shards": ",".join(_runs(ix, padded) for ix, _ in every)}
        write_safetensors(path, out, meta)
        return path


def _global_rank(dist, group, rank):
    for f in ("get_global_rank", "_get_global_rank"):  # public from torch 2.x
        g = getattr(dist, f, None) or getattr(dist.distributed_c10d, f, None)
        if g:
            return g(group, rank)
    raise RuntimeError("cannot find the global rank of the group's rank 0 in this torch")


# ---- a model against itself: every module's output by its path --------------------------------
# Another library's model under its own context parallelism, compared with its own one-process run:
# no name map is needed (both runs name a tensor by the module that made it), and the layout of
# each rank's tensors is read from their shapes against the one-process shapes (lay_out).
def _tensors_of(output):
    """The floating-point tensors of a module's output: [(suffix, tensor)]; "" for a lone tensor,
    "[i]" for the i-th of a tuple or list; other outputs give none"""
    if torch.is_tensor(output):
        return [("", output)] if output.is_floating_point() else []
    if isinstance(output, (tuple, list)):
        return [(f"[{i}]", t) for i, t in enumerate(output) if torch.is_tensor(t) and t.is_floating_point()]
    return []


class ModuleTape:
    """Records the output of every submodule of `model` (forward hooks) and its gradient (tensor
    hooks), named by the module's path ("transformer_blocks.0.attn.to_k"); a module called again in
    the same step gets "#2", "#3"; the i-th tensor of a tuple output gets "[i]". Values are kept as
    this process holds them (its shard, under context parallelism): lay_out() puts N ranks'
    records in the one-process layout.

        tape = ModuleTape(model)
        out = model(**inputs)
        tape.tensor("loss", loss)                     # any other tensor, by a name of your choice
        loss.backward()
        tape.parameters(model)                        # grad.param.<name> of every parameter
        records = tape.records                        # [(name, numpy array)], in the order made

    skip: a function of (path, module) -> True for modules not to record (the root is never
    recorded: record its output with tensor())."""

    def __init__(self, model, skip=None):
        self.records, self.counts, self.handles = [], {}, []
        for path, module in model.named_modules():
            if path and not (skip and skip(path, module)):
                self.handles.append(module.register_forward_hook(self._hook(path)))

    def _hook(self, path):
        def hook(module, inputs, output):
            for suffix, t in _tensors_of(output):
                self.tensor(path + suffix, t)
        return hook

    def tensor(self, name, t):
        """Records t as `name` now (a repeated name gets "#k") and its gradient when backward
        reaches it; returns t"""
        k = self.counts[name] = self.counts.get(name, 0) + 1
        name = name if k == 1 else f"{name}#{k}"
        self.records.append((name, _host(t)))
        if t.requires_grad:
            t.register_hook(lambda g: self.records.append(("grad." + name, _host(g))))
        return t

    def parameters(self, model):
        """Records each parameter's gradient as grad.param.<name> (this process's own, before any
        reduction over the processes)"""
        for name, p in model.named_parameters():
            if p.grad is not None:
                self.records.append(("grad.param." + name, _host(p.grad)))

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []


def _host(t):
    t = t.detach()
    return (t if t.dtype in (torch.float32, torch.float64) else t.float()).cpu().numpy().copy()


def _split_sizes(n, parts):
    """The lengths torch.tensor_split (and, where parts divides n, chunk) gives n rows in `parts`"""
    return [n // parts + (i < n % parts) for i in range(parts)]


class _Layout:
    """Where each rank's rows of a token dimension go: streams [(name, length)] in the global token
    order, and the orders of streams a tensor may hold them in (one stream, or a concatenation)"""

    def __init__(self, streams, concat, ranks):
        self.streams = dict(streams)
        self.offset, o = {}, 0
        for name, n in streams:
            self.offset[name], o = o, o + n
        self.tokens, self.ranks = o, ranks
        self.orders = [(name,) for name, _ in streams] + [tuple(c) for c in concat]

    def rows(self, order, rank):
        """The global token index of each row rank `rank` holds of a tensor of `order`'s streams"""
        out = []
        for s in order:
            sizes = _split_sizes(self.streams[s], self.ranks)
            lo = sum(sizes[:rank])
            out += range(self.offset[s] + lo, self.offset[s] + lo + sizes[rank])
        return np.asarray(out, np.int64)

    def order_of(self, full, local):
        """The stream order whose one-process length is `full` and whose shards are `local` (one
        length per rank); None when no order fits"""
        fits = [o for o in self.orders if sum(self.streams[s] for s in o) == full
                and all(len(self.rows(o, r)) == n for r, n in enumerate(local))]
        if len(fits) > 1 and len({tuple(np.concatenate([self.rows(o, r) for r in range(self.ranks)])) for o in fits}) > 1:
            raise ValueError(f"lay_out: {len(fits)} stream orders {fits} fit a dimension of {full} rows held as "
                             f"{local}; give the streams lengths that tell them apart")
        return fits[0] if fits else None

    def shards(self):
        """The tape's "shards" metadata: each rank's token runs over all streams"""
        return ",".join(_runs(np.concatenate([self.rows((s,), r) for s in self.streams]), self.tokens)
                        for r in range(self.ranks))


def lay_out(reference, ranks, streams, concat=(), whole=()):
    """One process's records and N ranks' records of the same step (ModuleTape.records each), in the
    layout `train locate` compares: returns (theirs, ours, meta, notes): two dicts name -> array in
    the order of rank 0's records, the metadata of the N-rank tape (write_tape's tokens, ranks,
    shards) and a list of what could not be laid out.

    streams: [(name, tokens)], the sequences that the parallel run splits across its ranks (image
    tokens, text tokens), in the order the tape numbers its tokens; concat: the stream orders of
    tensors that hold several streams one after another, e.g. [("text", "image")] for joint
    attention. Each rank holds, of each stream, the rows torch.tensor_split gives it (contiguous;
    chunk where the ranks divide the stream).

    A tensor whose one-process shape differs from a rank's in one dimension is split there: its
    rows go to their global token numbers, and the tape holds it as (B, tokens, X) (X: the other
    dimensions flattened; a tensor split along its first dimension gets B = 1), zero at the tokens
    of streams it does not hold; the one-process tensor is written the same way. A tensor of the
    same shape on every rank is replicated: its value is rank 0's; its gradient is the sum of the
    ranks' shares (a tensor before the split, a parameter: each rank's tokens' part), except for
    the names in `whole` (a gathered output, the loss; a set, or a function of the name), whose
    gradient every rank holds whole: rank 0's."""
    P = len(ranks)
    layout = _Layout(streams, concat, P)
    ref = dict(reference)
    per_rank = [dict(r) for r in ranks]
    names = [n for n, _ in ranks[0]]
    theirs, ours, notes = {}, {}, []
    split_dim = {}  # forward name -> (dim, order), for its gradient
    for name in names:
        if name not in ref:
            notes.append(f"{name}: not in the one-process run")
            continue
        if any(name not in d for d in per_rank):
            notes.append(f"{name}: not recorded on every rank")
            continue
        full, parts = ref[name], [d[name] for d in per_rank]
        base = name[5:] if name.startswith("grad.") else name
        if all(p.shape == full.shape for p in parts) and base not in split_dim:
            if name.startswith("grad.") and not (whole(base) if callable(whole) else base in whole):
                value = sum(p.astype(np.float64) for p in parts).astype(parts[0].dtype)
            else:
                value = parts[0]
            theirs[name], ours[name] = value, full
            continue
        if base in split_dim:
            dim, order = split_dim[base]
        else:
            differ = [i for i in range(full.ndim) if any(p.ndim != full.ndim or p.shape[i] != full.shape[i] for p in parts)]
            if len(differ) != 1 or any(p.ndim != full.ndim for p in parts):
                notes.append(f"{name}: shapes {[p.shape for p in parts]} on the ranks, {full.shape} on one process")
                continue
            dim = differ[0]
            order = layout.order_of(full.shape[dim], [p.shape[dim] for p in parts])
            if order is None:
                notes.append(f"{name}: {full.shape[dim]} rows held as {[p.shape[dim] for p in parts]}: no stream fits")
                continue
            split_dim[base] = (dim, order)
        if any(p.shape[dim] != len(layout.rows(order, r)) for r, p in enumerate(parts)):
            notes.append(f"{name}: shapes {[p.shape for p in parts]} on the ranks do not fit {order}")
            continue
        rows = np.concatenate([layout.rows(order, r) for r in range(P)])
        theirs[name] = _tokens_first(np.concatenate(parts, axis=dim), dim, rows, layout.tokens)
        ours[name] = _tokens_first(full, dim, _in_order(layout, order), layout.tokens)
    meta = {"tokens": layout.tokens, "ranks": P, "shards": layout.shards()}
    return theirs, ours, meta, notes


def _in_order(layout, order):
    """The global token numbers of the rows of a one-process tensor of `order`'s streams"""
    return np.concatenate([np.arange(layout.offset[s], layout.offset[s] + layout.streams[s]) for s in order])


def _tokens_first(a, dim, rows, tokens):
    """a with its rows along `dim` placed at token numbers `rows` of (B, tokens, X), zero elsewhere"""
    a = np.moveaxis(a, dim, 0 if dim == 0 else 1)
    if dim == 0:
        a = a[None]
    a = a.reshape(a.shape[0], a.shape[1], -1)
    out = np.zeros((a.shape[0], tokens, a.shape[2]), a.dtype)
    out[:, rows] = a
    return out


def write_tape(path, tensors, tokens, ranks=1, shards=None, layout="PyTorch (ditsp_tape)"):
    """Writes {name: array} (in execution order) as a tape `train locate` reads: tokens, the token
    count of the (B, tokens, X) tensors; ranks and shards (each rank's token runs, "0-4+8-12,4-8")
    say which rank held which tokens"""
    out = {f"{i:04d} {name}": (a.reshape(1) if a.ndim == 0 else a) for i, (name, a) in enumerate(tensors.items())}
    meta = {"ranks": ranks, "tokens": tokens, "padded_tokens": tokens, "exact": 0, "context_tokens": 0,
            "layout": layout, "shards": shards or f"0-{tokens}"}
    write_safetensors(path, out, meta)
    return path
