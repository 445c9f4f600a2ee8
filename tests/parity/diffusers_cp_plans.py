"""diffusers' context parallelism around the attention: what its plans and hooks do to a training step,
each departure reproduced at the smallest size that shows it, its cause printed from the installed
code (file and line), and its fix (tests/parity/field_models.py's, the same the table runs) checked:

  device        enable_parallelism on a machine without an accelerator (ZeroDivisionError)
  warning-once  a plan input of other dimensions than the plan expects (AttributeError), which
                Wan's plan meets with the one-dimensional timestep of Wan 2.1
  gloo          the "anything" modes' exchanges on gloo: sizes put on the accelerator unless the
                backend is named "cpu:gloo"; shards of unequal length all-gathered unpadded
  helios        Helios' plan: gathers listed for 40 blocks (a 2-block model is refused); then
                its split/gather around each module leaves the residual stream's gradient neither
                whole nor in shares: no reduction of the ranks' gradients gives the patch
                embedding's; fixed with the split's backward gathering (split_whole_gradient)
  ltx2          LTX2's plan: the audio-video cross-attention's rotary table not split
                (refused); then the audio left whole: its gradient neither whole nor in shares;
                fixed with the audio split as the video is

Each must hold as written: the shipped code departs (or refuses) where this says, and agrees with
the fix. Models and one-process comparisons are field_models.py's (P = 2; every P in its table).

usage: diffusers_cp_plans.py TRAIN_F64 WORKDIR
"""
import os
import sys
import tempfile
import warnings

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import field_common as fc  # noqa: E402

check = fc.Checks()


def where(obj, text):
    """'file:line: code' of the first line of obj's source (a module, class or function) holding text"""
    found = fc.installed_lines(obj, (text,))
    return found[0] if found else f"{fc.source_file(obj)}: (no line holds {text!r})"


# ---- hooks alone, in processes of their own ----------------------------------------------------
def hooks_main(rank, p, init, out, backend):
    warnings.filterwarnings("ignore")
    import field_models as fm
    from diffusers.hooks import context_parallel as hooks
    from diffusers.models._modeling_parallel import ContextParallelConfig, ContextParallelInput
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=p)
    said = {}

    def attempt(key, fn):
        try:
            said[key] = ("ok", fn())
        except Exception as e:
            said[key] = ("error", f"{type(e).__name__}: {str(e).strip().splitlines()[0]}")
    cp = ContextParallelConfig(ulysses_degree=p)
    cp.setup(rank, p, torch.device("cpu"), dist.device_mesh.init_device_mesh("cpu", cp.mesh_shape, mesh_dim_names=cp.mesh_dim_names))
    group = cp._flattened_mesh.get_group()
    attempt("sizes", lambda: hooks.gather_size_by_comm(rank + 1, group))
    if backend == "gloo":  # the sizes only: they fail before any exchange
        with open(f"{out}.{rank}", "w") as f:
            f.write(repr(said))
        return
    hook = hooks.ContextParallelSplitHook({}, cp)
    one_dim = ContextParallelInput(split_dim=1, expected_dims=2)  # as Wan's plan for the timestep
    attempt("warning-once shipped", lambda: tuple(hook._prepare_cp_input(torch.zeros(3), one_dim).shape))
    with fm.warning_once():
        attempt("warning-once fixed", lambda: tuple(hook._prepare_cp_input(torch.zeros(3), one_dim).shape))
    mine = torch.full((1, rank + 1, 2), float(rank))  # rank r holds r + 1 rows
    attempt("uneven gather shipped", lambda: tuple(hooks._all_gather_anything(mine, 1, group).shape))
    with fm.gloo_uneven_gather():
        attempt("uneven gather fixed", lambda: hooks._all_gather_anything(mine, 1, group)[0, :, 0].tolist())
    fc.gather_rows(said, p, out)


