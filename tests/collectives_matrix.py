#!/usr/bin/env python3
"""collectives_matrix.py: a matrix no hang can hide in. Every subcommand that runs a model (train
with samples every step and at the end from the EMA, train with --sample-sizes, sample with
prompts, probe with its tape dump, verify, bugs on one bug) on meshes of 2 to 4 ranks (data groups
beside the sequence groups, micro-batches, the ring and the hybrid layout), at every --zero level,
with each small model family (class labels, captions, clips), in default and in exact arithmetic
(--exact). Every run has --check-collectives on
(a mismatch of collectives stops it at once, naming each rank's call) and a time limit; each must
end with exit 0 and write what it writes.

The cells are generated, not listed: a greedy covering of every pair of values of any two of the
five dimensions (command, mesh, zero, model, arithmetic) in at least one cell, less the pairs that cannot
be: text conditioning has no --sample-sizes (refused), and bugs runs each bug in its own config
(the class model; of the mesh, its rank count). --list prints them without running.

usage: tests/collectives_matrix.py TRAIN [--list]
"""
import itertools
import os
import subprocess
import sys
import tempfile
import time

from covering import covering

COMMANDS = ["train", "train-sizes", "sample", "probe", "verify", "bugs"]
MESHES = {  # name: ranks, the flags of the mesh
    "dp2": (2, ["--sp", "1"]),
    "dp3-accum2": (3, ["--sp", "1", "--grad-accum", "2"]),
    "dp2xsp2-ring": (4, ["--sp", "2", "--sp-attention", "ring"]),
    "hybrid-2x2": (4, ["--sp", "4", "--sp-attention", "hybrid", "--ulysses-degree", "2"]),
}
ZERO = [0, 1, 2, 3]
MODELS = {
    "class": [],
    "text": ["--cond", "text"],
    "clip": ["--frames", "2", "--data", "moving-shapes"],
}
ARITHMETIC = ["default", "exact"]  # --exact: canonical blocks and exact sums, other collectives
DIMS = [COMMANDS, list(MESHES), ZERO, list(MODELS), ARITHMETIC]
BASE = ["--steps", "2", "--batch", "12", "--sample-steps", "2", "--log-every", "1"]
# bugs runs each bug in its own layout on --ranks N: the bug of a cell follows its --zero
BUG_OF_ZERO = {0: "no-dp-allreduce", 1: "zero-grad-averaged", 2: "zero-grad-averaged", 3: "zero-outer-grads-unsummed"}
LIMIT = 120  # seconds a command may run (a hang the check cannot see ends here)


def allowed(cell):
    command, mesh, zero, model, arithmetic = cell
    # bugs takes no model flags: each bug runs its own config
    return not (command == "train-sizes" and model == "text") and not (command == "bugs" and model != "class")


