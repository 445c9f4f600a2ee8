#!/usr/bin/env bash
# run_all.sh: every suite of `make test`. A failing suite does not stop the others; the last line
# sums them up ("tests: N passed, N failed, N skipped"); above it, the seconds each suite took, and
# what failed or was skipped and why. Each suite runs under a time limit, a few times its usual
# length on 2 cores: a suite still running then is stopped and counted as failed, by name. A suite
# that could not run part of itself says so in a line "skipped: WHAT (WHY)" (the unit tests
# without a GPU), and each such line counts as skipped too.
# The suites run in two lanes at once: the C suites under mpirun in one, the emulated device, the
# Python suites, fuzzing and three of the train program's suites in the other. Alone, a suite keeps a core busy only about half of its
# time (process starts, waits for the slowest rank, reading and writing files), so two lanes on 2
# cores finish in little more than the longer lane's time. Each suite's output is shown whole when
# it ends, never interleaved with the other lane's.
# Exit status 1 when any suite failed.
# usage (from the repository root): run_all.sh BUILD "MPIRUN" PYTHON
set -u
BUILD=$1; MPIRUN=$2; PY=$3
# OpenMP threads that wait for work sleep instead of spinning: a spinning thread holds a core that
# another rank, or another program on a shared machine, needs (a one-rank run of the CLI tests'
# model took 184 s with spinning threads, 9 s without, on 2 cores at load 26)
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# every rank of every suite runs on this machine: Open MPI's shared memory (pml ob1) carries them, as
# it does verify's and bugs' own launches (study/launch.c), without UCX's probe of network devices
# at each launch (0.2 s of each mpirun -np 4 on 2 cores)
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
# every collective of every suite first compares its fingerprint across its group
# (--check-collectives): a mismatch stops the suite at once, naming each rank's call, not by a
# suite's time limit
export DIT_CHECK_COLLECTIVES=1
RES=$(mktemp -d); trap 'rm -rf "$RES"' EXIT
LANE=a count=0 START=$SECONDS

