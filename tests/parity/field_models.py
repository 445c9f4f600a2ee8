"""The field's own models under their own context parallelism: every diffusers model class with a
`_cp_plan` (found in the installed package, not listed here; a class without a row here, or a row
without a class, fails), a tiny config with random weights, one training step (forward, loss,
backward) on one process and under diffusers' `enable_parallelism(ContextParallelConfig(...))` on P
processes (gloo, CPU), each recorded op by op with python/ditsp_tape.py (ModuleTape: every module's
output and gradient, each attention's core output, every parameter's gradient; lay_out: each rank's
tensors in the one-process layout) and compared by `train locate` (the model against itself: no name
map).

Layouts: Ulysses P (backends native, float64, and _native_flash, float32), ring P (both: native
refuses) and ring 2 x Ulysses P/2 (_native_flash, float32: its ring refuses float64 with the default
convert_to_fp32=True), at P = 2, 3, 4. _native_flash runs on the CPU through
field_libraries.cpu_flash_kernels(). Each cell runs as shipped, and where that does not agree again
with the model's fixes (FIXED: run-time patches, FIXES and PLANS below, each for one departure that
tests/parity/diffusers_*.py reproduces), and for the models whose float32 casts part a float64 step
by float32 rounding, once more with them kept in float64. Every model also runs with token counts
the ranks do not divide (P = 3, 16 image tokens): the plain plan's refusal, and the "anything"
modes' (forward, then their backward's refusal). And: the backends diffusers marks as supporting
context parallelism, on this CPU; enable_parallelism's refusal on a machine without an accelerator.

Each cell's verdict must be the expected one (expected()): a departure that goes away, or a new one,
fails the run, so a diffusers release that changes any cell is noticed.

usage: field_models.py TRAIN_F64 WORKDIR [--quick] [--table FILE]
  --quick   the rows of make test: Flux, Ulysses (native, _native_flash) and ring, P = 2 and 3, and
            the ring's fix at 3
  --table   writes the verdict table (markdown) to FILE
Prints "skipped: ..." and checks nothing where torch 2 or diffusers is not installed.
"""
import contextlib
import importlib
import importlib.metadata
import inspect
import os
import pkgutil
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import ditsp_tape as tape  # noqa: E402
import field_common as fc  # noqa: E402

HEAD_DIM = 12


# ---- sizes -------------------------------------------------------------------------------------
def sizes(p, uneven=False):
    """The tiny config's sizes for P processes: heads the Ulysses degrees divide (4 at P = 2 and 4,
    3 at P = 3), image tokens frames x h x w and text tokens that P divides (16 and 8; 12 and 6),
    of unequal counts so that every stream and concatenation has its own length. uneven: 16 image
    tokens and 8 text tokens at P = 3 (which does not divide them)"""
    if p == 3 and not uneven:
        return dict(heads=3, frames=2, h=2, w=3, text=6, audio=9, p=p)
    return dict(heads=4 if p != 3 else 3, frames=2, h=2, w=4, text=8, audio=12, p=p)


def image_tokens(s):
    return s["frames"] * s["h"] * s["w"]


# ---- the models: constructor arguments, a batch, the streams the plan splits --------------------
def randn(g, dtype, *shape):
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def flux_inputs(s, g, dt):
    h, w = s["frames"] * s["h"], s["w"]  # an image of frames*h x w patches
    img_ids = torch.stack(torch.meshgrid(torch.zeros(1), torch.arange(h * 1.0), torch.arange(w * 1.0), indexing="ij"), -1).reshape(-1, 3)
    return dict(hidden_states=randn(g, dt, 1, h * w, 8), encoder_hidden_states=randn(g, dt, 1, s["text"], 16),
                pooled_projections=randn(g, dt, 1, 16), timestep=torch.tensor([0.4], dtype=dt),
                img_ids=img_ids.to(dt), txt_ids=torch.zeros(s["text"], 3, dtype=dt))


def flux2_inputs(s, g, dt):
    h, w = s["frames"] * s["h"], s["w"]
    img_ids = torch.cartesian_prod(torch.arange(1), torch.arange(h), torch.arange(w), torch.arange(1))[None]
    txt_ids = torch.cartesian_prod(torch.arange(1), torch.arange(1), torch.arange(1), torch.arange(s["text"]))[None]
    return dict(hidden_states=randn(g, dt, 1, h * w, 8), encoder_hidden_states=randn(g, dt, 1, s["text"], 16),
                img_ids=img_ids, txt_ids=txt_ids, timestep=torch.tensor([0.4], dtype=dt),
                guidance=torch.tensor([2.0], dtype=dt))


def qwen_inputs(s, g, dt):
    h, w = s["frames"] * s["h"], s["w"]
    return dict(hidden_states=randn(g, dt, 1, h * w, 16), encoder_hidden_states=randn(g, dt, 1, s["text"], 16),
                timestep=torch.tensor([0.4], dtype=dt), img_shapes=[(1, h, w)])


def wan_inputs(s, g, dt):  # patch (1, 2, 2): latent frames x 2h x 2w
    return dict(hidden_states=randn(g, dt, 1, 4, s["frames"], 2 * s["h"], 2 * s["w"]),
                timestep=torch.tensor([400], dtype=torch.int64), encoder_hidden_states=randn(g, dt, 1, 5, 16))


def ltx_inputs(s, g, dt):
    return dict(hidden_states=randn(g, dt, 1, image_tokens(s), 4), encoder_hidden_states=randn(g, dt, 1, s["text"], 16),
                timestep=torch.tensor([400], dtype=torch.int64),
                encoder_attention_mask=None,
                num_frames=s["frames"], height=s["h"], width=s["w"])


def ltx2_inputs(s, g, dt):
    d = ltx_inputs(s, g, dt)
    d.update(audio_hidden_states=randn(g, dt, 1, s["audio"], 4), audio_encoder_hidden_states=randn(g, dt, 1, s["text"], 16),
             audio_num_frames=s["audio"], fps=25.0, timestep=torch.tensor([400.0], dtype=dt))
    return d


def helios_inputs(s, g, dt):
    return dict(hidden_states=randn(g, dt, 1, 4, s["frames"], 2 * s["h"], 2 * s["w"]),
                timestep=torch.tensor([400], dtype=torch.int64), encoder_hidden_states=randn(g, dt, 1, 5, 16))


