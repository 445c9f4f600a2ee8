#!/usr/bin/env bash
# run_all.sh: every suite of `make test`, in order. A failing suite does not stop the others; the
# last line sums them up ("tests: N passed, N failed, N skipped"); above it, the seconds each suite
# took, and what failed or was skipped and why. A suite that could not run part of itself says so
# in a line "skipped: WHAT (WHY)" (the unit tests without a GPU), and each such line counts as
# skipped too.
# Exit status 1 when any suite failed.
# usage (from the repository root): run_all.sh BUILD "MPIRUN" PYTHON
set -u
BUILD=$1; MPIRUN=$2; PY=$3
# OpenMP threads that wait for work sleep instead of spinning: a spinning thread holds a core that
# another rank, or another program on a shared machine, needs (a one-rank run of the CLI tests'
# model took 184 s with spinning threads, 9 s without, on 2 cores at load 26)
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
passed=0 failed=0 skipped=0 notes="" times=""
LOG=$(mktemp); trap 'rm -f "$LOG"' EXIT

suite() { # name, command...
  local name=$1 part start=$SECONDS; shift
  echo "== $name =="
  "$@" 2>&1 | tee "$LOG"
  if [ "${PIPESTATUS[0]}" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); notes+="failed: $name"$'\n'; fi
  times+="$(printf '%5d s  %s' $((SECONDS - start)) "$name")"$'\n'
  while IFS= read -r part; do
    skipped=$((skipped + 1)); notes+="skipped: $name: ${part#skipped: }"$'\n'
  done < <(grep '^skipped: ' "$LOG")
}
skip() { # name, why
  echo "== $1 =="; echo "$1: skipped ($2)"
  skipped=$((skipped + 1)); notes+="skipped: $1 ($2)"$'\n'
}
# planted SUBSTITUTION EXPECTED: the emulated device suite with SUBSTITUTION planted in the kernels
# (tests/gpu/emulate.sh) must build, run, and fail with EXPECTED (an extended regular expression)
# in its output; a planted build that does not compile, or a failure for another reason, fails
planted() {
  local log=$BUILD/emulate-planted/log
  mkdir -p "$BUILD/emulate-planted"
  if tests/gpu/emulate.sh "$BUILD" "$1" > "$log" 2>&1; then echo "not caught: the suite passed with the bug planted (see $log)"; return 1; fi
  if ! grep -q '^Running suite(s): cuda' "$log"; then echo "the planted build did not reach the suite:"; tail -5 "$log"; return 1; fi
  if ! grep -qE "$2" "$log"; then echo "failed, but not for the expected reason /$2/:"; grep -E ':[FE]:|^emulated' "$log" | head -5; return 1; fi
  echo "$(grep '^planted in:' "$log"); caught: $(grep -E "$2" "$log" | head -1)"
}

# planted_exact SUBSTITUTION: a kernel bug within every tolerance (the float32 kernel suite passes
# with it planted) that --exact on the emulated device (device_cli.sh --exact-only) must catch
planted_exact() {
  local log=$BUILD/emulate-planted/log
  mkdir -p "$BUILD/emulate-planted"
  if ! tests/gpu/emulate.sh "$BUILD" "$1" f32 > "$log" 2>&1; then echo "the planted build failed, or its kernel suite failed:"; tail -5 "$log"; return 1; fi
  if tests/gpu/device_cli.sh "$BUILD/emulate-planted/f32/train" "" --exact-only > "$log.exact" 2>&1; then
    echo "not caught: --exact on the device passed with the bug planted (see $log.exact)"; return 1
  fi
  echo "$(grep -m 1 '^planted in:' "$log"); caught: $(grep -m 1 '^FAILED' "$log.exact")"
}

suite "layering: each folder includes only from its floor or below, no include circles (a planted upward include and circle caught)" \
  "$PY" tests/layering.py --self-test
suite "unit tests, float32" "$BUILD/f32/test_all"
suite "unit tests, float64" "$BUILD/f64/test_all"
for v in f32 f64; do
  # one process: the sequence-parallel code with nothing to exchange against the plain model,
  # micro-batches, the memory estimate; a baseline, the parallel runs compare ranks. Both run 2
  # ranks; the uneven split of 3 ranks is float64's (the same tests, tighter tolerances), the
  # 4-rank meshes float32's, to keep the suite's time (one rank has no ring step to move: its run
  # runs the parallel case alone, not the progress one)
  suite "one rank through the sequence-parallel code (the single-rank baseline), $v" \
    $MPIRUN -np 1 -x CK_RUN_CASE=parallel "$BUILD/$v/test_parallel"
  for np in 2 $([ $v = f32 ] && echo 4 || echo 3); do
    suite "sequence parallel vs one rank, $v, $np ranks" $MPIRUN -np $np "$BUILD/$v/test_parallel"
  done
