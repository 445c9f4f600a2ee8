#!/usr/bin/env bash
# step_bench.sh: our training step on the GPU against PyTorch's on the same GPU, for DiT-S/2 and
# DiT-B/2 at 1024 tokens (--input-size 64) and 4096 tokens (--input-size 128), batch 8, in float32
# and then with TF32. Ours: TRAIN --device cuda on one rank (mpirun -np 1), one progress line per
# step; s/step = batch x tokens / the median tok/s of the steps after the first two; peak memory
# from the `device memory: at most X MiB per rank` line (the arena's peak, parameters, gradients,
# Adam moments and pos_embed; EMA off), else, without it, the `done:` line's peak activation memory
# plus 4 x parameters x 4 bytes. PyTorch: tests/gpu/torch_step_cuda.py (tests/parity/dit_torch.py in
# eager mode, AdamW, MSE; median of timed steps after warm-up; torch.cuda.max_memory_allocated()).
# With a GPU, nvidia-smi's memory.used is also sampled during each run (its peak over the value
# before it: the whole process, CUDA context and allocator reserve included).
# Prints a markdown table (also OUTDIR/table.md, row by row as each config finishes).
# usage: tests/gpu/step_bench.sh TRAIN OUTDIR
# environment (defaults for the H200):
#   STEP_BENCH_CONFIGS  "MODEL:INPUT:BATCH:OUR_STEPS:TORCH_STEPS ..." (default
#                       "DiT-S/2:64:8:10:10 DiT-B/2:64:8:10:10 DiT-S/2:128:8:6:6 DiT-B/2:128:8:6:6")
#   STEP_BENCH_DEVICE   cuda (default) or cpu: the same measurements on the CPU, to check this script
#                       where no GPU is (no TF32 there: the tf32 columns repeat float32)
#   STEP_BENCH_BUDGET   seconds for everything (default: STEP_SECONDS, which device_check.sh's step
#                       sets, less 15, else 600); a run that would start with under 20 s left is
#                       skipped (-), and each run is stopped at what is left
#   STEP_BENCH_PY_LD_LIBRARY_PATH  LD_LIBRARY_PATH for PyTorch (device_check.sh passes the machine's
#                       own, without the carried libraries); PYTHON (default python3)
# Batch 8 at 4096 tokens fits both on an H200: ours keeps no T x T matrix (fused attention); PyTorch's
# eager attention keeps one softmax of B x H x T x T floats per layer (DiT-B/2: 12 x 6.4 GB = 77 GB).
# If our program refuses a batch (its memory check: "needs about ... GiB"), the row is run again at
# half the batch, ours and PyTorch's, and says so.
set -u
TRAIN=$(realpath "$1"); OUTDIR=$2
HERE=$(dirname "$(realpath "$0")")
mkdir -p "$OUTDIR"; WORK=$(mktemp -d "${TMPDIR:-/tmp}/step_bench.XXXXXX"); trap 'rm -rf "$WORK"' EXIT
DEVICE=${STEP_BENCH_DEVICE:-cuda}
CONFIGS=${STEP_BENCH_CONFIGS:-"DiT-S/2:64:8:10:10 DiT-B/2:64:8:10:10 DiT-S/2:128:8:6:6 DiT-B/2:128:8:6:6"}
BUDGET=${STEP_BENCH_BUDGET:-$(( ${STEP_SECONDS:-615} - 15 ))}
DEADLINE=$(( $(date +%s) + BUDGET ))
PY="env LD_LIBRARY_PATH=${STEP_BENCH_PY_LD_LIBRARY_PATH-${LD_LIBRARY_PATH:-}} ${PYTHON:-python3}"
MPIRUN="mpirun -np 1 --bind-to none $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )"
TF32=$([ "$DEVICE" = cuda ] && echo --tf32)
SMI=$([ "$DEVICE" = cuda ] && command -v nvidia-smi)

# seconds left for one run, or nothing when under 20
left() { local l=$((DEADLINE - $(date +%s))); [ $l -ge 20 ] && echo $l; }