def minimax_inputs(s, g, dt):
    nt, na, nv = 3, 5, image_tokens(s) - 8  # a packed sequence of text, audio, video rows: 16 or 12 rows
    n = nt + na + nv
    text, audio, video = torch.arange(nt), torch.arange(nt, nt + na), torch.arange(nt + na, n)
    tags = torch.zeros(n, dtype=torch.int64)
    tags[text], tags[audio] = 1, 2
    tindex = torch.zeros(n, dtype=torch.int64)
    tindex[audio] = 1
    pos = torch.zeros(n, 3)
    pos[:, 0] = torch.arange(n)
    pos[video, 1] = torch.arange(nv) % 2 * 1.0
    pos[video, 2] = torch.arange(nv) // 2 * 1.0
    return dict(hidden_states=randn(g, dt, 1, nv, 16), audio_hidden_states=randn(g, dt, 1, na, 6),
                encoder_hidden_states=randn(g, dt, 1, nt, 8), timestep=torch.tensor([0.7, 0.3], dtype=dt),
                timestep_indices=tindex, token_tags=tags, position_ids=pos.to(dt), video_indices=video,
                audio_indices=audio, text_indices=text)


def wan_init(s):
    return dict(patch_size=(1, 2, 2), num_attention_heads=s["heads"], attention_head_dim=HEAD_DIM, in_channels=4,
                out_channels=4, text_dim=16, freq_dim=16, ffn_dim=32, num_layers=2, rope_max_seq_len=32)


# name: (class, constructor arguments (sizes), batch (sizes, generator, dtype), streams (sizes),
#        concatenations, what the streams are)
MODELS = {
    "Flux": ("FluxTransformer2DModel",
             lambda s: dict(patch_size=1, in_channels=8, num_layers=1, num_single_layers=1, attention_head_dim=HEAD_DIM,
                            num_attention_heads=s["heads"], joint_attention_dim=16, pooled_projection_dim=16,
                            axes_dims_rope=(4, 4, 4)),
             flux_inputs, lambda s: [("text", s["text"]), ("image", image_tokens(s))], [("text", "image")],
             "1 joint block and 1 single block"),
    "Flux2": ("Flux2Transformer2DModel",
              lambda s: dict(patch_size=1, in_channels=8, num_layers=1, num_single_layers=1, attention_head_dim=HEAD_DIM,
                             num_attention_heads=s["heads"], joint_attention_dim=16, timestep_guidance_channels=16,
                             axes_dims_rope=(2, 2, 4, 4)),
              flux2_inputs, lambda s: [("text", s["text"]), ("image", image_tokens(s))], [("text", "image")],
              "1 joint block and 1 single block"),
    "QwenImage": ("QwenImageTransformer2DModel",
                  lambda s: dict(patch_size=2, in_channels=16, out_channels=4, num_layers=2, attention_head_dim=HEAD_DIM,
                                 num_attention_heads=s["heads"], joint_attention_dim=16, axes_dims_rope=(4, 4, 4)),
                  qwen_inputs, lambda s: [("text", s["text"]), ("image", image_tokens(s))], [("text", "image")], ""),
    "Wan": ("WanTransformer3DModel", wan_init, wan_inputs, lambda s: [("image", image_tokens(s))], [],
            "text not split"),
    "ChronoEdit": ("ChronoEditTransformer3DModel", lambda s: dict(wan_init(s), rope_temporal_skip_len=8),
                   wan_inputs, lambda s: [("image", image_tokens(s))], [], "text not split"),
    "Helios": ("HeliosTransformer3DModel",
               lambda s: dict(patch_size=(1, 2, 2), num_attention_heads=s["heads"], attention_head_dim=HEAD_DIM,
                              in_channels=4, out_channels=4, text_dim=16, freq_dim=16, ffn_dim=32, num_layers=2,
                              rope_dim=(4, 4, 4)),
               helios_inputs, lambda s: [("image", image_tokens(s))], [], "no history latents; text not split"),
    "LTX": ("LTXVideoTransformer3DModel",
            lambda s: dict(in_channels=4, out_channels=4, num_attention_heads=s["heads"], attention_head_dim=HEAD_DIM,
                           cross_attention_dim=s["heads"] * HEAD_DIM, num_layers=2, caption_channels=16),
            ltx_inputs, lambda s: [("text", s["text"]), ("image", image_tokens(s))], [], ""),
    "LTX2": ("LTX2VideoTransformer3DModel",
             lambda s: dict(in_channels=4, out_channels=4, num_attention_heads=s["heads"], attention_head_dim=HEAD_DIM,
                            cross_attention_dim=s["heads"] * HEAD_DIM, audio_in_channels=4, audio_out_channels=4,
                            audio_num_attention_heads=s["heads"], audio_attention_head_dim=4,
                            audio_cross_attention_dim=s["heads"] * 4, num_layers=2, caption_channels=16, rope_double_precision=False),
             ltx2_inputs, lambda s: [("text", s["text"]), ("image", image_tokens(s)), ("audio", s["audio"])], [],
             "audio not split"),
    "MiniMax-H3": ("MiniMaxH3Transformer3DModel",
                   lambda s: dict(num_attention_heads=s["heads"], attention_head_dim=HEAD_DIM, hidden_size=24,
                                  num_layers=2, num_refiner_layers=1, ffn_dim=32, in_channels=4, audio_in_channels=6,
                                  patch_size=(1, 2, 2), text_dim=8, freq_dim=8, time_embed_hidden_dim=24,
                                  time_embed_dim=16, rope_freq_dim=2),
                   minimax_inputs, lambda s: [("packed", image_tokens(s))], [], "one packed sequence of text, audio, video"),
}


def cp_classes():
    """{class name: class} of every diffusers model class with a _cp_plan, from the installed package"""
    import diffusers.models
    from diffusers.models.modeling_utils import ModelMixin
    found = {}
    for info in pkgutil.walk_packages(diffusers.models.__path__, "diffusers.models."):
        try:
            mod = importlib.import_module(info.name)
        except Exception:  # a module that needs a package not installed
            continue
        for name, c in vars(mod).items():
            if inspect.isclass(c) and issubclass(c, ModelMixin) and c.__module__ == mod.__name__ and c._cp_plan:
                found[name] = c
    return found


