"""Every trainer precision either trains correctly or is refused before fit with one line.

``16-mixed`` (Lightning's ``MixedPrecision`` with its GradScaler) is built by hand for CPU: the trainer's flag would
silently become bf16-mixed there, while the plugin object runs fp16 autocast and a real ``torch.amp.GradScaler("cpu")``.
The RL loop must clip the gradients after the scaler unscaled them and let the scaler see every step, so that an
overflow is skipped by the scaler and lowers its scale (Lightning issue #18089).
"""

from __future__ import annotations

import math

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.plugins.precision import MixedPrecision

from rlinf_core.builtin.toy_env import ReachEnv
from rlinf_core.builtin.toy_policy import TinyVLAPolicy
from rlinf_core.cli.machine import check_machine
from rlinf_core.rl.algorithms import PPO
from rlinf_core.rl.config import OptimConfig, RolloutConfig
from rlinf_core.rl.module import RLModule

INITIAL_SCALE = 2.0**16  # torch.amp.GradScaler's default init_scale


def _module(clip_grad: float | None = 1.0) -> RLModule:
    torch.manual_seed(0)
    env = ReachEnv(num_envs=8, group_size=1, max_episode_steps=8, auto_reset=True)
    policy = TinyVLAPolicy(action_dim=2, num_action_chunks=2, add_value_head=True)
    return RLModule(
        env=env,
        policy=policy,
        algorithm=PPO(update_epoch=2),
        rollout=RolloutConfig(max_steps_per_rollout_epoch=8, show_progress=False),
        optim=OptimConfig(lr=1e-2, value_lr=1e-2, clip_grad=clip_grad),
        global_batch_size=16,
        micro_batch_size=8,
    )


def _fit(tmp_path, module: RLModule, callbacks=(), **trainer_args) -> pl.Trainer:
    trainer = pl.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        default_root_dir=str(tmp_path),
        callbacks=list(callbacks),
        **trainer_args,
    )
    trainer.fit(module)
    return trainer


def _norm(params) -> float:
    return math.sqrt(sum(float(p.grad.float().norm()) ** 2 for p in params if p.grad is not None))


class _GradientProbe(pl.Callback):
    """The gradient norm a callback sees at on_before_optimizer_step (after the scaler's unscale_, before the
    module clips) and the one the torch optimizer steps with (after clipping)."""

    def __init__(self) -> None:
        self.before_clip: list[float] = []
        self.stepped_with: list[float] = []

    def on_fit_start(self, trainer, pl_module) -> None:
        optimizer = trainer.optimizers[0]
        optimizer.register_step_pre_hook(
            lambda opt, *_: self.stepped_with.append(_norm(p for g in opt.param_groups for p in g["params"]))
        )

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self.before_clip.append(_norm(pl_module.policy.parameters()))


@pytest.mark.numeric
def test_16_mixed_clips_the_unscaled_gradients(tmp_path):
    clip = 1e-3  # far below every gradient norm of this model: every step is clipped
    module, probe = _module(clip_grad=clip), _GradientProbe()
    plugin = MixedPrecision("16-mixed", "cpu")
    trainer = _fit(tmp_path, module, [probe], plugins=[plugin])
    assert plugin.scaler is not None and trainer.precision_plugin is plugin
    assert probe.stepped_with and len(probe.stepped_with) == len(probe.before_clip) == module.skipped_steps + len(
        probe.stepped_with
    )
    assert all(n > 10 * clip for n in probe.before_clip), probe.before_clip
    # the optimizer steps with the unscaled gradients clipped to clip_grad (not clip_grad / scale); rel 1e-3: a norm
    # is a float32 sum of ~2e4 squares, off by at most 2e4 · 2^-24 = 1.2e-3 of itself whatever its order
    assert probe.stepped_with == pytest.approx([clip] * len(probe.stepped_with), rel=1e-3)
    # the logged norm is the true (unscaled) one, not scale times it
    assert trainer.callback_metrics["train/actor/grad_norm"].item() == pytest.approx(
        sum(probe.before_clip) / len(probe.before_clip), rel=1e-3
    )


def test_16_mixed_overflow_is_skipped_by_the_scaler_which_lowers_its_scale(tmp_path):
    module = _module()
    original = module.policy.evaluate

    def overflowing(*args, **kw):
        out = original(*args, **kw)
        out.logprobs = out.logprobs * float("inf")  # the loss (and every gradient) overflows
        return out

    module.policy.evaluate = overflowing
    before = {k: v.clone() for k, v in module.policy.state_dict().items()}
    plugin = MixedPrecision("16-mixed", "cpu")
    _fit(tmp_path, module, plugins=[plugin])
    steps = module.optimizer_steps_per_epoch
    assert module.skipped_steps == steps
    assert plugin.scaler.get_scale() == INITIAL_SCALE * 0.5**steps, "the scaler saw every overflowed step"
    for k, v in module.policy.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_16_mixed_recovers_after_an_overflow(tmp_path):
    module = _module()
    original, calls = module.policy.evaluate, []

    def first_overflows(*args, **kw):
        out = original(*args, **kw)
        calls.append(1)
        if len(calls) <= 2:  # the first minibatch's two micro-batches (no recompute: evaluate is only the update's)
            out.logprobs = out.logprobs * float("inf")
        return out

    module.policy.evaluate = first_overflows
    plugin = MixedPrecision("16-mixed", "cpu")
    _fit(tmp_path, module, plugins=[plugin])
    assert module.skipped_steps == 1 and module.optimizer_steps_per_epoch > 1
    assert plugin.scaler.get_scale() == INITIAL_SCALE / 2, "halved once, then steps applied at the lower scale"


def test_bf16_true_trains_bf16_weights(tmp_path):
    module = _module()
    before = [p.detach().clone() for p in module.policy.parameters()]
    trainer = _fit(tmp_path, module, precision="bf16-true")
    assert {p.dtype for p in module.policy.parameters()} == {torch.bfloat16}
    assert module.skipped_steps == 0 and math.isfinite(trainer.callback_metrics["train/actor/grad_norm"].item())
    assert any(not torch.equal(p.detach().float(), b.float()) for p, b in zip(module.policy.parameters(), before))


def _machine_check(precision: str, strategy=None, training: bool = True) -> list[str]:
    warnings: list[str] = []
    trainer = {"accelerator": "cpu", "devices": 1, "precision": precision}
    if strategy is not None:
        trainer["strategy"] = strategy
    check_machine(trainer, warnings.append, training)
    return warnings


def test_precisions_that_cannot_train_are_refused_before_fit_with_one_line():
    with pytest.raises(ValueError, match="16-true trains fp16 weights with no loss scaling") as err:
        _machine_check("16-true")
    assert "\n" not in str(err.value)
    _machine_check("16-true", training=False)  # evaluation in fp16 is fine
    # DeepSpeed's fp16 mode keeps fp32 masters and scales the loss itself
    _machine_check("16-true", {"class_path": "rlinf_core.distributed.strategies.DeepSpeedStrategy"})
    with pytest.raises(ValueError, match="ModelParallelStrategy has no gradient scaler"):
        _machine_check("16-mixed", {"class_path": "rlinf_core.distributed.strategies.FSDP2Strategy"})
    assert any("bf16-true stores every weight" in w for w in _machine_check("bf16-true"))
    assert not _machine_check("bf16-mixed")
