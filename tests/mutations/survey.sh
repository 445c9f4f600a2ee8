#!/usr/bin/env bash
# survey.sh: which one-line mutations of the data-movement code (tests/mutations/list) `train
# verify` catches. Each mutant is built fast (build_mutant.sh: the one mutated file compiled, its
# object swapped into a copy of the library) and runs `verify --exact --steps 3` and plain `verify
# --steps 3` at the mutation's rank count and flags; the table says whether each exits 1, and
# where locate (verify's tape check) puts the first divergence against where it should be. The
# unmutated program runs each configuration first (control): a mutation counts as caught only
# where the clean code passes. The table goes to stdout and OUT/survey.md, stamped with the date,
# commit and CPU; each run's output to OUT/NAME/{exact,plain}.log.
# usage (from the repository root, after make): tests/mutations/survey.sh BUILD [NAME ...]
#   NAME: only these mutations. Environment: OUT (default BUILD/mutations), STEPS (default 3).
set -u
BUILD=${1:?usage: tests/mutations/survey.sh BUILD [NAME ...]}; shift
ONLY=" $* "
OUT=${OUT:-$BUILD/mutations} STEPS=${STEPS:-3}
HERE=$(dirname "$0")
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
TRAIN=$BUILD/f32/bin/train
[ -x "$TRAIN" ] || { echo "survey: $TRAIN is missing: run make first" >&2; exit 2; }
mkdir -p "$OUT"
OUT=$(realpath "$OUT")

# PACKS: mixed-size images packed into rows of 40 tokens (as tests/cli_tests.sh)
mkdir -p "$OUT/mixed"
python3 "$HERE/../mixed_images.py" "$OUT/mixed"
PACKS="--model DiT-tiny/2 --input-size 16 --data $OUT/mixed --max-tokens 40 --batch 2"

trim() { local s=$1; s=${s#"${s%%[![:space:]]*}"}; printf '%s' "${s%"${s##*[![:space:]]}"}"; }

# run BINARY DIR MODE RANKS FLAGS: verify (MODE exact or plain) into DIR/MODE, its output in
# DIR/MODE.log; prints its verdict: "yes (curves, tape)" for exit 1 (what disagreed), "no",
# or "error (exit N)"
run() {
  local bin=$1 dir=$2 mode=$3 np=$4 flags=$5 rc what=""
  # shellcheck disable=SC2086
  timeout 600 "$bin" verify --ranks "$np" --steps "$STEPS" --samples-per-class 0 $([ "$mode" = exact ] && echo --exact) \
    $flags --out "$dir/$mode" > "$dir/$mode.log" 2>&1 < /dev/null
  rc=$?
  grep -q 'the runs DIVERGE' "$dir/$mode.log" && what="curves"
  grep -q '^NOT identical' "$dir/$mode.log" && what="${what:+$what, }bits"
  grep -q 'the step DIFFERS' "$dir/$mode.log" && what="${what:+$what, }tape"
  case $rc in 0) echo no ;; 1) echo "yes${what:+ ($what)}" ;; *) echo "error (exit $rc)" ;; esac
}
# the first divergence locate named in DIR/MODE.log: "NAME (backward, block 3, op attn.v)", or "none"
located() {
  local line
  line=$(grep -o 'first divergence: [^(]*([^)]*)' "$1/$2.log" | head -1)
  if [ -n "$line" ]; then echo "${line#first divergence: }"
  elif grep -q 'the step AGREES' "$1/$2.log"; then echo none
  else echo "no tape"; fi
}
# whether place (locate's) matches the expected pattern: "-" expects none
right() {
  local where=${1%% (*}
  if [ "$2" = - ]; then [ "$where" = none ] && echo yes || echo no
  else case $where in $2) echo yes ;; *) echo no ;; esac; fi
}

TABLE=$OUT/survey.md
{
  echo "# Mutations of the movement code: caught by verify --exact, by plain verify, and where locate puts them"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD 2>/dev/null || echo ' (with changes)'), $(grep -m 1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores; verify --steps $STEPS, $TRAIN's flags (tests/mutations/list)"
  echo
  echo "| mutation | file | ranks, flags | should first appear at | caught by --exact | caught by plain verify | locate (plain) | locate (--exact) | place right (--exact / plain) |"
  echo "|---|---|---|---|---|---|---|---|---|"
} > "$TABLE"

declare -A control
errors=0 count=0
while IFS='|' read -r name file np flags expect expr; do
  name=$(trim "$name")
  case $name in ''|'#'*) continue ;; esac
  file=$(trim "$file") np=$(trim "$np") flags=$(trim "$flags") expect=$(trim "$expect") expr=$(trim "$expr")
  [ "$ONLY" = "  " ] || [[ $ONLY == *" $name "* ]] || continue
  flags=${flags//PACKS/$PACKS}
  shown=$(trim "${flags//$PACKS/PACKS}")
  # the control: the clean program passes this configuration
  key="$np $flags"
  if [ -z "${control[$key]:-}" ]; then
    cdir="$OUT/control-$(echo "$np $shown" | tr -c 'A-Za-z0-9\n-' '_')"
    mkdir -p "$cdir"
    ce=$(run "$TRAIN" "$cdir" exact "$np" "$flags") cp_=$(run "$TRAIN" "$cdir" plain "$np" "$flags")
    control[$key]="$ce/$cp_"
    echo "control ($np ranks${shown:+ $shown}): --exact caught: $ce, plain caught: $cp_"
    if [ "$ce" != no ] || [ "$cp_" != no ]; then
      errors=$((errors + 1)); echo "survey: the clean program fails $np ranks $shown (see $cdir)" >&2
    fi
  fi
  count=$((count + 1))
  dir=$OUT/$name
  rm -rf "$dir"
  start=$SECONDS
  if ! "$HERE/build_mutant.sh" "$BUILD" "$dir" "$file" "$expr" > "$dir.build.log" 2>&1 < /dev/null; then
    errors=$((errors + 1)); echo "survey: $name: $(tail -1 "$dir.build.log")" >&2
    echo "| $name | $file | $np${shown:+, $shown} | $expect | not built: $(tail -1 "$dir.build.log") | | | | |" >> "$TABLE"
    continue
  fi
  exact=$(run "$dir/train" "$dir" exact "$np" "$flags")
  plain=$(run "$dir/train" "$dir" plain "$np" "$flags")
  lp=$(located "$dir" plain) le=$(located "$dir" exact)
  echo "$name: --exact caught: $exact; plain caught: $plain; locate: --exact $le, plain $lp (expected $expect: --exact $(right "$le" "$expect"), plain $(right "$lp" "$expect")) [$((SECONDS - start)) s]"
  echo "| $name | ${file#parallel/} | $np${shown:+, $shown} | $expect | $exact | $plain | $lp | $le | $(right "$le" "$expect") / $(right "$lp" "$expect") |" >> "$TABLE"
done < "$HERE/list"
{
  echo
  echo "PACKS: $PACKS. \"curves\": the loss curves disagree; \"bits\": --exact's files differ; \"tape\": a tensor of one step is beyond tolerance (plain) or differs in a bit (--exact). \"place right\": locate's first divergence (in --exact's tape, then plain verify's) matches the expected place; \"-\" expects none in the tape."
} >> "$TABLE"
echo
cat "$TABLE"
echo "survey: $count mutations, $errors errors; the table is in $TABLE"
[ "$errors" = 0 ]
