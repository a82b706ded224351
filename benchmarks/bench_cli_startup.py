"""Start-up of the CLI: ``clusterenv --version`` against ``python -c "import argparse, re"``.

Both run as fresh processes, interleaved, and the medians are compared: the baseline is what any
argparse-based Python command pays before doing anything. ``--version`` and ``--help`` must not
import a verb module, pydantic or netifaces. Goal: ratio <= 2.0 (median of 9 of each).

    python benchmarks/bench_cli_startup.py [--samples 9]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

GOAL = 2.0


def command() -> list[str]:
    """The installed ``clusterenv`` script next to this interpreter, else ``python -m``."""
    script = Path(sys.executable).with_name("clusterenv")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script), "--version"]
    found = shutil.which("clusterenv")
    if found is not None:
        return [found, "--version"]
    return [sys.executable, "-m", "clusterenv", "--version"]


def wall(argv: Sequence[str]) -> float:
    """Seconds one fresh process takes, start to exit."""
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def measure(samples: int) -> tuple[float, float]:
    """Median seconds of (clusterenv --version, python -c "import argparse, re")."""
    ours_argv, base_argv = command(), [sys.executable, "-c", "import argparse, re"]
    wall(ours_argv), wall(base_argv)  # warm the file cache for both
    ours, base = [], []
    for _ in range(samples):
        base.append(wall(base_argv))
        ours.append(wall(ours_argv))
    return statistics.median(ours), statistics.median(base)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=9)
    args = parser.parse_args(argv)
    ours, base = measure(args.samples)
    ratio = ours / base
    print(f"python -c 'import argparse, re' (baseline): {base * 1e3:7.1f} ms "
          f"(median of {args.samples})")
    print(f"{' '.join(Path(a).name for a in command())}: {ours * 1e3:7.1f} ms")
    print(f"ratio: {ratio:.2f} (goal <= {GOAL})")
    return 0 if ratio <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