# next_id: id, the next suite's name in $RES: its lane and place
next_id() { count=$((count + 1)); id=$LANE$(printf %02d $count); }
# suite LIMIT NAME COMMAND...: runs COMMAND under LIMIT seconds, keeps its output and verdict in
# $RES (one file each, named by lane and place), and shows the output whole when it ends
suite() {
  local limit=$1 name=$2 start=$SECONDS rc id; shift 2
  next_id
  # a shell function of this script runs in a bash of its own (exported below), as timeout needs
  if declare -F "$1" >/dev/null; then set -- bash -c '"$@"' bash "$@"; fi
  timeout --kill-after=10 "$limit" "$@" > "$RES/$id.log" 2>&1 < /dev/null; rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then echo "TIMEOUT: $name: still running after $limit s, stopped" >> "$RES/$id.log"; fi
  shown "$id" "$name" "$rc" $((SECONDS - start)) "$limit"
}
skip() { # name, why
  local id; next_id
  echo "$1: skipped ($2)" > "$RES/$id.log"; shown "$id" "$1" skip 0 "$2"
}
# shown ID NAME RC SECONDS NOTE: the verdict into $RES/ID.verdict, the output to the screen
shown() {
  printf '%s\n%s\n%s\n%s\n' "$2" "$3" "$4" "$5" > "$RES/$1.verdict"
  { flock 9; echo "== $2 == ($4 s, at $((SECONDS - START)) s)"; cat "$RES/$1.log"; } 9> "$RES/screen.lock"
}
# planted VARIANT CASE SUBSTITUTION EXPECTED: the emulated device suite's test CASE (its case of
# tests/test_cuda.c) in VARIANT (f32 or f64) with SUBSTITUTION planted in the kernels
# (tests/gpu/emulate.sh) must build, run, and fail with EXPECTED (an extended regular expression)
# in its output; a planted build that does not compile, or a failure for another reason, fails
planted() {
  local log=$BUILD/emulate-planted/log
  mkdir -p "$BUILD/emulate-planted"
  if CK_RUN_CASE=$2 tests/gpu/emulate.sh "$BUILD" "$3" "$1" > "$log" 2>&1; then echo "not caught: $2 passed with the bug planted (see $log)"; return 1; fi
  if ! grep -q '^Running suite(s): cuda' "$log"; then echo "the planted build did not reach the suite:"; tail -5 "$log"; return 1; fi
  if ! grep -qE "$4" "$log"; then echo "failed, but not for the expected reason /$4/:"; grep -E ':[FE]:|^emulated' "$log" | head -5; return 1; fi
  echo "$(grep '^planted in:' "$log"); caught: $(grep -E "$4" "$log" | head -1)"
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

# rank_failure: a check planted to fail on rank 1 alone (test_parallel's "planted" case) ends the
# whole 2-rank job within seconds, with the check's message and its rank; before, the other rank
# waited in the next collective until an outer timeout
rank_failure() {
  local start=$SECONDS out rc
  out=$(timeout 60 $MPIRUN -np 2 -x CK_RUN_CASE=planted "$BUILD/f32/test_parallel" 2>&1); rc=$?
  local took=$((SECONDS - start)) msg
  msg=$(grep -o 'FAILED on rank 1 of 2 at .*a failure planted on rank 1 alone' <<< "$out")
  if [ $rc = 0 ]; then echo "not caught: the job passed with the failure planted"; return 1; fi
  if [ $rc = 124 ] || [ $rc = 137 ]; then echo "the job hung: still running after 60 s"; return 1; fi
  if [ -z "$msg" ]; then echo "exit $rc, without the check's message and rank:"; tail -5 <<< "$out"; return 1; fi
  if [ $took -gt 20 ]; then echo "the job took $took s to end"; return 1; fi
  echo "the job ended in $took s (exit $rc): $msg"
}

# collectives_named: three mismatches planted in test_parallel (its planted-* cases, 4 ranks) end
# the job within seconds under --check-collectives, each rank's call named: a count that differs
# (at once), a collective skipped on one rank of one data group (the ranks then wait in different
# groups' collectives, as the --zero 3 sampling hang did), a rank stopped outside any collective
# (the watchdog, bound 3 s). Without the check each of them hangs.
collectives_named() {
  local kind want took rc out start
  for kind in count skip stall; do
    case $kind in
      count) want='rank 1 is in all_reduce \(tests/mpi/test_parallel.c:[0-9]+, 5 values of real\) over the world' ;;
      skip) want='rank 1 is in all_reduce \(tests/mpi/test_parallel.c:[0-9]+, 4 values of real\) over the group of ranks 1 3' ;;
      stall) want='rank 1 has not said that it waits' ;;
    esac
    start=$SECONDS
    out=$(DIT_CHECK_COLLECTIVES=1 DIT_COLLECTIVE_TIMEOUT=3 timeout 60 $MPIRUN -np 4 --oversubscribe \
          -x CK_RUN_CASE=planted-$kind "$BUILD/f32/test_parallel" 2>&1); rc=$?
    took=$((SECONDS - start))
    if [ $rc = 0 ]; then echo "$kind: not caught: the job passed"; return 1; fi
    if [ $rc = 124 ] || [ $rc = 137 ]; then echo "$kind: the job hung: still running after 60 s"; return 1; fi
    if ! grep -qE "$want" <<< "$out"; then echo "$kind: exit $rc, without /$want/:"; tail -6 <<< "$out"; return 1; fi
    if [ $took -gt 20 ]; then echo "$kind: the job took $took s to end"; return 1; fi
    echo "$kind: ended in $took s (exit $rc):"; grep -E '^error \(--check-collectives\)|^  rank ' <<< "$out"
  done
}

export BUILD MPIRUN; export -f planted planted_exact rank_failure collectives_named

