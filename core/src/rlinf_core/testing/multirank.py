"""Real multi-rank ``rlinf fit`` runs on CPU, as subprocesses (core's ``tests/scale`` and plugins' strategy tests)::

    from rlinf_core.testing.multirank import check_ranks, reach_config, run_fit
    cfg = reach_config(tmp_path, "ddp", "PPO", policy={"class_path": "TinyVLAPolicy", "init_args": {...}})
    records = run_fit(tmp_path, cfg)  # one dict per rank, written by ScaleProbe
    check_ranks(records)

:class:`ScaleProbe` (a callback ``reach_config`` adds) makes each rank write what it saw to ``rank<k>.json``: its
share of initial states, the rollout reset ids, the gathered metrics and digests of the full policy parameters.
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


def params_digest(module: torch.nn.Module) -> str:
    """sha1 of every parameter's full value (sharded parameters are gathered: call on all ranks)."""
    h = hashlib.sha1()
    for name, p in sorted(module.named_parameters(), key=lambda kv: kv[0]):
        h.update(name.encode())
        h.update(_full(p.detach()).float().cpu().numpy().tobytes())
    return h.hexdigest()


class ScaleProbe(pl.Callback):
    """Records per rank: shard pools, rollout reset ids, gathered metrics, parameter digests.

    Args:
        out_dir: directory for ``rank<k>.json``.
    """

    def __init__(self, out_dir: str) -> None:
        self.out_dir = Path(out_dir)
        self.record: dict = {"epochs": []}

    def on_fit_start(self, trainer, pl_module) -> None:
        self.record["rank"] = trainer.global_rank
        self.record["world_size"] = trainer.world_size
        self.record["strategy"] = type(trainer.strategy).__name__
        self.record["digest_start"] = params_digest(pl_module.policy)
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
        self.record["digest_end"] = params_digest(pl_module.policy)
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
                    "init_args": {"out_dir": str(tmp_path / "probe")},
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


def exported_weights(records: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """The policy export of a :func:`run_fit` run (``<log_dir>/policy/model.safetensors``)."""
    from safetensors.torch import load_file

    return load_file(Path(records[0]["log_dir"]) / "policy" / "model.safetensors")


def weight_distance(records: list[dict], reference: list[dict], skip: tuple[str, ...] = ()) -> tuple[float, str]:
    """Largest absolute difference between two runs' exported weights, and where (keys ending in ``skip``
    left out); the two exports must hold the same keys."""
    got, want = exported_weights(records), exported_weights(reference)
    assert got.keys() == want.keys(), f"exports differ in keys: {sorted(set(got) ^ set(want))[:5]}"
    diffs = {k: (got[k].float() - want[k].float()).abs().max().item() for k in want if not k.endswith(skip)}
    worst = max(diffs, key=diffs.get)
    return diffs[worst], worst
