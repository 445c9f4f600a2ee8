#!/usr/bin/env bash
# bench_step.sh: one training step of the project against the independent PyTorch DiT
# (tests/parity/dit_torch.py) on the same configs, measured back to back in one run so the ratios
# hold on a noisy machine; GFLOP/s and the fraction of this machine's sgemm throughput (2 threads,
# measured here too); 1 vs 2 ranks on config L; and the peak activation memory per rank (the
# arena's peak counter) of DiT-mini/2 at 4096 and 16384 tokens; config L with captions (--cond text).
# usage: bench_step.sh TRAIN BENCH_GEMM [PYTHON]
set -eu
TRAIN=$(realpath "$1"); GEMM=$(realpath "$2"); PY=${3:-/usr/bin/python3}
HERE=$(dirname "$(realpath "$0")")
WORK=$(mktemp -d /tmp/dit-bench.XXXXXX); trap 'rm -rf "$WORK"' EXIT
MPIRUN="mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )"
STEPS=${BENCH_STEPS:-8}

# config: name hidden depth heads input patch batch
CONFIGS=("S 384 6 6 32 2 8" "L 384 4 6 64 2 2")

# model FLOPs of one step (forward + backward = 3 x forward) of the linear layers and attention
flops() { # hidden depth input patch batch
  awk -v D=$1 -v L=$2 -v S=$3 -v P=$4 -v B=$5 'BEGIN {
    T = (S / P) ^ 2; M = 4 * D
    printf "%.6g", 3 * L * (B * T * 2 * (4 * D * D + 2 * D * M) + B * 4 * T * T * D) }'
}

# median seconds per step from the progress lines, leaving out the first two (page faults)
step_time() { # ranks threads tokens_per_step flags...
  local np=$1 th=$2 tok=$3; shift 3
  rm -rf "$WORK/run"
  $MPIRUN -np "$np" --bind-to "$([ "$th" = 1 ] && echo core || echo none)" "$TRAIN" "$@" \
    --steps "$STEPS" --threads "$th" --log-every 1 \
    --samples-per-class 0 --out "$WORK/run" > "$WORK/log"
  grep '^step' "$WORK/log" | tail -n +3 | sed -E 's/.*\| ([0-9]+) tok\/s.*/\1/' | sort -n |
    awk -v tok="$tok" '{ a[NR] = $1 } END { printf "%.4f", tok / a[int((NR + 1) / 2)] }'
}

gemm_out=$("$GEMM" 2)
sgemm=$(echo "$gemm_out" | sed -nE 's/^gemm.*: ([0-9.]+) GFLOP.*/\1/p')
gemm_line=$(echo "$gemm_out" | sed -nE 's/^gemm[^(]*\((.*)\)$/\1/p')
core=$(echo "$gemm_line" | sed -nE 's/^OpenBLAS [0-9.]+ ([A-Za-z0-9]+) kernels.*/\1/p')
echo "GEMM: $gemm_line; sgemm 1024^3 with 2 threads: $sgemm GFLOP/s"
echo "$gemm_out" | grep '^CPU: '
# PyTorch's column, or the reason it is missing (printed, not hidden: a "-" alone said nothing)
torch_notes="" torch_modes=""
if err=$("$PY" -c 'import torch' 2>&1); then
  version=$("$PY" -c 'import torch; print(torch.__version__)')
  # eager: the reference's attention formula; PyTorch 2 adds its fused attention, and torch.compile
  torch_modes="eager$([ "${version%%.*}" -ge 2 ] && echo " sdpa compile")"
  echo "PyTorch: $version ($torch_modes), OPENBLAS_CORETYPE=$core (the kernels this project runs); torch.set_num_threads 1 and 2, best kept (its OpenBLAS threads stay at the core count)"
else
  echo "PyTorch: not measured: $PY cannot import torch (${err##*$'\n'}); install python3-torch, or pass a Python that has it as the third argument (make bench PYTHON=...)"