def commands(cell, train, work):
    """The runs of a cell, each (argv, files it must write), and the flags of its name"""
    command, mesh, zero, model, arithmetic = cell
    ranks, mesh_flags = MESHES[mesh]
    exact = ["--exact"] if arithmetic == "exact" else []
    mpirun = ["mpirun", "--oversubscribe", "-np", str(ranks)] + (["--allow-run-as-root"] if os.getuid() == 0 else [])
    flags = mesh_flags + ["--zero", str(zero)] + MODELS[model] + exact + BASE
    out = os.path.join(work, "run")
    trained = mpirun + [train] + flags + ["--samples-per-class", "0", "--out", out]
    if command == "train":
        return [(mpirun + [train] + flags + ["--samples-per-class", "1", "--sample-every", "1", "--ema", "0.9",
                 "--out", out], ["samples.png", "model.safetensors", "ema.safetensors", "loss.csv"])]
    if command == "train-sizes":
        return [(mpirun + [train] + flags + ["--samples-per-class", "2", "--sample-sizes", "8x8,4x12", "--out", out],
                 ["samples.png", "model.safetensors"])]
    if command == "sample":  # the world is the sampler's sequence group
        prompts = ["--prompt", "red circle", "--prompt", "blue square"] if model == "text" else []
        return [(trained, ["model.safetensors"]),
                (mpirun + [train, "sample", "--ckpt", out, "--zero", str(zero)] + exact + ["--sample-steps", "2",
                           "--samples-per-class", "2", "--out", os.path.join(out, "grid.png")] + prompts, ["grid.png"])]
    if command == "probe":  # the tape dump, where there is one micro-batch
        ckpt, batch = os.path.join(out, "model.safetensors"), os.path.join(out, "batch.safetensors")
        data = MODELS[model][MODELS[model].index("--data"):][:2] if "--data" in MODELS[model] else []
        dump = [] if "--grad-accum" in mesh_flags else ["--dump-tape", os.path.join(out, "tape.safetensors")]
        return [(trained, ["model.safetensors"]),
                ([train, "probe", "--ckpt", ckpt, "--make-batch", "6", "--out", batch] + data, ["batch.safetensors"]),
                (mpirun + [train, "probe", "--ckpt", ckpt, "--batch", batch] + mesh_flags + ["--zero", str(zero)] + exact +
                 ["--out", os.path.join(out, "probe.safetensors")] + dump, ["probe.safetensors"] + ["tape.safetensors"] * bool(dump))]
    if command == "verify":
        return [([train, "verify", "--ranks", str(ranks)] + flags + ["--samples-per-class", "1", "--out", out],
                 [f"ranks-{ranks}/samples.png", "ranks-1/samples.png", "loss.png"])]
    return [([train, "bugs", "--bug", BUG_OF_ZERO[zero], "--ranks", str(ranks), "--steps", "2", "--out", out] + exact,
             ["bugs.md", "bugs.png"])]


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 2
    train, listing = os.path.realpath(sys.argv[1]), "--list" in sys.argv[2:]
    cells = covering(DIMS, allowed)
    pairs = sum(len(a) * len(b) for a, b in itertools.combinations(DIMS, 2))
    print(f"{len(cells)} cells cover every pair of values of two of command ({len(COMMANDS)}), mesh "
          f"({len(MESHES)}), --zero ({len(ZERO)}), model ({len(MODELS)}) and arithmetic ({len(ARITHMETIC)}): "
          f"{pairs} pairs, less those that cannot be")
    if listing:
        for c in cells:
            print("  " + " ".join(map(str, c)))
        return 0
    env = dict(os.environ, DIT_CHECK_COLLECTIVES="1", DIT_COLLECTIVE_TIMEOUT="60", SAMPLE_QUIET_SECONDS="1e9")
    passed = failed = 0
    start = time.time()
    for cell in cells:
        name = " ".join(map(str, cell))
        t0 = time.time()
        with tempfile.TemporaryDirectory(prefix="dit-matrix.") as work:
            why = None
            for argv, files in commands(cell, train, work):
                try:
                    r = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True, timeout=LIMIT)
                except subprocess.TimeoutExpired:
                    why = f"still running after {LIMIT} s: {' '.join(argv)}"
                    break
                missing = [f for f in files if not os.path.exists(os.path.join(work, "run", f))]
                if r.returncode or missing:
                    tail = "\n".join(l for l in r.stdout.splitlines() if not l.startswith(("[", "--", " "))
                                     or l.startswith("  rank"))[-3000:]
                    why = (f"exit {r.returncode}" + (f", did not write {', '.join(missing)}" if missing else "") +
                           f": {' '.join(argv)}\n{tail}")
                    break
        if why:
            failed += 1
            print(f"FAIL {name}: {why}")
        else:
            passed += 1
            print(f"ok   {name} ({time.time() - t0:.1f} s)")
        sys.stdout.flush()
    print(f"the matrix: {len(cells)} cells in {time.time() - start:.0f} s")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
