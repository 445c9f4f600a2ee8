#!/usr/bin/env python3
"""layering.py: folders are floors. A file of the library includes only from its own folder or
from a folder on a lower floor; folders on one floor do not include each other; and no module (a
.c with its .h) reaches itself again through its includes (no include circles). tests/ sits
above every floor and is not checked. And a layout is a row (parallel/sp.h's SpLayout): no code
outside the layouts' own files and their table branches on which layout it is (compares with, or
switches on, SP_GATHER, SP_ALL_TO_ALL, SP_RING or SP_HYBRID); each such site is printed. And no
CUDA kernel takes more than MAX_KERNEL_ARGS arguments (more go in an argument struct). Prints each
upward include, circle, branch and kernel and exits 1, or prints one line and exits 0.

usage: tests/layering.py [ROOT]          check the tree at ROOT (default: the current folder)
       tests/layering.py --self-test     also show that a planted upward include and a planted
                                         circle are caught (a copy of the tree in a temporary folder)
"""
import os
import re
import shutil
import sys
import tempfile

# lowest first; folders in one entry share a floor (README.md, "Layout", states the same)
FLOORS = [["core"], ["kernels"], ["autograd"], ["layers"], ["parallel"], ["data", "draw"],
          ["run"], ["plan"], ["study"], ["train"]]
FLOOR = {folder: i for i, names in enumerate(FLOORS) for folder in names}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# the layouts' own files and their table, where a layout's kind may decide
LAYOUT_FILES = {"parallel/gather.c", "parallel/all_to_all.c", "parallel/ring.c", "parallel/hybrid.c",
                "parallel/layouts.c"}
KIND = r"SP_(?:GATHER|ALL_TO_ALL|RING|HYBRID)\b"
BRANCH = re.compile(rf"[!=]=\s*(?:\(\w+\))?{KIND}|{KIND}\s*[!=]=|case\s+{KIND}|\?\s*{KIND}")
MAX_KERNEL_ARGS = 8
KERNEL = re.compile(r"__global__\s+void\s+(\w+)\s*\(([^)]*)\)\s*\{")


def sources(root):
    for folder in FLOOR:
        d = os.path.join(root, folder)
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            if name.endswith((".c", ".h", ".cu", ".cuh")):
                yield f"{folder}/{name}"


def includes(root, path):
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        for spec in INCLUDE.findall(f.read()):
            yield os.path.normpath(os.path.join(os.path.dirname(path), spec))


def module(path):  # x.c, x.h, x.cu and x.cuh are one module
    return os.path.splitext(path)[0]


def check(root):
    problems, graph = [], {}
    for path in sources(root):
        own = path.split("/")[0]
        for target in includes(root, path):
            folder = target.split("/")[0]
            if folder not in FLOOR:
                problems.append(f"{path} includes {target}, outside the library's floors")
                continue
            if FLOOR[folder] > FLOOR[own] or (FLOOR[folder] == FLOOR[own] and folder != own):
                problems.append(f"{path} includes {target}: {folder}/ is not below {own}/ "
                                f"(floors, lowest first: {' < '.join('/'.join(f) for f in FLOORS)})")
            if module(target) != module(path):
                graph.setdefault(module(path), set()).add(module(target))
    # circles: depth-first search for a back edge; each circle reported once
    state, seen = {}, set()

    def visit(m, trail):
        state[m] = 1
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                circle = trail[trail.index(n):] + [n]
                key = frozenset(circle)
                if key not in seen:
                    seen.add(key)
                    problems.append("include circle: " + " -> ".join(circle))
            elif n not in state:
                visit(n, trail + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    for path in sources(root):  # branches on the layout kind outside the layouts
        if path in LAYOUT_FILES:
            continue
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                if BRANCH.search(line.split("//")[0]):
                    problems.append(f"{path}:{n} branches on the layout kind: {line.strip()} (make it "
                                    "a member of the layout's row, parallel/sp.h's SpLayout)")
        if path.endswith((".cu", ".cuh")):
            with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                for name, params in KERNEL.findall(f.read()):
                    n = len([p for p in params.split(",") if p.strip()])
                    if n > MAX_KERNEL_ARGS:
                        problems.append(f"{path}: kernel {name} takes {n} arguments, more than "
                                        f"{MAX_KERNEL_ARGS}: give it an argument struct")
    return problems


def self_test(root):
    """A planted upward include and a planted circle, each in a copy of the tree: both caught."""
    plants = [("core/arena.c", '#include "../train/train.h"\n', "core/arena.c includes train/train.h"),
              ("run/settings.h", '#include "config.h"\n', "run/settings -> run/config"),
              ("plan/plan.c", 'static int ring_only(SeqAttention a) { return a == SP_RING; }\n',
               "branches on the layout kind"),
              ("kernels/adamw.cu", "static __global__ void wide(real *a, real *b, real *c, real *d, real *e, "
               "int f, int g, int h, int i) {}\n", "kernel wide takes 9 arguments")]
    ok = True
    for path, line, expect in plants:
        with tempfile.TemporaryDirectory() as tmp:
            for folder in FLOOR:
                shutil.copytree(os.path.join(root, folder), os.path.join(tmp, folder))
            with open(os.path.join(tmp, path), "a") as f:
                f.write(line)
            found = [p for p in check(tmp) if expect in p]
        print(f"planted {line.strip()} in {path}: " + (f"caught ({found[0]})" if found else "NOT caught"))
        ok = ok and bool(found)
    return ok


def main():
    args = sys.argv[1:]
    test = "--self-test" in args
    args = [a for a in args if a != "--self-test"]
    root = args[0] if args else "."
    problems = check(root)
    for p in problems:
        print("layering:", p)
    if not problems:
        files = sum(1 for _ in sources(root))
        print(f"layering: {files} files, every include on its own floor or below, no include circles, "
              f"no branch on the layout kind outside the layouts, no kernel of over {MAX_KERNEL_ARGS} arguments")
    ok = not problems
    if test:
        ok = self_test(root) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
