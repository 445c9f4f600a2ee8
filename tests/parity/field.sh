#!/usr/bin/env bash
# field.sh PYTHON TRAIN_F64 WORKDIR OUT: `make field`. The field's own models under their own context
# parallelism, every row: every diffusers model with a _cp_plan (field_models.py), PyTorch's
# context_parallel (torch_context_parallel.py) and the reproductions of each departure with their
# fixes (diffusers_*.py); writes OUT (docs/results/field.md) stamped with the date, the CPU, the
# commit and the versions, with the seconds each part took. OUT is replaced only when every part
# passes; a part that fails is named and the status is 1.
set -u -o pipefail
PY=$1 TRAIN64=$2 WORK=$3 OUT=$4
mkdir -p "$WORK" "$(dirname "$OUT")"
versions=$("$PY" -c 'import importlib.metadata as m, platform
def v(p):
    try: return m.version(p)
    except Exception: return "not installed"
print("Python %s, torch %s, diffusers %s" % (platform.python_version(), v("torch"), v("diffusers")))')
cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && commit="$commit (with uncommitted changes)"
tmp=$OUT.tmp failed=""
{
  echo "# The field's models under their own context parallelism"
  echo
  echo "Written by \`make field\` (tests/parity/field.sh) on $(date -u '+%Y-%m-%d %H:%M UTC'); CPU: $cpu ($(nproc) cores); commit $commit; $versions. docs/check-your-own.md explains the rows."
} > "$tmp"
# part TITLE KIND COMMAND...: runs COMMAND, shows its output; KIND table: its --table file goes in as
# markdown; KIND log: its output goes in as text
# (gloo's and torch's notes at a process's end about collectives it did not wait for, left by the
# refused runs, are left out)
noise='Warning: At the time of process termination\|c10d_functional\|^[12]\. \|^before the output\|triton\|^\s*$'
part() {
  local title=$1 kind=$2 start=$SECONDS rc; shift 2
  echo "== $title"
  rm -f "$WORK/table.md"
  if [ "$kind" = table ]; then set -- "$@" --table "$WORK/table.md"; fi
  "$@" > "$WORK/log.txt" 2>&1; rc=$?
  grep -v "$noise" "$WORK/log.txt"
  { echo; echo "## $title"; echo; echo "($((SECONDS - start)) s)"; echo
    if [ "$kind" = table ]; then cat "$WORK/table.md" 2>/dev/null
    else echo '```'; grep -v "$noise" "$WORK/log.txt"; echo '```'; fi; } >> "$tmp"
  [ "$rc" = 0 ] || failed="$failed; $title"
}
part "diffusers: every model with a _cp_plan" table "$PY" tests/parity/field_models.py "$TRAIN64" "$WORK/models"
part "PyTorch: context_parallel" table "$PY" tests/parity/torch_context_parallel.py "$TRAIN64" "$WORK/torch"
part "Reproduction: the ring's dK/dV accumulator" log "$PY" tests/parity/diffusers_ring_accumulator.py 2 3 4
part "Reproduction: Ulysses' backward with keys of another length" log "$PY" tests/parity/diffusers_ulysses_kv_length.py 2 3 4
part "Reproduction: plans and hooks" log "$PY" tests/parity/diffusers_cp_plans.py "$TRAIN64" "$WORK/plans"
if [ -n "$failed" ]; then rm -f "$tmp"; echo "field: failed: ${failed#; } ($OUT kept as it was)"; exit 1; fi
mv "$tmp" "$OUT"
echo "field: every part passed (kept in $OUT)"
