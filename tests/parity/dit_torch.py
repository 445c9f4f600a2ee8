"""An independent PyTorch implementation of DiT (Peebles & Xie), written from the paper's
description with the reference's module and parameter names, plus a minimal safetensors reader
and writer (the safetensors package is not packaged for Debian). Used by parity.py."""
import json
import math
import struct

import numpy as np
import torch
import torch.nn as nn

# ---- safetensors -------------------------------------------------------------------------------
DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}


def st_read(path):
    """Returns (dict name -> numpy array, metadata dict)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(data[b:end], dtype=DTYPES[e["dtype"]]).reshape(e["shape"]).copy()
    return out, meta


def st_write(path, tensors, meta=None):
    names = sorted(tensors)
    header, offset, blobs = {}, 0, []
    for name in names:
        a = np.ascontiguousarray(tensors[name])
        dtype = {np.dtype(v): k for k, v in DTYPES.items()}[a.dtype]
        blob = a.tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    if meta:
        header["__metadata__"] = {k: str(v) for k, v in meta.items()}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ---- the tape: tensors by the names `train probe --dump-tape` gives them ---------------------------
class Tape:
    """Records named tensors of a forward pass (keeping their gradients); dump() writes them, then
    their gradients in the reverse order, then the parameters' gradients, as `train locate` reads."""
    current = None

    def __init__(self):
        self.named = []

    def dump(self, path, model, tokens):
        out, i = {}, 0
        for name, t in self.named:
            out[f"{i:04d} {name}"] = t.detach().numpy().copy() if t.dim() else t.detach().numpy().reshape(1)
            i += 1
        for name, t in reversed(self.named):
            if t.dim():
                out[f"{i:04d} grad.{name}"] = t.grad.numpy().copy()
                i += 1
        for name, p in model.named_parameters():
            if p.requires_grad:
                out[f"{i:04d} grad.{name}"] = p.grad.numpy().copy()
                i += 1
        st_write(path, out, {"ranks": 1, "tokens": tokens, "padded_tokens": tokens, "exact": 0,
                             "layout": "PyTorch reference"})


def named(name, t):
    if Tape.current is not None:
        t.retain_grad()
        Tape.current.named.append((name, t))
    return t


# ---- the model ---------------------------------------------------------------------------------
def modulate(x, shift, scale):
    return x * (1 + scale[:, None, :]) + shift[:, None, :]


class PatchEmbed(nn.Module):
    def __init__(self, p, c, d):
        super().__init__()
        self.proj = nn.Conv2d(c, d, kernel_size=p, stride=p)

    def forward(self, x):  # (N, C, H, W) -> (N, T, D), tokens in row-major patch order
        return self.proj(x).flatten(2).transpose(1, 2)


class TimestepEmbedder(nn.Module):
    def __init__(self, d, freq=256):
        super().__init__()
        self.freq = freq
        self.mlp = nn.Sequential(nn.Linear(freq, d), nn.SiLU(), nn.Linear(d, d))

    def forward(self, t):
        half = self.freq // 2
        f = torch.exp(-math.log(10000) * torch.arange(half, dtype=t.dtype) / half)
        a = t[:, None] * f[None]
        return self.mlp(torch.cat([torch.cos(a), torch.sin(a)], dim=-1))


class LabelEmbedder(nn.Module):
    def __init__(self, classes, d, dropout):
        super().__init__()
        self.embedding_table = nn.Embedding(classes + (dropout > 0), d)

    def forward(self, y):  # eval mode: no label dropout
        return self.embedding_table(y)


class RMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) * weight over the last dim (Zhang & Sennrich 2019; the QK-norm of
    Flux and HunyuanVideo over a head's dims, of Wan2.1 over the full width)."""
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_angles(dh, gh, gw, theta=10000.0):
    """Axial 3-D rotary angles (T, dh/2) of a one-frame gh x gw grid, row-major, as Wan2.1 splits a
    head: of its c = dh/2 complex pairs, c - 2 (c // 3) rotate with the frame, c // 3 with the row,
    c // 3 with the column; an axis of m pairs has frequencies theta^(-k/m) (RoFormer's
    theta^(-2k/d) with d = 2m dims)."""
    c = dh // 2
    parts = [c - 2 * (c // 3), c // 3, c // 3]
    rows, cols = np.meshgrid(np.arange(gh, dtype=np.float64), np.arange(gw, dtype=np.float64), indexing="ij")
    coords = [np.zeros(gh * gw), rows.reshape(-1), cols.reshape(-1)]
    return np.concatenate([np.outer(x, theta ** (-np.arange(m, dtype=np.float64) / m))
                           for x, m in zip(coords, parts)], axis=1)


def rotate(x, angles):
    """RoFormer's rotary embedding: x (N, T, H, dh) with each adjacent pair (2j, 2j+1) read as the
    complex number x_2j + i x_2j+1 and multiplied by e^(i angle[t, j])."""
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles)[None, :, None]).flatten(-2)


class Attention(nn.Module):
    def __init__(self, d, heads, qk_norm="none", rope=False):
        super().__init__()
        self.heads, self.qk_norm, self.rope = heads, qk_norm, rope
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        if qk_norm != "none":
            self.q_norm = RMSNorm(d // heads if qk_norm == "head" else d)
            self.k_norm = RMSNorm(d // heads if qk_norm == "head" else d)

    def forward(self, x, at="", grid=None):
        n, t, d = x.shape
        h = self.heads
        q, k, v = (named(at + "attn." + s, u) for s, u in zip("qkv", self.qkv(x).chunk(3, dim=2)))
        split = lambda u: u.reshape(n, t, h, d // h)
        if self.qk_norm == "head":
            q, k = (named(at + "attn." + s, f(split(u)).reshape(n, t, d)) for s, f, u in
                    (("q_norm", self.q_norm, q), ("k_norm", self.k_norm, k)))
        elif self.qk_norm == "full":
            q, k = named(at + "attn.q_norm", self.q_norm(q)), named(at + "attn.k_norm", self.k_norm(k))
        if self.rope:
            # in-context: the conditioning tokens in front have no place in the grid: not turned
            a = rope_angles(d // h, *grid)
            angles = torch.from_numpy(np.concatenate([np.zeros((t - len(a), a.shape[1])), a])).to(x.dtype)
            q, k = (named(at + "attn." + s, rotate(split(u), angles).reshape(n, t, d))
                    for s, u in (("q_rope", q), ("k_rope", k)))
        q, k, v = (split(u).transpose(1, 2) for u in (q, k, v))
        w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // h), dim=-1)
        return named(at + "attn.proj", self.proj(named(at + "attn.out", (w @ v).transpose(1, 2).reshape(n, t, d))))


class Mlp(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x, at=""):
        return named(at + "mlp.fc2", self.fc2(named(at + "mlp.gelu", self.act(named(at + "mlp.fc1", self.fc1(x))))))


class DiTBlock(nn.Module):
    def __init__(self, d, heads, mlp_ratio, in_context=False, qk_norm="none", rope=False):
        super().__init__()
        self.norm1 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(d, heads, qk_norm, rope)
        self.norm2 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.mlp = Mlp(d, int(d * mlp_ratio))
        self.in_context = in_context
        if not in_context:
            self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(d, 6 * d))

    def forward(self, x, c, at="", grid=None):
        if self.in_context:  # a plain pre-norm block: the conditioning is in the sequence
            x = named(at + "residual1", x + self.attn(named(at + "norm1", self.norm1(x)), at, grid))
            return named(at + "residual2", x + self.mlp(named(at + "norm2", self.norm2(x)), at))
        sa, ca, ga, sm, cm, gm = named(at + "adaLN", self.adaLN_modulation(c)).chunk(6, dim=1)
        x = named(at + "residual1", x + ga[:, None] * self.attn(named(at + "norm1", modulate(self.norm1(x), sa, ca)), at, grid))
        return named(at + "residual2", x + gm[:, None] * self.mlp(named(at + "norm2", modulate(self.norm2(x), sm, cm)), at))


class FinalLayer(nn.Module):
    def __init__(self, d, p, c_out, in_context=False):
        super().__init__()
        self.norm_final = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(d, p * p * c_out)
        self.in_context = in_context
        if not in_context:
            self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(d, 2 * d))

    def forward(self, x, c):
        if self.in_context:
            return named("final_layer.out", self.linear(named("final_layer.norm", self.norm_final(x))))
        shift, scale = named("final_layer.adaLN", self.adaLN_modulation(c)).chunk(2, dim=1)
        return named("final_layer.out", self.linear(named("final_layer.norm", modulate(self.norm_final(x), shift, scale))))


class DiT(nn.Module):
    def __init__(self, input_size, patch_size, in_channels, hidden_size, depth, num_heads,
                 mlp_ratio, num_classes, learn_sigma, class_dropout_prob, in_context=False, pos="sincos",
                 qk_norm="none"):
        """in_context: the DiT paper's in-context conditioning (its Table 4): the timestep and class
        embeddings as two tokens in front of the patch tokens, plain blocks, and the two tokens
        dropped before a final layer without adaLN. pos "rope": no table added, q and k rotated
        (rope_angles); qk_norm "head" or "full": RMSNorm on q and k before that."""
        super().__init__()
        self.rope = pos == "rope"
        self.in_context = in_context
        self.c, self.p, self.s = in_channels, patch_size, input_size
        self.c_out = 2 * in_channels if learn_sigma else in_channels
        t = (input_size // patch_size) ** 2
        self.x_embedder = PatchEmbed(patch_size, in_channels, hidden_size)
        self.t_embedder = TimestepEmbedder(hidden_size)
        self.y_embedder = LabelEmbedder(num_classes, hidden_size, class_dropout_prob)
        self.pos_embed = nn.Parameter(torch.zeros(1, t, hidden_size), requires_grad=False)
        self.blocks = nn.ModuleList(DiTBlock(hidden_size, num_heads, mlp_ratio, in_context, qk_norm, self.rope)
                                    for _ in range(depth))
        self.final_layer = FinalLayer(hidden_size, patch_size, self.c_out, in_context)

    def unpatchify(self, x, gh, gw):  # (N, T, p*p*C) laid out (p, q, c) -> (N, C, gh p, gw p)
        n, p = x.shape[0], self.p
        x = x.reshape(n, gh, gw, p, p, self.c_out)
        return torch.einsum("nhwpqc->nchpwq", x).reshape(n, self.c_out, gh * p, gw * p)

    def forward(self, x, t, y, pos_embed=None):
        """x (N, C, H, W); pos_embed (T, D) for x's grid, by default the stored square one."""
        gh, gw = x.shape[2] // self.p, x.shape[3] // self.p
        x = self.x_embedder(x)
        x = named("x_embedder", x if self.rope else x + (self.pos_embed if pos_embed is None else pos_embed))
        if self.in_context:
            c = named("c", torch.stack([self.t_embedder(t), self.y_embedder(y)], dim=1))
            x = torch.cat([c, x], dim=1)
        else:
            c = named("c", self.t_embedder(t) + self.y_embedder(y))
        for i, b in enumerate(self.blocks):
            x = b(x, c, f"blocks.{i}.", (gh, gw))
        if self.in_context:
            x = x[:, c.shape[1]:]
        return self.unpatchify(self.final_layer(x, c), gh, gw)

    def forward_varlen(self, images, t, y, pos_embed=None):
        """Images of their own sizes, the plain way: each image (C, h, w) run alone on its own
        grid, with the 2-D sin-cos embedding of that grid from the reference formula (or
        pos_embed(d, gh, gw) instead), its own timestep t[i] and label y[i]; the outputs
        (C_out, h, w) in the images' order."""
        out = []
        for i, x in enumerate(images):
            gh, gw = x.shape[1] // self.p, x.shape[2] // self.p
            pos = (pos_embed or sincos_pos_embed)(self.pos_embed.shape[2], gh, gw)
            out.append(self(x[None], t[i:i + 1], y[i:i + 1], torch.from_numpy(pos).to(x.dtype))[0])
        return out


def config_from_meta(meta):
    i = lambda k: int(meta[k])
    return dict(input_size=i("input_size"), patch_size=i("patch_size"), in_channels=i("in_channels"),
                hidden_size=i("hidden_size"), depth=i("depth"), num_heads=i("num_heads"),
                mlp_ratio=float(meta["mlp_ratio"]), num_classes=i("num_classes"),
                learn_sigma=meta["learn_sigma"] in ("true", "True", "1"),
                class_dropout_prob=float(meta.get("class_dropout_prob", "0")),
                in_context=meta.get("in_context", "false") in ("true", "True", "1"),
                pos=meta.get("pos", "sincos"), qk_norm=meta.get("qk_norm", "none"))


def sincos_pos_embed(d, gh, gw):
    """The reference's fixed 2-D embedding of a gh x gw grid (get_2d_sincos_pos_embed), from its
    formula: the first half encodes the column, the second the row; (gh gw, d), row-major."""
    def one(dim, pos):
        w = 1.0 / 10000 ** (np.arange(dim // 2, dtype=np.float64) / (dim / 2.0))
        a = np.einsum("m,d->md", pos.reshape(-1), w)
        return np.concatenate([np.sin(a), np.cos(a)], axis=1)
    cols, rows = np.meshgrid(np.arange(gw, dtype=np.float64), np.arange(gh, dtype=np.float64))
    return np.concatenate([one(d // 2, cols), one(d // 2, rows)], axis=1)
