#!/usr/bin/env bash
# build_mutant.sh: the train program with one-line mutations planted, built fast: each mutated .c
# file alone is compiled with the command the Makefile uses for it (make -n), its object replaces
# the original in a copy of BUILD/f32/libdit.a (ar r), and BUILD/f32/train/main.o is linked against
# that copy with the Makefile's link command. Nothing in BUILD or the tree changes.
# A sed that leaves its file unchanged, or changes more than one line, is an error (exit 2).
# usage (from the repository root, after make has built BUILD/f32/bin/train):
#   tests/mutations/build_mutant.sh BUILD DIR FILE SED [FILE SED ...]    writes DIR/train
# Environment: MUTANT_LIB, the library to start from (default BUILD/f32/libdit.a: another
# mutant's, to add to it); MUTANT_CACHE, a folder that keeps make's commands between calls.
set -u
[ $# -ge 4 ] && [ $(( ($# - 2) % 2 )) = 0 ] || { echo "usage: $0 BUILD DIR FILE SED [FILE SED ...]" >&2; exit 2; }
BUILD=$1 DIR=$2; shift 2
fail() { echo "build_mutant: $*" >&2; exit 2; }
LIB=$BUILD/f32/libdit.a
[ -f "${MUTANT_LIB:-$LIB}" ] && [ -f "$BUILD/f32/train/main.o" ] || fail "$LIB or $BUILD/f32/train/main.o is missing: run make first"
# the Makefile's variant for BUILD: build-cpu is USE_CUDA=0's
use_cuda=$([ "${BUILD%-cpu}" != "$BUILD" ] && echo 0 || echo 1)
# make_cmd FILE TARGET PATTERN: the line of `make -n -W FILE TARGET` that holds PATTERN (cached)
make_cmd() {
  local cache=${MUTANT_CACHE:+$MUTANT_CACHE/$(echo "$2" | tr / _).cmd}
  if [ -n "$cache" ] && [ -s "$cache" ]; then cat "$cache"; return; fi
  ${MAKE:-make} --no-print-directory -n USE_CUDA=$use_cuda -W "$1" "$2" 2>/dev/null | grep -F -- "$3" | tee ${cache:+"$cache"}
}
mkdir -p "$DIR" ${MUTANT_CACHE:+"$MUTANT_CACHE"}
cp "${MUTANT_LIB:-$LIB}" "$DIR/libdit.a.tmp" && mv "$DIR/libdit.a.tmp" "$DIR/libdit.a"
while [ $# -gt 0 ]; do
  file=$1 expr=$2; shift 2
  [ -f "$file" ] || fail "$file does not exist"
  obj=$BUILD/f32/${file%.c}.o member=$(basename "${file%.c}").o
  mkdir -p "$DIR/src/$(dirname "$file")"
  sed -e "$expr" "$file" > "$DIR/src/$file" || fail "sed '$expr' failed on $file"
  changed=$(diff "$file" "$DIR/src/$file" | grep -c '^>')
  [ "$changed" = 1 ] || fail "sed '$expr' changes $changed lines of $file, not one$([ "$changed" = 0 ] && echo ': it matches nothing')"
  # the object's compile command, with the mutated copy in place of the file: its quoted includes
  # are looked up beside the file in the tree (-iquote)
  cmd=$(make_cmd "$file" "$obj" " -c $file -o $obj")
  [ -n "$cmd" ] || fail "make -n prints no command that compiles $file into $obj"
  cmd="${cmd% -c $file -o $obj} -iquote $(dirname "$file") -c $DIR/src/$file -o $DIR/$member"
  eval "$cmd" || fail "the mutated $file does not compile"
  [ "$(ar t "$DIR/libdit.a" | grep -cxF "$member")" = 1 ] || fail "${MUTANT_LIB:-$LIB} holds no single $member to replace"
  ar r "$DIR/libdit.a" "$DIR/$member" 2>/dev/null || fail "ar r $member failed"
done
link=$(make_cmd "$LIB" "$BUILD/f32/bin/train" " -o $BUILD/f32/bin/train")
[ -n "$link" ] || fail "make -n prints no command that links $BUILD/f32/bin/train"
link=${link/" $LIB "/" $DIR/libdit.a "}
eval "${link/" -o $BUILD/f32/bin/train"/" -o $DIR/train"}" || fail "the link failed"
