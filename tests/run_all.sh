#!/usr/bin/env bash
# run_all.sh: every suite of `make test`, in order. A failing suite does not stop the others; the
# last line sums them up ("tests: N passed, N failed, N skipped"), with what failed or was skipped
# and why just above it. Exit status 1 when any suite failed.
# usage (from the repository root): run_all.sh BUILD "MPIRUN" PYTHON
set -u
BUILD=$1; MPIRUN=$2; PY=$3
passed=0 failed=0 skipped=0 notes=""

suite() { # name, command...
  local name=$1; shift
  echo "== $name =="
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); notes+="failed: $name"$'\n'; fi
}
skip() { # name, why
  echo "== $1 =="; echo "$1: skipped ($2)"
  skipped=$((skipped + 1)); notes+="skipped: $1 ($2)"$'\n'
}

suite "unit tests, float32" "$BUILD/f32/test_all"
suite "unit tests, float64" "$BUILD/f64/test_all"
for v in f32 f64; do
  for np in 1 2 3 4; do
    suite "sequence parallel vs one rank, $v, $np ranks" $MPIRUN -np $np "$BUILD/$v/test_parallel"
  done
done
suite "the CUDA kernels on an emulated device, device vs CPU" tests/gpu/emulate.sh "$BUILD"
suite "the same with a planted bug (a warp sum one shuffle short): caught" \
  bash -c '! tests/gpu/emulate.sh "$0" "s/off > 0; off >>= 1/off > 1; off >>= 1/" > /dev/null 2>&1' "$BUILD"
suite "the train program on the emulated device (--device cuda) against the CPU, f32" \
  tests/gpu/device_cli.sh "$BUILD/emulate/f32/train"
suite "the same probes in float64" \
  tests/gpu/device_cli.sh "$BUILD/emulate/f64/train" "" --probes-only
suite "the train program under mpirun" tests/cli_tests.sh train/train
suite "kill at any moment, then resume (8 kills)" tests/kill_test.sh train/train 1
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
  suite "fuzzing, 10 s per target" env FUZZ_SEED=1 ${MAKE:-make} --no-print-directory -s BUILD="$BUILD" FUZZ_SECONDS=10 fuzz-run
else
  skip "fuzzing, 10 s per target" "$fuzz_why"
fi
echo
printf "%s" "$notes"
echo "tests: $passed passed, $failed failed, $skipped skipped"
[ $failed = 0 ]
