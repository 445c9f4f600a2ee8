#!/usr/bin/env bash
# ptx_check.sh: the static check that the kernels built for the GPUs (sm_80, sm_90) use the
# instructions they are written for, without a GPU. The build keeps what it needs (the Makefile's
# .cu rule): each kernel file's PTX for both architectures (BUILD/kernels/NAME.cu.o.keep/) and
# ptxas' --resource-usage report (BUILD/kernels/NAME.cu.o.usage). The PTX of each kernel file of the
# table below must hold each of its instructions, and the report must show no spills; where PyPI's
# cuobjdump and nvdisasm are in build/venv (make deps), the machine code (SASS) of each file whose
# PTX holds mma.sync must hold the tensor cores' HMMA, for each architecture. A self-test first asks
# a file for an instruction it does not use (layernorm.cu for mma.sync): the check must fail on it.
# Skipped where the build has no CUDA objects (no nvcc, or USE_CUDA=0).
# usage: tests/gpu/ptx_check.sh BUILD_VARIANT (build/f32)
set -u
B=${1:?usage: tests/gpu/ptx_check.sh BUILD_VARIANT}
[ -f "$B/kernels/layernorm.cu.o" ] || { echo "skipped: the PTX check (the build in $B has no CUDA objects: no nvcc, or USE_CUDA=0)"; echo "ptx_check: 0 passed, 0 failed"; exit 0; }
SASS_TOOLS=$(ls -d build/venv/lib/python3*/site-packages/nvidia/cu*/bin 2>/dev/null | head -1)
[ -x "$SASS_TOOLS/cuobjdump" ] && [ -x "$SASS_TOOLS/nvdisasm" ] || SASS_TOOLS=
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
# ptx FILE ARCH: the build's PTX of FILE for ARCH
ptx() { echo "$B/kernels/$(basename "$1").o.keep/$(basename "$1" .cu).compute_${2#sm_}.ptx"; }
# holds FILE ARCH REGEX: the PTX of FILE for ARCH holds REGEX
holds() { grep -qE "$3" "$(ptx "$1" "$2")"; }
if holds kernels/layernorm.cu sm_80 'mma\.sync'; then echo "FAIL self-test: layernorm.cu said to hold mma.sync"; fail=$((fail + 1))
else echo "ok   self-test: the check fails on an instruction a file does not use (layernorm.cu, mma.sync)"; pass=$((pass + 1)); fi
for arch in sm_80 sm_90; do
  while read -r file regex; do
    if holds "$file" $arch "$regex"; then pass=$((pass + 1))
    else echo "FAIL $file for $arch: its PTX does not hold $regex"; fail=$((fail + 1)); fi
  done < <(table)
  for file in $(table | cut -d' ' -f1 | sort -u); do
    [ -f "$(ptx "$file" $arch)" ] || { echo "FAIL $file for $arch: no PTX in the build ($(ptx "$file" $arch)): rebuild"; fail=$((fail + 1)); continue; }
    # the report's lines for ARCH: from "Compiling entry function ... for 'ARCH'" to the next entry
    usage=$(awk -v a="'$arch'" '/Compiling entry function/ { on = index($0, a) > 0 } on' "$B/kernels/$(basename "$file").o.usage")
    spills=$(grep -oE '[1-9][0-9]* bytes spill (stores|loads)' <<< "$usage" | head -1)
    regs=$(grep -oE 'Used [0-9]+ registers' <<< "$usage" | sort -t' ' -k2 -n | tail -1)
    if [ -z "$usage" ]; then echo "FAIL $file for $arch: no ptxas report for it"; fail=$((fail + 1))
    elif [ -z "$spills" ]; then echo "ok   $file for $arch: every instruction of the table, no spills (most: $regs)"; pass=$((pass + 1))
    else echo "FAIL $file for $arch: $spills"; fail=$((fail + 1)); fi
    if [ -n "$SASS_TOOLS" ] && table | grep -q "^$file mma"; then
      hmma=$(PATH=$SASS_TOOLS:$PATH cuobjdump -sass -arch $arch "$B/kernels/$(basename "$file").o" | grep -oE 'HMMA[.0-9A-Z]*' | sort | uniq -c | xargs)
      if [ -n "$hmma" ]; then echo "ok   $file for $arch: its machine code runs on the tensor cores ($hmma)"; pass=$((pass + 1))
      else echo "FAIL $file for $arch: no HMMA in its machine code (cuobjdump -sass)"; fail=$((fail + 1)); fi
    fi
  done
done
[ -n "$SASS_TOOLS" ] || echo "skipped: the machine-code check (no cuobjdump and nvdisasm in build/venv: make deps installs them)"
echo "ptx_check: $pass passed, $fail failed"
[ $fail = 0 ]
