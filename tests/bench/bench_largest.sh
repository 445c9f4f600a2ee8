#!/usr/bin/env bash
# bench_largest.sh: the largest DiT that the planner says fits this machine's memory on 4 ranks
# (each rank's share: the memory / 4), at each --zero level (0 to 3) without and with --recompute.
# For each preset (depth x width: mini, S, B, L, XL, patch 2) and sequence (input 64 to 512: 1024
# to 65536 tokens, with 184: 8464; a longer one is not tried once none fits), batch 1 (the sequence split over the 4 ranks), `train plan --ranks 4` lists every mesh
# with each memory option; a (model, sequence) fits an option when a mesh with it does. Its rates
# are one process's, which the 4 ranks of a run share: a run takes about 4 times its prediction
# where the cores are fewer than the ranks' threads. Then, per option, one training step of the
# largest fitting run whose predicted step takes at most a tenth of LIMIT seconds (the largest of
# them that finishes: the next smaller is tried after a timeout), and its
# measured memory per rank (the run's memory line: the arena's peak, parameters, gradients, Adam
# moments, EMA) against the planner's (which adds the host's copy of the batch).
# usage: bench_largest.sh TRAIN [LIMIT]   (LIMIT: seconds a run may take, default 300);
# BENCH_LARGEST_MODELS="S B" and BENCH_LARGEST_SIZES="64 128" pick a smaller grid
set -eu
TRAIN=$(realpath "$1"); LIMIT=${2:-300}
NP=4 MODELS=${BENCH_LARGEST_MODELS:-mini S B L XL} SIZES=${BENCH_LARGEST_SIZES:-64 128 184 256 512}
MPIRUN="mpirun --oversubscribe --allow-run-as-root"
WORK=$(mktemp -d /tmp/dit-largest.XXXXXX); trap 'rm -rf "$WORK"' EXIT
OPTIONS=("no 0" "yes 0" "no 1" "yes 1" "no 2" "yes 2" "no 3" "yes 3") # recompute, zero: as the plan table's columns
flags() { echo "$( [ "${1% *}" = yes ] && echo --recompute) $( [ "${1#* }" != 0 ] && echo --zero "${1#* }")"; }

# every (option, model, sequence) that fits, smallest first: "i model size memory ... step mesh..."
touch "$WORK/fits"
for m in $MODELS; do for s in $SIZES; do
  before=$(wc -l < "$WORK/fits")
  table=$("$TRAIN" plan --ranks $NP --link-bandwidth 1000 --link-latency 20 --model DiT-$m/2 \
          --input-size $s --batch 1 2>&1) || { echo "$table"; exit 1; }
  for i in "${!OPTIONS[@]}"; do
    read -r rc z <<< "${OPTIONS[$i]}"
    echo "$table" | awk -v r=$rc -v z=$z -v m=$m -v s=$s -v i=$i '$1 ~ /^[0-9]+$/ && $2 == r && $3 == z &&
      !/does not fit/ { $1 = $2 = $3 = ""; print i, m, s, $0; exit }' >> "$WORK/fits"
  done
  [ "$(wc -l < "$WORK/fits")" != "$before" ] || break
done; done
printf "%-26s %-9s %8s %12s %12s  %s\n" option model tokens "memory MiB" "step s" "mesh (the planner's pick)"
for i in "${!OPTIONS[@]}"; do
  row=$(awk -v i=$i '$1 == i' "$WORK/fits" | tail -1)
  [ -n "$row" ] || { echo "${OPTIONS[$i]}: nothing fits"; continue; }
  read -r _ m s mem _ _ _ _ step mesh <<< "$row"
  printf "%-26s %-9s %8d %12s %12s  %s\n" "recompute ${OPTIONS[$i]% *}, zero ${OPTIONS[$i]#* }" DiT-$m/2 \
         $((s * s / 4)) "$mem" "$step" "$mesh"
done
echo "one step each, the largest that finishes in $LIMIT s (predicted at most $((LIMIT / 10)) s):"
for i in "${!OPTIONS[@]}"; do
  done_=0
  while read -r _ m s mem _ _ _ _ step mesh; do
    awk -v t="$step" -v l=$LIMIT 'BEGIN { exit !(t <= l / 10) }' || continue
    rc=0
    timeout $LIMIT $MPIRUN -np $NP "$TRAIN" --model DiT-$m/2 --input-size $s --batch 1 $mesh \
      $(flags "${OPTIONS[$i]}") --steps 1 --samples-per-class 0 --out "$WORK/run" < /dev/null > "$WORK/log" 2>&1 || rc=$?
    line=$(grep '^memory: at most' "$WORK/log" || true)
    rm -rf "$WORK/run"
    label="recompute ${OPTIONS[$i]% *}, zero ${OPTIONS[$i]#* }: DiT-$m/2, $((s * s / 4)) tokens"
    if [ $rc = 124 ]; then echo "  $label: did not finish in $LIMIT s; the next smaller"; continue; fi
    if [ -z "$line" ]; then
      echo "  $label: FAILED (exit $rc): $(grep -m 1 -i 'error\|killed\|signal' "$WORK/log" || tail -n 1 "$WORK/log")"
      exit 1
    fi
    measured=$(echo "$line" | sed -E 's/^memory: at most ([0-9.]+) MiB.*/\1/')
    echo "  $label: predicted $mem MiB per rank, measured $measured MiB ($(awk -v p=$mem -v m=$measured \
         'BEGIN { printf "x%.2f", p / m }'))"
    done_=1; break
  done < <(awk -v i=$i '$1 == i' "$WORK/fits" | tac)
  [ $done_ = 1 ] || echo "  recompute ${OPTIONS[$i]% *}, zero ${OPTIONS[$i]#* }: no run finished in $LIMIT s"
done
