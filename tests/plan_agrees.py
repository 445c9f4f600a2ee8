#!/usr/bin/env python3
"""plan_agrees.py: the planner recommends only what train runs, and refuses what train refuses.
Over a generated grid of flag sets (a pairwise covering, covering.py, of the model: classes,
cross and joint captions, clips, in-context tokens; --zero 0 or 3; one further setting: none,
--exact, --max-tokens on the procedural data, a bug of the ring, a --zero bug, heads that no rank
count divides; and 1 to 4 ranks), for each cell:
- `train/train plan --ranks R FLAGS` and `train/train --sp-attention auto FLAGS --dry-run` under
  mpirun -np R both run (exit 0) or both refuse (exit 2);
- where plan runs, the command it prints as best, and for every mesh it ranks the command of its
  fastest row, pass `--dry-run` under mpirun -np R.
Each line: ok or FAIL, the cell; the last "N passed, N failed".

usage: tests/plan_agrees.py TRAIN [--list]
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from covering import covering

MODELS = {"class": [], "text": ["--cond", "text"], "joint": ["--cond", "text", "--text-attn", "joint"],
          "clip": ["--frames", "2", "--data", "moving-shapes"], "in-context": ["--in-context"]}
ZERO = ["0", "3"]
EXTRA = {"none": [], "exact": ["--exact"], "packs-on-shapes": ["--max-tokens", "10"],
         "ring-bug": ["--inject-bug", "ring-stale-kv"], "zero-bug": ["--inject-bug", "zero-grad-averaged"],
         "heads-3": ["--heads", "3", "--hidden", "48"]}
RANKS = ["1", "2", "3", "4"]
DIMS = [list(MODELS), ZERO, list(EXTRA), RANKS]
BASE = ["--batch", "12", "--steps", "2", "--samples-per-class", "0"]
LINK = ["--link-bandwidth", "1000", "--link-latency", "20"]
ROW = re.compile(r"^\s+\d+\s+(yes|no)\s+(\d)\s+.*?\s(--sp \d+ --sp-attention \S+(?: --ulysses-degree \d+)?)\s*$")


def run(argv):
    # an Open MPI session folder of the command's own: two run at once, and one job's cleanup of a
    # shared folder made the other's start fail now and then ("orte_session_dir failed")
    with tempfile.TemporaryDirectory(prefix="plan-agrees-mpi-") as folder:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, OMPI_MCA_orte_tmpdir_base=folder))
    return r.returncode, r.stdout + r.stderr


def mpirun(ranks):
    return ["mpirun", "--oversubscribe", "-np", ranks] + (["--allow-run-as-root"] if os.getuid() == 0 else [])


def sentence(out):
    """the refusal's sentence, without the rank or the command that says it"""
    for line in out.splitlines():
        m = re.match(r"^error(?: \(rank \d+ of \d+\))?: (?:plan: |--sp-attention auto: )?(.*)", line)
        if m:
            return m.group(1)
    return ""


def check(cell, train, pool):
    model, zero, extra, ranks = cell
    flags = MODELS[model] + ["--zero", zero] + EXTRA[extra] + BASE
    (prc, pout), (trc, tout) = pool.map(run, [
        [train, "plan", "--ranks", ranks] + LINK + flags,
        mpirun(ranks) + [train, "--sp-attention", "auto"] + flags + ["--dry-run", "--out", "/nonexistent/never"]])
    if prc != trc or prc not in (0, 2):
        return f"plan exits {prc}, train --sp-attention auto {trc}: {sentence(pout) or pout[-300:]} | {sentence(tout) or tout[-300:]}"
    if prc == 2:  # each says it in its own words ("plan predicts ...", "--sp-attention auto predicts ...")
        return None
    best = [l for l in pout.splitlines() if l.startswith("best: ")]
    commands, meshes = [], set()
    if best:
        commands.append(shlex.split(best[0][6:]))
    for line in pout.splitlines():
        m = ROW.match(line)
        if m and m.group(3) not in meshes:  # each mesh's fastest row, with its --recompute and --zero
            meshes.add(m.group(3))
            recompute = ["--recompute"] * (m.group(1) == "yes")
            commands.append(["train/train"] + MODELS[model] + EXTRA[extra] + BASE + m.group(3).split() +
                            recompute + ["--zero", m.group(2)])
    if not meshes:
        return "plan runs but ranks no mesh"
    argvs = []
    for c in commands:
        c = c[c.index("train/train") + 1:]
        argvs.append(mpirun(ranks) + [train] + c + ["--dry-run", "--out", "/nonexistent/never"])
    for argv, (rc, out) in zip(argvs, pool.map(run, argvs)):
        if rc:
            return f"plan recommends a command train refuses (exit {rc}): {' '.join(argv)}: {sentence(out) or out[-300:]}"
    return None


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 2
    train = os.path.realpath(sys.argv[1])
    cells = covering(DIMS)
    print(f"{len(cells)} cells cover every pair of values of two of model ({len(MODELS)}), --zero "
          f"({len(ZERO)}), a further setting ({len(EXTRA)}) and ranks ({len(RANKS)})")
    if "--list" in sys.argv[2:]:
        for c in cells:
            print("  " + " ".join(c))
        return 0
    os.environ.setdefault("OMPI_MCA_pml", "ob1")
    passed = failed = 0
    start = time.time()
    with ThreadPoolExecutor(max_workers=2) as pool:  # two commands at once: the machine's cores
        for cell in cells:
            why = check(cell, train, pool)
            if why:
                failed += 1
                print(f"FAIL {' '.join(cell)}: {why}")
            else:
                passed += 1
                print(f"ok   {' '.join(cell)}")
            sys.stdout.flush()
    print(f"plan_agrees: {len(cells)} cells in {time.time() - start:.0f} s")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