def run_hooks(p, backend):
    with tempfile.TemporaryDirectory() as d:
        torch.multiprocessing.spawn(hooks_main, args=(p, f"file://{d}/rendezvous", f"{d}/out", backend), nprocs=p)
        if backend == "gloo":
            return [eval(open(f"{d}/out.{r}").read()) for r in range(p)]
        return eval(open(f"{d}/out").read())


def hook_checks():
    import diffusers.models.modeling_utils as mu
    from diffusers.hooks import context_parallel as hooks
    from diffusers.models import _modeling_parallel as mp
    from diffusers.models.transformers import transformer_wan as wan
    print("warning-once, cause:\n  " + where(hooks.ContextParallelSplitHook._prepare_cp_input, "logger.warning_once")
          + "\n  " + where(wan.WanTransformer3DModel, '"timestep": ContextParallelInput')
          + "\n  (diffusers' logger is a logging.Logger; nothing in diffusers gives it warning_once)")
    shipped = run_hooks(2, "cpu:gloo")
    got = shipped[0]["warning-once shipped"]
    check(got == ("error", "AttributeError: 'Logger' object has no attribute 'warning_once'"),
          f"a one-dimensional timestep where the plan expects two, as shipped: {got[1]}")
    got = shipped[0]["warning-once fixed"]
    check(got == ("ok", (3,)), f"the same with a warning_once: the input left whole, shape {got[1]}")
    print("gloo, cause:\n  " + where(mp.gather_size_by_comm, "gather_device = ")
          + "\n  " + where(hooks._all_gather_anything, "dist.all_gather("))
    plain = run_hooks(2, "gloo")
    got = plain[0]["sizes"]
    check(got[0] == "error", f"the anything modes' size exchange on a group of backend 'gloo': {got[1]}")
    check(shipped[0]["sizes"] == ("ok", [1, 2]), f"... of backend 'cpu:gloo': {shipped[0]['sizes'][1]}")
    got = shipped[0]["uneven gather shipped"]
    check(got[0] == "error" and "invalid tensor size" in got[1], f"shards of 1 and 2 rows gathered on gloo, as shipped: {got[1]}")
    got = shipped[0]["uneven gather fixed"]
    check(got == ("ok", [0.0, 1.0, 1.0]), f"... padded to the longest and trimmed: rows {got[1]}")
    print("device, cause:\n  " + where(mu.ModelMixin._resolve_parallel_config, "device_count()"))


