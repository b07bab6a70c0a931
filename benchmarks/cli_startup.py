"""Start-up time of the ``rlinf`` front door: ``--help``, ``plugins`` and ``configs`` vs ``python -c pass``.

    python benchmarks/cli_startup.py [--repeats 5]

Prints the median wall time of each command (a fresh process each run) and its ratio to a bare
interpreter start, plus the heavy libraries each path imports (should be none). Requirement: each
command answers in <= 2 s on the 2-core development machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

HEAVY = ("lightning", "transformers", "diffusers", "torch")
PROBE = (
    "import sys, contextlib, io\n"
    "from rlinf_core.cli.main import main\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n"
    "    main({args!r})\n"
    "print('heavy:' + ','.join(m for m in {heavy!r} if m in sys.modules))\n"
)


def wall(cmd: list[str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    opts = parser.parse_args()
    base = wall([sys.executable, "-c", "pass"], opts.repeats)
    print(f"{'command':<16} {'median s':>9} {'x python -c pass':>17}  heavy imports")
    print(f"{'python -c pass':<16} {base:>9.3f} {1.0:>17.1f}")
    for args in (["--help"], ["plugins"], ["configs"]):
        seconds = wall([sys.executable, "-m", "rlinf_core.cli.main", *args], opts.repeats)
        probe = (
            subprocess.run(
                [sys.executable, "-c", PROBE.format(args=args, heavy=HEAVY)],
                capture_output=True,
                text=True,
                check=False,
            )
            .stdout.strip()
            .splitlines()
        )
        heavy = probe[-1].removeprefix("heavy:") if probe and probe[-1].startswith("heavy:") else "? (probe failed)"
        print(f"{'rlinf ' + ' '.join(args):<16} {seconds:>9.3f} {seconds / base:>17.1f}  {heavy or 'none'}")


if __name__ == "__main__":
    main()
