#!/usr/bin/env python3
"""docs_check.py: docs that stay true. Every command line of README.md and docs/*.md that runs
the program (a line in a ``` block starting with `train/train` or `mpirun ... train/train`; a
trailing backslash continues it) runs with --dry-run, which checks every flag and the settings
they make and exits 0 without running or writing anything (the folder they ran in must stay
empty). And every flag the docs name in code
(`--something`, in blocks and inline) must appear in the program's --help or a subcommand's,
but for mpirun's own options and a Python script's (a line or span running python, torchrun or
a *.py). Examples with --device cuda run only where a GPU is (a
"skipped:" line says how many did not); their flags are checked all the same. And a table the
program prints (GENERATED: `train/train bugs --list`, the table of the bugs) must stand in its page
as printed. Prints each failure with its file and line; exits 1 on any.

usage: tests/docs_check.py TRAIN_BINARY [ROOT]    check ROOT's README.md and docs/ (default .)
       tests/docs_check.py TRAIN_BINARY --self-test  also show that a doc example with a misspelt
                                                  flag fails the check (a copy in a temp folder)
"""
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

SUBCOMMANDS = ["probe", "sample", "plan", "compare", "verify", "bugs", "locate"]
# options of mpirun (Open MPI), which the program's --help does not list; the docs may name them
MPIRUN_OPTIONS = {"--oversubscribe", "--allow-run-as-root", "--bind-to", "--map-by", "--mca",
                  "--host", "--hostfile", "--np"}
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# tables the program prints, each with the page that holds it whole
GENERATED = [(["bugs", "--list"], "docs/bugs.md")]


def doc_files(root):
    return [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))


def code_parts(path):
    """(line number, text, in_block) of the code in a markdown file: block lines, inline spans"""
    in_block = False
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.lstrip().startswith("```"):
                in_block = not in_block
                continue
            if in_block:
                yield n, line.rstrip("\n"), True
            else:
                for span in re.findall(r"`([^`]+)`", line):
                    yield n, span, False


def commands(path):
    """(line number, command) of every program command line in the file's code blocks"""
    pending, start = None, 0
    for n, text, in_block in code_parts(path):
        if not in_block:
            continue
        line = text.strip()
        if pending is not None:
            pending += " " + line.rstrip("\\").strip()
            if not line.endswith("\\"):
                yield start, pending
                pending = None
            continue
        words = line.split()
        runs = words and (words[0] == "train/train" or (words[0] == "mpirun" and "train/train" in words))
        if not runs:
            continue
        if line.endswith("\\"):
            pending, start = line.rstrip("\\").strip(), n
        else:
            yield n, line


def other_program(text):
    """A code line or span that runs another program (python, torchrun, a *.py word, nvcc): its
    flags are that program's, not ours"""
    words = text.split()
    return bool(words) and (os.path.basename(words[0]) in ("python", "python3", "torchrun", "nvcc")
                            or any(w.endswith(".py") for w in words))


def help_flags(train):
    text = ""
    for args in [["--help"]] + [[s, "--help"] for s in SUBCOMMANDS]:
        text += subprocess.run([train] + args, capture_output=True, text=True, timeout=60).stdout
    return set(FLAG.findall(text))


def run_example(train, workdir, command):
    words = shlex.split(command, comments=True)
    if words[0] == "mpirun":
        words[1:1] = ["--oversubscribe"] + (["--allow-run-as-root"] if os.getuid() == 0 else [])
    words = [train if w == "train/train" else w for w in words] + ["--dry-run"]
    try:
        r = subprocess.run(words, cwd=workdir, capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, OMP_WAIT_POLICY="passive"))
    except subprocess.TimeoutExpired:
        return 124, "still running after 120 s"
    return r.returncode, (r.stderr or r.stdout).strip()


def has_gpu():
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def check(train, root):
    train = os.path.abspath(train)
    known = help_flags(train)
    failures, ran, gpu, skipped = [], 0, has_gpu(), 0
    with tempfile.TemporaryDirectory() as work:
        for path in doc_files(root):
            if not os.path.exists(path):
                failures.append(f"{path}: missing")
                continue
            name = os.path.relpath(path, root)
            for n, text, _ in code_parts(path):
                for flag in [] if other_program(text) else FLAG.findall(text):
                    if flag not in known and flag not in MPIRUN_OPTIONS:
                        failures.append(f"{name}:{n}: {flag} is in no --help of the program")
            for n, command in commands(path):
                if "--device cuda" in command and not gpu:  # its flags are checked above
                    skipped += 1
                    continue
                rc, out = run_example(train, work, command)
                ran += 1
                if rc != 0:
                    failures.append(f"{name}:{n}: `{command}` --dry-run exited {rc}: "
                                    f"{out.splitlines()[0] if out else ''}")
        for args, page in GENERATED:
            path = os.path.join(root, page)
            table = subprocess.run([train] + args, capture_output=True, text=True).stdout
            if os.path.exists(path) and (not table or table not in open(path, encoding="utf-8").read()):
                failures.append(f"{page}: does not hold `train/train {' '.join(args)}`'s table as it prints "
                                f"it: paste it there again")
        written = [os.path.join(d, f) for d, _, files in os.walk(work) for f in files]
        written += [d for d, subdirs, files in os.walk(work) if d != work]
        if written:  # a dry run writes nothing
            failures.append(f"the dry runs wrote {len(written)} files or folders: "
                            + ", ".join(os.path.relpath(w, work) for w in written[:5]))
    if skipped:
        print(f"skipped: {skipped} docs examples with --device cuda (no GPU here; their flags are checked)")
    return ran, failures


def self_test(train, root):
    """a doc example with a misspelt flag, and the bug table with a row's text changed, in a copy
    of the docs: the check must fail on both"""
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "docs"))
        with open(os.path.join(tmp, "README.md"), "w") as f:
            f.write("# planted\n```\ntrain/train --stpes 10 --out runs/x\n```\n")
        table = subprocess.run([os.path.abspath(train), "bugs", "--list"], capture_output=True, text=True).stdout
        with open(os.path.join(tmp, "docs", "bugs.md"), "w") as f:
            f.write(table.replace("attends only to the local keys", "attends to the local keys"))
        ran, failures = check(train, tmp)
    caught = [f for f in failures if "--stpes" in f]
    stale = [f for f in failures if "bugs --list" in f]
    print("planted `train/train --stpes 10` in a README: " +
          (f"caught ({len(caught)} failures: {caught[0]}; ...)" if caught else "NOT caught"))
    print("planted a bug table with one row's text changed: " + (f"caught ({stale[0]})" if stale else "NOT caught"))
    return len(caught) == 2 and len(stale) == 1  # the unknown flag in --help and the example's exit 2


def main():
    args = [a for a in sys.argv[1:] if a != "--self-test"]
    if not args:
        print(__doc__)
        return 2
    train, root = args[0], args[1] if len(args) > 1 else "."
    ran, failures = check(train, root)
    for f in failures:
        print("docs:", f)
    pages = len(doc_files(root))
    print(f"docs: {ran} examples in {pages} files run with --dry-run, "
          f"{len(failures)} failure{'s' if len(failures) != 1 else ''}")
    ok = not failures
    if "--self-test" in sys.argv:
        ok = self_test(train, root) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
