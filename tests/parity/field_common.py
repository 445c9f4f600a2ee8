"""What the field-parity scripts (field_models.py, torch_context_parallel.py, diffusers_*.py) share:

  Checks           counts and prints the checks ("ok  " or "FAIL", then what), prints the verdict table
                   and writes it to --table's file, and the count line; gives the exit status
  installed_lines  'file:line: code' of the lines of an installed function or class holding a text
  parallel_config  diffusers' ParallelConfig set up for this rank on a CPU device mesh
  on_ranks         runs rows(rank, P) on P processes (gloo, a file rendezvous); every rank's rows
  gather_rows      in a rank: every rank's rows to rank 0, written to a file for the spawning process
  reproduction     main() of diffusers_ring_accumulator.py and diffusers_ulysses_kv_length.py: the
                   installed cause printed, the case run at each P of the command line, each row judged
"""
import inspect
import os
import sys
import tempfile
import time
import warnings

import torch
import torch.distributed as dist


class Checks:
    """check(ok, what) prints "ok  " or "FAIL" then what, and counts it"""

    def __init__(self):
        self.checks = self.failures = 0

    def __call__(self, ok, what):
        self.checks += 1
        self.failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)

    def end(self, title, text=None, table=None, start=None):
        """Prints text (the verdict table) where there is one, and writes it to the file table where
        one is named; then "title: N passed, M failed" (with the seconds since start where given);
        returns the exit status, 1 where a check failed"""
        if text is not None:
            print("\n" + text)
            if table:
                with open(table, "w") as f:
                    f.write(text + "\n")
        took = "" if start is None else f" ({time.time() - start:.0f} s)"
        print(f"\n{title}: {self.checks - self.failures} passed, {self.failures} failed{took}")
        return 1 if self.failures else 0


def source_file(obj):
    """The file of obj's source (obj unwrapped), from its package's folder on where it is diffusers'"""
    path = inspect.getsourcefile(inspect.unwrap(obj))
    return path[path.rindex("diffusers" + os.sep):] if "diffusers" + os.sep in path else path


def installed_lines(obj, keep):
    """'file:line: code' of each line of obj's source (a module, class or function, as installed)
    that holds any of the texts keep"""
    src, first = inspect.getsourcelines(inspect.unwrap(obj))
    path = source_file(obj)
    return [f"{path}:{first + i}: {line.strip()}" for i, line in enumerate(src) if any(k in line for k in keep)]


def parallel_config(rank, p, **degrees):
    """diffusers' ParallelConfig of ContextParallelConfig(**degrees), set up for this rank of P on a
    CPU device mesh (the process group already initialised)"""
    from diffusers.models._modeling_parallel import ContextParallelConfig, ParallelConfig
    cp = ContextParallelConfig(**degrees)
    config = ParallelConfig(context_parallel_config=cp)
    config.setup(rank, p, torch.device("cpu"),
                 mesh=dist.device_mesh.init_device_mesh("cpu", cp.mesh_shape, mesh_dim_names=cp.mesh_dim_names))
    return config


def gather_rows(rows, p, out):
    """In each of P ranks: every rank's rows to rank 0 (all_gather_object), which writes them (repr)
    to out; ends the process group"""
    every = [None] * p
    dist.all_gather_object(every, rows)
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            f.write(repr(every))
    dist.destroy_process_group()


def ranks_main(rank, p, init, out, rows, flash):
    """A process of on_ranks"""
    warnings.filterwarnings("ignore")
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=p)
    if flash:
        from field_libraries import cpu_flash_kernels
        kernels = cpu_flash_kernels()  # noqa: F841 (registered while it lives)
    gather_rows(rows(rank, p), p, out)


def on_ranks(p, rows, flash=False):
    """Runs rows(rank, p) (a module-level function, its result written with repr and read back with
    eval) on P processes, gloo on the CPU with a file rendezvous in a fresh temporary folder; flash:
    with field_libraries.cpu_flash_kernels() registered. Returns every rank's rows, rank 0's first"""
    with tempfile.TemporaryDirectory() as d:
        torch.multiprocessing.spawn(ranks_main, args=(p, f"file://{d}/rendezvous", f"{d}/rows", rows, flash), nprocs=p)
        return eval(open(f"{d}/rows").read())


def reproduction(what, cause_of, cause, rows, judge, flash=False):
    """main() of a reproduction: "skipped: WHAT (the import error)" where diffusers is not installed;
    else "cause, CAUSE_OF as installed:" and the lines cause() returns, then for each P of the command
    line (default 2 3 4) rows(rank, p) on P processes (on_ranks) and a line for each (ok, label,
    said, want) that judge(p, every rank's rows) yields. Returns the exit status, 1 where one failed"""
    ps = [int(a) for a in sys.argv[1:]] or [2, 3, 4]
    try:
        import diffusers  # noqa: F401
    except Exception as e:
        print(f"skipped: {what} ({type(e).__name__}: {e})")
        return 0
    print(f"cause, {cause_of} as installed:")
    for line in cause():
        print("  " + line)
    failures = 0
    for p in ps:
        for ok, label, said, want in judge(p, on_ranks(p, rows, flash)):
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} P = {p}, {label}: {said} (expected: {want})")
    return 1 if failures else 0
