#!/usr/bin/env bash
# slips_test.sh: two slips in the movement code that the loss curves miss (an add that drops its
# last value: the ring's own-block dV on the overlapped path, and the all-gather's backward
# reduce-scatter add), each planted in a scratch build (build_mutant.sh, its line in
# tests/mutations/list): plain `verify --ranks 2` must exit 1 and name the op (locate's first
# divergence, e.g. grad.blocks.3.attn.v), and so must `verify --exact`. The test shows that it
# can fail: the same slip with verify's tape check planted away must come out "not caught".
# usage (from the repository root, after make): tests/mutations/slips_test.sh BUILD
set -u
BUILD=${1:?usage: tests/mutations/slips_test.sh BUILD}
HERE=$(dirname "$0")
WORK=$(mktemp -d /tmp/dit-slips.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} MUTANT_CACHE=$WORK/commands
# verify's tape check taken out: the check that this test stands on
NO_TAPE=(study/verify.c 's/int tape = tape_check(self, ranks, out, pass, np, dir_n, dir_1, exact);/int tape = 0;/')
pass=0 fail=0
ok()  { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }

# verdict BINARY NAME MODE RANKS FLAGS PATTERN: "caught: <locate's first divergence>" when verify
# exits 1 and locate names a tensor matching PATTERN first, else "not caught: <why>"
verdict() {
  local bin=$1 name=$2 mode=$3 np=$4 flags=$5 want=$6 rc where log=$WORK/$2-$3.log
  # shellcheck disable=SC2086
  timeout 300 "$bin" verify --ranks "$np" --steps 2 --samples-per-class 0 $([ "$mode" = exact ] && echo --exact) \
    $flags --out "$WORK/$name-$mode" > "$log" 2>&1 < /dev/null
  rc=$?
  where=$(grep -o 'first divergence: [^(]*([^)]*)' "$log" | head -1)
  where=${where#first divergence: }
  if [ $rc = 1 ] && [ -n "$where" ]; then
    case ${where%% (*} in $want) echo "caught: $where"; return ;; esac
    echo "not caught: exit 1, but locate names $where, not $want"
  elif [ $rc = 1 ]; then echo "not caught: exit 1, but no tensor named ($(grep -m 1 '^tape' "$log"))"
  else # what verify said: its tape line, or without one the loss curves' difference
    echo "not caught: exit $rc; $( (grep -E -o '^(tape|error): .*' "$log"; grep -o 'largest relative loss difference [^ ]*' "$log") | head -1)"
  fi
}

trim() { local s=$1; s=${s#"${s%%[![:space:]]*}"}; printf '%s' "${s%"${s##*[![:space:]]}"}"; }
for slip in slip-ring-own-dv slip-scatter-add; do
  IFS='|' read -r _ file np flags want expr < <(grep "^$slip " "$HERE/list")
  file=$(trim "$file") np=$(trim "$np") flags=$(trim "$flags") want=$(trim "$want") expr=$(trim "$expr")
  # the slip, and the slip without the tape check (its library with verify.c's object swapped too)
  if ! "$HERE/build_mutant.sh" "$BUILD" "$WORK/$slip" "$file" "$expr" > "$WORK/$slip.build" 2>&1 ||
     ! MUTANT_LIB=$WORK/$slip/libdit.a "$HERE/build_mutant.sh" "$BUILD" "$WORK/$slip-no-tape" "${NO_TAPE[@]}" \
       > "$WORK/$slip-no-tape.build" 2>&1; then
    bad "$slip: the scratch build failed: $(tail -q -n 1 "$WORK/$slip.build" "$WORK/$slip-no-tape.build" 2>/dev/null | head -1)"
    continue
  fi
  what="$slip ($file, $np ranks${flags:+ $flags})"
  v=$(verdict "$WORK/$slip/train" "$slip" plain "$np" "$flags" "$want")
  case $v in caught*) ok "$what, plain verify: $v" ;; *) bad "$what, plain verify: $v" ;; esac
  v=$(verdict "$WORK/$slip/train" "$slip" exact "$np" "$flags" "$want")
  case $v in caught*) ok "$what, verify --exact: $v" ;; *) bad "$what, verify --exact: $v" ;; esac
  # the test can fail: without the tape check the loss curves alone let the slip through
  v=$(verdict "$WORK/$slip-no-tape/train" "$slip-no-tape" plain "$np" "$flags" "$want")
  case $v in "not caught"*) ok "$what, plain verify without its tape check: the test says $v" ;;
    *) bad "$what, plain verify without its tape check: still $v (the test would pass without the check it tests)" ;; esac
done
echo "slips: $pass passed, $fail failed"
[ $fail = 0 ]
