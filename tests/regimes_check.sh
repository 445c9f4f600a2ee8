#!/bin/sh
# regimes_check.sh CSV: recomputes every cell of `train bugs --regimes`'s table (regimes.csv) from
# the errors it stores, apart from the C code that printed the verdicts, and checks that the table
# obeys logic:
#   - a regime catches a bug exactly when one of its errors is over its level (NaN over, - never),
#     and did not run it exactly when it has none of its errors (all -);
#   - forward-only never catches a bug that changes only gradients (--exact: no forward bit differs);
#   - finite-gradients catches only bugs with inf or NaN gradients (ours' gradient error infinite);
#   - ours catches every bug where it shows, and neither ours nor ours-exact flags the correct code;
#   - ours-exact runs every row but those of in-context conditioning (no exact mode);
#   - a bug right in exact arithmetic (kind rounding) is missed by ours and caught by ours-exact.
# Prints each violation and exits 1 if there is one.
[ -r "$1" ] || { echo "usage: tests/regimes_check.sh regimes.csv (train bugs --regimes writes it)" >&2; exit 2; }
awk -F, '
function over(e, tau) { return e ~ /nan|inf/ || (e != "-" && e + 0 > tau + 0) }
function bad(what) { printf "regimes.csv row %d (%s): %s\n", NR, $1, what; fails++ }
NR == 1 {
    for (i = 1; i <= NF; i++) {
        if ($i ~ / error$/) { name = substr($i, 1, length($i) - 6); split(name, p, "/"); err[++n] = i; reg[n] = p[1]; col[name] = i }
        else if ($i ~ / verdict$/) { g = substr($i, 1, length($i) - 8); verdict[g] = i; regimes++ }
        else if ($i == "kind") kind = i
    }
    for (k = 1; k <= n; k++) if (!(reg[k] in verdict)) { print "regimes.csv: " reg[k] " has errors but no verdict"; fails++ }
    if (!("forward-only" in verdict) || !("finite-gradients" in verdict) || !("ours" in verdict) || !("ours-exact/forward" in col) || !("ours/grads" in col)) {
        print "regimes.csv: a regime the rules need is missing"; exit 1
    }
    next
}
{
    rows++
    for (g in verdict) caught[g] = measured[g] = 0
    for (k = 1; k <= n; k++) {
        if (over($(err[k]), $(err[k] + 1))) caught[reg[k]] = 1
        if ($(err[k]) != "-") measured[reg[k]] = 1
    }
    for (g in verdict) {
        want = !measured[g] ? "not run" : caught[g] ? "caught" : "missed"
        if ($(verdict[g]) != want) bad(g " says " $(verdict[g]) " but its errors say " want)
    }
    if ($(verdict["forward-only"]) == "caught" && $(col["ours-exact/forward"]) == 0)
        bad("forward-only catches a bug whose forward is bit-identical")
    if ($(verdict["finite-gradients"]) == "caught" && $(col["ours/grads"]) !~ /nan|inf/)
        bad("finite-gradients catches a bug whose gradients are finite")
    if ($kind == "bug" && $(verdict["ours"]) != "caught") bad("ours misses a bug where it shows")
    if ($kind == "rounding" && ($(verdict["ours"]) != "missed" || $(verdict["ours-exact"]) != "caught"))
        bad("a bug right in exact arithmetic: ours must miss it and ours-exact catch it")
    if ($kind == "correct" && ($(verdict["ours"]) != "missed" || $(verdict["ours-exact"]) == "caught"))
        bad("the correct code is flagged by ours")
    if ($(verdict["ours-exact"]) == "not run" && $2 !~ /--in-context/)
        bad("ours-exact did not run a config that has an exact mode")
}
END {
    if (fails) exit 1
    printf "regimes.csv: %d rows x %d regimes recomputed from %d errors each, every rule holds\n", rows, regimes, n
}' "$1"
