"""attention_table.py LOG [OUT.md]: the attention lines of bench_kernels (ours) and sdpa_bench.py
(PyTorch's) in LOG set side by side: a row for each precision, length, head width and pass (fwd,
bwd, fwd+bwd) with both times, our TFLOP/s (backward counted as 2.5 forwards) and `ratio N.NN`
(our time over PyTorch's; below 1 is faster). A precision with no line of ours reads "not built".
Writes OUT.md (default: stdout) headed with the date, the GPU, its driver and the
commit."""
import datetime
import re
import subprocess
import sys

LINE = re.compile(r"attention (CUDA|torch) (\w+) T(\d+) H8 dh(\d+): fwd ([\d.]+) ms, bwd ([-\d.]+) ms, "
                  r"fwd\+bwd ([\d.]+) ms")
PASSES = (("fwd", 1.0), ("bwd", 2.5), ("fwd+bwd", 3.5))


def run(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def table(text):
    times = {}
    for m in LINE.finditer(text):
        who, prec, T, dh = m.group(1), m.group(2), int(m.group(3)), int(m.group(4))
        times[(who, prec, T, dh)] = [float(x) for x in m.group(5, 6, 7)]
    rows = ["| precision | T | head | pass | ours ms | ours TFLOP/s | PyTorch ms | ratio |",
            "|---|---|---|---|---|---|---|---|"]
    for (who, prec, T, dh), theirs in sorted(times.items(), key=lambda kv: (kv[0][1], kv[0][3], kv[0][2])):
        if who != "torch":
            continue
        ours = times.get(("CUDA", prec, T, dh))
        for i, (name, weight) in enumerate(PASSES):
            if ours is None:
                rows.append(f"| {prec} | {T} | {dh} | {name} | not built | - | {theirs[i]:.3f} | - |")
                continue
            tflops = weight * 4.0 * 8 * T * T * dh / (ours[i] * 1e-3) / 1e12
            rows.append(f"| {prec} | {T} | {dh} | {name} | {ours[i]:.3f} | {tflops:.1f} | {theirs[i]:.3f} | "
                        f"ratio {ours[i] / theirs[i]:.2f} |")
    return rows


def main():
    text = open(sys.argv[1]).read()
    gpu = run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    head = [f"# Attention on the GPU against PyTorch's SDPA",
            "",
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; GPU, driver: {gpu}; "
            f"commit {run(['git', 'rev-parse', '--short', 'HEAD'])}; batch 1, 8 heads; "
            "made by `tests/gpu/device_check.sh run bench` (tests/gpu/attention_table.py).",
            ""]
    out = "\n".join(head + table(text)) + "\n"
    if len(sys.argv) > 2:
        open(sys.argv[2], "w").write(out)
    else:
        sys.stdout.write(out)


if __name__ == "__main__":
    main()
