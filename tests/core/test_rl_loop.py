"""The Lightning RL loop on the built-in env and policy."""

from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rlinf_core.builtin.toy_env import ReachEnv
from rlinf_core.builtin.toy_gaussian import TinyGaussianPolicy
from rlinf_core.builtin.toy_policy import TinyVLAPolicy
from rlinf_core.contracts.env import VideoConfig
from rlinf_core.rl.algorithms import GRPO, PPO
from rlinf_core.rl.config import OptimConfig, RolloutConfig
from rlinf_core.rl.module import RLModule

POLICIES = {"tokens": TinyVLAPolicy, "gaussian": TinyGaussianPolicy}


def make_module(algo="ppo", num_envs=16, steps=24, video=False, policy_cls=TinyVLAPolicy, **kw):
    torch.manual_seed(0)
    group = 4 if algo == "grpo" else 1
    env = ReachEnv(
        num_envs=num_envs,
        group_size=group,
        max_episode_steps=steps,
        auto_reset=algo == "ppo",
        video_cfg=VideoConfig(save_video=video, max_envs=4),
    )
    policy = policy_cls(action_dim=2, num_action_chunks=2, add_value_head=algo == "ppo")
    algorithm = PPO(update_epoch=4) if algo == "ppo" else GRPO(update_epoch=2)
    defaults = dict(
        rollout=RolloutConfig(max_steps_per_rollout_epoch=steps, show_progress=False),
        optim=OptimConfig(lr=1e-2, value_lr=1e-2),
        global_batch_size=96,
        micro_batch_size=48,
    )
    defaults.update(kw)
    return RLModule(env=env, policy=policy, algorithm=algorithm, **defaults)


def make_trainer(tmp_path, epochs, **kw):
    args = dict(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        logger=TensorBoardLogger(str(tmp_path), name="t"),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,
        log_every_n_steps=1,
        check_val_every_n_epoch=1000,
    )
    args.update(kw)
    return pl.Trainer(**args)


def scalars(trainer, tag):
    ea = EventAccumulator(trainer.logger.log_dir)
    ea.Reload()
    return [e.value for e in ea.Scalars(tag)] if tag in ea.Tags()["scalars"] else []


@pytest.mark.parametrize("kind", list(POLICIES))
def test_ppo_learns_on_reach_env(tmp_path, kind):
    module = make_module("ppo", num_envs=32, policy_cls=POLICIES[kind])
    trainer = make_trainer(tmp_path, 45)
    trainer.fit(module)
    success = scalars(trainer, "env/success_once")
    start, end = sum(success[:5]) / 5, sum(success[-5:]) / 5
    assert end > start + 0.3, (start, end)
    for tag in (
        "train/actor/approx_kl",
        "train/actor/clip_fraction",
        "train/critic/explained_variance",
        "train/critic/value_clip_ratio",
        "train/entropy_loss",
        "train/loss",
        "rollout/advantages_max",
        "env/episode_len",
        "env/return",
        "time/rollout",
        "train/actor/lr",
    ):
        assert scalars(trainer, tag), tag
    assert (Path(trainer.log_dir) / "policy" / "config.json").exists()


@pytest.mark.parametrize("kind", list(POLICIES))
def test_grpo_learns_on_reach_env(tmp_path, kind):
    torch.manual_seed(0)
    # wider steps and radius: about 30 % initial success, so groups of 8 have a learning signal
    env = ReachEnv(num_envs=64, group_size=8, max_episode_steps=12, auto_reset=False, step_size=0.15, radius=0.15)
    extra = {"init_log_std": -0.5} if kind == "gaussian" else {}
    policy = POLICIES[kind](action_dim=2, num_action_chunks=2, add_value_head=False, **extra)
    module = RLModule(
        env=env,
        policy=policy,
        algorithm=GRPO(update_epoch=4, clip_ratio_high=0.28),
        rollout=RolloutConfig(max_steps_per_rollout_epoch=12, show_progress=False),
        optim=OptimConfig(lr=1e-2, clip_grad=1.0),
        global_batch_size=192,
        micro_batch_size=192,
    )
    trainer = make_trainer(tmp_path, 30)
    trainer.fit(module)
    success = scalars(trainer, "env/success_once")
    start, end = sum(success[:5]) / 5, sum(success[-5:]) / 5
    assert end > start + 0.2, (start, end)


def test_ppo_bootstrap_values_come_from_policy_value(tmp_path):
    rollout = RolloutConfig(max_steps_per_rollout_epoch=4, show_progress=False)
    module = make_module("ppo", num_envs=4, steps=8, rollout=rollout)
    calls = {"act": 0, "value": 0}
    act, value = module.policy.act, module.policy.value

    def counted_act(*a, **k):
        calls["act"] += 1
        return act(*a, **k)

    def counted_value(*a, **k):
        calls["value"] += 1
        return value(*a, **k)

    module.policy.act, module.policy.value = counted_act, counted_value
    make_trainer(tmp_path, 1).fit(module)
    # 2 chunk steps of 2 sub-steps per rollout: one act per chunk, the final value through value()
    assert calls["value"] >= 1 and calls["act"] == 2, calls


