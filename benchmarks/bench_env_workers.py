"""N worker-process envs vs one in-process env: env steps per second for the same ``B`` sub-envs.

``num_workers: W`` splits the env's ``B`` sub-envs over ``W`` processes (observations come back
through shared memory). With ``W`` >= the number of free cores every core steps simulators;
``W = 1`` shows the cost of the process boundary alone. The variants are measured round-robin
(``--rounds``), medians reported::

    OMP_NUM_THREADS=1 python benchmarks/bench_env_workers.py [--env auto|metaworld|reach|reach-sleep] \
        [--num-envs 8] [--workers 0 1 2 4]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from scale_common import env_kind, fmt_table, free_cores, interleaved, load_line, make_env, random_actions  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="auto", choices=["auto", "metaworld", "reach", "reach-sleep"])
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=4, help="chunk steps per measurement")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2, 4])
    parser.add_argument("--image-size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    kind, B, C, N = env_kind(args.env), args.num_envs, args.chunks, args.steps
    print(f"env {kind}, B={B}, C={C}, {load_line()}")
    envs = {
        W: make_env(kind, B, args.image_size, num_workers=W, ignore_terminations=True)
        for W in args.workers
        if not W or B % W == 0
    }
    acts = None
    for env in envs.values():
        env.reset()
        acts = random_actions(B, C, env.action_dim)
        env.chunk_step(acts)  # warm up (simulators built, workers started)

    def runner(env):
        return lambda: [env.chunk_step(acts) for _ in range(N)]

    times = interleaved({W: runner(env) for W, env in envs.items()}, args.rounds)
    for env in envs.values():
        env.close()
    first = next(iter(times))
    rows = [(W or "0 (in process)", f"{B * C * N / t:.0f}", f"{times[first] / t:.2f}") for W, t in times.items()]
    print(fmt_table(rows, ("num_workers", "env steps/s", f"speed vs num_workers={first}")))
    print(f"{load_line()}; free cores measured now: {free_cores():.1f} of 2")


if __name__ == "__main__":
    main()
