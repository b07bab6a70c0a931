"""End-to-end efficiency: env-steps/s of whole GRPO training epochs vs the simulator alone.

Trains the quickstart's GRPO config (``configs/metaworld/quickstart_grpo.yaml``, built through
the real ``rlinf fit`` CLI) from the tiny OpenVLA-OFT of ``rlinf_policy_openvla.make_tiny`` (no SFT
stage: episodes run to the horizon, so the speed does not depend on what the policy learned), and
before every training epoch steps the simulator with no policy, in the same envs, chunking and
render cadence (reset, then ``max_steps_per_rollout_epoch / C`` chunks of C steps, one render per
chunk):

* ``Env.chunk_step``: the training env's own stage envs (same clones, worker processes, seeds),
  random actions, all stages stepping at once — the rollout with an infinitely fast policy;
* ``raw simulator``: metaworld's envs driven directly through the plugin's simulator layer
  (``TaskSim`` step, ``SceneRenderer``), split into the same processes: no rlinf ``Env`` (no
  episode bookkeeping, observations or inter-process hand-off);
* with ``--in-process``: both again in one process with all sub-envs (the adapter's own cost).

The variants run round-robin (one of each before every training epoch), so load changes on a
shared machine hit all alike. A training epoch is timed from one epoch start to the next: rollout,
advantages, update, metric logging and the checkpoint Lightning writes; eval is switched off
(``check_val_every_n_epoch`` beyond the run; ``time/eval`` is reported by evals separately).
Prints wall and CPU seconds (main process + env workers) and env-steps/s of each, the ratio
training / simulator (target >= 0.8) and where the training epoch's time goes (``time/*``
metrics plus clocks on the update, logging and checkpoint). ``--old-render-threads`` adds the
stage envs with every stage's workers rendering on all cores (the behaviour before
``WorkerEnv.concurrent_envs``); ``--update-threads N`` gives the update N torch threads; unknown options
go to ``rlinf fit``::

    OMP_NUM_THREADS=1 python benchmarks/bench_e2e.py [--epochs 5] [--in-process] [--profile out.prof]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "metaworld" / "quickstart_grpo.yaml"

import lightning.pytorch as pl  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from rlinf_core.envs.vector import WorkerEnv  # noqa: E402
from scale_common import Clock, fmt_table, load_line  # noqa: E402  (sets OMP_NUM_THREADS / MUJOCO_GL defaults)


# ------------------------------------------------------------------------------------------------ CPU time
def cpu_seconds(pids: list[int]) -> float:
    """CPU seconds (user + system, all threads) used so far by this process and ``pids``."""
    tick = os.sysconf("SC_CLK_TCK")
    total = time.process_time()
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    return total


def worker_pids(envs: list) -> list[int]:
    return [pid for e in envs if isinstance(e, WorkerEnv) for pid in e.pids]


# ------------------------------------------------------------------------------------------------ simulator only
class EnvOnly:
    """One epoch of ``Env.chunk_step`` with random actions on ``envs`` (stepping concurrently).

    Args:
        envs: the stage envs (unbuilt clones of the training env, sharded like the module's).
        n_chunks: chunk steps per epoch.
        chunk: env steps per chunk (C).
    """

    def __init__(self, envs: list, n_chunks: int, chunk: int) -> None:
        self.envs, self.n_chunks, self.chunk = envs, n_chunks, chunk
        self.pool = ThreadPoolExecutor(len(envs))
        self.gen = torch.Generator().manual_seed(0)

    def __call__(self) -> int:
        list(self.pool.map(lambda e: e.reset(), self.envs))
        steps = 0
        for _ in range(self.n_chunks):
            acts = [torch.rand(e.num_envs, self.chunk, e.action_dim, generator=self.gen) * 2 - 1 for e in self.envs]
            for res in self.pool.map(lambda ea: ea[0].chunk_step(ea[1]), zip(self.envs, acts)):
                steps += int(res.valid.sum())
        for e in self.envs:
            e.flush_episodes()
            e.pop_episodes()
        return steps

    def pids(self) -> list[int]:
        return worker_pids(self.envs)

    def close(self) -> None:
        self.pool.shutdown()
        for e in self.envs:
            e.close()


def _raw_init(kwargs: dict, render_threads: int) -> None:
    """Worker initializer: a :class:`RawSim` for this process (kept in a module global)."""
    global _RAW
    torch.set_num_threads(1)
    os.environ.setdefault("LP_NUM_THREADS", str(render_threads))  # as rlinf's env workers do
    _RAW = RawSim(**kwargs)


def _raw_epoch(_: int) -> int:
    return _RAW()


class RawSim:
    """metaworld's MuJoCo envs driven directly: no rlinf Env, no observations, no episode records.

    Same cadence as the env: every sub-env resets to a scene, then ``n_chunks`` chunks of
    ``chunk`` steps (a sub-env stops at ``max_episode_steps``), one render per sub-env per chunk.

    Args:
        tasks: task per sub-env, cycled.
        num_envs: sub-envs in this process.
        n_chunks, chunk, max_episode_steps, image_size, camera_name, fast_render: as the env's.
        seed: seed of actions and scenes.
    """

    def __init__(self, tasks: list[str], num_envs: int, n_chunks: int, chunk: int, max_episode_steps: int,
                 image_size: int, camera_name: str, fast_render: bool, seed: int = 0) -> None:  # fmt: skip
        from rlinf_env_metaworld import _sim

        _sim.setup_gl(None)
        self.renderer = _sim.SceneRenderer(image_size, fast_render)
        self.sims = [_sim.TaskSim(tasks[i % len(tasks)], self.renderer) for i in range(num_envs)]
        self.cam = self.sims[0].camera_id(camera_name)
        self.flip = camera_name.startswith("corner")
        self.out = np.zeros((num_envs, image_size, image_size, 3), np.uint8)
        self.n_chunks, self.chunk, self.horizon = n_chunks, chunk, max_episode_steps
        self.rng = np.random.default_rng(seed)
        #: images rendered so far
        self.renders = 0

    def _render_all(self) -> None:
        with self.renderer:
            for i, sim in enumerate(self.sims):
                self.renderer.render(sim, self.cam, self.flip, self.out[i])
        self.renders += len(self.sims)

    def __call__(self) -> int:
        for sim in self.sims:
            sim.reset(int(self.rng.integers(2**31)))
        self._render_all()
        steps = 0
        for k in range(self.n_chunks):
            acts = self.rng.uniform(-1, 1, (len(self.sims), self.chunk, 4)).astype(np.float32)
            for c in range(self.chunk):
                if k * self.chunk + c >= self.horizon:
                    break
                for i, sim in enumerate(self.sims):
                    sim.step(acts[i, c])
                    steps += 1
            self._render_all()
        return steps

    def pids(self) -> list[int]:
        return []

    def close(self) -> None:
        for sim in self.sims:
            sim.close()
        self.renderer.close()


class RawSimProcs:
    """:class:`RawSim` in ``procs`` worker processes at once (the training env's process layout)."""

    def __init__(self, procs: int, **kwargs) -> None:
        import multiprocessing as mp

        self.procs = procs
        from rlinf_core.envs.vector.workers import render_threads

        threads = render_threads(os.cpu_count() or 1, procs)
        self.pool = mp.get_context("spawn").Pool(procs, initializer=_raw_init, initargs=(kwargs, threads))

    def __call__(self) -> int:
        return sum(self.pool.map(_raw_epoch, range(self.procs), chunksize=1))

    def pids(self) -> list[int]:
        return [p.pid for p in self.pool._pool]

    def close(self) -> None:
        self.pool.close()
        self.pool.join()


# ------------------------------------------------------------------------------------------------ training
class E2EBench(pl.Callback):
    """Times every training epoch (epoch start to epoch start) and runs the no-policy variants in between.

    Args:
        variants: name -> function running one simulator-only epoch and returning its env steps.
        warmup: training epochs not measured (the first builds simulators and starts workers).
        profile: cProfile the measured training epochs into this file.
        update_threads: torch intra-op threads during the update (0: leave as is); the rollout
            keeps one thread so that the env processes get the other cores.
    """

    def __init__(self, variants: dict[str, Callable[[], int]], warmup: int, profile: str | None,
                 update_threads: int = 0) -> None:  # fmt: skip
        self.variants = variants
        self.update_threads = update_threads
        self.warmup = warmup
        self.clock = Clock()
        self.epochs: list[dict[str, float]] = []
        self.sim: dict[str, list[tuple[float, int]]] = defaultdict(list)
        self.loads: list[float] = []
        self.profiler = cProfile.Profile() if profile else None
        self.profile_path = profile
        self._t0: float | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        for opt in trainer.optimizers:
            self.clock.wrap(opt, "step", "optimizer step")
        self.clock.wrap(pl_module.policy, "evaluate", "update forward")
        self.clock.wrap(pl_module, "manual_backward", "update backward")
        self.clock.wrap(pl_module, "_optimizer_step", "optimizer step + clip")
        self.clock.wrap(trainer, "save_checkpoint", "checkpoint")
        for logger in trainer.loggers:
            self.clock.wrap(logger, "log_metrics", "logger")

    def _close_epoch(self, trainer) -> None:
        if self._t0 is None:
            return
        wall = time.perf_counter() - self._t0
        if self.profiler is not None:
            self.profiler.disable()
        m = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(("time/", "env/"))}
        m["wall"] = wall
        m["cpu"] = cpu_seconds(self._pids) - self._c0
        m.update({f"clock/{k}": v for k, v in self.clock.spent.items()})
        m["env_steps"] = m.get("env/episode_len", 0.0) * m.get("env/num_trajectories", 0.0)
        self.epochs.append(m)

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._close_epoch(trainer)
        self.loads.append(os.getloadavg()[0])
        if trainer.current_epoch >= self.warmup:
            for name, fn in self.variants.items():
                pids = fn.pids()
                t0, c0 = time.perf_counter(), cpu_seconds(pids)
                steps = fn()
                self.sim[name].append((time.perf_counter() - t0, steps, cpu_seconds(pids) - c0))
        self.clock.spent.clear()
        if self.profiler is not None and trainer.current_epoch >= self.warmup:
            self.profiler.enable()
        self._pids = worker_pids(pl_module._stage_envs)
        self._c0 = cpu_seconds(self._pids)
        self._t0 = time.perf_counter()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.update_threads and batch_idx == 0:
            torch.set_num_threads(self.update_threads)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if self.update_threads:
            torch.set_num_threads(1)

    def on_train_end(self, trainer, pl_module) -> None:
        self._close_epoch(trainer)
        self._t0 = None
        if self.profiler is not None:
            self.profiler.dump_stats(self.profile_path)


def _build_cli(work: Path, model_path: Path, epochs: int, extra: list[str]):
    """The quickstart GRPO run, parsed by the real ``rlinf fit`` CLI (not started)."""
    from rlinf_core.cli.lightning import RLinfCLI, trainer_defaults
    from rlinf_core.plugins.manager import load_plugins

    load_plugins()
    import rlinf_core.rl.algorithms  # noqa: F401
    import rlinf_core.rl.module  # noqa: F401

    args = [
        "--config", str(CONFIG),
        f"--model.init_args.policy.init_args.model_path={model_path}",
        f"--trainer.max_epochs={epochs}",
        f"--trainer.check_val_every_n_epoch={epochs + 1}",  # eval excluded
        f"--trainer.logger.init_args.save_dir={work / 'tb'}",
        f"--trainer.default_root_dir={work}",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        "--model.init_args.export_policy=false",
        *extra,
    ]  # fmt: skip
    argv, sys.argv = sys.argv, sys.argv[:1]  # the benchmark's own options are not the CLI's
    try:
        return RLinfCLI(
            pl.LightningModule, None, subclass_mode_model=True, args=args, run=False,
            save_config_kwargs={"overwrite": True}, seed_everything_default=0, trainer_defaults=trainer_defaults(),
        )  # fmt: skip
    finally:
        sys.argv = argv


def _stage_clones(module, concurrent: bool = True) -> list:
    """Clones of the module's stage envs (same arguments, seeds and shards), not yet built.

    ``concurrent=False``: each stage's workers take all the cores for rendering (before the
    stages shared them).
    """
    S = module.rollout_cfg.pipeline_stage_num
    env = module.env
    if S == 1:
        envs = [env.clone()]
    else:
        envs = [env.clone(num_envs=env.num_envs // S, seed=env.seed + 1000 * s) for s in range(S)]
    for s, e in enumerate(envs):
        if isinstance(e, WorkerEnv):
            e.concurrent_envs = S if concurrent else 1
        e.shard(s, S)
    return envs


# ------------------------------------------------------------------------------------------------ report
def _median(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(r.get(key, 0.0) for r in rows)


def _mean(rows: list[dict[str, float]], key: str) -> float:
    return statistics.fmean(r.get(key, 0.0) for r in rows)


def _breakdown(rows: list[dict[str, float]]) -> list[tuple[str, float]]:
    """Mean seconds per part of a training epoch (the parts add up to the mean wall time)."""
    g = lambda k: _mean(rows, k)  # noqa: E731
    rollout, policy, wait = g("time/rollout"), g("time/rollout_policy"), g("time/rollout_env_wait")
    fwd, bwd, opt = g("clock/update forward"), g("clock/update backward"), g("clock/optimizer step + clip")
    step, wall = g("time/step"), g("wall")
    ckpt, logger = g("clock/checkpoint"), g("clock/logger")
    parts = [
        ("rollout: waiting for the envs", wait),
        ("rollout: policy inference", policy),
        ("rollout: collector bookkeeping", rollout - policy - wait),
        ("advantages", g("time/advantages")),
        ("update: forward (evaluate)", fwd),
        ("update: backward", bwd),
        ("update: clip + optimizer step", opt),
        ("update: loss, metrics, Lightning loop", step - rollout - g("time/advantages") - fwd - bwd - opt),
        ("epoch end: checkpoint", ckpt),
        ("epoch end: logger", logger),
        ("epoch end: other (metric reduction, hooks)", wall - step - ckpt - logger),
    ]
    return parts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5, help="measured training epochs (RL steps)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured first epochs")
    parser.add_argument("--in-process", action="store_true", help="also run both no-policy variants in one process")
    parser.add_argument(
        "--old-render-threads",
        action="store_true",
        help="also step the stage envs with every stage's workers using all cores for rendering",
    )
    parser.add_argument("--profile", default=None, help="cProfile the measured training epochs into this file")
    parser.add_argument(
        "--update-threads",
        type=int,
        default=0,
        help="torch threads during the update only (default: OMP_NUM_THREADS for everything)",
    )
    parser.add_argument("--work", default=None, help="scratch directory (default: a temporary one)")
    # the rest are rlinf fit options, e.g. --model.init_args.micro_batch_size=52
    args, extra = parser.parse_known_args(argv)
    tmp = tempfile.TemporaryDirectory(prefix="bench_e2e_") if args.work is None else None
    work = Path(args.work or tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    print(f"start: {load_line()}", flush=True)

    from rlinf_policy_openvla.make_tiny import make_tiny

    model_path = make_tiny(
        work / "tiny_oft", kind="oft", norm_keys=["metaworld"], action_dim=4, proprio_dim=4, num_action_chunks=8
    )  # fmt: skip (the quickstart's make_tiny call)
    total = args.warmup + args.epochs
    cli = _build_cli(work, model_path, total, extra)
    module, trainer = cli.model, cli.trainer
    env, ro = module.env, module.rollout_cfg
    C = module.policy.num_action_chunks
    n_chunks = ro.max_steps_per_rollout_epoch // C
    workers = env.num_workers if isinstance(env, WorkerEnv) else 0
    S, W = ro.pipeline_stage_num, max(workers, 1)
    raw_kw = dict(tasks=env.task_names, n_chunks=n_chunks, chunk=C, max_episode_steps=env.max_episode_steps,
                  image_size=env.unwrapped.render.image_size, camera_name=env.unwrapped.render.camera_name,
                  fast_render=env.unwrapped.render.fast_render)  # fmt: skip
    layout = f"{S} stage(s) x {workers} worker process(es)"
    variants = {
        f"Env.chunk_step, {layout}": EnvOnly(_stage_clones(module), n_chunks, C),
        f"raw simulator, {S * W} processes": RawSimProcs(S * W, num_envs=env.num_envs // (S * W), **raw_kw),
    }
    if args.old_render_threads:
        variants[f"Env.chunk_step, {layout}, render threads per stage (before)"] = EnvOnly(
            _stage_clones(module, concurrent=False), n_chunks, C
        )
    if args.in_process:
        variants["Env.chunk_step, 1 process"] = EnvOnly([env.unwrapped.clone()], n_chunks, C)
        variants["raw simulator, 1 process"] = RawSim(num_envs=env.num_envs, **raw_kw)
    print(f"{type(env).__name__} {env.task_names}, {env.num_envs} envs, {layout}, {n_chunks} chunks of C={C}, "
          f"horizon {env.max_episode_steps}, {env.unwrapped.render.image_size}px; {args.warmup} warm-up + "
          f"{args.epochs} measured epochs", flush=True)  # fmt: skip
    bench = E2EBench(variants, args.warmup, args.profile, args.update_threads)
    trainer.callbacks.append(bench)
    for fn in variants.values():  # build simulators and start processes outside the timings
        fn()
    t0 = time.perf_counter()
    trainer.fit(module)
    fit_s = time.perf_counter() - t0
    for fn in variants.values():
        fn.close()

    rows = bench.epochs[args.warmup :]
    train_sps = statistics.median(r["env_steps"] / r["wall"] for r in rows)
    sims = {k: statistics.median(n / t for t, n, _ in v) for k, v in bench.sim.items()}
    print()
    table = [("training epoch (rollout + update + logging + checkpoint)", f"{_median(rows, 'wall'):.2f}",
              f"{_median(rows, 'cpu'):.2f}", f"{_median(rows, 'env_steps'):.0f}", f"{train_sps:.0f}", "")]  # fmt: skip
    for name, v in bench.sim.items():
        table.append((f"no policy: {name}", f"{statistics.median(t for t, _, _ in v):.2f}",
                      f"{statistics.median(c for _, _, c in v):.2f}", f"{statistics.median(n for _, n, _ in v):.0f}",
                      f"{sims[name]:.0f}", f"{train_sps / sims[name]:.2f}"))  # fmt: skip
    print(fmt_table(table, ("per epoch (median)", "seconds", "CPU s", "env steps", "env steps/s", "training / this")))
    print()
    wall = _mean(rows, "wall")
    parts = _breakdown(rows)
    print(fmt_table([(k, f"{v:.3f}", f"{100 * v / wall:.0f}%") for k, v in parts],
                    ("training epoch, where the time goes (means)", "seconds", "share")))  # fmt: skip
    print(
        f"(env time summed over stages: {_mean(rows, 'time/rollout_env_busy'):.2f} s; "
        f"fit incl. start-up and variants: {fit_s:.0f} s)"
    )
    print(f"load average (1 min) at the epochs: {', '.join(f'{x:.2f}' for x in bench.loads)}; end: {load_line()}")
    if args.profile:
        print(f"\nprofile of the measured training epochs (main process) in {args.profile}; top by own time:")
        pstats.Stats(args.profile).sort_stats("tottime").print_stats(15)
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