# the preset's width, depth and heads (layers/dit.c)
dims() { # MODEL
  local size=${1#DiT-}; size=${size%/*}
  case $size in S) echo "384 12 6" ;; B) echo "768 12 12" ;; L) echo "1024 24 16" ;; XL) echo "1152 28 16" ;;
    mini) echo "64 4 4" ;; tiny) echo "32 2 2" ;; *) echo "unknown preset $1" >&2; return 1 ;; esac
}

# peak of nvidia-smi's memory.used while COMMAND runs, over its value before (MiB), to $WORK/smi
with_smi() { # COMMAND...
  rm -f "$WORK/smi"
  if [ -z "$SMI" ]; then "$@"; return; fi
  local base pid rc
  base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > "$WORK/smi.log" 2>/dev/null &
  pid=$!
  "$@"; rc=$?
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  sort -n "$WORK/smi.log" 2>/dev/null | tail -1 | awk -v b="${base:-x}" 'b != "x" && $1 ~ /^[0-9]+$/ { print $1 - b }' > "$WORK/smi"
  return $rc
}

# ours MODEL INPUT BATCH STEPS [FLAGS]: prints "s/step peakMiB" or "- -" (the log in $WORK/ours.log)
ours() {
  local model=$1 input=$2 batch=$3 steps=$4 t; shift 4
  t=$(left) || { echo "- -"; echo "# ours $model $input x$batch${*:+ $*}: skipped, out of time" >&2; return; }
  rm -rf "$WORK/run"
  with_smi timeout -k 5 "$t" $MPIRUN "$TRAIN" --model "$model" --input-size "$input" --batch "$batch" \
    --steps "$steps" --device "$DEVICE" "$@" --log-every 1 --samples-per-class 0 --ema 0 --save-every 0 \
    --out "$WORK/run" > "$WORK/ours.log" 2>&1
  local rc=$?
  grep -E "parameters|^done|^device memory|needs about|error" "$WORK/ours.log" | sed "s|^|# ours $model $input x$batch${*:+ $*}: |" >&2
  local tokens params sstep peak
  tokens=$(sed -nE 's/.* ([0-9]+) tokens per image.*/\1/p' "$WORK/ours.log" | head -1)
  params=$(sed -nE 's/^[^ ]+: ([0-9]+) parameters.*/\1/p' "$WORK/ours.log" | head -1)
  sstep=$(grep '^step' "$WORK/ours.log" | tail -n +3 | sed -E 's/.*\| ([0-9.]+) tok\/s.*/\1/' | sort -g |
    awk -v tok=$((batch * ${tokens:-0})) '{ a[NR] = $1 } END {
      if (NR == 0 || tok == 0) { print "-"; exit }
      m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
      printf "%.6g", tok / m }')
  peak=$(sed -nE 's/^device memory: at most ([0-9.]+) MiB.*/\1/p' "$WORK/ours.log")
  [ -z "$peak" ] && peak=$(sed -nE 's/^done:.*peak activation memory ([0-9.]+) MiB.*/\1/p' "$WORK/ours.log" |
    awk -v p="${params:-0}" '{ printf "%.1f", $1 + 4 * p * 4 / 1048576 }')
  if [ $rc != 0 ]; then
    sstep=-
    echo "# ours $model $input x$batch${*:+ $*}: exit $rc$(grep -q error "$WORK/ours.log" ||
      echo ": $(tail -3 "$WORK/ours.log" | tr '\n' ' ' | cut -c1-300)")" >&2
  fi
  echo "${sstep:--} ${peak:--} $(cat "$WORK/smi" 2>/dev/null)"
}

