#!/usr/bin/env bash
# record.sh NAME TITLE -- COMMAND...: runs one part of `make bench`, shows its output, and keeps it in
# docs/results/NAME.md stamped with the date, the CPU and the commit (the figures the docs quote
# come from these files). The file is replaced only when the part succeeds.
set -o pipefail
name=$1 title=$2; shift 3
out=docs/results/$name.md
mkdir -p docs/results
cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
width=$(grep -m1 -o -w 'avx512f' /proc/cpuinfo || grep -m1 -o -w 'avx2' /proc/cpuinfo || echo "no AVX2")
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && commit="$commit (with uncommitted changes)"
{
  echo "# $title"
  echo
  echo "Written by \`make bench\` ($*) on $(date -u '+%Y-%m-%d %H:%M UTC'); CPU: $cpu ($width, $(nproc) cores); commit $commit; load average before: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
  echo '```'
} > "$out.tmp"
if "$@" 2>&1 | tee -a "$out.tmp"; then
  echo '```' >> "$out.tmp"; mv "$out.tmp" "$out"; echo "(kept in $out)"
else
  status=$?; rm -f "$out.tmp"; exit $status
fi
