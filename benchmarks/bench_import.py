"""How long a fresh process takes to `import minidl`, and to run its first ops, once kernels are cached.

Run: python benchmarks/bench_import.py [--runs 7]
Each measurement is a new interpreter (so nothing is warm but the OS file cache and Numba's
on-disk kernel cache); the first run fills that cache and is not counted.
"""
import argparse
import statistics
import subprocess
import sys

IMPORT = "import time; t = time.perf_counter(); import minidl; print(time.perf_counter() - t)"
FIRST_OPS = ("import time; t = time.perf_counter(); import minidl; "
             "x = minidl.randn(64, 64, requires_grad=True); (x * 2 + 1).exp().sum().backward(); "
             "print(time.perf_counter() - t)")


def seconds(code: str, runs: int) -> float:
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)  # fill the caches
    times = [float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                                  text=True).stdout) for _ in range(runs)]
    return statistics.median(times)


def main(runs: int = 7) -> None:
    print("| measurement | median of %d fresh processes |" % runs)
    print("|---|---:|")
    print(f"| `import minidl` | {seconds(IMPORT, runs):.3f} s |")
    print(f"| import + first forward/backward (loads the cached kernels) | {seconds(FIRST_OPS, runs):.3f} s |")
    print("\ntarget: `import minidl` under 1 s once kernels are cached")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh processes to measure (prints their median)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, not {args.runs}")
    main(args.runs)
