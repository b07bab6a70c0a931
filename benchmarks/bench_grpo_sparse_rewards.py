"""GRPO on a sparse success reward: how the number of groups and the group size decide whether it learns.

Runs the shipped ``toy/grpo_in_world_model.yaml`` (RL inside the toy world model, reward 1 at success, else 0) with
several ``num_envs`` / ``group_size`` for the same number of RL steps, each run in its own ``rlinf fit`` process,
and prints the held-out success (greedy, the 32 initial states) and the training success of the first and last
steps. ``--pixels_per_unit 1`` halves the square's speed: success by chance becomes rare (the sparse regime).

    python benchmarks/bench_grpo_sparse_rewards.py --steps 20 --pixels_per_unit 1

A group of G rollouts from one initial state teaches only when its outcomes differ: with success probability p,
P(informative) = 1 - p**G - (1 - p)**G (printed for the first step's training success).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

SIZES = ((16, 4), (64, 4), (64, 8), (128, 8), (256, 8), (256, 16))


def run(num_envs: int, group: int, steps: int, ppu: float, seed: int, root: str) -> dict:
    env = "model.init_args.env.init_args"
    batch = num_envs * 4  # every sample of the RL step (8 steps / 2 actions per chunk) in one optimizer step
    cmd = [sys.executable, "-m", "rlinf_core.cli.main", "fit", "--config", "toy/grpo_in_world_model.yaml",
           f"--seed_everything={seed}", f"--trainer.max_epochs={steps}", f"--trainer.check_val_every_n_epoch={steps}",
           f"--{env}.num_envs={num_envs}", f"--{env}.group_size={group}",
           f"--{env}.world_model.init_args.pixels_per_unit={ppu}",
           f"--model.init_args.global_batch_size={batch}", f"--model.init_args.micro_batch_size={batch}",
           f"--trainer.logger.init_args.save_dir={root}/runs"]  # fmt: skip
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - t0
    if out.returncode:
        raise SystemExit(out.stdout[-2000:] + out.stderr[-2000:])
    train = [float(x) for x in re.findall(r"step \d+/\d+ \| success_once ([\d.]+)%", out.stdout)]
    evals = re.findall(r"eval after step \d+: success_once ([\d.]+)%", out.stdout)
    return {"first": train[0] / 100, "last": train[-1] / 100, "eval": float(evals[-1]) / 100, "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="RL steps per run")
    parser.add_argument("--pixels_per_unit", type=float, default=1.0, help="ToyWorldModel speed (2: the config's)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds (each size runs once per seed)")
    opts = parser.parse_args()
    print(f"toy/grpo_in_world_model.yaml, pixels_per_unit {opts.pixels_per_unit}, {opts.steps} RL steps, "
          f"seeds {opts.seeds}")  # fmt: skip
    print("| num_envs | group_size | groups | train success, step 1 | P(informative group), step 1 "
          "| train success, last step | held-out success (32 states) | wall |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as root:
        for num_envs, group in SIZES:
            rows = [run(num_envs, group, opts.steps, opts.pixels_per_unit, s, root) for s in opts.seeds]
            p = sum(r["first"] for r in rows) / len(rows)
            informative = 1 - p**group - (1 - p) ** group
            mean = {k: sum(r[k] for r in rows) / len(rows) for k in ("last", "eval", "wall")}
            evals = " / ".join(f"{r['eval']:.1%}" for r in rows)
            print(f"| {num_envs} | {group} | {num_envs // group} | {p:.1%} | {informative:.2f} | {mean['last']:.1%} "
                  f"| {evals} | {mean['wall']:.0f} s |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