fi
echo
printf "| %-6s | %-22s | %8s | %8s | %8s | %12s | %10s |\n" config "ranks x threads" "s/step" "tok/s" "GFLOP/s" "of sgemm x2" "vs PyTorch"
printf "| %-6s | %-22s | %8s | %8s | %8s | %12s | %10s |\n" --- --- --- --- --- --- ---
declare -A T1
for cfg in "${CONFIGS[@]}"; do
  set -- $cfg; name=$1 D=$2 L=$3 H=$4 S=$5 P=$6 B=$7
  tok=$(( B * (S / P) * (S / P) )); fl=$(flops $D $L $S $P $B)
  flags="--hidden $D --depth $L --heads $H --patch $P --input-size $S --batch $B"
  # PyTorch's modes, each its best over 1 and 2 threads; "vs PyTorch" is against the best of them
  torch="" rows=()
  for mode in $torch_modes; do
    best=""
    for th in 1 2; do
      out=$(OPENBLAS_CORETYPE=$core "$PY" "$HERE/torch_step.py" $D $L $H $S $P $B $th 4 $mode 2>&1) || true
      t=$(echo "$out" | sed -nE 's/^torch .*: ([0-9.]+) s\/step$/\1/p')
      if [ -z "$t" ]; then
        torch_notes+="PyTorch's step ($mode) failed on config $name with $th threads: ${out##*$'\n'}"$'\n'
        continue
      fi
      best=$(awk -v a="$t" -v b="${best:-1e9}" 'BEGIN { print (a < b) ? a : b }')
    done
    [ -n "$best" ] || continue
    rows+=("$mode $best")
    torch=$(awk -v a="$best" -v b="${torch:-1e9}" 'BEGIN { print (a < b) ? a : b }')
  done
  for row in "${rows[@]}"; do
    set -- $row
    printf "| %-6s | %-22s | %8.3f | %8.0f | %8.1f | %11.0f%% | %10s |\n" "$name" "PyTorch $1 (best)" "$2" \
      "$(awk -v t=$2 -v k=$tok 'BEGIN { print k / t }')" "$(awk -v t=$2 -v f=$fl 'BEGIN { print f / t / 1e9 }')" \
      "$(awk -v t=$2 -v f=$fl -v g=$sgemm 'BEGIN { print 100 * f / t / 1e9 / g }')" \
      "$(awk -v a=$2 -v b=$torch 'BEGIN { printf "x%.2f", a / b }')"
  done
  for run in "1 2" "2 1" "1 1"; do
    set -- $run; np=$1 th=$2
    [ "$name" = S ] && [ $np$th = 11 ] && continue
    t=$(step_time $np $th $tok $flags)
    [ $np$th = 11 ] && T1[$name]=$t
    [ $np$th = 21 ] && T2=$t
    vs=$([ -n "$torch" ] && awk -v a=$t -v b=$torch 'BEGIN { printf "x%.2f", a / b }' || echo "-")
    printf "| %-6s | %-22s | %8.3f | %8.0f | %8.1f | %11.0f%% | %10s |\n" "$name" "$np x $th" "$t" \
      "$(awk -v t=$t -v k=$tok 'BEGIN { print k / t }')" "$(awk -v t=$t -v f=$fl 'BEGIN { print f / t / 1e9 }')" \
      "$(awk -v t=$t -v f=$fl -v g=$sgemm 'BEGIN { print 100 * f / t / 1e9 / g }')" "$vs"
  done
done
printf "%s" "$torch_notes"
echo "(vs PyTorch: step time over PyTorch's best mode's; config L, 2 ranks x 1 thread over 1 rank x 1 thread: x$(awk -v a=${T1[L]} -v b=$T2 'BEGIN { printf "%.2f", a / b }') faster)"

echo
echo "the cost of --exact: each config's step without and with it, back to back (target: at most x2)"
printf "| %-6s | %-15s | %10s | %14s | %7s |\n" config "ranks x threads" "s/step" "--exact s/step" ratio
printf "| %-6s | %-15s | %10s | %14s | %7s |\n" --- --- --- --- ---
for cfg in "${CONFIGS[@]}"; do
  set -- $cfg; name=$1 D=$2 L=$3 H=$4 S=$5 P=$6 B=$7
  tok=$(( B * (S / P) * (S / P) ))
  flags="--hidden $D --depth $L --heads $H --patch $P --input-size $S --batch $B"
  for run in "1 2" "2 1"; do
    set -- $run; np=$1 th=$2
    t=$(step_time $np $th $tok $flags) te=$(step_time $np $th $tok $flags --exact)
    printf "| %-6s | %-15s | %10.3f | %14.3f | %6.2fx |\n" "$name" "$np x $th" "$t" "$te" "$(awk -v a=$te -v b=$t 'BEGIN { print a / b }')"
  done
done