done
suite "a ring step moves during the attention over TCP (--mca btl tcp,self), 2 ranks" \
  $MPIRUN -np 2 --mca pml ob1 --mca btl tcp,self -x CK_RUN_CASE=progress "$BUILD/f32/test_parallel"
suite "the CUDA kernels on an emulated device, device vs CPU, under three schedules" tests/gpu/emulate.sh "$BUILD"
suite "a planted warp sum one shuffle short: caught by the LayerNorm test" \
  planted 's/off > 0; off >>= 1/off > 1; off >>= 1/' ':F:cuda:cuda_layernorm:.*layernorm_forward (out|mean|rstd)'
suite "a planted missing __syncthreads in the attention forward: its schedules disagree" \
  planted 's/__syncthreads\(\);(\n    \}\n    if \(!active\) return;\n    real inv)/$1/' \
  '^emulated kernel forward_kernel .*: the (reverse|shuffled) schedule leaves device memory different'
suite "the train program on the emulated device (--device cuda) against the CPU, f32" \
  tests/gpu/device_cli.sh "$BUILD/emulate/f32/train"
suite "the same probes in float64 (those that agree; the bugs: float32's)" \
  tests/gpu/device_cli.sh "$BUILD/emulate/f64/train" "" --probes-only
suite "a planted LayerNorm rounding rows from the 16th on another way: within tolerance, caught by --exact on the device" \
  planted_exact 's/real r = \(real\)\(1 \/ sqrt\(var \+ eps\)\);/real r = (real)(1 \/ sqrt(row < 16 ? var + eps : (real)(var + eps)));/'
suite "the train program under mpirun" tests/cli_tests.sh train/train
suite "two slips in the movement code (an add one value short), planted: verify's tape check names the op; without the check, not caught" \
  tests/mutations/slips_test.sh "$BUILD"
# the 4 signals on 2 ranks and a rank killed on 1 (make soak: each signal on both, 4 moments each)
suite "kill at any moment, then resume (5 kills)" tests/kill_test.sh train/train 1 "1:KILL-rank 2:KILL-rank 2:KILL-mpirun 2:INT 2:TERM"
suite "--exact: every layout and mesh the same bits as one rank, f32" tests/exact_test.sh train/train
suite "--exact: one case of each layout and mesh in float64" tests/exact_test.sh "$BUILD/f64/bin/train" quick
if "$PY" -c 'import torch, numpy' >/dev/null 2>&1; then
  suite "parity with an independent PyTorch DiT" "$PY" tests/parity/parity.py train/train \
    "$BUILD/f64/bin/train" "$BUILD/parity"
else
  skip "parity with an independent PyTorch DiT" "python3-torch or python3-numpy could not be installed; 'make deps' installs them"
fi
if "$PY" -c 'import safetensors' >/dev/null 2>&1 && [ -f "$BUILD/parity/run/model.safetensors" ]; then
  suite "our files read by the official safetensors package" "$PY" tests/parity/load_with_safetensors.py \
    "$BUILD/parity/run/model.safetensors" "$BUILD"/parity/*.safetensors
else
  skip "our files read by the official safetensors package" "the safetensors Python package is not packaged for Debian; 'pip install safetensors' adds it where PyPI is reachable"
fi
fuzz_why=$(${MAKE:-make} --no-print-directory -s BUILD="$BUILD" fuzz-why-not)
if [ -z "$fuzz_why" ]; then
  suite "fuzzing, 5 s per target" env FUZZ_SEED=1 ${MAKE:-make} --no-print-directory -s BUILD="$BUILD" FUZZ_SECONDS=5 fuzz-run
else
  skip "fuzzing, 5 s per target" "$fuzz_why"
fi
echo
echo "time per suite:"; printf "%s" "$times"
printf "%s" "$notes"
echo "tests: $passed passed, $failed failed, $skipped skipped"
[ $failed = 0 ]
