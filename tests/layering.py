#!/usr/bin/env python3
"""layering.py: folders are floors. A file of the library includes only from its own folder or
from a folder on a lower floor; folders on one floor do not include each other; and no module (a
.c with its .h) reaches itself again through its includes (no include circles). tests/ sits
above every floor and is not checked. In parallel/, each header declares the functions of its own
.c and each .c's functions are in its own header, so that an include there is an edge between two
files, which the circle check sees. And a layout is a row (parallel/layouts/row.h's SpLayout): no code
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
FLOORS = [["core"], ["kernels"], ["autograd"], ["layers"], ["parallel/transport"], ["parallel/layouts"],
          ["parallel/mesh"], ["data", "draw"], ["run"], ["plan"], ["study"], ["train"]]
FLOOR = {folder: i for i, names in enumerate(FLOORS) for folder in names}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# the layouts' own files and their table, where a layout's kind may decide
LAYOUT_FILES = {f"parallel/layouts/{name}.c" for name in ("gather", "all_to_all", "ring", "hybrid", "layouts")}
# folders where each header declares the functions of its own .c only, and each .c's functions are
# declared in its own header: an include is then a real edge between two files, which the circle
# check sees (a header declaring several files' functions hides their edges)
ONE_HEADER_PER_FILE = ("parallel/",)
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


def code(text):
    """text without comments, preprocessor lines and brace bodies: the top-level declarations"""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"^\s*#[^\n]*", "", text, flags=re.M)
    out, depth = [], 0
    for ch in text:
        depth += (ch == "{") - (ch == "}")
        if depth == 0 and ch != "}":
            out.append(ch)
    return "".join(out)


FUNCTION = re.compile(r"^(?:extern\s+)?(?:_Noreturn\s+)?[\w\s*]*?\b(\w+)\s*\(")


def functions(root, path, defined):
    """The functions a header declares, or a .c defines (not static)"""
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        text = f.read()
    if defined:  # a definition: a top-level line "type name(...)" that reaches a body
        return set(re.findall(r"^(?!static\b)[A-Za-z_][\w\s*]*?\b(\w+)\s*\([^;{]*\)\s*\{", text, re.M))
    names = set()
    for statement in code(text).split(";"):
        statement = " ".join(statement.split())
        if statement.startswith(("typedef", "static")) or "(" not in statement:
            continue
        m = FUNCTION.match(statement)
        if m and not statement[m.end() - 1:].lstrip("(").lstrip().startswith("*"):
            names.add(m.group(1))
    return names


def module(path):  # x.c, x.h, x.cu and x.cuh are one module
    return os.path.splitext(path)[0]


def check(root):
    problems, graph = [], {}
    for path in sources(root):
        own = os.path.dirname(path)
        for target in includes(root, path):
            folder = os.path.dirname(target)
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
    for path in sources(root):  # one header per .c file
        if not path.startswith(ONE_HEADER_PER_FILE) or not path.endswith((".c", ".h")):
            continue
        twin = module(path) + (".c" if path.endswith(".h") else ".h")
        mine = functions(root, path, path.endswith(".c"))
        theirs = functions(root, twin, twin.endswith(".c")) if os.path.exists(os.path.join(root, twin)) else set()
        for name in sorted(mine - theirs):
            problems.append(f"{path} declares {name}, which {twin} does not define (one header per .c: "
                            "declare it in the header of the file that defines it)" if path.endswith(".h") else
                            f"{path} defines {name}, which {twin} does not declare (one header per .c: "
                            "declare it there, or make it static)")
    for path in sources(root):  # branches on the layout kind outside the layouts
        if path in LAYOUT_FILES:
            continue
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                if BRANCH.search(line.split("//")[0]):
                    problems.append(f"{path}:{n} branches on the layout kind: {line.strip()} (make it "
                                    "a member of the layout's row, parallel/layouts/row.h's SpLayout)")
        if path.endswith((".cu", ".cuh")):
            with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                for name, params in KERNEL.findall(f.read()):
                    n = len([p for p in params.split(",") if p.strip()])
                    if n > MAX_KERNEL_ARGS:
                        problems.append(f"{path}: kernel {name} takes {n} arguments, more than "
                                        f"{MAX_KERNEL_ARGS}: give it an argument struct")
    return problems


def self_test(root):
    """Planted upward includes, circles, a header declaring another file's function, a branch and a\n    wide kernel, each in a copy of the tree: each caught."""
    plants = [("core/arena.c", '#include "../train/train.h"\n', "core/arena.c includes train/train.h"),
              ("run/settings.h", '#include "config.h"\n', "run/settings -> run/config"),
              ("parallel/mesh/batch.h", '#include "step.h"\n', "parallel/mesh/batch -> parallel/mesh/step"),
              ("parallel/layouts/ring.c", '#include "../mesh/batch.h"\n', "parallel/mesh/ is not below"),
              ("parallel/mesh/sp.h", "void sp_sync_grads(SeqParallel *sp, ParamStore *ps);\n",
               "sp.h declares sp_sync_grads, which parallel/mesh/sp.c does not define"),
              ("parallel/layouts/policy.c", "int seq_policy_blocks(void) { return 12; }\n",
               "policy.c defines seq_policy_blocks, which parallel/layouts/policy.h does not declare"),
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
              f"one header per .c in {', '.join(ONE_HEADER_PER_FILE)}, "
              f"no branch on the layout kind outside the layouts, no kernel of over {MAX_KERNEL_ARGS} arguments")
    ok = not problems
    if test:
        ok = self_test(root) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
