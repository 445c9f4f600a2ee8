#!/usr/bin/env bash
# fuzz.sh: runs the libFuzzer targets built in DIR (the Makefile's fuzz-run). For each target:
# first every saved crash input, tests/fuzz/regressions/<target>/* (each must now pass), then
# SECONDS of fuzzing from tests/fuzz/seeds/<target>/ and the corpus kept in DIR/corpus/<target>/
# (new inputs go there), with tests/fuzz/<target>.dict when there is one. One line per target:
# runs, coverage, corpus and crashes; a crash prints its sanitizer report, is saved under
# DIR/crashes/<target>/ and fails the script (after the other targets have run).
# usage (from the repository root): fuzz.sh DIR SECONDS TARGET...
set -u
DIR=$1 SECONDS_PER=$2; shift 2
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
# the targets' scratch folders, removed at the end also when a crash left some behind
FUZZ_TMPDIR=$(mktemp -d "$( [ -w /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")/dit-fuzz-run-XXXXXX") || exit 1
export FUZZ_TMPDIR
trap 'rm -rf "$FUZZ_TMPDIR"' EXIT
failed=0
for t in "$@"; do
  bin=$DIR/fuzz_$t log=$DIR/logs/$t.log
  mkdir -p "$DIR/logs" "$DIR/corpus/$t" "$DIR/crashes/$t"
  saved=$(find "tests/fuzz/regressions/$t" -type f 2>/dev/null | sort)
  if [ -n "$saved" ]; then
    # shellcheck disable=SC2086 # one argument per file; the names have no spaces
    if ! "$bin" $saved > "$log" 2>&1; then
      echo "fuzz $t: a saved crash input crashes again:"
      grep -a '^Running: ' "$log" | tail -n 1
      grep -a -A 30 -m1 -E 'ERROR: |runtime error|fatal error|broken promise|==[0-9]+==' "$log" | head -n 40
      failed=$((failed + 1)); continue
    fi
  fi
  dict=(); [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
  # FUZZ_SEED set (make test): the same mutations every run, so a pass repeats what it explored
  [ -n "${FUZZ_SEED:-}" ] && dict+=(-seed="$FUZZ_SEED")
  "$bin" -max_total_time="$SECONDS_PER" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$DIR/crashes/$t/" "${dict[@]}" "$DIR/corpus/$t" "tests/fuzz/seeds/$t" > "$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  last=$(grep -a -E '^#[0-9]+.*cov: ' "$log" | tail -n 1)
  cov=$(echo "$last" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
  ft=$(echo "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
  corp=$(echo "$last" | sed -n 's/.* corp: \([0-9]*\).*/\1/p')
  n_saved=$(echo "$saved" | grep -c .)
  [ "$n_saved" = 0 ] && passed_note="no saved crash inputs" || passed_note="$n_saved saved crash inputs pass"
  if [ $rc = 0 ]; then
    echo "fuzz $t: ${SECONDS_PER} s, ${runs:-?} runs, coverage ${cov:-?} edges / ${ft:-?} features, corpus ${corp:-?} inputs, 0 crashes; $passed_note"
  else
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
    echo "fuzz $t: CRASH after ${runs:-?} runs (coverage ${cov:-?} edges); the input: ${artifact:-none saved}"
    grep -a -A 30 -m1 -E 'ERROR: |runtime error|fatal error|broken promise' "$log" | head -n 40
    echo "  reproduce: $bin $artifact; once fixed, keep it as tests/fuzz/regressions/$t/<what-it-was>"
    failed=$((failed + 1))
  fi
done
[ $failed = 0 ]