# ---- models ------------------------------------------------------------------------------------
def rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def model_checks(train64, work):
    import field_models as fm
    from diffusers.models.transformers import transformer_helios as helios, transformer_ltx2 as ltx2
    print("helios, cause:\n  " + where(helios.HeliosTransformer3DModel, "for i in range(40)")
          + "\n  then, for the gradients:\n  "
          + where(__import__("diffusers.hooks.context_parallel", fromlist=["x"]).EquipartitionSharder.shard, "return tensor.chunk(mesh.size(), dim=dim)[torch")
          + "\n  " + where(__import__("diffusers.hooks.context_parallel", fromlist=["x"]).AllGatherFunction.backward, "return grad_chunks"))
    print("ltx2, cause:\n  " + where(ltx2.LTX2VideoTransformer3DModel, "_cp_plan = {")
          + " (splits rope, not cross_attn_rope, nor the audio)\n  "
          + where(ltx2.LTX2VideoTransformer3DModel.forward, "self.cross_attn_rope(") + "\n  "
          + where(ltx2.apply_interleaved_rotary_emb, "x.float() * cos"))
    jobs = {
        "device": fm.job("Flux", "ulysses", 2, "native", "float64", device_fix=False),
        "device fixed": fm.job("Flux", "ulysses", 2, "native", "float64"),
        "wan fixed": fm.job("Wan", "ulysses", 2, "_native_flash", "float32", fixes=("warning-once",)),
        "helios": fm.job("Helios", "ulysses", 2, "native", "float64"),
        "helios plan": fm.job("Helios", "ulysses", 2, "native", "float64", fixes=("helios-plan",)),
        "helios 41": None,
        "helios fixed": fm.job("Helios", "ulysses", 2, "native", "float64", fixes=("helios-plan", "split-whole-gradient")),
        "ltx2": fm.job("LTX2", "ulysses", 2, "native", "float64", fixes=("ulysses-kv-length",)),
        "ltx2 rope": fm.job("LTX2", "ulysses", 2, "native", "float64", fixes=("ltx2-rope-plan", "ulysses-kv-length")),
        "ltx2 audio": fm.job("LTX2", "ulysses", 2, "native", "float64", fixes=("ltx2-audio-plan", "ulysses-kv-length")),
    }
    jobs = {k: j for k, j in jobs.items() if j}
    results = {r[0]: r for r in fm.run_jobs(list(jobs.values()), work)}
    v = {k: fm.verdict(results[j], train64, work) for k, j in jobs.items()}
    check(v["device"][0] == "refused" and "ZeroDivisionError: integer modulo by zero" in v["device"][1],
          f"Flux, Ulysses 2, enable_parallelism as shipped on this machine: {v['device'][1]}")
    check(v["device fixed"][0] == "agrees", f"... with the device count 1 while it runs: {fm.short(*v['device fixed'])}")
    check(v["wan fixed"][0] == "agrees", f"Wan, Ulysses 2, _native_flash, with warning_once: {fm.short(*v['wan fixed'])}")
    check(v["helios"][0] == "refused" and "'2' is not a submodule of 'ModuleList'" in v["helios"][1],
          f"Helios (2 blocks), Ulysses 2, as shipped: {v['helios'][1]}")
    check(v["helios plan"][0] == "departs" and v["helios plan"][1].startswith("first divergence: grad.proj_out "),
          f"... with the plan's gathers for its own 2 blocks: {fm.short(*v['helios plan'])}")
    # the parameters' gradients of that run, rank by rank: which reduction gives one process's?
    _, every, (ref, _), _ = results[jobs["helios plan"]]
    ref = dict(ref)
    ranks = [dict(r) for r, _ in every]
    for name, region in (("grad.param.patch_embedding.weight", "before the first split"),
                         ("grad.param.blocks.0.attn1.to_q.weight", "inside a split region"),
                         ("grad.param.proj_out.weight", "after the last gather")):
        g = ref[name]
        parts = [r[name] for r in ranks]
        sums, first = rel(sum(parts), g), rel(parts[0], g)
        exp = {"before": lambda: sums > 0.01 and first > 0.01, "inside": lambda: sums < 1e-12,
               "after": lambda: first < 1e-12 and sums > 0.5}[region.split()[0]]()
        check(exp, f"  {name} ({region}): the ranks' sum off by {sums:.2g}, rank 0's by {first:.2g} (relative)")
    check(v["helios fixed"][0] == "agrees", f"... and with the split's backward gathering the chunks: {fm.short(*v['helios fixed'])}")
    check(v["ltx2"][0] == "refused" and "The size of tensor a (8) must match the size of tensor b (16)" in v["ltx2"][1],
          f"LTX2, Ulysses 2, as shipped (with the Ulysses key-length fix): {v['ltx2'][1]}")
    check(v["ltx2 rope"][0] == "departs" and v["ltx2 rope"][1].startswith("first divergence: grad.audio_proj_out "),
          f"... with cross_attn_rope split: {fm.short(*v['ltx2 rope'])}")
    check(v["ltx2 audio"][0] == "agrees", f"... with the audio split too: {fm.short(*v['ltx2 audio'])}")


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    train64, work = sys.argv[1:3]
    try:
        import diffusers  # noqa: F401
    except Exception as e:
        print(f"skipped: diffusers' context-parallel plans ({type(e).__name__}: {e})")
        return 0
    warnings.filterwarnings("ignore")
    from diffusers.utils import logging
    logging.set_verbosity_error()
    os.makedirs(work, exist_ok=True)
    hook_checks()
    model_checks(train64, work)
    return check.end("diffusers' plans and hooks")


if __name__ == "__main__":
    sys.exit(main())
