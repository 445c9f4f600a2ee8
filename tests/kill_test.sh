#!/usr/bin/env bash
# kill_test.sh: training runs that save every step are killed at spread-out moments (SIGKILL to
# one rank, SIGKILL to mpirun, SIGINT and SIGTERM to mpirun, on 1 and 2 ranks) and resumed: every
# folder must resume, and the finished run's loss.csv must equal an uninterrupted run's bit for
# bit (the resumed curve continues the killed one exactly). A kill counts only when it lands while
# the run is under way: one that finds no rank to kill yet is tried again later, one that comes
# after the run has finished again earlier, up to TRIES times; a case whose kill never lands fails.
# usage: kill_test.sh TRAIN [MOMENTS_PER_CASE] [CASES]
# CASES: RANKS:SIGNAL words (default: each signal on 1 and 2 ranks, 8 cases); make soak: all 8, 4
# moments each; make test: 1 moment of a killed rank, mpirun killed and SIGTERM on 2 ranks, and of
# a killed rank on 1 (SIGINT takes the same path as SIGTERM)
set -u
TRAIN=$(realpath "$1"); MOMENTS=${2:-1}
CASES=${3:-"1:KILL-rank 1:KILL-mpirun 1:INT 1:TERM 2:KILL-rank 2:KILL-mpirun 2:INT 2:TERM"}
WORK=$(mktemp -d /tmp/dit-kill.XXXXXX)
trap 'pkill -9 -f -- "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
MPIRUN="mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )"
STEPS=80 # each saved: about 4 s a run on 2 cores
ARGS="--model DiT-tiny/2 --input-size 8 --batch 4 --steps $STEPS --save-every 1 --samples-per-class 0 --ema 0.9"
# moments spread over the first 65% of an uninterrupted run's time (a busy machine slows some runs)
pass=0 fail=0 case_i=0 TRIES=6 retries=0

# all processes of the run in folder $1 gone (waits, then SIGKILLs what is left)
settle() {
  for _ in $(seq 50); do pgrep -f -- "--out $1" >/dev/null || return 0; sleep 0.1; done
  pkill -9 -f -- "--out $1"; sleep 0.3
}

# attempt NP SIG AT DIR: a run in DIR killed with SIG at AT seconds; sets landed to "yes", or to
# why the kill did not land ("early": no rank to kill yet; "late": the run had finished), and
# last to the last step in loss.csv
attempt() {
  local np=$1 sig=$2 at=$3 dir=$4 launcher rank
  rm -rf "$dir"
  $MPIRUN -np $np "$TRAIN" $ARGS --out "$dir" >/dev/null 2>&1 &
  launcher=$!
  sleep "$at"
  landed=yes
  case $sig in
    KILL-rank) rank=$(pgrep -P $launcher | head -n 1)
               if [ -n "$rank" ] && kill -9 "$rank" 2>/dev/null; then :
               elif kill -0 $launcher 2>/dev/null; then landed=early
               else landed=late; fi ;;
    KILL-mpirun) kill -9 $launcher 2>/dev/null || landed=late ;;
    *) kill -$sig $launcher 2>/dev/null || landed=late ;;
  esac
  wait $launcher 2>/dev/null
  settle "$dir"
  last=$(tail -n 1 "$dir/loss.csv" 2>/dev/null | cut -d, -f1)
  if [ $landed = yes ] && [ "$last" = "$STEPS" ]; then landed=late; fi
}

declare -A dur # an uninterrupted run's seconds, by ranks (its loss.csv: $WORK/ref$np)
for c in $CASES; do
  np=${c%%:*} sig=${c#*:}
  if [ -z "${dur[$np]:-}" ]; then
    start=$(date +%s.%N)
    $MPIRUN -np $np "$TRAIN" $ARGS --out "$WORK/ref$np" >/dev/null 2>&1 || { echo "FAIL reference run on $np ranks"; exit 1; }
    dur[$np]=$(awk -v s=$start -v e=$(date +%s.%N) 'BEGIN { print e - s }')
  fi
  for k in $(seq "$MOMENTS"); do
    dir="$WORK/r$np-$sig-$k"
    # moments spread over the run, from just after start to near its end
    case_i=$((case_i + 1))
    at=$(awk -v d=${dur[$np]} -v k=$k -v m=$MOMENTS -v c=$case_i 'BEGIN { srand(c * 13 + k); printf "%.2f", d * (0.05 + 0.6 * (k - 1 + rand()) / m) }')
    what="$np rank(s), $sig"
    for try in $(seq $TRIES); do
      attempt $np $sig "$at" "$dir"
      [ $landed = yes ] && break
      retries=$((retries + 1))
      old=$at
      if [ $landed = late ]; then at=$(awk -v a=$at 'BEGIN { printf "%.2f", a / 2 }')
      else at=$(awk -v a=$at 'BEGIN { printf "%.2f", a + 0.3 }'); fi
      echo "     $what at ${old}s: $([ $landed = late ] && echo "the run had finished" || echo "no rank to kill yet"); again at ${at}s"
    done
    what="$what at ${at}s (saved up to step ${last:-none})"
    if [ $landed != yes ]; then
      fail=$((fail + 1)); echo "FAIL $what: in $TRIES tries no kill landed while the run was under way"
      rm -rf "$dir"; continue
    fi
    out=$($MPIRUN -np $np "$TRAIN" $ARGS --resume "$dir" 2>&1); rc=$?
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
echo "kill tests: $pass passed, $fail failed ($retries kills tried again at another moment)"
[ $fail = 0 ]