def test_grpo_rollout_logprobs_equal_training_recompute(tmp_path):
    module = make_module(
        "grpo", rollout=RolloutConfig(max_steps_per_rollout_epoch=8, recompute_logprobs=True, show_progress=False)
    )
    trainer = make_trainer(tmp_path, 2)
    trainer.fit(module)
    mismatch = scalars(trainer, "rollout/logprob_mismatch")
    assert mismatch and max(mismatch) < 1e-5


def test_logprob_recompute_runs_in_train_mode_like_the_update(tmp_path):
    rollout = RolloutConfig(max_steps_per_rollout_epoch=8, recompute_logprobs=True, show_progress=False)
    module = make_module("grpo", rollout=rollout, optim=OptimConfig(lr=0.0))
    module.policy.trunk.append(torch.nn.Dropout(0.5))  # train-mode forward differs from the rollout's
    modes = []
    original = module.policy.evaluate

    def spy(*args, **kw):
        modes.append(module.policy.training)
        return original(*args, **kw)

    module.policy.evaluate = spy
    trainer = make_trainer(tmp_path, 1)
    trainer.fit(module)
    assert modes and all(modes), "recompute and update both in train mode"
    (mismatch,) = scalars(trainer, "rollout/logprob_mismatch")
    assert mismatch > 1e-2, "dropout active in the recompute shows up in the mismatch"


def test_lr_schedule_steps_per_optimizer_step_and_shuffle_is_fresh(tmp_path):
    module = make_module(
        "ppo",
        num_envs=8,
        steps=8,
        global_batch_size=8,
        micro_batch_size=4,
        optim=OptimConfig(lr=1.0, lr_scheduler="linear", min_lr=0.0),
    )
    trainer = make_trainer(tmp_path, 2)
    orders = []
    original = module.buffer.fill

    def spy(step, *args, **kw):
        original(step, *args, **kw)
        orders.append(torch.cat([mb.idx for mb in module.buffer]))

    module.buffer.fill = spy
    trainer.fit(module)
    # 32 samples per epoch / 8 per optimizer step × 4 update epochs = 16 optimizer steps per RL step
    assert module.optimizer_steps_per_epoch == 16
    assert trainer.global_step == 32
    lr = module.lr_schedulers().get_last_lr()[0]
    assert lr == pytest.approx(0.0, abs=1e-9)
    assert not torch.equal(orders[0], orders[1])


def test_non_finite_gradients_skip_the_step(tmp_path):
    module = make_module("ppo", num_envs=4, steps=4, global_batch_size=8, micro_batch_size=8)
    trainer = make_trainer(tmp_path, 1)
    before = {k: v.clone() for k, v in module.policy.state_dict().items()}
    original = module.policy.evaluate

    def poisoned(*args, **kw):
        out = original(*args, **kw)
        out.logprobs = out.logprobs * float("nan")
        return out

    module.policy.evaluate = poisoned
    trainer.fit(module)
    assert module.skipped_steps == module.optimizer_steps_per_epoch
    for k, v in module.policy.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_critic_warmup_trains_only_the_value_head(tmp_path):
    module = make_module("ppo", num_envs=4, steps=4, optim=OptimConfig(lr=1e-2, critic_warmup_steps=100))
    trainer = make_trainer(tmp_path, 1)
    before = {k: v.clone() for k, v in module.policy.state_dict().items()}
    trainer.fit(module)
    after = module.policy.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all("value_head" in k for k in changed)


def test_eval_visits_every_task_and_trial_once_and_writes_a_table(tmp_path):
    module = make_module("ppo", num_envs=4)
    module.eval_env = ReachEnv(num_envs=5, is_eval=True, auto_reset=True, max_episode_steps=6, trials_per_task=3)
    trainer = make_trainer(tmp_path, 1)
    trainer.validate(module)
    records_tasks = module.last_eval["per_task"]
    assert set(records_tasks) == {"reach_red", "reach_green", "reach_blue"}
    assert all(row["num_trajectories"] == 3 for row in records_tasks.values())
    assert scalars(trainer, "eval/num_trajectories") == [9.0]
    assert list((Path(trainer.log_dir) / "eval").glob("*.md"))