# lane b: the emulated device, the Python suites (parity's run folder, which the safetensors
# suite reads, first), fuzzing, then the movement slips, the kill test and --exact in float64
lane_b() {
LANE=b count=0
# Open MPI's session files of this lane's own: a job that starts while another ends in the same
# folder can fail in MPI_Init ("orte_session_dir failed"; the parity suite also gives each of the
# probes it runs at once a folder of its own)
export OMPI_MCA_orte_tmpdir_base=$RES/mpi-b; mkdir -p "$OMPI_MCA_orte_tmpdir_base"
suite 180 "docs that stay true: every train/train example of README.md and docs/ with --dry-run, every flag they name in --help (a misspelt one caught)" \
  "$PY" tests/docs_check.py train/train --self-test
suite 60 "the kernels built for sm_80 and sm_90 use the instructions they are written for (the build's PTX), no spills" tests/gpu/ptx_check.sh "$BUILD/f32"
suite 900 "the CUDA kernels on an emulated device, device vs CPU, under three schedules" tests/gpu/emulate.sh "$BUILD"
suite 600 "a planted warp sum one shuffle short: caught by the LayerNorm test" \
  planted f32 cuda_layernorm 's/off > 0; off >>= 1/off > 1; off >>= 1/' ':F:cuda_layernorm:cuda_layernorm:.*layernorm_forward (out|mean|rstd)'
suite 600 "a planted missing __syncthreads in the CUDA-core attention forward (the float64 build's): its schedules disagree" \
  planted f64 cuda_attention 's/__syncthreads\(\);(\n    \}\n    if \(!active\) return;\n    real inv)/$1/' \
  '^emulated kernel forward_kernel .*: the (reverse|shuffled) schedule leaves device memory different'
suite 600 "a planted missing __syncthreads in the tensor-core attention's tile pipeline (the next tile lands in a buffer other warps read): caught" \
  planted f32 cuda_attention 's/__syncthreads\(\); \/\/ every warp is done with this buffer[^\n]*\n//' \
  '^emulated kernel [a-z]+_mma_kernel .*: the (reverse|shuffled) schedule leaves device memory different|:F:cuda_attention:cuda_attention:.*attention (out|dq|dk|dv)'
suite 600 "a planted slip in the tensor-core attention's column order (a tile's two rows of a fragment swapped): caught by the attention test" \
  planted f32 cuda_attention 's/\{r\[0\], r\[S\]\}/{r[S], r[0]}/' ':F:cuda_attention:cuda_attention:.*attention (out|dq|dk|dv)'
suite 600 "a planted slip in the bf16 attention's B fragment (two halves of a register swapped): caught by the bf16 attention test" \
  planted f32 cuda_attention_bf16 's/bf16x2\(r\[8\], r\[9\]\)/bf16x2(r[9], r[8])/' ':F:cuda_attention_bf16:cuda_attention_bf16:.*attention (out|dq|dk|dv)'
suite 600 "a planted mma fragment-layout slip (A's registers 1 and 2 swapped): caught by the tensor-core test" \
  planted f32 cuda_tensor_cores 's/a\[\(g \+ 8 \* \(i & 1\)\) \* 8 \+ t \+ 4 \* \(i >> 1\)\]/a[(g + 8 * (i >> 1)) * 8 + t + 4 * (i & 1)]/' \
  ':F:cuda_tensor_cores:cuda_tensor_cores:.*mma tf32'
suite 900 "the train program on the emulated device (--device cuda) against the CPU, f32" \
  tests/gpu/device_cli.sh "$BUILD/emulate/f32/train"
suite 600 "the same probes in float64 (those that agree; the bugs: float32's)" \
  tests/gpu/device_cli.sh "$BUILD/emulate/f64/train" "" --probes-only
suite 600 "a planted LayerNorm rounding rows from the 16th on another way: within tolerance, caught by --exact on the device" \
  planted_exact 's/real r = \(real\)\(1 \/ sqrt\(var \+ eps\)\);/real r = (real)(1 \/ sqrt(row < 16 ? var + eps : (real)(var + eps)));/'
if "$PY" -c 'import torch, numpy' >/dev/null 2>&1; then
  suite 900 "parity with an independent PyTorch DiT" "$PY" tests/parity/parity.py train/train \
    "$BUILD/f64/bin/train" "$BUILD/parity"
else
  skip "parity with an independent PyTorch DiT" "python3-torch or python3-numpy could not be installed; 'make deps' installs them"
fi
# check your own: a PyTorch DiT split over 2 and 3 processes (gloo) records its step with
# python/ditsp_tape.py; locate finds no divergence from our float64 probe, and places each of the
# three bugs planted in it (op, direction, tokens, ranks)
if "$PY" -c 'import sys, torch, numpy, torch.distributed as d; sys.exit(not (d.is_available() and d.is_gloo_available()))' >/dev/null 2>&1; then
  suite 180 "check your own implementation: a PyTorch sequence-parallel DiT at 2 and 3 processes located against our probe, three planted bugs placed" \
    "$PY" tests/parity/check_your_own.py train/train "$BUILD/f64/bin/train" "$BUILD/check-your-own"
else
  skip "check your own implementation: a PyTorch sequence-parallel DiT located against our probe" "torch.distributed with the gloo backend is not available to $PY; 'make deps' installs Debian's python3-torch, which has it"
fi
# the field's code under the locator: yunchang's and diffusers' sequence-parallel attention in the
# same DiT at 2 and 4 processes, each verdict the expected one (diffusers' ring dK/dV from 3 ranks on)
if "$PY" -c 'import sys, torch; sys.exit(int(torch.__version__.split(".")[0]) < 2)' >/dev/null 2>&1; then
  suite 300 "the field's libraries: yunchang's and diffusers' sequence-parallel attention located against our probe at 2 and 4 processes" \
    "$PY" tests/parity/field_libraries.py train/train "$BUILD/f64/bin/train" "$BUILD/field-libraries"
else
  skip "the field's libraries: yunchang's and diffusers' sequence-parallel attention located against our probe" "they need PyTorch 2, which $PY lacks; 'make deps' installs it, yunchang and diffusers from PyPI into build/venv"
fi
# the field's models under their own context parallelism, the quick rows (make field runs them all):
# Flux under diffusers' Ulysses and ring at 2 and 3 processes against its one-process step, op by
# op; the ring's dK/dV departs at 3, and agrees with the accumulator sent the other way
if "$PY" -c 'import sys, torch; sys.exit(int(torch.__version__.split(".")[0]) < 2)' >/dev/null 2>&1; then
  suite 180 "the field's models: Flux under diffusers' own Ulysses and ring at 2 and 3 processes located against one process, the ring's dK/dV at 3 departing and its fix agreeing" \
    "$PY" tests/parity/field_models.py "$BUILD/f64/bin/train" "$BUILD/field-models" --quick
else
  skip "the field's models: Flux under diffusers' own Ulysses and ring located against one process" "they need PyTorch 2, which $PY lacks; 'make deps' installs it and diffusers from PyPI into build/venv"
fi
if "$PY" -c 'import safetensors' >/dev/null 2>&1 && [ -f "$BUILD/parity/run/model.safetensors" ]; then
  suite 300 "our files read by the official safetensors package" "$PY" tests/parity/load_with_safetensors.py \
    "$BUILD/parity/run/model.safetensors" "$BUILD"/parity/*.safetensors
  suite 120 "a checkpoint shared in bf16 and in float16, written by PyTorch, loads and probes as its values widened to float32 (bit for bit)" \
    "$PY" tests/parity/bf16_checkpoint.py train/train "$BUILD/parity/run/model.safetensors" "$BUILD/bf16-checkpoint"
else
  skip "our files read by the official safetensors package" "the safetensors Python package is not packaged for Debian and is not in $PY; 'make deps' installs it from PyPI into build/venv where PyPI is reachable"
fi
fuzz_why=$(${MAKE:-make} --no-print-directory -s BUILD="$BUILD" fuzz-why-not)
if [ -z "$fuzz_why" ]; then
  suite 600 "fuzzing, 2 s per target" env FUZZ_SEED=1 ${MAKE:-make} --no-print-directory -s BUILD="$BUILD" FUZZ_SECONDS=2 fuzz-run
else
  skip "fuzzing, 2 s per target" "$fuzz_why"
fi
# three of the train program's suites, in this lane to even out the two lanes' times; the kill
# test: a killed rank, a killed mpirun and SIGTERM on 2 ranks, a rank killed on 1 (make soak: each signal on both, 4 moments
# each)
suite 300 "two slips in the movement code (an add one value short), planted: verify's tape check names the op; without the check, not caught" \
  tests/mutations/slips_test.sh "$BUILD"
suite 300 "the planner recommends only what train runs: a generated grid of models, --zero, further settings and 1-4 ranks, plan and --sp-attention auto refusing alike, every mesh plan ranks passing --dry-run" \
  "$PY" tests/plan_agrees.py train/train
suite 300 "a new layout is one file and one row: the test build's all-queries layout agrees with one rank at 2 and 3 ranks, a bug on it caught, the planner ranks it" \
  tests/layout_test.sh "$BUILD"
suite 600 "kill at any moment, then resume (4 kills)" tests/kill_test.sh train/train 1 "1:KILL-rank 2:KILL-rank 2:KILL-mpirun 2:TERM"
suite 600 "--exact: one case of each layout and mesh in float64" tests/exact_test.sh "$BUILD/f64/bin/train" quick
}
lane_b &

# lane a: the C suites
suite 60 "layering: each folder includes only from its floor or below, no include circles, one header per .c in parallel/, no branch on the layout kind, no CUDA kernel of over 8 arguments (a planted one of each caught)" \
  "$PY" tests/layering.py --self-test
suite 60 "a check failing on rank 1 alone ends the 2-rank job at once, naming the check" rank_failure
suite 120 "--check-collectives names three planted mismatches of collectives within seconds (a count, a collective skipped on one rank of a data group, a rank stopped elsewhere)" collectives_named
suite 600 "unit tests, float32" "$BUILD/f32/test_all"
suite 600 "unit tests, float64" "$BUILD/f64/test_all"
for v in f32 f64; do
  # one process: the sequence-parallel code with nothing to exchange against the plain model,
  # micro-batches, the memory estimate; a baseline, the parallel runs compare ranks (float32's:
  # float64's 3 ranks hold the same tests to tighter tolerances). float32 runs 2 ranks and the
  # 4-rank meshes, float64 the uneven split of 3 ranks, to keep the suite's time (one rank has no
  # ring step to move: its run runs the parallel case alone, not the progress one)
  [ $v = f32 ] && suite 600 "one rank through the sequence-parallel code (the single-rank baseline), $v" \
    $MPIRUN -np 1 -x CK_RUN_CASE=parallel "$BUILD/$v/test_parallel"
  for np in $([ $v = f32 ] && echo 2 4 || echo 3); do
    suite 900 "sequence parallel vs one rank, $v, $np ranks" $MPIRUN -np $np "$BUILD/$v/test_parallel"
  done
done
suite 300 "a ring step moves during the attention over TCP (--mca btl tcp,self), 2 ranks" \
  $MPIRUN -np 2 --mca pml ob1 --mca btl tcp,self -x CK_RUN_CASE=progress "$BUILD/f32/test_parallel"
suite 1200 "the train program under mpirun" tests/cli_tests.sh train/train
suite 300 "no hang: a generated matrix of every command that runs a model x meshes x --zero 0-3 x models x --exact, every pair of values in a cell, each run ending and writing its files" \
  "$PY" tests/collectives_matrix.py train/train
suite 120 "a run folder has one writer: two jobs 0.05 s apart, a live holder refuses every command, a killed one blocks nothing" \
  tests/lock_test.sh train/train
suite 900 "--exact: every layout and mesh the same bits as one rank, f32" tests/exact_test.sh train/train
wait # for lane b
passed=0 failed=0 skipped=0 notes="" times=""
for verdict in "$RES"/*.verdict; do
  { read -r name; read -r rc; read -r took; read -r note; } < "$verdict"
  case $rc in
    skip) skipped=$((skipped + 1)); notes+="skipped: $name ($note)"$'\n'; continue ;;
    0) passed=$((passed + 1)) ;;
    124|137) failed=$((failed + 1)); notes+="failed: $name (timed out: still running after $note s)"$'\n' ;;
    *) failed=$((failed + 1)); notes+="failed: $name"$'\n' ;;
  esac
  times+="$(printf '%5d s  %s' "$took" "$name")"$'\n'
  while IFS= read -r part; do
    skipped=$((skipped + 1)); notes+="skipped: $name: ${part#skipped: }"$'\n'
  done < <(grep '^skipped: ' "${verdict%.verdict}.log")
done
echo
echo "time per suite (lane a: the C suites; lane b, at the same time: the device, Python, fuzzing and three more):"
printf "%s" "$times"
echo "the whole run: $((SECONDS - START)) s"
printf "%s" "$notes"
echo "tests: $passed passed, $failed failed, $skipped skipped"
[ $failed = 0 ]
