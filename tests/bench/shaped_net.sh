# shaped_net.sh, sourced by the benches on a shaped network (bench_plan.sh, bench_overlap.sh):
# re-runs the calling script in a network namespace of its own (unshare -n; root, tc and unshare
# needed, else it says "skipped" and exits 0), brings its loopback up, and sets WORK (a temporary
# folder, removed at exit with the shaping), MPIRUN (Open MPI's TCP transport over that loopback;
# MPIRUN_EXTRA is added) and shape RATE (tc's token bucket on the loopback, with a burst of 256 KiB:
# above the loopback's 64 KiB MTU, below which every large packet is dropped and the job hangs).
if [ "$(id -u)" != 0 ] || ! command -v tc >/dev/null || ! command -v unshare >/dev/null; then
  echo "skipped: the shaped network needs root, tc and unshare"; exit 0
fi
if [ -z "${DIT_SHAPED_NETNS:-}" ]; then
  exec unshare -n env DIT_SHAPED_NETNS=1 bash "$0" "$@"
fi
ip link set lo up
WORK=$(mktemp -d /tmp/dit-shaped.XXXXXX); trap 'tc qdisc del dev lo root 2>/dev/null; rm -rf "$WORK"' EXIT
MPIRUN="mpirun --oversubscribe --allow-run-as-root --mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo ${MPIRUN_EXTRA:-}"
shape() { tc qdisc replace dev lo root tbf rate "$1" burst 256kb latency 500ms; }
