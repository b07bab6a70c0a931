"""Framework overhead: the share of an RL step (Lightning epoch) not spent in env stepping or model math.

Trains ``RLModule`` (GRPO) for a few epochs under a Lightning ``Trainer`` and times, per epoch:

* env: ``reset`` / ``chunk_step`` of the env (simulation and rendering);
* inference: the policy's ``act`` during the rollout;
* update math: the policy's ``evaluate`` (forward), the loss, ``backward`` and the optimizer step;
* overhead: everything else (Lightning's loop and logging, rollout bookkeeping, advantages,
  sample assembly and shuffling, host copies).

Two setups: ``toy`` (ReachEnv 32 px + TinyVLAPolicy: every part is tiny, so this is the worst
case for the overhead share) and ``realistic`` (MetaWorld 128 px, or CostlyReachEnv, + a policy
calibrated to cost about as much as the env)::

    OMP_NUM_THREADS=1 python benchmarks/bench_overhead.py [--setup toy realistic] [--epochs 4]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import lightning.pytorch as pl  # noqa: E402

from rlinf_core.builtin.toy_env import ReachEnv  # noqa: E402
from rlinf_core.builtin.toy_policy import TinyVLAPolicy  # noqa: E402
from rlinf_core.rl.algorithms import GRPO  # noqa: E402
from rlinf_core.rl.config import OptimConfig, RolloutConfig  # noqa: E402
from rlinf_core.rl.module import RLModule  # noqa: E402
from scale_common import (  # noqa: E402
    Clock,
    calibrate_policy,
    env_kind,
    fmt_table,
    load_line,
    make_env,
    random_actions,
    time_median,
)


class _EpochTimer(pl.Callback):
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.epochs: list[dict[str, float]] = []

    def on_train_start(self, trainer, pl_module) -> None:
        for opt in trainer.optimizers:
            self.clock.wrap(opt, "step", "update")

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.clock.spent.clear()
        self.t0 = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.epochs.append({"total": time.perf_counter() - self.t0, **self.clock.spent})


def _module(setup: str, kind: str, num_envs: int, chunks: int, steps: int):
    if setup == "toy":
        env = ReachEnv(num_envs=num_envs, group_size=4, max_episode_steps=steps, image_size=32)
        policy = TinyVLAPolicy(action_dim=2, num_action_chunks=chunks, add_value_head=False)
    else:
        env = make_env(kind, num_envs, 128, group_size=4, max_episode_steps=steps)
        probe = make_env(kind, num_envs, 128)
        obs = probe.reset()
        acts = random_actions(num_envs, chunks, probe.action_dim)
        t_env = time_median(lambda: probe.chunk_step(acts), 3)
        probe.close()
        state_dim = obs.states.shape[1] if obs.states is not None else 0
        policy = calibrate_policy(obs, t_env, env.action_dim, chunks, state_dim)
    rollout = RolloutConfig(max_steps_per_rollout_epoch=steps, show_progress=False)
    module = RLModule(
        env=env,
        policy=policy,
        algorithm=GRPO(update_epoch=1),
        rollout=rollout,
        optim=OptimConfig(lr=1e-3),
        global_batch_size=num_envs * steps // chunks,
        micro_batch_size=num_envs,
        export_policy=False,
    )
    return module, env, policy


def run(setup: str, kind: str, epochs: int, num_envs: int, chunks: int, steps: int) -> dict[str, float]:
    module, env, policy = _module(setup, kind, num_envs, chunks, steps)
    clock = Clock()
    clock.wrap(env, "chunk_step", "env")
    clock.wrap(env, "reset", "env")
    clock.wrap(policy, "act", "inference")
    clock.wrap(policy, "evaluate", "update")
    clock.wrap(module, "manual_backward", "update")
    clock.wrap(module.algorithm, "loss", "update")
    timer = _EpochTimer(clock)
    trainer = pl.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        use_distributed_sampler=False,
        callbacks=[timer],
    )
    trainer.fit(module)
    env.close()
    rows = timer.epochs[1:]  # the first epoch builds simulators
    mean = {k: sum(r.get(k, 0.0) for r in rows) / len(rows) for k in ("total", "env", "inference", "update")}
    mean["overhead"] = mean["total"] - mean["env"] - mean["inference"] - mean["update"]
    return mean


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setup", nargs="+", default=["toy", "realistic"], choices=["toy", "realistic"])
    parser.add_argument("--env", default="auto", choices=["auto", "metaworld", "reach"])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=32, help="env steps per rollout (max_steps_per_rollout_epoch)")
    args = parser.parse_args(argv)
    kind = env_kind(args.env)
    print(f"B={args.num_envs}, C={args.chunks}, {args.steps} env steps per rollout, {load_line()}")
    rows = []
    for setup in args.setup:
        m = run(setup, kind, args.epochs, args.num_envs, args.chunks, args.steps)
        label = "toy (ReachEnv 32px + TinyVLA)" if setup == "toy" else f"realistic ({kind} 128px + calibrated policy)"
        share = lambda k: f"{m[k]:.3f} ({100 * m[k] / m['total']:.0f}%)"  # noqa: E731
        rows.append((label, f"{m['total']:.3f}", share("env"), share("inference"), share("update"), share("overhead")))
    print(fmt_table(rows, ("setup", "epoch s", "env", "inference", "update math", "framework overhead")))


if __name__ == "__main__":
    main()