def test_video_callback_writes_mp4_and_tensorboard_clip(tmp_path):
    module = make_module("ppo", num_envs=4, steps=4, video=True)
    trainer = make_trainer(tmp_path, 1, check_val_every_n_epoch=1)
    trainer.fit(module)
    videos = sorted(Path(trainer.log_dir, "video").rglob("*.mp4"))
    assert [v.parent.name for v in videos] == ["eval", "train"]
    assert all(v.stat().st_size > 1000 for v in videos)
    ea = EventAccumulator(trainer.log_dir)
    ea.Reload()
    assert {"video/train", "video/eval"} <= set(ea.Tags()["images"])


def test_grpo_config_errors_are_explained():
    env = ReachEnv(num_envs=4, group_size=1, max_episode_steps=4)
    policy = TinyVLAPolicy(action_dim=2, num_action_chunks=2, add_value_head=False)
    with pytest.raises(ValueError, match="group_size > 1"):
        RLModule(env=env, policy=policy, algorithm=GRPO())
    with pytest.raises(ValueError, match="add_value_head"):
        RLModule(env=env, policy=policy, algorithm=PPO())
    with pytest.raises(ValueError, match="multiple of the policy's num_action_chunks"):
        RLModule(
            env=env,
            policy=TinyVLAPolicy(num_action_chunks=3),
            algorithm=PPO(),
            rollout=RolloutConfig(max_steps_per_rollout_epoch=4),
        )


def test_resume_from_checkpoint_continues_sampler_and_steps(tmp_path):
    module = make_module("ppo", num_envs=4, steps=4)
    saver = ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), save_last=True, save_on_train_epoch_end=True)
    trainer = make_trainer(tmp_path, 2, enable_checkpointing=True, callbacks=[saver])
    trainer.fit(module)
    ckpt = saver.last_model_path
    assert ckpt
    state = torch.load(ckpt, weights_only=False)["rlinf"]
    resumed = make_module("ppo", num_envs=4, steps=4)
    trainer2 = make_trainer(tmp_path, 3)
    trainer2.fit(resumed, ckpt_path=ckpt)
    assert trainer2.current_epoch == 3
    assert resumed._optim_steps_done == state["optim_steps_done"] + resumed.optimizer_steps_per_epoch


@pytest.mark.numeric
def test_logged_losses_do_not_depend_on_micro_batch_size(tmp_path):
    logged = []
    for micro in (96, 24):
        module = make_module(
            "grpo", num_envs=8, steps=8, global_batch_size=32, micro_batch_size=micro, optim=OptimConfig(lr=0.0)
        )
        trainer = make_trainer(tmp_path / str(micro), 1)
        trainer.fit(module)
        logged.append(scalars(trainer, "train/entropy_loss")[0])
    # the same entropies from other batch sizes: the tiny policy's logits differ by reordered sums (<= 300 terms,
    # ~8 in a row: reorder_rtol(300, 8) = 3e-6 of their size), an entropy moves by <= 2 per unit of logit, and
    # the micro-batch means sum <= 96 terms in other groupings (96 · 2^-24 = 6e-6): well within 1e-4
    assert logged[0] == pytest.approx(logged[1], rel=1e-4)


def test_per_suite_success_from_prefixed_task_names():
    from rlinf_core.rl.evaluation import per_suite as _per_suite

    per_task = {
        "libero_spatial/a": {"success_once": 1.0, "num_trajectories": 2},
        "libero_spatial/b": {"success_once": 0.0, "num_trajectories": 2},
        "libero_goal/c": {"success_once": 0.5, "num_trajectories": 4},
    }
    suites = _per_suite(per_task)
    assert suites["libero_spatial"] == {"success_once": 0.5, "num_trajectories": 4}
    assert suites["libero_goal"]["success_once"] == 0.5


# ---- critic warm-up: the actor's LR schedule starts when the actor starts training
WARMUP_CRITIC, WARMUP_LR, STEPS_PER_EPOCH, EPOCHS = 10, 2, 8, 2


class LRRecorder(pl.Callback):
    """The learning rate of every parameter group at each optimizer step, keyed by the step."""

    def __init__(self) -> None:
        self.lrs: dict[int, dict[str, float]] = {}

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self.lrs[trainer.global_step] = {g["name"]: g["lr"] for g in optimizer.param_groups}


def _module():
    optim = OptimConfig(
        lr=1.0,
        value_lr=0.5,
        lr_scheduler="linear",
        lr_warmup_steps=WARMUP_LR,
        min_lr=0.0,
        critic_warmup_steps=WARMUP_CRITIC,
    )
    return make_module("ppo", num_envs=4, steps=4, global_batch_size=4, micro_batch_size=4, optim=optim)


def _expected(step: int, total: int, start: int) -> float:
    if step < start:
        return 0.0
    j = step - start
    if j < WARMUP_LR:
        return (j + 1) / WARMUP_LR
    return 1.0 - min(1.0, (j - WARMUP_LR) / max(1, total - start - WARMUP_LR))