# torch MODEL INPUT BATCH STEPS: prints "fp32_s/step tf32_s/step peakMiB smiMiB" or dashes
torch_step() {
  local model=$1 input=$2 batch=$3 steps=$4 t d
  d=$(dims "$model") || { echo "- - - -"; return; }
  t=$(left) || { echo "- - - -"; echo "# torch $model $input x$batch: skipped, out of time" >&2; return; }
  set -- $d
  local warm=3; [ "$DEVICE" = cpu ] && warm=1
  with_smi timeout -k 5 "$t" $PY "$HERE/torch_step_cuda.py" "$1" "$2" "$3" "$input" "${model##*/}" "$batch" \
    --steps "$steps" --warmup $warm --device "$DEVICE" > "$WORK/torch.log" 2>&1
  local rc=$?
  grep -E "^torch|Error|error" "$WORK/torch.log" | sed "s|^|# torch $model $input x$batch: |" >&2
  [ $rc != 0 ] && echo "# torch $model $input x$batch: exit $rc: $(tail -2 "$WORK/torch.log" | tr '\n' ' ' | cut -c1-300)" >&2
  [ $rc = 124 ] || [ $rc = 137 ] && echo "# torch $model $input x$batch: stopped at the time left (${t}s)" >&2
  local f32 tf32 peak
  f32=$(sed -nE 's/^torch fp32 [a-z]+: ([0-9.]+) s\/step.*/\1/p' "$WORK/torch.log")
  tf32=$(sed -nE 's/^torch tf32 [a-z]+: ([0-9.]+) s\/step.*/\1/p' "$WORK/torch.log")
  peak=$(sed -nE 's/^torch fp32 .*peak ([0-9.]+) MiB.*/\1/p' "$WORK/torch.log")
  echo "${f32:--} ${tf32:--} ${peak:--} $(cat "$WORK/smi" 2>/dev/null)"
}

sig() { awk -v a="$1" 'BEGIN { if (a + 0 > 0) printf "%.4g", a; else print a }'; } # 4 significant digits
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "x%.2f", a / b; else print "-" }'; }

{
  echo "step benchmark on $DEVICE: $([ -n "$SMI" ] && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 || echo "$(nproc) cores")"
  echo "(s/step: median after warm-up; ours/torch below 1 is ours faster; peak: ours the arena's peak +"
  echo " parameters, gradients, Adam moments, pos_embed; torch max_memory_allocated; nvidia-smi: the"
  echo " process's whole footprint, CUDA context and allocator reserve included)"
  echo
  printf "| %-8s | %6s | %5s | %9s | %9s | %10s | %9s | %9s | %10s | %9s | %9s | %9s | %9s |\n" config tokens batch \
    "ours f32" "torch f32" "ours/torch" "ours tf32" "torch tf32" "ours/torch" "ours MiB" "torch MiB" "smi ours" "smi torch"
  printf "| %-8s | %6s | %5s | %9s | %9s | %10s | %9s | %9s | %10s | %9s | %9s | %9s | %9s |\n" --- --- --- --- --- --- --- --- --- --- --- --- ---
} > "$OUTDIR/table.md"
cat "$OUTDIR/table.md"
notes=""
for cfg in $CONFIGS; do
  IFS=: read -r model input batch osteps tsteps <<< "$cfg"
  patch=${model##*/}; tokens=$(( (input / patch) * (input / patch) ))
  read -r o32 opeak osmi <<< "$(ours "$model" "$input" "$batch" "$osteps")"
  while [ "$o32" = - ] && [ "$batch" -gt 1 ] && grep -q "needs about" "$WORK/ours.log"; do
    notes="$notes $model at $tokens tokens: batch $batch refused by our memory check ($(grep -oE 'needs about [0-9.]+ GiB per rank' "$WORK/ours.log" | head -1)), run at $((batch / 2));"
    batch=$((batch / 2))
    read -r o32 opeak osmi <<< "$(ours "$model" "$input" "$batch" "$osteps")"
  done
  read -r otf _ _ <<< "$(ours "$model" "$input" "$batch" "$osteps" $TF32)"
  read -r t32 ttf tpeak tsmi <<< "$(torch_step "$model" "$input" "$batch" "$tsteps")"
  printf "| %-8s | %6s | %5s | %9s | %9s | %10s | %9s | %9s | %10s | %9s | %9s | %9s | %9s |\n" "${model#DiT-}" $tokens $batch \
    "$(sig "$o32")" "$(sig "$t32")" "$(ratio "$o32" "$t32")" "$(sig "$otf")" "$(sig "$ttf")" "$(ratio "$otf" "$ttf")" "$opeak" "$tpeak" "${osmi:--}" "${tsmi:--}" |
    tee -a "$OUTDIR/table.md"
done
[ -n "$notes" ] && echo "note:$notes" | tee -a "$OUTDIR/table.md"
[ "$DEVICE" = cpu ] && echo "(on the CPU: no --tf32 for ours; torch's tf32 line sets the flags, which the CPU ignores)" | tee -a "$OUTDIR/table.md"
exit 0