# with_flags TITLE LABEL RUNS FLAGS...: config L's step without and with FLAGS, back to back, at each
# "ranks threads" of RUNS, and their ratio
with_flags() {
  local title=$1 label=$2 runs=$3 run; shift 3
  local extra=("$@")
  echo
  echo "$title"
  printf "| %-6s | %-15s | %10s | %22s | %7s |\n" config "ranks x threads" "s/step" "$label s/step" ratio
  printf "| %-6s | %-15s | %10s | %22s | %7s |\n" --- --- --- --- ---
  set -- ${CONFIGS[1]}; local name=$1 D=$2 L=$3 H=$4 S=$5 P=$6 B=$7
  local tok=$(( B * (S / P) * (S / P) ))
  local flags="--hidden $D --depth $L --heads $H --patch $P --input-size $S --batch $B"
  for run in $runs; do
    local np=${run%:*} th=${run#*:} t tw
    t=$(step_time $np $th $tok $flags) tw=$(step_time $np $th $tok $flags "${extra[@]}")
    printf "| %-6s | %-15s | %10.3f | %22.3f | %6.2fx |\n" "$name" "$np x $th" "$t" "$tw" "$(awk -v a=$tw -v b=$t 'BEGIN { print a / b }')"
  done
}
with_flags "the cost of a video DiT's rotary positions and per-head QK-norm: config L without and with --pos rope --qk-norm head, back to back, twice (target: at most x1.10)" \
  "rope + qk-norm" "1:2 1:2" --pos rope --qk-norm head

echo
echo "peak activation memory per rank, DiT-mini/2, batch 1 (1 step; sampling: 10 images, 1 Euler step, no guidance)"
printf "| %-7s | %-5s | %14s | %14s |\n" tokens ranks "training MiB" "sampling MiB"
printf "| %-7s | %-5s | %14s | %14s |\n" --- --- --- ---
for S in 128 256; do
  for np in 1 2 4; do
    rm -rf "$WORK/mem"
    spc=$([ $np = 1 ] && echo 1 || echo 0)
    $MPIRUN -np $np "$TRAIN" --model DiT-mini/2 --input-size $S --batch 1 --steps 1 \
      --samples-per-class $spc --sample-steps 1 --cfg-scale 1 --out "$WORK/mem" > "$WORK/log"
    line=$(grep '^done:' "$WORK/log")
    printf "| %-7s | %-5s | %14s | %14s |\n" $(( (S / 2) * (S / 2) )) $np \
      "$(echo "$line" | sed -E 's/.*memory ([0-9.]+) MiB.*/\1/')" \
      "$([ $spc = 1 ] && echo "$line" | sed -E 's/.*\(sampling ([0-9.]+) MiB\).*/\1/' || echo -)"
  done
done

echo
echo "the layouts at 4 ranks x 1 thread, DiT-mini/2 (width 64, depth 4, 4 heads), 4096 tokens, batch 1"
echo "(4 ranks on this machine's cores: compare the layouts with each other, not with the tables above)"
printf "| %-28s | %8s | %16s | %16s | %14s |\n" layout "s/step" "attention MiB" "formula MiB" "gradients MiB"
printf "| %-28s | %8s | %16s | %16s | %14s |\n" --- --- --- --- ---
for layout in "gather" "all-to-all" "ring" "hybrid --ulysses-degree 2"; do
  rm -rf "$WORK/lay"
  $MPIRUN -np 4 --bind-to none "$TRAIN" --model DiT-mini/2 --input-size 128 --batch 1 --steps $STEPS \
    --threads 1 --log-every 1 --samples-per-class 0 --sp-attention $layout --out "$WORK/lay" > "$WORK/log"
  t=$(grep '^step' "$WORK/log" | tail -n +3 | sed -E 's/.*\| ([0-9]+) tok\/s.*/\1/' | sort -n |
      awk '{ a[NR] = $1 } END { printf "%.4f", 4096 / a[int((NR + 1) / 2)] }')
  line=$(grep '^done:' "$WORK/log")
  # per layer and rank, B T_pad D values of 4 bytes (P = 4, U = 2): parallel/layouts/layouts.h gives each formula
  formula=$(awk -v l="${layout%% *}" 'BEGIN { P = 4; U = 2; f["gather"] = 4 * (P - 1) / P
    f["all-to-all"] = 8 * (P - 1) / P / P; f["ring"] = 6 * (P - 1) / P
    f["hybrid"] = 8 * (U - 1) / (U * P) + 6 * (P / U - 1) / P
    printf "%.3f", f[l] * 4096 * 64 * 4 * 4 / 1048576 }')
  printf "| %-28s | %8.3f | %16s | %16s | %14s |\n" "$layout" "$t" \
    "$(echo "$line" | sed -E 's/.*\(attention ([0-9.]+), .*/\1/')" "$formula" \
    "$(echo "$line" | sed -E 's/.*, gradients ([0-9.]+)\).*/\1/')"
done

with_flags "text conditioning: config L's step with class labels and with captions (--cond text, 12 tokens, a 1-layer text encoder, cross-attention in every block), back to back" \
  "text cross" "1:2 2:1" --cond text
with_flags "text conditioning: the same with joint attention (--text-attn joint: SD3's MMDiT blocks, a text stream of its own in every block, one attention over [caption; image])" \
  "text joint" "1:2 2:1" --cond text --text-attn joint
