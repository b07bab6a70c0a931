"""Real multi-rank ``rlinf fit`` runs on CPU, as subprocesses (core's ``tests/scale`` and plugins' strategy tests)::

    from rlinf_core.testing.multirank import check_ranks, reach_config, run_fit
    cfg = reach_config(tmp_path, "ddp", "PPO", policy={"class_path": "TinyVLAPolicy", "init_args": {...}})
    records = run_fit(tmp_path, cfg)  # one dict per rank, written by ScaleProbe
    check_ranks(records)

:class:`ScaleProbe` (a callback ``reach_config`` adds) makes each rank write what it saw to ``rank<k>.json``: its
share of initial states, the rollout reset ids, the gathered metrics and digests of the full policy parameters.
:func:`assert_trains_like` compares two runs of one config (e.g. DDP and a sharded strategy) within a float32
bound that holds on any CPU.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import yaml

REACH_TASKS = 3  #: ReachEnv's tasks (colours)


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def full_params(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter's full value, float32 on CPU (sharded parameters are gathered: call on all ranks)."""
    named = sorted(module.named_parameters(), key=lambda kv: kv[0])
    return {name: _full(p.detach()).float().cpu() for name, p in named}


def params_digest(params: dict[str, torch.Tensor]) -> str:
    """sha1 of :func:`full_params`' values."""
    h = hashlib.sha1()
    for name, value in params.items():
        h.update(name.encode())
        h.update(value.numpy().tobytes())
    return h.hexdigest()


class ScaleProbe(pl.Callback):
    """Records per rank: shard pools, rollout reset ids, gathered metrics, parameter digests, optimizer steps.

    Args:
        out_dir: directory for ``rank<k>.json``.
        save_params: rank 0 also writes the full parameters at fit start and end to ``params_start.safetensors`` /
            ``params_end.safetensors`` (for :func:`end_weight_excess`).
    """

    def __init__(self, out_dir: str, save_params: bool = False) -> None:
        self.out_dir = Path(out_dir)
        self.save_params = save_params
        self.record: dict = {"epochs": []}

    def _params(self, trainer, pl_module, stage: str) -> str:
        params = full_params(pl_module.policy)
        if self.save_params and trainer.global_rank == 0:
            from safetensors.torch import save_file

            self.out_dir.mkdir(parents=True, exist_ok=True)
            save_file(params, self.out_dir / f"params_{stage}.safetensors")
        return params_digest(params)

    def on_fit_start(self, trainer, pl_module) -> None:
        self.record["rank"] = trainer.global_rank
        self.record["world_size"] = trainer.world_size
        self.record["strategy"] = type(trainer.strategy).__name__
        self.record["digest_start"] = self._params(trainer, pl_module, "start")
        self.record["sharded_params"] = any(hasattr(p, "full_tensor") for p in pl_module.policy.parameters())
        self.record["model_type"] = type(trainer.strategy.model).__name__
        self.record["rng_digest"] = hashlib.sha1(torch.get_rng_state().numpy().tobytes()).hexdigest()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if batch_idx != 0:
            return
        envs = pl_module.train_envs
        self.record["epochs"].append(
            {
                "pools": [env.pool.tolist() for env in envs],
                "reset_state_ids": [env.reset_state_ids.tolist() for env in envs],
                "group_size": pl_module.env.group_size,
                "num_samples": len(pl_module.buffer.samples),
                "worker_pids": [getattr(env, "pids", []) for env in envs],
            }
        )

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if torch.is_tensor(v) and v.numel() == 1}
        self.record["epochs"][-1]["metrics"] = metrics

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        self.record["eval"] = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("eval/")}
        self.record["eval_per_task"] = pl_module.last_eval.get("per_task", {})

    def on_fit_end(self, trainer, pl_module) -> None:
        self.record["digest_end"] = self._params(trainer, pl_module, "end")
        self.record["optimizer_steps"] = trainer.global_step
        self.record["probe_dir"] = str(self.out_dir)
        self.record["log_dir"] = trainer.log_dir
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / f"rank{trainer.global_rank}.json").write_text(json.dumps(self.record, indent=1))


