#!/usr/bin/env bash
# ptx_check.sh: the static check that the kernels built for the GPUs (sm_80, sm_90) use the
# instructions they are written for, without a GPU: each kernel file of the table below is
# compiled to PTX (nvcc -ptx) and must hold each of its instructions, and compiled to a cubin with
# --resource-usage, which must report no spills; where PyPI's cuobjdump and nvdisasm are in
# build/venv (make deps), the machine code (SASS) of each file whose PTX holds mma.sync must hold
# the tensor cores' HMMA. A self-test first asks a file for an instruction it does not use
# (layernorm.cu for mma.sync): the check must fail on it. Skipped without nvcc.
# usage: tests/gpu/ptx_check.sh [NVCC]
set -u
NVCC=${1:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$NVCC" ] || { echo "skipped: the PTX check (no nvcc)"; echo "ptx_check: 0 passed, 0 failed"; exit 0; }
SASS_TOOLS=$(ls -d build/venv/lib/python3*/site-packages/nvidia/cu*/bin 2>/dev/null | head -1)
[ -x "$SASS_TOOLS/cuobjdump" ] && [ -x "$SASS_TOOLS/nvdisasm" ] || SASS_TOOLS=
WORK=$(mktemp -d /tmp/dit-ptx.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
pass=0 fail=0
# file: the instructions its PTX must hold (extended regular expressions, one a line)
table() {
  cat <<'TABLE'
kernels/tensorcore.cu mma\.sync\.aligned\.m16n8k8\.row\.col\.f32\.tf32\.tf32\.f32
kernels/tensorcore.cu mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32
kernels/tensorcore.cu ldmatrix\.sync\.aligned\.m8n8\.x4\.trans\.shared\.b16
kernels/tensorcore.cu cp\.async\.cg\.shared\.global
kernels/tensorcore.cu cp\.async\.wait_group
kernels/tensorcore.cu cvt\.rna\.tf32\.f32
kernels/tensorcore.cu cvt\.rn\.bf16x2\.f32
kernels/attention_mma.cu mma\.sync\.aligned\.m16n8k8\.row\.col\.f32\.tf32\.tf32\.f32
kernels/attention_mma.cu mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32
kernels/attention_mma.cu cp\.async\.cg\.shared\.global
kernels/attention_mma.cu cp\.async\.wait_group 1
kernels/attention_mma.cu cvt\.rna\.tf32\.f32
kernels/attention_mma.cu cvt\.rn\.bf16x2\.f32
kernels/attention_mma.cu shfl\.sync\.bfly
TABLE
}
# build FILE ARCH: compiles FILE for ARCH once (nvcc -c -keep): DIR/NAME.ptx, the object DIR/x.o
# and --resource-usage's report DIR/usage, DIR = $WORK/NAME.ARCH
build() {
  local dir=$WORK/$(basename "$1" .cu).$2
  mkdir -p "$dir"
  "$NVCC" -c -arch="$2" -std=c++17 -I kernels -keep -keep-dir "$dir" --resource-usage "$1" -o "$dir/x.o" > "$dir/usage" 2>&1 ||
    { cat "$dir/usage"; return 2; }
}
# holds FILE ARCH REGEX: the PTX of FILE for ARCH holds REGEX
holds() { grep -qE "$3" "$WORK/$(basename "$1" .cu).$2/$(basename "$1" .cu).ptx"; }
build kernels/layernorm.cu sm_80
if holds kernels/layernorm.cu sm_80 'mma\.sync'; then echo "FAIL self-test: layernorm.cu said to hold mma.sync"; fail=$((fail + 1))
else echo "ok   self-test: the check fails on an instruction a file does not use (layernorm.cu, mma.sync)"; pass=$((pass + 1)); fi
# every file for both architectures, two compilers at a time
for file in $(table | cut -d' ' -f1 | sort -u); do for arch in sm_80 sm_90; do echo "$file $arch"; done; done |
  xargs -P 2 -n 2 bash -c "$(declare -f build); WORK=$WORK NVCC=$NVCC build \"\$0\" \"\$1\"" || fail=$((fail + 1))
for arch in sm_80 sm_90; do
  while read -r file regex; do
    if holds "$file" $arch "$regex"; then pass=$((pass + 1))
    else echo "FAIL $file for $arch: its PTX does not hold $regex"; fail=$((fail + 1)); fi
  done < <(table)
  for file in $(table | cut -d' ' -f1 | sort -u); do
    dir=$WORK/$(basename "$file" .cu).$arch
    spills=$(grep -oE '[1-9][0-9]* bytes spill (stores|loads)' "$dir/usage" | head -1)
    regs=$(grep -oE 'Used [0-9]+ registers' "$dir/usage" | sort -t' ' -k2 -n | tail -1)
    if [ -z "$spills" ]; then echo "ok   $file for $arch: every instruction of the table, no spills (most: $regs)"; pass=$((pass + 1))
    else echo "FAIL $file for $arch: $spills"; fail=$((fail + 1)); fi
    if [ -n "$SASS_TOOLS" ] && table | grep -q "^$file mma"; then
      hmma=$(PATH=$SASS_TOOLS:$PATH cuobjdump -sass "$dir/x.o" | grep -oE 'HMMA[.0-9A-Z]*' | sort | uniq -c | xargs)
      if [ -n "$hmma" ]; then echo "ok   $file for $arch: its machine code runs on the tensor cores ($hmma)"; pass=$((pass + 1))
      else echo "FAIL $file for $arch: no HMMA in its machine code (cuobjdump -sass)"; fail=$((fail + 1)); fi
    fi
  done
done
[ -n "$SASS_TOOLS" ] || echo "skipped: the machine-code check (no cuobjdump and nvdisasm in build/venv: make deps installs them)"
echo "ptx_check: $pass passed, $fail failed"
[ $fail = 0 ]
