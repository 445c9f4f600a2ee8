"""An independent PyTorch implementation of DiT (Peebles & Xie), written from the paper's
description with the reference's module and parameter names, plus a minimal safetensors reader
and writer (the safetensors package is not packaged for Debian). Used by parity.py.

Clips (frames > 1), as the video DiTs describe them: a clip (N, C, F, H, W) is cut into patches
of patch_t frames x p x p by a 3-D convolution of stride = kernel (Open-Sora's PatchEmbed3D; with
patch_t 1 a 2-D convolution of each frame, as Latte embeds frames), the tokens frame by frame;
the fixed position table is CogVideoX's 3-D sin-cos (sincos_pos_embed_3d); the final layer's
tokens are unpatchified from (frame, row, column, channel) rows."""
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
    def __init__(self, p, c, d, pt=1):
        super().__init__()
        self.proj = nn.Conv2d(c, d, kernel_size=p, stride=p) if pt == 1 else \
            nn.Conv3d(c, d, kernel_size=(pt, p, p), stride=(pt, p, p))

    def forward(self, x):  # (N, C, H, W) or clips (N, C, F, H, W) -> (N, T, D), frame-major
        if x.dim() == 5 and isinstance(self.proj, nn.Conv2d):  # each frame alone
            n, f = x.shape[0], x.shape[2]
            e = self.proj(x.transpose(1, 2).flatten(0, 1)).flatten(2).transpose(1, 2)  # (N F, hw, D)
            return e.reshape(n, f * e.shape[1], e.shape[2])
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


def rope_angles(dh, gf, gh, gw, theta=10000.0):
    """Axial 3-D rotary angles (T, dh/2) of a gf x gh x gw grid of (frame, row, column), frame-major
    (an image: one frame), as Wan2.1 splits a head: of its c = dh/2 complex pairs, c - 2 (c // 3)
    rotate with the frame, c // 3 with the row, c // 3 with the column; an axis of m pairs has
    frequencies theta^(-k/m) (RoFormer's theta^(-2k/d) with d = 2m dims)."""
    c = dh // 2
    parts = [c - 2 * (c // 3), c // 3, c // 3]
    coords = [a.reshape(-1) for a in np.meshgrid(*(np.arange(g, dtype=np.float64) for g in (gf, gh, gw)),
                                                 indexing="ij")]
    return np.concatenate([np.outer(x, theta ** (-np.arange(m, dtype=np.float64) / m))
                           for x, m in zip(coords, parts)], axis=1)


def rotate(x, angles):
    """RoFormer's rotary embedding: x (N, T, H, dh) with each adjacent pair (2j, 2j+1) read as the
    complex number x_2j + i x_2j+1 and multiplied by e^(i angle[t, j])."""
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles)[None, :, None]).flatten(-2)


