#!/bin/sh
# install_pypi.sh VENV TORCH_VERSION PACKAGES...: PyTorch and PACKAGES (pure Python, or wheels with
# no torch pin) from PyPI into the virtual environment VENV, made with --system-site-packages so
# that Debian's packages (numpy, and torch 1.13) show through where PyPI is not reachable.
#
# PyPI's torch for Linux is its CUDA build: with all its dependencies it brings about 4 GB of CUDA
# libraries that a CPU never calls. So torch goes in alone, then what it needs on every platform,
# then only the CUDA wheels whose libraries this machine's CUDA toolkit lacks or has too old to load
# torch (TORCH_CUDA_WHEELS: the loader finds the rest in the toolkit, on the ld.so path). The install
# is then checked (import, attention forward and backward, a gloo all-reduce in 2 processes); where
# that fails, torch's full dependency set is installed and checked again; where that fails too,
# torch leaves VENV (Debian's shows through) and the tests that need PyTorch 2 are skipped.
set -u
VENV=$1 TORCH=$2; shift 2
TORCH_CUDA_WHEELS="nvidia-nccl-cu13 nvidia-cufile nvidia-cusparselt-cu13 nvidia-nvshmem-cu13"
PY=$VENV/bin/python
pip() { "$PY" -m pip install -q --disable-pip-version-check --timeout 60 "$@"; }
works() { "$PY" "$(dirname "$0")/torch_works.py" "$TORCH"; }

[ -x "$PY" ] || /usr/bin/python3 -m venv --system-site-packages "$VENV" || exit 1
if ! works >/dev/null 2>&1; then
  echo "deps: torch $TORCH from PyPI into $VENV, with the CUDA wheels the CUDA toolkit here lacks"
  pip --no-deps "torch==$TORCH" || { echo "deps: torch $TORCH could not be installed from PyPI"; exit 1; }
  # its requirements: every platform's as they are; of the Linux ones, the wheels named above
  reqs=$("$PY" -c 'import importlib.metadata as m, re, sys
wanted = sys.argv[1].split()
for r in m.requires("torch"):
    name = re.split("[ ;<>=~!\\[]", r)[0]
    if "extra ==" not in r and (";" not in r or name in wanted):
        print(r.split(";")[0].strip())' "$TORCH_CUDA_WHEELS")
  # nvidia-cufile comes through cuda-toolkit's extra, unpinned
  echo "$reqs" nvidia-cufile | xargs "$PY" -m pip install -q --disable-pip-version-check --timeout 60 --no-deps
  echo "deps: (pip's resolver may list torch's other CUDA wheels as missing below: they are left out on purpose)"
  echo "$reqs" | grep -v '^nvidia' | xargs "$PY" -m pip install -q --disable-pip-version-check --timeout 60
  if ! works; then
    echo "deps: that torch does not load here; installing torch $TORCH with all its dependencies (about 4 GB)"
    pip "torch==$TORCH" && works || {
      echo "deps: torch $TORCH does not work from $VENV; removed, so that Debian's torch is used"
      "$PY" -m pip uninstall -q -y torch; exit 1; }
  fi
fi
# the rest: their own requirements, less torch (pip would otherwise fetch its full CUDA set)
for p in "$@"; do
  case $p in yunchang*) pip --no-deps "$p" ;; *) pip "$p" ;; esac || { echo "deps: $p could not be installed"; exit 1; }
done
works
