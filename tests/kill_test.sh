#!/usr/bin/env bash
# kill_test.sh: training runs that save every step are killed at spread-out moments (SIGKILL to
# one rank, SIGKILL to mpirun, SIGINT and SIGTERM to mpirun, on 1 and 2 ranks) and resumed: every
# folder must resume, and the finished run's loss.csv must equal an uninterrupted run's bit for
# bit (the resumed curve continues the killed one exactly).
# usage: kill_test.sh TRAIN [MOMENTS_PER_CASE]   (8 cases; make test: 1 moment each, make soak: 4)
set -u
TRAIN=$(realpath "$1"); MOMENTS=${2:-1}
WORK=$(mktemp -d /tmp/dit-kill.XXXXXX)
trap 'pkill -9 -f -- "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
MPIRUN="mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )"
ARGS="--model DiT-tiny/2 --input-size 8 --batch 4 --steps 160 --save-every 1 --samples-per-class 0 --ema 0.9"
# moments spread over the first 65% of an uninterrupted run's time (a busy machine slows some runs)
pass=0 fail=0 case_i=0 late=0 STEPS=160

# all processes of the run in folder $1 gone (waits, then SIGKILLs what is left)
settle() {
  for _ in $(seq 50); do pgrep -f -- "--out $1" >/dev/null || return 0; sleep 0.1; done
  pkill -9 -f -- "--out $1"; sleep 0.3
}

for np in 1 2; do
  start=$(date +%s.%N)
  $MPIRUN -np $np "$TRAIN" $ARGS --out "$WORK/ref$np" >/dev/null 2>&1 || { echo "FAIL reference run on $np ranks"; exit 1; }
  dur=$(awk -v s=$start -v e=$(date +%s.%N) 'BEGIN { print e - s }')
  for sig in KILL-rank KILL-mpirun INT TERM; do
    for k in $(seq "$MOMENTS"); do
      dir="$WORK/r$np-$sig-$k"
      # moments spread over the run, from just after start to near its end
      case_i=$((case_i + 1))
      at=$(awk -v d=$dur -v k=$k -v m=$MOMENTS -v c=$case_i 'BEGIN { srand(c * 13 + k); printf "%.2f", d * (0.05 + 0.6 * (k - 1 + rand()) / m) }')
      $MPIRUN -np $np "$TRAIN" $ARGS --out "$dir" >/dev/null 2>&1 &
      launcher=$!
      sleep "$at"
      case $sig in
        KILL-rank) rank=$(pgrep -P $launcher | head -n 1); [ -n "$rank" ] && kill -9 "$rank" ;;
        KILL-mpirun) kill -9 $launcher ;;
        *) kill -$sig $launcher ;;
      esac
      wait $launcher 2>/dev/null
      settle "$dir"
      last=$(tail -n 1 "$dir/loss.csv" 2>/dev/null | cut -d, -f1)
      [ "$last" = "$STEPS" ] && late=$((late + 1)) # the run had finished: no kill was tested
      out="" rc=0 # a run that had finished has nothing to resume
      [ "$last" = "$STEPS" ] || { out=$($MPIRUN -np $np "$TRAIN" $ARGS --resume "$dir" 2>&1); rc=$?; }
      what="$np rank(s), $sig at ${at}s (saved up to step ${last:-none})"
      if [ $rc = 0 ] && cmp -s "$dir/loss.csv" "$WORK/ref$np/loss.csv"; then
        pass=$((pass + 1))
        echo "ok   $what: resumed, loss.csv equals the uninterrupted run's"
      else
        fail=$((fail + 1)); echo "FAIL $what: resume exit $rc"; echo "$out" | tail -3
        diff <(head -n 5 "$dir/loss.csv") <(head -n 5 "$WORK/ref$np/loss.csv") | head -4
      fi
      rm -rf "$dir"
    done
  done
done
[ $late = 0 ] || echo "($late of the runs had finished before their kill: the machine was busier during the reference run)"
echo "kill tests: $pass passed, $fail failed"
[ $fail = 0 ]