def build(name, s, dtype, seed=35):
    """The model with random weights (each weight N(0, 1/fan_in), other parameters N(0, 0.3^2)) in eval
    mode, and its batch; both functions of the seed only"""
    cls = cp_classes_cache()[MODELS[name][0]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = cls(**MODELS[name][1](s))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            w = torch.randn(p.shape, generator=g, dtype=torch.float64)
            p.copy_(w / np.sqrt(np.prod(p.shape[1:])) if p.dim() > 1 else 0.3 * w)
    model = model.to(dtype).eval()
    batch = MODELS[name][2](s, torch.Generator().manual_seed(seed + 1), dtype)
    return model, batch


_CLASSES = {}


def cp_classes_cache():
    if not _CLASSES:
        _CLASSES.update(cp_classes())
    return _CLASSES


# ---- one step, recorded ------------------------------------------------------------------------
@contextlib.contextmanager
def attention_cores(tape_, model):
    """Records each attention's core output (dispatch_attention_fn's, before the output projection)
    as <attention module>.attend: a pre-hook names the module, the wrapped function records"""
    from diffusers.models.attention import AttentionModuleMixin
    from diffusers.models.attention_processor import Attention, MochiAttention
    current, handles, patched = [None], [], {}
    for path, m in model.named_modules():
        if isinstance(m, (Attention, MochiAttention, AttentionModuleMixin)) and m.processor is not None:
            handles.append(m.register_forward_pre_hook(lambda mod, args, path=path: current.__setitem__(0, path)))
            mod = sys.modules[type(m.processor).__module__]
            if hasattr(mod, "dispatch_attention_fn") and mod not in patched:
                patched[mod] = mod.dispatch_attention_fn

                def wrapped(*a, _orig=patched[mod], **k):
                    out = _orig(*a, **k)
                    t = out[0] if isinstance(out, tuple) else out
                    tape_.tensor(f"{current[0]}.attend", t)
                    return out
                mod.dispatch_attention_fn = wrapped
    try:
        yield
    finally:
        for mod, f in patched.items():
            mod.dispatch_attention_fn = f
        for h in handles:
            h.remove()


def step(model, batch, seed=36):
    """Forward, loss = sum over the outputs of mean((out - target)^2), backward: (the records, None),
    or (the records up to the error, the error's first line) where the library raises"""
    rec = tape.ModuleTape(model)
    phase = "forward"
    try:
        with attention_cores(rec, model):
            outs = [t for t in model(**batch, return_dict=False) if torch.is_tensor(t)]
        g = torch.Generator().manual_seed(seed)
        loss = 0
        for i, o in enumerate(outs):
            rec.tensor(f"output[{i}]", o)
            loss = loss + ((o - randn(g, o.dtype, *o.shape)) ** 2).mean()
        rec.tensor("loss", loss)
        phase = "backward"
        loss.backward()
        rec.parameters(model)
        return rec.records, None
    except Exception as e:
        return rec.records, f"{phase}: {first_line(e)}"
    finally:
        rec.remove()


# ---- fixes: run-time patches, each for one departure (tests/parity/diffusers_*.py reproduce them) --
@contextlib.contextmanager
def one_device():
    """enable_parallelism on a machine without an accelerator: ModelMixin._resolve_parallel_config
    takes the rank modulo torch.accelerator.device_count(), 0 there (ZeroDivisionError); this makes
    the count 1 while it runs (the device it computes is then cpu:0, where the model is)"""
    count = torch.accelerator.device_count
    torch.accelerator.device_count = lambda: 1
    try:
        yield
    finally:
        torch.accelerator.device_count = count


@contextlib.contextmanager
def warning_once():
    """ContextParallelSplitHook._prepare_cp_input calls logger.warning_once, which diffusers' logger
    (a logging.Logger) lacks unless another package added it: give it one"""
    from diffusers.hooks import context_parallel
    logger = context_parallel.logger
    had = "warning_once" in vars(logger)
    if not hasattr(logger, "warning_once"):
        logger.warning_once = logger.warning
    try:
        yield
    finally:
        if not had and "warning_once" in vars(logger):
            del logger.warning_once


@contextlib.contextmanager
def ring_accumulator():
    """TemplatedRingAttention.backward with the dK/dV accumulator travelling the other way: at step i
    rank r computes the gradient of key chunk r + i, so the accumulator it adds it to must come from
    rank r + 1 (which held chunk r + i one step before), and after the last step the sum of chunk
    r - 1 goes to rank r - 1. The shipped code sends both ways to r + 1 (src_dst = [1, .., P-1, 0]);
    this inverts the permutation of its funcol.permute_tensor calls while its backward runs"""
    import torch.distributed._functional_collectives as funcol
    from diffusers.models import attention_dispatch as ad
    shipped, permute = ad.TemplatedRingAttention.backward, funcol.permute_tensor

    def inverted(tensor, src_dst, group, tag=""):
        inverse = [0] * len(src_dst)
        for src, dst in enumerate(src_dst):
            inverse[dst] = src
        return permute(tensor, inverse, group, tag)

    def backward(ctx, *grads):
        funcol.permute_tensor = inverted
        try:
            return shipped(ctx, *grads)
        finally:
            funcol.permute_tensor = permute
    ad.TemplatedRingAttention.backward = staticmethod(backward)
    try:
        yield
    finally:
        ad.TemplatedRingAttention.backward = staticmethod(shipped)


@contextlib.contextmanager
def ulysses_kv_length():
    """TemplatedUlyssesAttention.backward brings dK and dV back to the sequence layout with the local
    length of grad_out (the queries'); where the keys have another length (cross-attention on a
    split text) the reshape fails. This backward uses the keys' own local length, saved by the
    forward; the exchanges are diffusers' own _all_to_all_single"""
    from diffusers.models import attention_dispatch as ad
    cls = ad.TemplatedUlyssesAttention
    shipped_forward, shipped_backward = cls.forward, cls.backward

    def forward(ctx, query, key, *rest):
        ctx.kv_local = key.shape[1]
        return shipped_forward(ctx, query, key, *rest)

    def backward(ctx, grad_out, *args):
        group = ctx._parallel_config.context_parallel_config._ulysses_mesh.get_group()
        p = ctx._parallel_config.context_parallel_config.ulysses_degree
        b, n, h, d = grad_out.shape

        def to_heads(x):  # (B, n, H, d), this rank's tokens -> (B, P n, H / P, d), this rank's heads
            x = x.reshape(b, x.shape[1], p, h // p, d).permute(2, 1, 0, 3, 4).contiguous()
            return ad._all_to_all_single(x, group).flatten(0, 1).permute(1, 0, 2, 3).contiguous()

        def to_tokens(x, m):  # (B, P m, H / P, d) -> (B, m, H, d)
            x = x.reshape(b, p, m, h // p, d).permute(1, 3, 0, 2, 4).contiguous()
            return ad._all_to_all_single(x, group).flatten(0, 1).permute(1, 2, 0, 3).contiguous()
        dq, dk, dv, *_ = ctx.backward_op(ctx, to_heads(grad_out))
        return (to_tokens(dq, n), to_tokens(dk, ctx.kv_local), to_tokens(dv, ctx.kv_local)) + (None,) * 9
    cls.forward, cls.backward = staticmethod(forward), staticmethod(backward)
    try:
        yield
    finally:
        cls.forward, cls.backward = staticmethod(shipped_forward), staticmethod(shipped_backward)


@contextlib.contextmanager
def float64_throughout():
    """Not a fix: the float64 model with its float32 casts (Tensor.float() of float64 tensors, as in
    FP32LayerNorm and the blocks' modulation) kept in float64, to show that a departure of a few
    float32 roundings comes from them"""
    shipped = torch.Tensor.float

    def keep(self, *a, **k):
        return self if self.dtype == torch.float64 else shipped(self, *a, **k)
    torch.Tensor.float = keep
    try:
        yield
    finally:
        torch.Tensor.float = shipped


def helios_plan(cls, config):
    """Helios' _cp_plan gathers the outputs of blocks.{i}.attn1, attn2 and ffn for i in range(40),
    the released model's depth: a model of another depth is refused (a block it lacks) or left with
    blocks whose outputs are never gathered. The plan for the model's own blocks"""
    return {k: v for k, v in cls._cp_plan.items()
            if not k.startswith("blocks.") or k.startswith("blocks.*") or int(k.split(".")[1]) < config["num_layers"]}


def ltx2_rope_plan(cls, config):
    """LTX2's _cp_plan splits the video tokens and the outputs of `rope`, but not those of
    `cross_attn_rope`, the positions of the audio-video cross-attention: its video queries (split)
    meet the whole clip's rotary table. The plan with that module's outputs split as `rope`'s"""
    return {**cls._cp_plan, "cross_attn_rope": cls._cp_plan["rope"]}


def ltx2_audio_plan(cls, config):
    """LTX2's plan leaves the audio tokens whole on every rank: the audio branch then takes its
    gradient whole from the loss (the audio output is not gathered) and in shares from the split
    video through the cross-attentions, so no sum over the ranks gives its gradient. The plan with
    the audio split as the video is: its tokens, its rotary tables (self- and cross-attention) and
    its output gathered"""
    from diffusers.models._modeling_parallel import ContextParallelInput, ContextParallelOutput
    plan = ltx2_rope_plan(cls, config)
    plan[""] = {**plan[""], "audio_hidden_states": ContextParallelInput(split_dim=1, expected_dims=3)}
    return {**plan, "audio_rope": plan["rope"], "cross_attn_audio_rope": plan["rope"],
            "audio_proj_out": ContextParallelOutput(gather_dim=1, expected_dims=3)}


@contextlib.contextmanager
def gloo_uneven_gather():
    """The "anything" modes gather shards of unequal length with dist.all_gather of unequal
    tensors (_all_gather_anything), which gloo refuses ("invalid tensor size"): this gathers them
    padded to the longest and trims each"""
    from diffusers.hooks import context_parallel as hooks
    shipped = hooks._all_gather_anything

    def gather(tensor, dim, group):
        tensor = tensor.contiguous()
        sizes = hooks.gather_size_by_comm(tensor.shape[dim], group)
        pad = list(tensor.shape)
        pad[dim] = max(sizes) - tensor.shape[dim]
        padded = torch.cat([tensor, tensor.new_zeros(pad)], dim)
        parts = [torch.empty_like(padded) for _ in sizes]
        dist.all_gather(parts, padded, group=group)
        return torch.cat([t.narrow(dim, 0, n) for t, n in zip(parts, sizes)], dim)
    hooks._all_gather_anything = gather
    try:
        yield
    finally:
        hooks._all_gather_anything = shipped


class _SplitWholeGradient(torch.autograd.Function):
    """This rank's chunk of x along dim; backward: the chunks' gradients gathered, so that every rank
    holds the whole gradient of x (where the shipped split's slice leaves zeros outside its chunk)"""

    @staticmethod
    def forward(ctx, x, dim, group):
        ctx.dim, ctx.group = dim, group
        return x.chunk(dist.get_world_size(group), dim=dim)[dist.get_rank(group)]

    @staticmethod
    def backward(ctx, g):
        parts = [torch.empty_like(g) for _ in range(dist.get_world_size(ctx.group))]
        dist.all_gather(parts, g.contiguous(), group=ctx.group)
        return torch.cat(parts, dim=ctx.dim), None, None


class _SumGradient(torch.autograd.Function):
    """x itself; backward: the sum of the ranks' gradients (each rank's share becomes the whole)"""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous().clone()
        dist.all_reduce(g, group=ctx.group)
        return g, None


@contextlib.contextmanager
def split_whole_gradient():
    """Helios' plan splits the input of each attention and feed-forward module and gathers its
    output, so the residual stream between them is whole on every rank. The gather's backward hands
    each rank its chunk of a gradient every rank holds whole; the split's backward (a slice) leaves
    each rank the gradient of its own chunk only: the stream's gradient is then whole plus a share,
    and no reduction over the ranks gives the modules outside the split regions their gradient.
    With the split's backward gathering the chunks, and the region's inputs that are not split
    (the text of the cross-attention) summing their gradients over the ranks on the way out, every
    tensor outside the split regions holds its whole gradient on every rank (and so do their
    parameters: no reduction), and the parameters inside hold their tokens' shares (summed)"""
    from diffusers.hooks import context_parallel as hooks
    shipped, shipped_pre = hooks.EquipartitionSharder.shard, hooks.ContextParallelSplitHook.pre_forward

    def shard(cls, tensor, dim, mesh):
        assert tensor.size()[dim] % mesh.size() == 0
        return _SplitWholeGradient.apply(tensor, dim, mesh.get_group())

    def pre_forward(self, module, *args, **kwargs):
        new_args, new_kwargs = shipped_pre(self, module, *args, **kwargs)
        group = self.parallel_config._flattened_mesh.get_group()
        whole = lambda old, new: _SumGradient.apply(new, group) if new is old and torch.is_tensor(new) and new.requires_grad else new  # noqa: E731
        return (tuple(whole(a, b) for a, b in zip(args, new_args)),
                {k: whole(kwargs.get(k), v) for k, v in new_kwargs.items()})
    hooks.EquipartitionSharder.shard = classmethod(shard)
    hooks.ContextParallelSplitHook.pre_forward = pre_forward
    try:
        yield
    finally:
        hooks.EquipartitionSharder.shard = shipped
        hooks.ContextParallelSplitHook.pre_forward = shipped_pre


PLANS = {"helios-plan": ("HeliosTransformer3DModel", helios_plan),
         "ltx2-rope-plan": ("LTX2VideoTransformer3DModel", ltx2_rope_plan),
         "ltx2-audio-plan": ("LTX2VideoTransformer3DModel", ltx2_audio_plan)}
# name: (the model class it is for, or None for any, the patch)
FIXES = {"ring-accumulator": (None, ring_accumulator), "ulysses-kv-length": (None, ulysses_kv_length),
         "warning-once": (None, warning_once), "float64-throughout": (None, float64_throughout),
         "split-whole-gradient": ("HeliosTransformer3DModel", split_whole_gradient),
         "gloo-uneven-gather": (None, gloo_uneven_gather)}


def fixes_for(model, fixes):
    """The fixes of `fixes` that concern `model`"""
    cls = MODELS[model][0]
    return tuple(f for f in fixes if (FIXES[f][0] if f in FIXES else PLANS[f][0]) in (None, cls))


# ---- under context parallelism -----------------------------------------------------------------
LAYOUTS = {"ulysses": lambda p: (1, p), "ring": lambda p: (p, 1), "ring x ulysses": lambda p: (2, p // 2)}


def first_line(e):
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


def parallel_step(name, s, dtype, backend, layout, p, options=None, fixes=(), device_fix=True):
    """This rank's records of one step of `name` under ContextParallelConfig(layout at p), and the
    error that stopped it (None, or the library's message; records up to there)"""
    from diffusers.models._modeling_parallel import ContextParallelConfig
    ring, ulysses = LAYOUTS[layout](p)
    model, batch = build(name, s, dtype)
    model.set_attention_backend(backend)
    cls = type(model)
    plan = None
    for f in fixes:
        if f in PLANS and PLANS[f][0] == cls.__name__:
            plan = PLANS[f][1](cls, MODELS[name][1](s))
    with contextlib.ExitStack() as stack:
        for f in fixes:
            if f in FIXES:
                stack.enter_context(FIXES[f][1]())
        try:
            cp = ContextParallelConfig(ring_degree=ring, ulysses_degree=ulysses, **(options or {}))
            with one_device() if device_fix else contextlib.nullcontext():
                model.enable_parallelism(config=cp, cp_plan=plan)
        except Exception as e:
            return [], f"enable_parallelism: {first_line(e)}"
        return step(model, batch)


def reference_step(name, s, dtype, backend, fixes=()):
    model, batch = build(name, s, dtype)
    model.set_attention_backend(backend)
    with contextlib.ExitStack() as stack:
        for f in fixes:
            if f == "float64-throughout":
                stack.enter_context(FIXES[f][1]())
        return step(model, batch)


# ---- the cells ---------------------------------------------------------------------------------
# A job: (model, layout, P, backend, dtype, uneven, options, fixes, device_fix)
BACKENDS = [("ulysses", "native", "float64"), ("ulysses", "_native_flash", "float32"),
            ("ring", "native", "float64"), ("ring", "_native_flash", "float32"),
            ("ring x ulysses", "_native_flash", "float32")]
PROCESSES = (2, 3, 4)


def job(model, layout, p, backend, dtype, uneven=False, options=(), fixes=(), device_fix=True):
    return (model, layout, p, backend, dtype, uneven, tuple(sorted(dict(options).items())), fixes_for(model, fixes),
            device_fix)


# gloo, named for the CPU: diffusers' gather_size_by_comm (the "anything" modes' exchange of local
# lengths) puts its tensors on the CPU only where the group's backend name says "cpu"; with plain
# "gloo" it asks for the accelerator and fails where there is none
BACKEND = "cpu:gloo"


def ranks_main(rank, p, init, out, jobs):
    warnings.filterwarnings("ignore")
    from diffusers.utils import logging
    logging.set_verbosity_error()
    import datetime
    dist.init_process_group(BACKEND, init_method=init, rank=rank, world_size=p, timeout=datetime.timedelta(seconds=120))
    torch.set_num_threads(1)
    from field_libraries import cpu_flash_kernels
    kernels = cpu_flash_kernels()  # noqa: F841 (registered while it lives)
    results, references = [], {}
    for j in jobs:
        model, layout, _, backend, dtype, uneven, options, fixes, device_fix = j
        s = sizes(p, uneven)
        t0 = time.time()
        records, error = parallel_step(model, s, getattr(torch, dtype), backend, layout, p, dict(options), fixes, device_fix)
        seconds = time.time() - t0
        every = [None] * p if rank == 0 else None
        dist.gather_object((records, error), every, dst=0)
        if rank == 0:
            key = (model, uneven, dtype, backend, "float64-throughout" in fixes)
            if key not in references:
                references[key] = reference_step(model, s, getattr(torch, dtype), backend, fixes)
            results.append((j, every, references[key], seconds))
        dist.barrier()
    if rank == 0:
        import pickle
        with open(out, "wb") as f:
            pickle.dump(results, f)
    dist.destroy_process_group()


def run_jobs(jobs, work):
    """Runs the jobs, one spawn of P processes for each P; [(job, every rank's (records, error),
    the one-process (records, error), seconds)]"""
    import pickle
    out = []
    for p in sorted({j[2] for j in jobs}):
        here = [j for j in jobs if j[2] == p]
        t0 = time.time()
        with tempfile.TemporaryDirectory() as d:
            torch.multiprocessing.spawn(ranks_main, args=(p, f"file://{d}/rendezvous", f"{d}/results", here), nprocs=p)
            with open(f"{d}/results", "rb") as f:
                out += pickle.load(f)
        print(f"{p} processes, {len(here)} runs: {time.time() - t0:.0f} s", flush=True)
    return out


def plan_of(model, s, fixes):
    """The plan a run applies: the class's, or a fix's"""
    cls = cp_classes_cache()[MODELS[model][0]]
    plan = cls._cp_plan
    for f in fixes:
        if f in PLANS and PLANS[f][0] == cls.__name__:
            plan = PLANS[f][1](cls, MODELS[model][1](s))
    return plan


def whole_gradients(model, s, fixes, ref):
    """Which replicated tensors of a run hold their whole gradient on every rank (the others hold
    shares, summed): the loss, the model's outputs and the gathered outputs of the plan (gathered
    on every rank, so each rank's loss is the whole loss); with split-whole-gradient, everything
    but the parameters inside the split regions"""
    gathers = {k for k, v in plan_of(model, s, fixes).items() if not isinstance(v, dict)}
    if "split-whole-gradient" in fixes:
        return lambda n: not any(n.startswith(f"{g}.") or n.startswith(f"param.{g}.") for g in gathers)
    return {"loss"} | {n for n, _ in ref if n.startswith("output[") or n.split("[")[0].split("#")[0] in gathers}


def relative(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    nb = np.linalg.norm(b)
    return np.linalg.norm(a - b) / nb if nb > 0 else np.linalg.norm(a - b)


def verdict(result, train64, work):
    """(kind, text, worst): kind agrees, departs, refused or forward (agrees in forward, backward
    refused); text: locate's verdict, or the library's message"""
    (model, layout, p, backend, dtype, uneven, options, fixes, _), every, (ref, ref_error), _ = result
    if ref_error:
        return "refused", f"one process: {ref_error}", None
    errors = [e for _, e in every if e]
    records = [r for r, _ in every]
    if errors and not errors[0].startswith("backward: "):
        return "refused", errors[0], None
    s = sizes(p, uneven)
    whole = whole_gradients(model, s, fixes, ref)
    if errors:  # backward refused: its records stop part way; the forward is compared
        ref, records = [r for r in ref if not r[0].startswith("grad.")], [[r for r in rs if not r[0].startswith("grad.")] for rs in records]
    theirs, ours, meta, notes = tape.lay_out(ref, records, MODELS[model][3](s), MODELS[model][4], whole)
    for n, a in ref:  # what the N-rank run lacks, for locate to name
        if n not in ours:
            ours[n] = a
    tag = "-".join(str(x) for x in (model, layout.replace(" ", ""), p, backend, dtype, "uneven" if uneven else "",
                                    "+".join(fixes), "+".join(f"{k}" for k, _ in options)) if x != "")
    a, b = os.path.join(work, f"{tag}.tape"), os.path.join(work, f"{tag}.one.tape")
    tape.write_tape(a, theirs, meta["tokens"], meta["ranks"], meta["shards"], f"{model}, {layout}, {p} processes")
    tape.write_tape(b, ours, meta["tokens"], layout=f"{model}, one process")
    worst = max((relative(theirs[n], ours[n]), n) for n in theirs if n in ours)
    cmd = [train64, "locate", a, b] + (["--tol", F32_TOL] if dtype == "float32" else [])
    got = subprocess.run(cmd, capture_output=True, text=True)
    text = got.stdout.strip() or got.stderr.strip()
    if notes:
        text += f" [not laid out: {'; '.join(notes[:3])}{' ...' if len(notes) > 3 else ''}]"
    if errors:
        return "forward", f"{text}; {errors[0]}", worst
    return ("agrees" if got.returncode == 0 else "departs"), text, worst


F32_TOL = "1e-4"  # float32 against float32: a correct step's worst tensor is within 4.7e-6 here


# ---- what each cell must say -------------------------------------------------------------------
# Fixes each model's second run applies (where its first, as shipped, does not agree); the ring
# accumulator for every model (ring degree 3 and more)
FIXED = {"Flux": ("ring-accumulator",), "Flux2": ("ring-accumulator",), "QwenImage": ("ring-accumulator",),
         "Wan": ("warning-once", "ring-accumulator"), "ChronoEdit": ("ring-accumulator",),
         "Helios": ("helios-plan", "split-whole-gradient", "ring-accumulator"),
         "LTX": ("ulysses-kv-length", "ring-accumulator"),
         "LTX2": ("ltx2-audio-plan", "ulysses-kv-length", "ring-accumulator"),
         "MiniMax-H3": ("ring-accumulator",)}
# float32 by design: float64 models whose float32 casts round the sum of a replicated tensor's
# gradient shares otherwise than one process does (a third run keeps them in float64)
FLOAT32_BY_DESIGN = {"Wan": "grad.condition_embedder.time_proj", "ChronoEdit": "grad.condition_embedder.time_proj"}
# the first dK or dV path tensor of backward: the gradient of the keys after their norm
RING_DKV = r"first divergence: grad\.\S*norm(_added)?_k \(backward"
REFUSALS = {
    "return_lse": "forward: ValueError: Native attention does not support return_lse=True",
    "warning_once": "forward: AttributeError: 'Logger' object has no attribute 'warning_once'",
    "helios": "enable_parallelism: ValueError: '2' is not a submodule of 'ModuleList'",
    "ltx2": "forward: RuntimeError: The size of tensor a",
    "ulysses_kv": "backward: RuntimeError: shape '",
    "divisible": "forward: AssertionError: Tensor size along dimension to be sharded must be divisible by mesh size",
    "anything": "backward: NotImplementedError: Backward pass for",
    "device": "enable_parallelism: ZeroDivisionError: integer modulo by zero",
}


def expected(model, layout, backend, p, stage):
    """(kind, regular expression the verdict text must match) of a cell; stage: shipped, fixed
    (FIXED[model]) or float64 (FIXED and float64-throughout)"""
    import re
    ring = layout != "ulysses"
    if backend == "native" and ring:
        if stage == "shipped" and model == "Helios":
            return "refused", re.escape(REFUSALS["helios"])
        if stage == "shipped" and model == "Wan":
            return "refused", re.escape(REFUSALS["warning_once"])
        return "refused", re.escape(REFUSALS["return_lse"])
    if stage == "shipped":
        if model == "Wan":
            return "refused", re.escape(REFUSALS["warning_once"])
        if model == "Helios":
            return "refused", re.escape(REFUSALS["helios"])
        if model == "LTX2":
            return "refused", re.escape(REFUSALS["ltx2"])
        if model == "LTX" and not ring:
            return "forward", "^no divergence.*" + re.escape(REFUSALS["ulysses_kv"])
    if stage != "float64" and model in FLOAT32_BY_DESIGN and backend == "native":
        return "departs", "^first divergence: " + re.escape(FLOAT32_BY_DESIGN[model]) + " "
    if stage == "shipped" and layout == "ring" and p >= 3:
        return "departs", RING_DKV
    return "agrees", "^no divergence: every tensor of the step is within tolerance"


def cells(quick):
    """[(job, stage, expected)] of the table: every model with a CP plan, each layout and backend,
    P = 2, 3, 4 (ring x Ulysses at 4), as shipped, and again with the fixes where the shipped run
    does not agree; token counts P does not divide (P = 3); enable_parallelism without the CPU fix"""
    out = []
    models = ["Flux"] if quick else list(MODELS)
    rows = [r for r in BACKENDS if r[0] != "ring x ulysses" and (r[0], r[1]) != ("ring", "native")] if quick else BACKENDS
    for m in models:
        for p in ((2, 3) if quick else PROCESSES):
            for layout, backend, dtype in rows:
                if layout == "ring x ulysses" and p != 4:
                    continue
                stages = [("shipped", ())]
                if expected(m, layout, backend, p, "shipped")[0] != "agrees" and not (backend == "native" and layout != "ulysses"):
                    stages.append(("fixed", FIXED[m]))
                if m in FLOAT32_BY_DESIGN and backend == "native" and layout == "ulysses":
                    stages.append(("float64", FIXED[m] + ("float64-throughout",)))
                for stage, fixes in stages:
                    if quick and stage == "fixed" and p == 2:
                        continue
                    out.append((job(m, layout, p, backend, dtype, fixes=fixes), stage, expected(m, layout, backend, p, stage)))
    if quick:
        return out
    import re
    for m in models:  # token counts that P = 3 does not divide
        fixes = tuple(f for f in FIXED[m] if f not in ("ltx2-audio-plan", "split-whole-gradient")) \
            + (("ltx2-rope-plan",) if m == "LTX2" else ()) + ("gloo-uneven-gather",)
        forward = ("forward", "^no divergence.*" + re.escape(REFUSALS["anything"]))
        out.append((job(m, "ulysses", 3, "native", "float64", uneven=True, fixes=fixes), "uneven",
                    ("refused", re.escape(REFUSALS["divisible"]))))
        out.append((job(m, "ulysses", 3, "native", "float64", uneven=True, options={"ulysses_anything": True}, fixes=fixes),
                    "uneven", forward))
        out.append((job(m, "ring", 3, "_native_flash", "float32", uneven=True, options={"ring_anything": True}, fixes=fixes),
                    "uneven", forward))
    out.append((job("Flux", "ulysses", 2, "native", "float64", device_fix=False), "device", ("refused", re.escape(REFUSALS["device"]))))
    return out


# ---- the table ---------------------------------------------------------------------------------
def refusal(text):
    """The REFUSALS key whose message `text` carries (the table's legend), or the text"""
    for key, message in REFUSALS.items():
        if message in text:
            return f"[{key}]"
    return f"({text})"


def short(kind, text, worst, compact=False):
    """A cell's words: agrees (worst error); departs at op, tokens, ranks; refused (the message, or
    with compact its key in REFUSALS)"""
    import re
    if kind == "refused":
        return f"refused {refusal(text)}" if compact else f"refused ({text})"
    if kind == "agrees":
        return f"agrees ({worst[0]:.1e})"
    m = re.match(r"first divergence: (\S+) \((\w+)[^)]*\)(?:, tokens (\d+-\d+) of (\d+) \((ranks? [\d, -]+ of \d+) in A)?"
                 r".*?; \d+ values differ, largest \|difference\| (\S+) \((\S+) of", text)
    if kind == "forward":
        fwd = f"forward agrees ({worst[0]:.1e})" if text.startswith("no divergence") else "forward departs"
        return f"{fwd}; backward refused {refusal(text)}" if compact else f"{fwd}; {text.split('; ')[-1]}"
    if not m:
        return f"departs: {text}"
    name, direction, tokens, total, ranks, _, rel = m.groups()
    where = f", tokens {tokens} of {total}, {ranks}" if tokens else ""
    return f"departs at `{name}` ({direction}){where}: {float(rel):.2g} of its largest value"


def table(rows, versions):
    """The markdown verdict table: a row per model and layout, a column per P"""
    lines = [f"diffusers {versions['diffusers']}, torch {versions['torch']}; each cell: the run as shipped, then "
             "(after \"fixed:\") the run with the model's fixes, then (after \"float64:\") with its float32 casts kept "
             "in float64. Tolerance: float64 1e-10 (locate's float64 default), float32 " + F32_TOL + ".", "",
             "| model | layout, backend, dtype | P = 2 | P = 3 | P = 4 |", "|---|---|---|---|---|"]
    grid = {}
    for (j, stage, _), (kind, text, worst) in rows:
        if stage in ("shipped", "fixed", "float64"):
            grid.setdefault((j[0], j[1], j[3], j[4]), {}).setdefault(j[2], []).append((stage, short(kind, text, worst, True)))
    for (m, layout, backend, dtype), by_p in grid.items():
        cells_ = []
        for p in PROCESSES:
            parts = by_p.get(p)
            cells_.append("—" if not parts else "<br>".join(w if st == "shipped" else f"{st}: {w}" for st, w in parts))
        lines.append(f"| {m} | {layout}, {backend}, {dtype} | " + " | ".join(cells_) + " |")
    uneven = {}
    for (j, stage, _), (kind, text, worst) in rows:
        if stage == "uneven":
            uneven.setdefault(j[0], []).append(short(kind, text, worst, True))
    if uneven:
        lines += ["", "Token counts the ranks do not divide (P = 3: 16 image tokens and 8 text tokens):", "",
                  "| model | plain plan (Ulysses, native) | ulysses_anything=True (native, float64) | ring_anything=True (_native_flash, float32) |",
                  "|---|---|---|---|"]
    for m, ws in uneven.items():
        lines.append(f"| {m} | " + " | ".join(ws) + " |")
    for (j, stage, _), (kind, text, worst) in rows:
        if stage == "device":
            lines += ["", f"`enable_parallelism` on this CPU-only machine, without the one_device patch: {short(kind, text, worst, True)}."]
    seen = [k for k in REFUSALS if any(REFUSALS[k] in t for _, (_, t, _) in rows)]
    lines += ["", "Refusals (the library's messages; shapes as at P = 2):", ""]
    for k in seen:
        example = next(t for _, (_, t, _) in rows if REFUSALS[k] in t)
        lines.append(f"- [{k}] `{example[example.index(REFUSALS[k]):].split('; ')[0]}`")
    return "\n".join(lines)


# The backends diffusers marks as supporting context parallelism, on this CPU: the two that run, and
# what the others say (each must still say it)
CPU_BACKENDS = {"native": "runs", "_native_flash": "runs",
                "_native_cudnn": "RuntimeError: No viable backend for scaled_dot_product_attention was found.",
                "_native_npu": "RuntimeError: NPU Attention backend '_native_npu' is not usable",
                "flash": "RuntimeError: Flash Attention backend 'flash' is not usable",
                "sage": "RuntimeError: Sage Attention backend 'sage' is not usable",
                "hub": "is not usable because the `kernels` package isn't available"}


def backends_on_cpu():
    """{backend: 'runs' or its message} for every backend with supports_context_parallel, one process,
    float32 q, k, v on the CPU"""
    from diffusers.models.attention_dispatch import (AttentionBackendName, _AttentionBackendRegistry,
                                                     _check_attention_backend_requirements, dispatch_attention_fn)
    q = torch.randn(1, 4, 2, 8)
    out = {}
    for b in sorted(str(getattr(x, "value", x)) for x in _AttentionBackendRegistry._supports_context_parallel):
        try:
            _check_attention_backend_requirements(AttentionBackendName(b))
            dispatch_attention_fn(q, q, q, backend=AttentionBackendName(b))
            out[b] = "runs"
        except Exception as e:
            out[b] = first_line(e)
    return out


def versions():
    import platform
    v = {"python": platform.python_version()}
    for lib in ("torch", "diffusers"):
        try:
            v[lib] = importlib.metadata.version(lib)
        except Exception:
            v[lib] = None
    return v


def main():
    import argparse
    import re
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("train64")
    ap.add_argument("work")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--table")
    a = ap.parse_args()
    start = time.time()
    v = versions()
    if int(torch.__version__.split(".")[0]) < 2 or not v["diffusers"]:
        print(f"skipped: the field's models under their own context parallelism (torch {torch.__version__}, diffusers "
              f"{v['diffusers'] or 'not installed'}; 'make deps' installs torch 2 and diffusers from PyPI into build/venv)")
        return 0
    warnings.filterwarnings("ignore")
    from diffusers.utils import logging
    logging.set_verbosity_error()
    os.makedirs(a.work, exist_ok=True)
    check = fc.Checks()

    found = set(cp_classes())
    ours = {m[0] for m in MODELS.values()}
    check(found == ours, f"the models with a _cp_plan in diffusers {v['diffusers']}: {', '.join(sorted(found))}"
          + ("" if found == ours else f" (without a row here: {sorted(found - ours)}; rows of no such model: {sorted(ours - found)})"))
    survey = backends_on_cpu() if not a.quick else {}
    if survey:
        for b, said in survey.items():
            want = CPU_BACKENDS.get(b, CPU_BACKENDS["hub"] if b.endswith("_hub") else None)
            check(want is not None and (said == want if want == "runs" else want in said),
                  f"backend {b} on the CPU: {said}" + ("" if want else " (a backend with no row here)"))
    todo = cells(a.quick)
    results = run_jobs([c[0] for c in todo], a.work)
    by_job = {r[0]: r for r in results}
    rows = []
    for j, stage, (kind, pattern) in todo:
        got = verdict(by_job[j], a.train64, a.work)
        rows.append(((j, stage, (kind, pattern)), got))
        ok = got[0] == kind and re.search(pattern, got[1]) is not None
        what = f"{j[0]}, {j[1]} {j[2]} processes, {j[3]}, {j[4]}{', uneven tokens' if j[5] else ''}" \
               f"{', ' + ', '.join(f'{k}={x}' for k, x in j[6]) if j[6] else ''}{', fixes: ' + ' '.join(j[7]) if j[7] else ''}" \
               f"{'' if j[8] else ', without the one_device patch'}"
        check(ok, f"{what}: {short(*got)}" + ("" if ok else f"\n     expected {kind} matching {pattern!r}\n     got {got[0]}: {got[1][:600]}"))
        if kind == "departs" and stage != "shipped" and ok:  # float32 by design: within float32 rounding
            check(got[2][0] < 1e-6, f"{what}: the departure is float32 rounding ({got[2][0]:.1e} < 1e-6)")
    text = table(rows, v)
    if survey:
        text += "\n\nThe backends diffusers marks as supporting context parallelism, one process on this CPU (float32):\n\n" + \
            "\n".join(f"- {b}: {said}" for b, said in survey.items())
    return check.end("the field's models", text, a.table, start)


if __name__ == "__main__":
    sys.exit(main())
