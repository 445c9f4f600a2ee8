#!/usr/bin/env bash
# place_check.sh TRAIN PYTHON: do the caption run's samples follow the place words? Trains the
# README's caption run (--cond text, 3000 steps), draws 8 samples of "a small red square <place>"
# for each of the 9 places of the shapes' captions, and measures where each sample's square lies
# (tests/bench/place_grid.py: the centre of its bright pixels). Against it, where the data puts a
# small shape of that place: the mean centre over the shapes' geometry (data/shapes.c: a radius of
# 0.55 to 0.75 of the largest, the centre uniform over its third of the span that keeps the shape
# inside a 1-pixel frame), computed here from that description. A row passes when its measured
# centre is nearest, on each axis, to its own third's. Exit 1 when a row does not.
set -eu
TRAIN=$(realpath "$1"); PY=${2:-python3}
WORK=$(mktemp -d /tmp/dit-place.XXXXXX); trap 'rm -rf "$WORK"' EXIT
S=20
"$TRAIN" --cond text --text-dropout 0.1 --steps 3000 --cfg-scale 3 --samples-per-class 0 --out "$WORK/run" |
  grep -E '^done' | cut -c1-60
places=("at the top left" "at the top" "at the top right" "at the left" "in the centre" "at the right"
        "at the bottom left" "at the bottom" "at the bottom right")
prompts=()
for p in "${places[@]}"; do prompts+=(--prompt "a small red square $p"); done
"$TRAIN" sample --ckpt "$WORK/run" "${prompts[@]}" --cfg-scale 3 --samples-per-class 8 --out "$WORK/places.png" > /dev/null
"$PY" "$(dirname "$0")/place_grid.py" "$WORK/places.png" 9 8 $S > "$WORK/centres"
# the data's mean centre of a small shape in each third, x or y in [0, 1]
expected=$(awk -v S=$S 'BEGIN { rmax = S / 2 - 1; rmin = 0.55 * rmax; if (rmin < 3) rmin = 3; top = 0.95 * rmax
  for (k = 0; k < 3; k++) { s = 0; n = 0
    for (i = 0; i < 200; i++) for (j = 0; j < 200; j++) {
      r = rmin + (top - rmin) * (i + 0.5) / 400; u = (k + (j + 0.5) / 200) / 3 # u0 < 0.5: small
      s += (1 + r + (S - 2 - 2 * r) * u) / S; n++ }
    printf "%.3f ", s / n } }')
echo "a small red square <place>, 8 samples each: the mean centre of its bright pixels (0 top or left, 1"
echo "bottom or right) against where the data puts a small shape of that place ($expected for the"
echo "three thirds)"
printf "%-22s %14s %14s  %s\n" place measured "the data's" verdict
fail=0
for i in "${!places[@]}"; do
  read -r mx my <<< "$(sed -n "$((i + 1))p" "$WORK/centres")"
  kx=$((i % 3)) ky=$((i / 3))
  line=$(awk -v mx="$mx" -v my="$my" -v kx=$kx -v ky=$ky -v e="$expected" 'BEGIN { split(e, t, " ")
    bx = 0; by = 0
    for (k = 1; k <= 3; k++) { if ((mx - t[k]) ^ 2 < (mx - t[bx + 1]) ^ 2) bx = k - 1; if ((my - t[k]) ^ 2 < (my - t[by + 1]) ^ 2) by = k - 1 }
    printf "%6.3f, %6.3f %6.3f, %6.3f  %s", mx, my, t[kx + 1], t[ky + 1], bx == kx && by == ky ? "follows" : "DOES NOT FOLLOW" }')
  printf "%-22s %s\n" "${places[$i]}" "$line"
  case $line in *"DOES NOT"*) fail=1 ;; esac
done
[ $fail = 0 ] && echo "every place followed" || echo "a place not followed"
exit $fail