def test_actor_schedule_starts_after_critic_warmup_and_survives_resume(tmp_path):
    saver = ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), save_top_k=-1, save_on_train_epoch_end=True)
    rec = LRRecorder()
    module = _module()
    trainer = make_trainer(tmp_path / "a", EPOCHS, enable_checkpointing=True, callbacks=[saver, rec])
    trainer.fit(module)
    total = EPOCHS * STEPS_PER_EPOCH
    assert module.optimizer_steps_per_epoch == STEPS_PER_EPOCH and sorted(rec.lrs) == list(range(total))
    for step, lrs in rec.lrs.items():
        assert lrs["actor"] == pytest.approx(_expected(step, total, WARMUP_CRITIC)), step
        assert lrs["critic"] == pytest.approx(0.5 * _expected(step, total, 0)), step
    # the actor gets its whole warm-up (0.5, 1.0) and decay (1.0, 0.75, 0.5, 0.25) once it trains
    assert [rec.lrs[s]["actor"] for s in range(WARMUP_CRITIC, total)] == pytest.approx([0.5, 1, 1, 0.75, 0.5, 0.25])

    # resume after the first RL step (still inside the critic warm-up): the same learning rates follow
    (first,) = (tmp_path / "ckpt").glob("epoch=0-*.ckpt")
    resumed_rec = LRRecorder()
    resumed = make_trainer(tmp_path / "b", EPOCHS, callbacks=[resumed_rec])
    resumed.fit(_module(), ckpt_path=first)
    assert sorted(resumed_rec.lrs) == list(range(STEPS_PER_EPOCH, total))
    for step, lrs in resumed_rec.lrs.items():
        assert lrs == pytest.approx(rec.lrs[step]), step


class EdgeReachEnv(ReachEnv):
    """ReachEnv whose episodes also record whether the agent touched the arena's edge."""

    episode_metrics = ("edge_once",)

    def _step(self, actions, live):
        out = super()._step(actions, live)
        edge = ((self.pos <= 0.0) | (self.pos >= 1.0)).any(1)
        for slot in np.nonzero(live)[0]:
            self.episode_info(int(slot), reduce="max", edge_once=float(edge[slot]))
        return out


def test_env_declared_episode_metrics_are_logged_for_train_and_eval(tmp_path):
    module = make_module("ppo", num_envs=4, steps=8)
    module.env = EdgeReachEnv(num_envs=4, max_episode_steps=8, auto_reset=True, step_size=0.5)
    trainer = make_trainer(tmp_path, 1, check_val_every_n_epoch=1)
    trainer.fit(module)
    for tag in ("env/edge_once", "eval/edge_once"):
        values = scalars(trainer, tag)
        assert len(values) == 1 and 0.0 <= values[0] <= 1.0, tag
    records = [{**r, "edge_once": e} for r, e in zip([_record()] * 3, (1.0, 0.0, 1.0))] + [_record()]
    metrics = module._episode_metrics(records, "env")
    assert metrics["env/edge_once"] == pytest.approx(2 / 3), "mean over the episodes that carry the key"
    assert metrics["env/num_trajectories"] == 4


def _record():
    return {"success_once": 1.0, "success_at_end": 1.0, "return": 1.0, "episode_len": 3, "reward": 0.3}


def test_the_loop_tells_the_policy_each_rl_step_before_its_rollout(tmp_path):
    rollout = RolloutConfig(max_steps_per_rollout_epoch=4, show_progress=False)
    module = make_module("grpo", num_envs=8, steps=4, rollout=rollout, global_batch_size=16, micro_batch_size=16)
    seen = []
    act = module.policy.act
    module.policy.set_rl_step = lambda step: seen.append(("step", step))
    module.policy.act = lambda *a, **k: (seen.append(("act",)), act(*a, **k))[1]
    make_trainer(tmp_path, 3).fit(module)
    steps = [s for s in seen if s[0] == "step"]
    assert steps == [("step", 0), ("step", 1), ("step", 2)]
    assert seen[0] == ("step", 0) and seen[1] == ("act",)  # told before the rollout acts


def test_suite_columns_give_the_seeds_one_row_layout():
    from rlinf_core.callbacks.eval_report import suite_columns

    suites = {
        "Vision": {"success_once": 0.82, "num_trajectories": 5},
        "Semantic": {"success_once": 0.806, "num_trajectories": 5},
        "Position": {"success_once": 0.893, "num_trajectories": 3},
    }
    lines = suite_columns(suites)
    assert lines[0] == "| Vision | Semantic | Position | Average |"
    assert lines[2] == "| 82.0% | 80.6% | 89.3% | 84.0% |"  # Average: the unweighted mean of the columns
    assert suite_columns({"only": suites["Vision"]}) == []