def reach_config(
    tmp_path: Path,
    strategy: str | dict,
    algorithm: str,
    policy: dict,
    *,
    trials: int = 4,
    env_extra: dict | None = None,
    rollout_extra: dict | None = None,
    model_extra: dict | None = None,
    callbacks: list | tuple = (),
    trainer_extra: dict | None = None,
    save_params: bool = False,
) -> dict:
    """``rlinf fit`` config: 2 CPU ranks, ReachEnv (8 envs per rank, 4 steps), two RL steps, one eval at the end.

    Args:
        tmp_path: run directory (logs under ``runs/``, probe records under ``probe/``).
        strategy: ``trainer.strategy`` (a name or a ``class_path`` dict).
        algorithm: ``PPO`` or ``GRPO`` (GRPO: groups of 4, no auto-reset; PPO: auto-reset).
        policy: the policy's ``class_path`` / ``init_args``.
        trials: ReachEnv trials per task (3 tasks × ``trials`` initial states).
        env_extra, rollout_extra, model_extra, trainer_extra: merged into those sections.
        callbacks: callbacks added after :class:`ScaleProbe`.
        save_params: :class:`ScaleProbe` writes the full parameters at start and end (:func:`end_weight_excess`).
    """
    grpo = algorithm == "GRPO"
    env = {
        "num_envs": 8,
        "group_size": 4 if grpo else 1,
        "max_episode_steps": 4,
        "auto_reset": not grpo,
        "trials_per_task": trials,
        "image_size": 16,
        **(env_extra or {}),
    }
    return {
        "seed_everything": 0,
        "trainer": {
            "max_epochs": 2,
            "accelerator": "cpu",
            "devices": 2,
            "strategy": strategy,
            "check_val_every_n_epoch": 2,
            "logger": {
                "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                "init_args": {"save_dir": str(tmp_path / "runs"), "name": "scale"},
            },
            "enable_progress_bar": False,
            "callbacks": [
                {
                    "class_path": "rlinf_core.testing.multirank.ScaleProbe",
                    "init_args": {"out_dir": str(tmp_path / "probe"), "save_params": save_params},
                },
                *callbacks,
            ],
            **(trainer_extra or {}),
        },
        "model": {
            "class_path": "RLModule",
            "init_args": {
                "env": {"class_path": "ReachEnv", "init_args": env},
                "policy": policy,
                "algorithm": {"class_path": algorithm, "init_args": {"update_epoch": 1}},
                "rollout": {
                    "rollout_epoch": 1,
                    "max_steps_per_rollout_epoch": 4,
                    "show_progress": False,
                    "do_sample_eval": False,
                    **(rollout_extra or {}),
                },
                "optim": {"lr": 0.05, "clip_grad": 1.0},
                "global_batch_size": 16,
                "micro_batch_size": 4,  # 2 micro-batches per minibatch: gradient accumulation
                **(model_extra or {}),
            },
        },
    }


