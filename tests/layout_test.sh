#!/usr/bin/env bash
# layout_test.sh: a new layout is one file and one row. The test build's train program
# (BUILD/f32/testlayout/train: tests/layout_all_queries.c and its row of parallel/layouts/layouts.c, built
# with -DSP_TEST_LAYOUT) runs --sp-attention all-queries: verify at 2 and 3 ranks agrees with one
# rank, the same check catches the no-pad-mask bug on it, the planner ranks it (it reads the
# table), and the program users run does not know it.
# usage: tests/layout_test.sh BUILD
set -u
BUILD=$1
TRAIN=$(realpath "$BUILD/f32/testlayout/train") USER_TRAIN=$(realpath train/train)
WORK=$(mktemp -d /tmp/dit-layout.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
pass=0 fail=0
ok()  { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
RUN="--sp-attention all-queries --steps 20 --samples-per-class 0"
for np in 2 3; do
  out=$("$TRAIN" verify --ranks $np $RUN --out "$WORK/v$np" 2>&1)
  if [ $? = 0 ] && echo "$out" | grep -q -- '-> the step AGREES$'; then
    ok "all-queries, $np ranks vs 1 rank: $(echo "$out" | grep -o 'largest relative loss difference [^ ]*'); $(echo "$out" | grep -o 'tape: all [0-9]* tensors within tolerance')"
  else bad "all-queries, $np ranks disagree with 1 rank"; echo "$out" | tail -5; fi
done
out=$("$TRAIN" verify --ranks 2 $RUN --inject-bug no-pad-mask --out "$WORK/bug" 2>&1)
if [ $? = 1 ] && echo "$out" | grep -q 'the runs DIVERGE'; then ok "all-queries with the no-pad-mask bug, 2 ranks: caught ($(echo "$out" | grep -o 'first step over tolerance: [0-9]*'))"
else bad "all-queries with the no-pad-mask bug: not caught"; echo "$out" | tail -5; fi
out=$("$TRAIN" plan --ranks 2 --link-bandwidth 1000 --link-latency 20 2>&1)
if echo "$out" | grep -q -- '--sp 2 --sp-attention all-queries'; then ok "the planner ranks all-queries (it reads the table)"
else bad "the planner does not rank all-queries"; echo "$out" | tail -5; fi
out=$("$USER_TRAIN" --sp-attention all-queries --dry-run 2>&1)
if [ $? = 2 ] && echo "$out" | grep -q "all-queries"; then ok "the program users run refuses all-queries: $(echo "$out" | head -1)"
else bad "train/train takes all-queries"; echo "$out" | head -3; fi
echo "layout_test: $pass passed, $fail failed"
[ $fail = 0 ]
