"""Start-up time of the commands a new user types first: `convinit --help`, `--version`, `models`,
`configs`, `datasets`, beside a bare `python -c pass` and `python -c "import torch"`.

Each command runs as a fresh process (what a user's shell does), interleaved over `--repeats`
rounds; the median wall time is printed per command. Run: `python benchmarks/startup.py`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "python -c 'import torch'": [sys.executable, "-c", "import torch"],
    "convinit --help": [sys.executable, "-m", "convinit", "--help"],
    "convinit --version": [sys.executable, "-m", "convinit", "--version"],
    "convinit models": [sys.executable, "-m", "convinit", "models"],
    "convinit configs": [sys.executable, "-m", "convinit", "configs"],
    "convinit datasets": [sys.executable, "-m", "convinit", "datasets"],
    "convinit train --help": [sys.executable, "-m", "convinit", "train", "--help"],
}


def wall_time(argv: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    code = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    return time.perf_counter() - start, code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    failed: dict[str, int] = {}
    for _ in range(repeats):  # interleaved: a busy stretch of the machine hits every command alike
        for name, argv in COMMANDS.items():
            seconds, code = wall_time(argv)
            times[name].append(seconds)
            if code:
                failed[name] = code
    print(f"start-up, median of {repeats} interleaved runs (fresh process each)")
    for name, values in times.items():
        spread = f"min {min(values):.2f}, max {max(values):.2f}"
        status = f"  exit {failed[name]}" if name in failed else ""
        print(f"{name:28s} {statistics.median(values):6.2f} s  ({spread}){status}")


if __name__ == "__main__":
    main()