def run_fit(tmp_path: Path, config: dict, pythonpath: tuple[str | Path, ...] = (), timeout: int = 900) -> list[dict]:
    """Run ``rlinf fit`` on ``config`` in ``tmp_path`` and return each rank's :class:`ScaleProbe` record.

    ``pythonpath``: extra import roots (e.g. a test folder with more callbacks)."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "DS_ACCELERATOR": "cpu",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([*map(str, pythonpath), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("MASTER_PORT", None)  # Lightning picks a free port
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("rlinf")), "fit", "--config", str(path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"rlinf fit failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    world = int(config["trainer"]["devices"])
    return [json.loads((tmp_path / "probe" / f"rank{r}.json").read_text()) for r in range(world)]


def check_ranks(records: list[dict[str, Any]], trials: int = 4) -> None:
    """What every 2-rank ReachEnv run of :func:`reach_config` must show: disjoint initial-state shards that cover
    all states, whole GRPO groups, metrics and the eval gathered over both ranks, identical parameters on both
    ranks that training changed, and the policy export and a checkpoint written."""
    assert [r["rank"] for r in records] == [0, 1] and all(r["world_size"] == 2 for r in records)
    # every rank draws from its own share of the initial states; together they cover all of them
    pools = [set(i for pool in r["epochs"][0]["pools"] for i in pool) for r in records]
    assert not pools[0] & pools[1], "ranks share initial states"
    assert pools[0] | pools[1] == set(range(REACH_TASKS * trials))
    for r, pool in zip(records, pools):
        for epoch in r["epochs"]:
            G = epoch["group_size"]
            for ids in epoch["reset_state_ids"]:
                assert set(ids) <= pool, "a rank used another rank's initial state"
                groups = [ids[i : i + G] for i in range(0, len(ids), G)]
                assert all(len(set(g)) == 1 for g in groups), f"a GRPO group straddles initial states: {ids}"
    assert records[0]["rng_digest"] != records[1]["rng_digest"], "ranks would draw the same sampling noise"
    # metrics are gathered over both ranks: both report the same global values
    m0, m1 = records[0]["epochs"][-1]["metrics"], records[1]["epochs"][-1]["metrics"]
    assert m0["env/num_trajectories"] == m1["env/num_trajectories"] >= 16, "episodes of both ranks (8 envs each)"
    # eval: every initial state exactly once over both ranks
    assert records[0]["eval"]["eval/num_trajectories"] == REACH_TASKS * trials
    assert sum(t["num_trajectories"] for t in records[0]["eval_per_task"].values()) == REACH_TASKS * trials
    # parameters: identical on both ranks, and training changed them
    assert records[0]["digest_end"] == records[1]["digest_end"], "ranks ended with different parameters"
    assert records[0]["digest_start"] == records[1]["digest_start"]
    assert records[0]["digest_end"] != records[0]["digest_start"], "training did not change the parameters"
    log_dir = Path(records[0]["log_dir"])
    assert (log_dir / "policy" / "model.safetensors").is_file(), "policy export missing"
    assert list((log_dir / "checkpoints").glob("*.ckpt")), "no checkpoint saved"


def saved_params(records: list[dict[str, Any]], stage: str) -> dict[str, torch.Tensor]:
    """The full parameters :class:`ScaleProbe` (``save_params``) wrote at ``stage`` (``start`` / ``end``)."""
    from safetensors.torch import load_file

    return load_file(Path(records[0]["probe_dir"]) / f"params_{stage}.safetensors")


def end_weight_excess(records: list[dict], reference: list[dict]) -> dict[str, tuple[float, float]]:
    """Per parameter tensor: how far two runs' end values differ beyond float32's rounding of each step's result,
    and how far the reference moved the tensor.

    Returns ``{name: (beyond, moved)}``: ``beyond`` is the largest ``|got - want| - steps * 2**-23 * max(|got|,
    |want|)`` (each optimizer step rounds the new value to float32 in both runs: half an ulp each), at least 0;
    ``moved`` is ``max |want - start|``. Both runs need ``save_params``."""
    start, want, got = saved_params(reference, "start"), saved_params(reference, "end"), saved_params(records, "end")
    assert got.keys() == want.keys() == start.keys(), f"parameters differ: {sorted(set(got) ^ set(want))[:5]}"
    steps = reference[0]["optimizer_steps"]
    assert records[0]["optimizer_steps"] == steps, "the runs took different numbers of optimizer steps"
    out = {}
    for k in want:
        rounding = steps * 2.0**-23 * torch.maximum(got[k].abs(), want[k].abs())
        beyond = ((got[k] - want[k]).abs() - rounding).clamp(min=0).max().item()
        out[k] = (beyond, (want[k] - start[k]).abs().max().item())
    return out


#: AdamW settings under which two runs that differ only by float32 rounding stay as close as rounding allows
#: (:func:`assert_trains_like`); ``lr`` is the test's.
PARITY_OPTIM = {"adam_eps": 1.0, "clip_grad": 1.0}
#: float32 reordering bound of :func:`assert_trains_like`, relative to a tensor's move
PARITY_RHO = 1e-3
_DISCRETE = ("env/return", "env/num_trajectories", "env/episode_len", "env/success_once", "rollout/rewards")
_CONTINUOUS = ("rollout/advantages_max", "rollout/advantages_min", "train/loss", "train/actor/grad_norm")
_CRITIC = ("rollout/returns_mean", "train/critic/value_loss")


def assert_trains_like(
    records: list[dict], reference: list[dict], exempt: tuple[str, ...] = (), rho: float = PARITY_RHO
) -> None:
    """Assert that a run trained as ``reference`` did, on any CPU: the same config under another strategy (or
    another CPU's kernels), so the same float32 sums taken in other orders (per rank, per micro-batch, per bucket,
    the clipping norm over shards, per kernel blocking). Both runs: :func:`reach_config` with ``save_params`` and
    ``optim`` :data:`PARITY_OPTIM`.

    Why ``adam_eps: 1``: AdamW's step ``lr·m̂/(√v̂ + ε)`` changes by up to ``lr/ε`` per unit of gradient where
    ``|g| ≲ ε``. With the usual ε = 1e-8, a clipped gradient (norm 1 over many parameters) has many elements in
    that range: the last bits of a sum become weight differences of a fraction of ``lr``, which then change every
    later gradient. With ε = 1 ≥ every element of a gradient clipped to norm 1, the step lies between ``lr·m̂/2``
    and ``lr·m̂`` and moves by at most ~1.5·lr per unit change of any step's gradient (β1 = 0.9, β2 = 0.999, a few
    steps): rounding stays rounding-sized. Adam's state is still sharded and stepped as usual.

    What is compared, and why within ``rho`` (1e-3):

    - Each RL step's metrics. Discrete ones (returns and rewards of success, episode counts and lengths) are
      equal: flipping one takes an env within float32 rounding of its success radius. Continuous ones (the
      normalised advantages' extremes, the loss, the gradient norm logged before clipping; the critic's returns
      and value loss) within ``rho`` relative: sums of the kind below.
    - End parameters, per tensor: past float32's rounding of each step's result (:func:`end_weight_excess`), at
      most ``rho`` of how far ``reference`` moved the tensor. Two sums of the same n float32 terms in different
      orders differ by at most ``2(n - 1)·2^-24·Σ|terms|``; the longest sums behind one gradient element in these
      tiny runs have n ≲ 1e3 (a minibatch's samples × tokens or pixels; widths ≤ 256 along the passes): at most
      1.2e-4 of Σ|terms|. With the per-sample contributions cancelling to no less than ~1/8 of their summed sizes
      (advantages of both signs over ≥ 8 samples), a tensor's gradients differ by ≤ ~1e-3 of its largest, and a
      step within 1.5x of linear keeps that ratio for the moves. A tensor whose gradient is 0 in exact arithmetic
      (``exempt`` name endings: its move is rounding noise) is held to ``rho`` of the largest move of any tensor.

    What it catches: the gradient norm, gradients summed over ranks instead of averaged (×2) or a rank's gradient
    left out; the end parameters, a rank's shard of the gradient or of the update lost, a clip coefficient off on
    any shard (a factor c leaves the tensors off by |1 - c| of their moves), micro-batches weighted wrongly, an
    optimizer setting that does not reach a sharded optimizer; the second RL step's metrics, a rank rolling out
    with stale parameters.
    """
    assert records[0]["digest_start"] == reference[0]["digest_start"], "not the same initial policy"
    critic = _CRITIC[0] in reference[0]["epochs"][0]["metrics"]
    for epoch, (mine, ref) in enumerate(zip(records[0]["epochs"], reference[0]["epochs"], strict=True)):
        got, want = mine["metrics"], ref["metrics"]
        for key in _DISCRETE:
            assert got[key] == want[key], f"RL step {epoch}: {key} {got[key]} != {want[key]}"
        for key in _CONTINUOUS + (_CRITIC if critic else ()):
            assert abs(got[key] - want[key]) <= rho * abs(want[key]), (
                f"RL step {epoch}: {key} {got[key]} vs {want[key]}"
            )
    excess = end_weight_excess(records, reference)
    largest = max(moved for _, moved in excess.values())
    ratio = {}
    for name, (beyond, moved) in excess.items():
        scale = largest if exempt and name.endswith(exempt) else moved
        ratio[name] = 0.0 if beyond == 0 else beyond / scale if scale > 0 else float("inf")
    worst = max(ratio, key=ratio.get)
    assert ratio[worst] <= rho, f"ended {ratio[worst]:.1e} of the reference's move away from it at {worst}"
