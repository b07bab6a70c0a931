"""Real 2-rank runs of ``rlinf fit`` (DDP, FSDP2, DeepSpeed ZeRO-2) on CPU, as subprocesses.

Each run trains ReachEnv + TinyVLAPolicy for two RL steps and evaluates once. The probe callback
(``scale_probe.py``) writes what every rank saw; the tests check that ranks drew disjoint
initial states, kept GRPO groups whole, gathered metrics over both ranks, evaluated every
initial state exactly once, and ended with identical parameters that training changed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).parent
RLINF = Path(sys.executable).with_name("rlinf")
TRIALS = 4  # ReachEnv: 3 tasks x 4 trials = 12 initial states


def _config(
    tmp_path: Path, strategy, algorithm: str, env_extra: dict, rollout_extra: dict, model_extra: dict, callbacks: list,
    trainer_extra: dict | None = None,
) -> Path:
    grpo = algorithm == "GRPO"
    env = {
        "num_envs": 8,
        "group_size": 4 if grpo else 1,
        "max_episode_steps": 4,
        "auto_reset": not grpo,
        "trials_per_task": TRIALS,
        "image_size": 16,
        **env_extra,
    }
    cfg = {
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
                {"class_path": "scale_probe.ScaleProbe", "init_args": {"out_dir": str(tmp_path / "probe")}},
                *callbacks,
            ],
            **(trainer_extra or {}),
        },
        "model": {
            "class_path": "RLModule",
            "init_args": {
                "env": {"class_path": "ReachEnv", "init_args": env},
                "policy": {
                    "class_path": "TinyVLAPolicy",
                    "init_args": {
                        "action_dim": 2, "num_action_chunks": 2, "hidden_size": 32, "add_value_head": not grpo,
                    },
                },
                "algorithm": {"class_path": algorithm, "init_args": {"update_epoch": 1}},
                "rollout": {
                    "rollout_epoch": 1,
                    "max_steps_per_rollout_epoch": 4,
                    "show_progress": False,
                    "do_sample_eval": False,
                    **rollout_extra,
                },
                "optim": {"lr": 0.05, "clip_grad": 1.0},
                "global_batch_size": 16,
                "micro_batch_size": 4,  # 2 micro-batches per minibatch: gradient accumulation
                **model_extra,
            },
        },
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _fit(
    tmp_path: Path, strategy, algorithm: str = "GRPO", env_extra=None, rollout_extra=None, model_extra=None,
    callbacks=(), trainer_extra=None,
) -> list[dict]:
    extras = (env_extra or {}, rollout_extra or {}, model_extra or {}, list(callbacks))
    config = _config(tmp_path, strategy, algorithm, *extras, trainer_extra)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "DS_ACCELERATOR": "cpu",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("MASTER_PORT", None)  # Lightning picks a free port
    proc = subprocess.run(
        [str(RLINF), "fit", "--config", str(config)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"rlinf fit failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    records = [json.loads((tmp_path / "probe" / f"rank{r}.json").read_text()) for r in range(2)]
    _check_common(records)
    return records


def _check_common(records: list[dict]) -> None:
    assert [r["rank"] for r in records] == [0, 1] and all(r["world_size"] == 2 for r in records)
    # every rank draws from its own share of the initial states; together they cover all of them
    pools = [set(i for pool in r["epochs"][0]["pools"] for i in pool) for r in records]
    assert not pools[0] & pools[1], "ranks share initial states"
    assert pools[0] | pools[1] == set(range(3 * TRIALS))
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
    assert records[0]["eval"]["eval/num_trajectories"] == 3 * TRIALS
    assert sum(t["num_trajectories"] for t in records[0]["eval_per_task"].values()) == 3 * TRIALS
    # parameters: identical on both ranks, and training changed them
    assert records[0]["digest_end"] == records[1]["digest_end"], "ranks ended with different parameters"
    assert records[0]["digest_start"] == records[1]["digest_start"]
    assert records[0]["digest_end"] != records[0]["digest_start"], "training did not change the parameters"
    log_dir = Path(records[0]["log_dir"])
    assert (log_dir / "policy" / "model.safetensors").is_file(), "policy export missing"
    assert list((log_dir / "checkpoints").glob("*.ckpt")), "no checkpoint saved"


@pytest.mark.slow
def test_ddp_two_ranks_with_pipeline_stages_and_worker_envs(tmp_path):
    records = _fit(tmp_path, "ddp", env_extra={"num_workers": 1}, rollout_extra={"pipeline_stage_num": 2})
    assert all(r["strategy"] == "DDPStrategy" for r in records)
    epoch = records[0]["epochs"][0]
    assert len(epoch["pools"]) == 2, "two pipeline stages per rank"
    pids = [p for r in records for stage in r["epochs"][0]["worker_pids"] for p in stage]
    assert len(set(pids)) == 4, "each stage of each rank has its own env worker process"


@pytest.mark.slow
def test_ddp_all_reduces_once_per_optimizer_step_with_the_full_minibatch_gradient(tmp_path):
    probe = {"class_path": "grad_sync_probe.GradSyncProbe", "init_args": {"out_dir": str(tmp_path / "probe")}}
    _fit(tmp_path, "ddp", "PPO", model_extra={"optim": {"lr": 0.05, "clip_grad": None}}, callbacks=[probe])
    for rank in range(2):
        steps = json.loads((tmp_path / "probe" / f"gradsync_rank{rank}.json").read_text())
        assert len(steps) == 4, "2 RL steps x 2 minibatches"
        for step in steps:
            assert step["micro_batches"] == 2, "the test needs gradient accumulation"
            # one all-reduce per bucket per optimizer step, not one per micro-batch
            assert step["bucket_allreduces"] == step["distinct_buckets"] >= 1, step
            assert step["allreduce_batch_idx"] == [step["batch_idx"][1]], "all-reduced at the last micro-batch"
            assert step["grad_max_abs"] > 0 and step["grad_max_abs_err"] <= 1e-6 * max(1.0, step["grad_max_abs"]), step


@pytest.fixture(scope="module")
def ddp_ppo(tmp_path_factory):
    """The reference: plain DDP on the same PPO config the sharded strategies run."""
    return _fit(tmp_path_factory.mktemp("ddp_ppo"), "ddp", "PPO")


def _same_first_update(records: list[dict], reference: list[dict]) -> None:
    """Same first rollout as DDP (same init, same sampling), and the same first update up to float error."""
    got, want = records[0]["epochs"][0]["metrics"], reference[0]["epochs"][0]["metrics"]
    for key in ("env/return", "env/num_trajectories", "rollout/rewards", "rollout/advantages_mean"):
        assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-7), key
    for key in ("train/loss", "train/actor/grad_norm"):
        assert got[key] == pytest.approx(want[key], rel=1e-3, abs=1e-6), key


@pytest.mark.slow
def test_fsdp2_two_ranks_matches_ddp(tmp_path, ddp_ppo):
    records = _fit(tmp_path, {"class_path": "rlinf.strategies.FSDP2Strategy"}, "PPO")
    assert all(r["strategy"] == "FSDP2Strategy" and r["sharded_params"] for r in records), "policy not sharded"
    _same_first_update(records, ddp_ppo)


@pytest.mark.slow
def test_deepspeed_zero2_two_ranks_matches_ddp(tmp_path, ddp_ppo):
    strategy = {"class_path": "rlinf.strategies.DeepSpeedStrategy", "init_args": {"stage": 2}}
    records = _fit(tmp_path, strategy, "PPO")
    assert all(r["strategy"] == "DeepSpeedStrategy" and r["model_type"] == "DeepSpeedEngine" for r in records)
    _same_first_update(records, ddp_ppo)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", [
    {"class_path": "rlinf.strategies.DeepSpeedStrategy", "init_args": {"stage": 2}},
    {"class_path": "rlinf.strategies.FSDP2Strategy"},
], ids=["deepspeed", "fsdp2"])
def test_sharded_strategies_train_under_bf16_mixed(tmp_path, strategy):
    """precision: bf16-mixed — DeepSpeed's bf16 mode (bf16 module, fp32 master weights; rlinf adds the
    autocast its plugin lacks for rollouts) and FSDP2's bf16 gathers (fp32 shards) both train."""
    records = _fit(tmp_path, strategy, "PPO", trainer_extra={"precision": "bf16-mixed"})
    assert all(r["strategy"] == strategy["class_path"].rsplit(".", 1)[1] for r in records)
