#!/usr/bin/env bash
# lock_test.sh: a run folder has one writer (run/lock.h). Two jobs started 0.05 s apart on one
# folder: exactly one trains, the other exits 2 at once naming the folder and the holder's
# process id and host, and the winner's run is whole. A job started while another holds the
# folder is refused, on every command that writes there (train, --resume, sample, verify, bugs;
# under mpirun too). A holder killed with kill -9 blocks nothing: the next job resumes the run.
# usage: tests/lock_test.sh TRAIN_BINARY
set -u
TRAIN=$(realpath "$1")
WORK=$(mktemp -d /tmp/dit-lock.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1
MPIRUN="mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )"
pass=0 fail=0
ok()  { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
HOST=$(hostname)
RUN="--model DiT-tiny/2 --input-size 8 --batch 4 --sample-steps 1 --samples-per-class 1"
# the refusal's sentence, naming the folder and the holder PID
refused() { grep -q "the folder $1 is being written by another job (process $2 on host $HOST" "$3"; }
# wait until DIR's lock file names its holder (at most 30 s)
wait_lock() { for _ in $(seq 300); do [ -s "$1/.lock" ] && return 0; sleep 0.1; done; return 1; }

# 1. two jobs 0.05 s apart: one wins, the other is refused at once (the runs long enough, 500
# steps, that on a loaded machine the winner still holds the folder when the other starts)
"$TRAIN" $RUN --steps 500 --out race > a.log 2>&1 & a=$!
sleep 0.05
"$TRAIN" $RUN --steps 500 --out race > b.log 2>&1 & b=$!
wait $a; ra=$?; wait $b; rb=$?
if [ $ra = 0 ] && [ $rb = 2 ] && refused race $a b.log; then winner=a
elif [ $rb = 0 ] && [ $ra = 2 ] && refused race $b a.log; then winner=b
else winner=; bad "two jobs 0.05 s apart on one folder: exit codes $ra and $rb, not one 0 and one 2 naming the other"; cat a.log b.log | grep -i error; fi
if [ -n "$winner" ]; then
  rows=$(($(wc -l < race/loss.csv) - 1))
  if [ -f race/model.safetensors ] && [ "$(tail -1 race/loss.csv | cut -d, -f1)" = 500 ]; then
    ok "two jobs 0.05 s apart: job $winner trained (loss.csv to step 500, $rows rows), the other exited 2 naming its $(grep -o 'process [0-9]* on host [^,]*' race/.lock)"
  else bad "two jobs 0.05 s apart: the winner's run is not whole"; ls race; fi
fi

# 2. a live holder refuses every command that writes its folder
"$TRAIN" $RUN --steps 100000 --save-every 5 --out live > holder.log 2>&1 & h=$!
wait_lock live || bad "the holder never wrote its lock file"
for _ in $(seq 300); do [ -f live/model.safetensors ] && break; sleep 0.1; done
before=$(cat live/config.json | md5sum)
check_refused() { # name, command...
  local name=$1; shift
  "$@" > refused.log 2>&1; local rc=$?
  if [ $rc = 2 ] && refused live $h refused.log; then ok "$name while another job holds the folder: exit 2, names process $h on $HOST"
  else bad "$name while another job holds the folder: exit $rc"; tail -3 refused.log; fi
}
check_refused "train --out" "$TRAIN" $RUN --steps 10 --out live
check_refused "train --resume" "$TRAIN" --resume live --steps 200000
check_refused "mpirun -np 2 train --out" $MPIRUN -np 2 "$TRAIN" $RUN --steps 10 --out live
check_refused "sample --out into the folder" "$TRAIN" sample --ckpt live/model.safetensors --out live/grid.png --sample-steps 1
check_refused "verify --out" "$TRAIN" verify --ranks 2 $RUN --steps 2 --out live
check_refused "bugs --out" "$TRAIN" bugs --ranks 2 --steps 2 --out live
if kill -0 $h 2>/dev/null && [ "$(cat live/config.json | md5sum)" = "$before" ] && [ ! -e live/grid.png ]; then
  ok "the holder still trains, its config.json unchanged, nothing written by the refused jobs"
else bad "the refused jobs disturbed the holder or its folder"; fi

# 3. a holder killed with kill -9 blocks nothing: the next job resumes its run
kill -9 $h; wait $h 2>/dev/null
# a kill inside a save leaves it for --resume to finish: the run may then stand one save (5 steps)
# past the loss.csv read here
target=$(($(tail -1 live/loss.csv | cut -d, -f1) + 5 + 3))
"$TRAIN" --resume live --steps $target > resumed.log 2>&1; rc=$?
step=$(tail -1 live/loss.csv | cut -d, -f1)
if [ $rc = 0 ] && [ "$step" = $target ] && ! grep -q "being written" resumed.log; then
  ok "a holder killed with kill -9 left no lock: --resume ran to step $target"
else bad "after kill -9 of the holder, --resume to step $target exited $rc (last step $step)"; tail -3 resumed.log; fi
# and a resumed run holds the lock with its own process id
if grep -q "^process [0-9]* on host $HOST, since " live/.lock; then ok "the lock file names the last holder: $(cat live/.lock)"
else bad "the lock file does not name its holder: $(cat live/.lock)"; fi

echo "lock_test: $pass passed, $fail failed"
[ $fail = 0 ]
