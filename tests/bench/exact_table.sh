#!/usr/bin/env bash
# exact_table.sh: the table of exact verifications. Each layout and mesh trains STEPS steps with
# --exact and is compared bit for bit with the --exact run on one rank without micro-batches
# (trained once per model): loss.csv, model, EMA and optimizer files must be the same bytes.
# Prints a markdown table with the first file that differs, if any. Exit 0 when every row is
# identical. usage: exact_table.sh TRAIN [STEPS]   (default 200; batch 6, no sample grids)
set -u
# OpenMP's threads sleep while they wait (ranks beyond the cores starve each other when they spin:
# this table took over 2 hours at 200 steps without it, about 15 minutes a build with it)
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
TRAIN=$(realpath "$1") STEPS=${2:-200}
WORK=$(mktemp -d /tmp/dit-exact-table.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
MPIRUN="mpirun -q --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )"
ARGS="--exact --steps $STEPS --batch 6 --samples-per-class 0"
FILES="loss.csv model.safetensors ema.safetensors optimizer.safetensors"
fail=0

train() { # name ranks flags...
  local name=$1 np=$2; shift 2
  $MPIRUN -np "$np" "$TRAIN" $ARGS --out "$WORK/$name" "$@" > "$WORK/$name.log" 2>&1 ||
    { echo "exact_table: the run $name failed: $(tail -n 1 "$WORK/$name.log")" >&2; return 1; }
}

row() { # reference, name, what, ranks, flags...
  local ref=$1 name=$2 what=$3 np=$4 first="" verdict; shift 4
  local t0=$SECONDS
  if train "$name" "$np" "$@"; then
    for f in $FILES; do cmp -s "$WORK/$ref/$f" "$WORK/$name/$f" || { first=$f; break; }; done
    verdict=${first:+"$first differs"}
  else
    verdict="the run failed"
  fi
  [ -z "$verdict" ] || fail=$((fail + 1))
  printf "| %-30s | %5s | %-44s | %6s |\n" "$what" "$np" "${verdict:-identical (loss, model, EMA, optimizer)}" $((SECONDS - t0))
}

echo "exact verifications: $STEPS steps against one rank, bit for bit ($1)"
train one 1 || exit 1
train heads5-one 1 --hidden 80 --heads 5 || exit 1
printf "| %-30s | %5s | %-44s | %6s |\n" layout ranks "against one rank" "s"
printf "| %-30s | %5s | %-44s | %6s |\n" --- --- --- ---
# mpirun binds a lone rank to one core, so the reference runs one thread: here two
row one threads-2 "one rank, 2 threads" 1 --threads 2
for np in 2 3 4; do row one gather-$np "gather" $np; done
for np in 2 4; do row one all-to-all-$np "all-to-all" $np --sp-attention all-to-all; done
row heads5-one heads5-3 "all-to-all, 5 heads" 3 --hidden 80 --heads 5 --sp-attention all-to-all
for np in 2 3 4; do row one ring-$np "ring" $np --sp-attention ring; done
row one hybrid-2x2 "hybrid U = 2" 4 --sp-attention hybrid --ulysses-degree 2
row one dp2-sp2 "--sp 2 (data x sequence 2 x 2)" 4 --sp 2
row one accum3-3 "--grad-accum 3" 3 --grad-accum 3
[ "$fail" = 0 ]