class Attention(nn.Module):
    fused = False  # True: PyTorch 2's scaled_dot_product_attention in place of the formula (benchmarks)

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
        q, k, v = (u.reshape(n, t, self.heads, d // self.heads).transpose(1, 2) for u in self.project(x, at, grid))
        if self.fused:
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        else:
            o = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // self.heads), dim=-1) @ v
        return named(at + "attn.proj", self.proj(named(at + "attn.out", o.transpose(1, 2).reshape(n, t, d))))

    def project(self, x, at="", grid=None):
        """q, k, v (N, T, D) of x: the qkv linear, then the QK-norm and the rotary angles"""
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
        return q, k, v


def masked_attention(q, k, v, heads, allowed):
    """Multi-head softmax(q k^T / sqrt(d_h)) v with allowed (N, Tq, Tk) saying which key each query
    may see; a query that may see none gets zeros (an image's cross-attention to an empty caption)."""
    n, tq, d = q.shape
    tk, h = k.shape[1], heads
    q, k, v = (u.reshape(n, -1, h, d // h).transpose(1, 2) for u in (q, k, v))
    some = allowed.any(dim=-1, keepdim=True)  # (N, Tq, 1)
    s = (q @ k.transpose(-2, -1) / math.sqrt(d // h)).masked_fill(~(allowed | ~some)[:, None], float("-inf"))
    w = torch.softmax(s, dim=-1) * some[:, None]
    return (w @ v).transpose(1, 2).reshape(n, tq, d)


class CrossAttention(nn.Module):
    """PixArt-alpha's cross-attention (Chen et al., 2023, section 2.3): queries from the image
    tokens, keys and values from the text tokens, an output projection; text padding masked."""
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.q_linear = nn.Linear(d, d)
        self.kv_linear = nn.Linear(d, 2 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x, text, words, at=""):
        q = named(at + "cross.q", self.q_linear(x))
        k, v = (named(at + "cross." + s, u) for s, u in zip("kv", self.kv_linear(text).chunk(2, dim=2)))
        allowed = words[:, None, :].expand(-1, x.shape[1], -1)
        out = named(at + "cross.out", masked_attention(q, k, v, self.heads, allowed))
        return named(at + "cross.proj", self.proj(out))


class Mlp(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x, at=""):
        return named(at + "mlp.fc2", self.fc2(named(at + "mlp.gelu", self.act(named(at + "mlp.fc1", self.fc1(x))))))


class TextLayer(nn.Module):
    """A pre-norm transformer layer (no affine LayerNorm, as DiT's): x + attn(ln(x)), then
    x + mlp(ln(x)); a word attends to the caption's words, a padding token to the padding."""
    def __init__(self, d, heads, mlp_ratio):
        super().__init__()
        self.norm1 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(d, heads)
        self.norm2 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.mlp = Mlp(d, int(d * mlp_ratio))

    def forward(self, x, words, at):
        h = named(at + "norm1", self.norm1(x))
        q, k, v = (named(at + "attn." + s, u) for s, u in zip("qkv", self.attn.qkv(h).chunk(3, dim=2)))
        allowed = words[:, :, None] == words[:, None, :]
        a = named(at + "attn.out", masked_attention(q, k, v, self.attn.heads, allowed))
        x = named(at + "residual1", x + named(at + "attn.proj", self.attn.proj(a)))
        return named(at + "residual2", x + self.mlp(named(at + "norm2", self.norm2(x)), at))


class TextEncoder(nn.Module):
    """Captions (N, L) of word ids (0: padding) -> (N, L, D): a learned embedding per word
    (text_embedder's table) plus the fixed sin-cos embedding of the place (the 2-D formula's
    1 x L grid), then the layers."""
    def __init__(self, d, heads, mlp_ratio, depth):
        super().__init__()
        self.layers = nn.ModuleList(TextLayer(d, heads, mlp_ratio) for _ in range(depth))

    def forward(self, table, ids):
        n, L = ids.shape
        pos = torch.from_numpy(sincos_pos_embed(table.weight.shape[1], 1, L)).to(table.weight.dtype)
        x = named("text_embedder", table(ids) + pos)
        words = ids != 0
        for j, layer in enumerate(self.layers):
            x = layer(x, words, f"text_encoder.layers.{j}.")
        return named("text_encoder", x), words


class DiTBlock(nn.Module):
    def __init__(self, d, heads, mlp_ratio, in_context=False, text=False, qk_norm="none", rope=False):
        super().__init__()
        if text:
            self.cross_attn = CrossAttention(d, heads)
        self.norm1 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(d, heads, qk_norm, rope)
        self.norm2 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.mlp = Mlp(d, int(d * mlp_ratio))
        self.in_context = in_context
        if not in_context:
            self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(d, 6 * d))

    def forward(self, x, c, at="", text=None, grid=None):
        if self.in_context:  # a plain pre-norm block: the conditioning is in the sequence
            x = named(at + "residual1", x + self.attn(named(at + "norm1", self.norm1(x)), at, grid))
            return named(at + "residual2", x + self.mlp(named(at + "norm2", self.norm2(x)), at))
        sa, ca, ga, sm, cm, gm = named(at + "adaLN", self.adaLN_modulation(c)).chunk(6, dim=1)
        x = named(at + "residual1", x + ga[:, None] * self.attn(named(at + "norm1", modulate(self.norm1(x), sa, ca)), at, grid))
        if text is not None:  # PixArt-alpha: cross-attention after the self-attention, no norm, no gate
            x = named(at + "cross.residual", x + self.cross_attn(x, *text, at))
        return named(at + "residual2", x + gm[:, None] * self.mlp(named(at + "norm2", modulate(self.norm2(x), sm, cm)), at))


class JointBlock(nn.Module):
    """SD3's MMDiT block (Esser et al., 2024, "Scaling Rectified Flow Transformers for High-Resolution
    Image Synthesis", section 4 and figure 2): the image tokens and the caption's tokens are two
    streams, each with its own weights: an adaLN modulation from c (shift, scale, gate before the
    attention and before the MLP), a qkv, an output projection and an MLP. The two streams' queries,
    keys and values are concatenated, [caption; image], for one attention (no query sees the
    caption's padding); its output is split back and each stream goes on as a DiT block does. The
    image stream's parameters carry DiT's names (attn, mlp, adaLN_modulation), the caption's the
    same under txt. In the last block the caption's stream only gives its keys and values (SD3's
    context_pre_only): shift and scale, a qkv, no output."""
    def __init__(self, d, heads, mlp_ratio, qk_norm="none", rope=False, last=False):
        super().__init__()
        self.heads, self.last = heads, last
        self.norm1 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.norm2 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(d, heads, qk_norm, rope)
        self.mlp = Mlp(d, int(d * mlp_ratio))
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(d, 6 * d))
        self.txt = nn.Module()
        self.txt.attn = Attention(d, heads, qk_norm)  # the caption's tokens are not turned
        self.txt.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(d, (2 if last else 6) * d))
        if last:
            del self.txt.attn.proj
        else:
            self.txt.mlp = Mlp(d, int(d * mlp_ratio))

    def forward(self, x, ctx, c, words, at="", grid=None):
        """x (N, T, D) the image tokens, ctx (N, L, D) the caption's, words (N, L) true for a word"""
        L, tx = ctx.shape[1], at + "txt."
        m = named(at + "adaLN", self.adaLN_modulation(c)).chunk(6, dim=1)
        mt = named(tx + "adaLN", self.txt.adaLN_modulation(c)).chunk(2 if self.last else 6, dim=1)
        img = self.attn.project(named(at + "norm1", modulate(self.norm1(x), m[0], m[1])), at, grid)
        cap = self.txt.attn.project(named(tx + "norm1", modulate(self.norm1(ctx), mt[0], mt[1])), tx)
        q, k, v = (torch.cat([a, b], dim=1) for a, b in zip(cap, img))
        keys = torch.cat([words, torch.ones(x.shape[:2], dtype=torch.bool)], dim=1)  # (N, L + T)
        o = masked_attention(q, k, v, self.heads, keys[:, None, :].expand(-1, q.shape[1], -1))
        x = named(at + "residual1", x + m[2][:, None] * named(at + "attn.proj", self.attn.proj(named(at + "attn.out", o[:, L:]))))
        x = named(at + "residual2", x + m[5][:, None] * self.mlp(named(at + "norm2", modulate(self.norm2(x), m[3], m[4])), at))
        if self.last:
            return x, ctx
        ctx = named(tx + "residual1", ctx + mt[2][:, None] * named(tx + "attn.proj", self.txt.attn.proj(named(tx + "attn.out", o[:, :L]))))
        return x, named(tx + "residual2", ctx + mt[5][:, None] * self.txt.mlp(named(tx + "norm2", modulate(self.norm2(ctx), mt[3], mt[4])), tx))


class FinalLayer(nn.Module):
    def __init__(self, d, p, c_out, in_context=False, pt=1):
        super().__init__()
        self.norm_final = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(d, pt * p * p * c_out)
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
                 mlp_ratio, num_classes, learn_sigma, class_dropout_prob, in_context=False, text=False,
                 text_len=0, text_depth=0, vocab=0, frames=1, patch_t=1, pos="sincos", qk_norm="none",
                 text_attn="cross"):
        """in_context: the DiT paper's in-context conditioning (its Table 4): the timestep and class
        embeddings as two tokens in front of the patch tokens, plain blocks, and the two tokens
        dropped before a final layer without adaLN. frames > 1: clips of that many frames in
        patches of patch_t frames (the module docstring)."""
        super().__init__()
        self.rope = pos == "rope"
        self.in_context = in_context
        self.c, self.p, self.s, self.pt, self.frames = in_channels, patch_size, input_size, patch_t, frames
        self.c_out = 2 * in_channels if learn_sigma else in_channels
        t = (frames // patch_t) * (input_size // patch_size) ** 2
        self.x_embedder = PatchEmbed(patch_size, in_channels, hidden_size, patch_t)
        self.t_embedder = TimestepEmbedder(hidden_size)
        self.text = text  # captions instead of labels: c is the timestep's embedding alone
        if text:
            self.text_embedder = nn.Module()
            self.text_embedder.embedding_table = nn.Embedding(vocab, hidden_size)
            self.text_encoder = TextEncoder(hidden_size, num_heads, mlp_ratio, text_depth)
        else:
            self.y_embedder = LabelEmbedder(num_classes, hidden_size, class_dropout_prob)
        self.pos_embed = nn.Parameter(torch.zeros(1, t, hidden_size), requires_grad=False)
        self.joint = text and text_attn == "joint"  # SD3's MMDiT blocks instead of cross-attention
        if self.joint:
            self.blocks = nn.ModuleList(JointBlock(hidden_size, num_heads, mlp_ratio, qk_norm, self.rope, i == depth - 1)
                                        for i in range(depth))
        else:
            self.blocks = nn.ModuleList(DiTBlock(hidden_size, num_heads, mlp_ratio, in_context, text, qk_norm, self.rope)
                                        for _ in range(depth))
        self.final_layer = FinalLayer(hidden_size, patch_size, self.c_out, in_context, patch_t)

    def unpatchify(self, x, gh, gw):  # (N, T, p*p*C) laid out (p, q, c) -> (N, C, gh p, gw p)
        n, p = x.shape[0], self.p
        x = x.reshape(n, gh, gw, p, p, self.c_out)
        return torch.einsum("nhwpqc->nchpwq", x).reshape(n, self.c_out, gh * p, gw * p)

    def unpatchify_clip(self, x, gf, gh, gw):  # (N, T, pt p p C) laid out (r, p, q, c) -> (N, C, gf pt, gh p, gw p)
        n, p, pt = x.shape[0], self.p, self.pt
        x = x.reshape(n, gf, gh, gw, pt, p, p, self.c_out)
        return torch.einsum("nfhwrpqc->ncfrhpwq", x).reshape(n, self.c_out, gf * pt, gh * p, gw * p)

    def forward(self, x, t, y, pos_embed=None):
        """x (N, C, H, W), or clips (N, C, F, H, W); pos_embed (T, D) for x's grid, by default the
        stored one."""
        if x.dim() == 5:
            gf, gh, gw = x.shape[2] // self.pt, x.shape[3] // self.p, x.shape[4] // self.p
            return self.unpatchify_clip(self.tokens(x, t, y, pos_embed), gf, gh, gw)
        gh, gw = x.shape[2] // self.p, x.shape[3] // self.p
        return self.unpatchify(self.tokens(x, t, y, pos_embed), gh, gw)

    def tokens(self, x, t, y, pos_embed=None):
        """The final layer's tokens (N, T, pt p p C_out)"""
        # rope: the token grid's frames (of patches), rows and columns
        grid = (x.shape[2] // self.pt if x.dim() == 5 else 1, x.shape[-2] // self.p, x.shape[-1] // self.p)
        x = self.x_embedder(x)
        x = named("x_embedder", x if self.rope else x + (self.pos_embed if pos_embed is None else pos_embed))
        if self.in_context:
            c = named("c", torch.stack([self.t_embedder(t), self.y_embedder(y)], dim=1))
            x = torch.cat([c, x], dim=1)
        elif self.text:  # y: the captions' word ids (N, L)
            text = self.text_encoder(self.text_embedder.embedding_table, y)
            c = named("c", self.t_embedder(t))
        else:
            c = named("c", self.t_embedder(t) + self.y_embedder(y))
        for i, b in enumerate(self.blocks):
            if self.joint:  # text: the caption's stream and its words
                x, ctx = b(x, text[0], c, text[1], f"blocks.{i}.", grid)
                text = (ctx, text[1])
            else:
                x = b(x, c, f"blocks.{i}.", text if self.text else None, grid)
        if self.in_context:
            x = x[:, c.shape[1]:]
        return self.final_layer(x, c)

    def forward_varlen(self, images, t, y, pos_embed=None):
        """Images of their own sizes, the plain way: each image (C, h, w) run alone on its own
        grid, with the 2-D sin-cos embedding of that grid from the reference formula (or
        pos_embed(d, gh, gw) instead), its own timestep t[i] and label y[i]; the outputs
        (C_out, h, w) in the images' order."""
        out = []
        for i, x in enumerate(images):
            if x.dim() == 4:  # a clip (C, F, h, w): the 3-D table of its own grid
                gf, gh, gw = x.shape[1] // self.pt, x.shape[2] // self.p, x.shape[3] // self.p
                pos = sincos_pos_embed_3d(self.pos_embed.shape[2], gf, gh, gw)
                out.append(self(x[None], t[i:i + 1], y[i:i + 1], torch.from_numpy(pos).to(x.dtype))[0])
                continue
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
                text=meta.get("cond", "class") == "text", text_len=int(meta.get("text_len", "0")),
                text_depth=int(meta.get("text_depth", "0")), vocab=VOCAB + 1,
                frames=int(meta.get("frames", "1")), patch_t=int(meta.get("patch_t", "1")),
                pos=meta.get("pos", "sincos"), qk_norm=meta.get("qk_norm", "none"),
                text_attn=meta.get("text_attn", "cross"))


VOCAB = 52  # the captions' vocabulary (docs/text.md); its row 0 is padding


def sincos_pos_embed(d, gh, gw):
    """The reference's fixed 2-D embedding of a gh x gw grid (get_2d_sincos_pos_embed), from its
    formula: the first half encodes the column, the second the row; (gh gw, d), row-major."""
    def one(dim, pos):
        w = 1.0 / 10000 ** (np.arange(dim // 2, dtype=np.float64) / (dim / 2.0))
        a = np.einsum("m,d->md", pos.reshape(-1), w)
        return np.concatenate([np.sin(a), np.cos(a)], axis=1)
    cols, rows = np.meshgrid(np.arange(gw, dtype=np.float64), np.arange(gh, dtype=np.float64))
    return np.concatenate([one(d // 2, cols), one(d // 2, rows)], axis=1)


def sincos_pos_embed_3d(d, gf, gh, gw):
    """CogVideoX's fixed 3-D embedding (get_3d_sincos_pos_embed) of a gf x gh x gw grid, from its
    description: the frame's 1-D sin-cos on the first d/4 channels, the 2-D table of (row, column)
    on the other 3d/4; (gf gh gw, d), frame-major."""
    w = 1.0 / 10000 ** (np.arange(d // 8, dtype=np.float64) / (d / 8.0))
    f = np.einsum("m,d->md", np.arange(gf, dtype=np.float64), w)
    temporal = np.concatenate([np.sin(f), np.cos(f)], axis=1)  # (gf, d/4)
    spatial = sincos_pos_embed(d - d // 4, gh, gw)  # (gh gw, 3d/4)
    return np.concatenate([np.repeat(temporal, gh * gw, axis=0), np.tile(spatial, (gf, 1))], axis=1)
