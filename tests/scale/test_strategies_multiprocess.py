"""Real 2-rank runs of ``rlinf fit`` (DDP, FSDP2, DeepSpeed ZeRO-2) on CPU, as subprocesses.

Each run trains ReachEnv + TinyVLAPolicy for two RL steps and evaluates once. The probe callback
(:class:`rlinf_core.testing.multirank.ScaleProbe`) writes what every rank saw; the tests check that ranks drew disjoint
initial states, kept GRPO groups whole, gathered metrics over both ranks, evaluated every
initial state exactly once, and ended with identical parameters that training changed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlinf_core.testing.multirank import PARITY_OPTIM, assert_trains_like, check_ranks, reach_config, run_fit

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
TRIALS = 4  # ReachEnv: 3 tasks x 4 trials = 12 initial states
TINY_VLA = {"class_path": "TinyVLAPolicy", "init_args": {"action_dim": 2, "num_action_chunks": 2, "hidden_size": 32}}
PARITY = {"optim": {**PARITY_OPTIM, "lr": 0.05}}  # assert_trains_like's optimizer (clipped, ε = 1)


def _fit(
    tmp_path: Path,
    strategy,
    algorithm: str = "GRPO",
    env_extra=None,
    rollout_extra=None,
    model_extra=None,
    callbacks=(),
    trainer_extra=None,
    save_params: bool = False,
) -> list[dict]:
    policy = {**TINY_VLA, "init_args": {**TINY_VLA["init_args"], "add_value_head": algorithm != "GRPO"}}
    config = reach_config(
        tmp_path,
        strategy,
        algorithm,
        policy,
        trials=TRIALS,
        env_extra=env_extra,
        rollout_extra=rollout_extra,
        model_extra=model_extra,
        callbacks=list(callbacks),
        trainer_extra=trainer_extra,
        save_params=save_params,
    )
    records = run_fit(tmp_path, config, pythonpath=(HERE,))  # HERE: grad_sync_probe
    check_ranks(records, TRIALS)
    return records


@pytest.mark.slow
def test_ddp_two_ranks_with_pipeline_stages_and_worker_envs(tmp_path):
    records = _fit(tmp_path, "ddp", rollout_extra={"pipeline_stage_num": 2, "env_workers": 1})
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
    return _fit(tmp_path_factory.mktemp("ddp_ppo"), "ddp", "PPO", model_extra=PARITY, save_params=True)


@pytest.mark.slow
def test_fsdp2_two_ranks_matches_ddp(tmp_path, ddp_ppo):
    strategy = {"class_path": "rlinf_core.distributed.strategies.FSDP2Strategy"}
    records = _fit(tmp_path, strategy, "PPO", model_extra=PARITY, save_params=True)
    assert all(r["strategy"] == "FSDP2Strategy" and r["sharded_params"] for r in records), "policy not sharded"
    assert_trains_like(records, ddp_ppo)  # on any CPU: the bound and what it catches in its docstring


@pytest.mark.slow
def test_deepspeed_zero2_two_ranks_matches_ddp(tmp_path, ddp_ppo):
    strategy = {"class_path": "rlinf_core.distributed.strategies.DeepSpeedStrategy", "init_args": {"stage": 2}}
    records = _fit(tmp_path, strategy, "PPO", model_extra=PARITY, save_params=True)
    assert all(r["strategy"] == "DeepSpeedStrategy" and r["model_type"] == "DeepSpeedEngine" for r in records)
    assert_trains_like(records, ddp_ppo)  # with gradient accumulation (2 micro-batches per rank and step)


@pytest.mark.slow
@pytest.mark.parametrize(
    "strategy",
    [
        {"class_path": "rlinf_core.distributed.strategies.DeepSpeedStrategy", "init_args": {"stage": 2}},
        {"class_path": "rlinf_core.distributed.strategies.FSDP2Strategy"},
    ],
    ids=["deepspeed", "fsdp2"],
)
def test_sharded_strategies_train_under_bf16_mixed(tmp_path, strategy):
    """precision: bf16-mixed — DeepSpeed's bf16 mode (bf16 module, fp32 master weights; rlinf adds the
    autocast its plugin lacks for rollouts) and FSDP2's bf16 gathers (fp32 shards) both train."""
    records = _fit(tmp_path, strategy, "PPO", trainer_extra={"precision": "bf16-mixed"})
    assert all(r["strategy"] == strategy["class_path"].rsplit(".", 1)[1] for r in records)
