"""Single-process checks of the strategy helpers (the multi-process runs are in test_strategies_multiprocess.py)."""

from __future__ import annotations

import pytest
import torch

from rlinf_core.builtin.toy_policy import TinyVLAPolicy
from rlinf_core.distributed.fsdp_sharding import _meta_copy
from rlinf_core.distributed.grad_accumulation import deepspeed_step
from rlinf_core.distributed.rollout_mode import move_optimizer_state
from rlinf_core.distributed.strategies import DeepSpeedStrategy, FSDP2Strategy


def _stepped_adam() -> torch.optim.Optimizer:
    policy = TinyVLAPolicy(action_dim=2, num_action_chunks=2)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    sum(p.sum() for p in policy.parameters()).backward()
    opt.step()
    return opt


def test_optimizer_state_moves_between_devices_and_back():
    opt = _stepped_adam()
    moved = move_optimizer_state(opt, "meta")
    assert moved > 0
    assert all(v.device.type == "meta" for st in opt.state.values() for v in st.values() if v.dim() > 0)
    assert all(st["step"].device.type == "cpu" for st in opt.state.values()), "scalar step counters stay put"
    assert move_optimizer_state(opt, "meta") == 0, "nothing left to move"
    opt2 = _stepped_adam()
    assert move_optimizer_state(opt2, "cpu") == 0, "already on the CPU: a no-op"


def test_meta_copy_holds_no_memory_and_keeps_structure():
    policy = TinyVLAPolicy(action_dim=2, num_action_chunks=2)
    copy = _meta_copy(policy)
    assert all(p.device.type == "meta" for p in copy.parameters())
    assert all(p.device.type == "cpu" for p in policy.parameters()), "the original is untouched"
    plain = copy.to_empty(device="cpu")
    plain.load_state_dict(policy.state_dict())
    for a, b in zip(plain.parameters(), policy.parameters()):
        torch.testing.assert_close(a, b)


def test_strategy_arguments_are_checked():
    with pytest.raises(ValueError, match="tensor_parallel_size: 1"):
        FSDP2Strategy(tensor_parallel_size=2)
    with pytest.raises(ValueError, match="FSDP2Strategy"):
        DeepSpeedStrategy(stage=3)
    assert DeepSpeedStrategy(stage=2).config["train_micro_batch_size_per_gpu"] == 1


class _FakeEngine:
    skipped_steps = 0

    def get_global_grad_norm(self):
        return 2.5


class _FakeStrategy(DeepSpeedStrategy):
    @property
    def model(self):
        return _FakeEngine()

    @model.setter
    def model(self, value):
        pass


def test_deepspeed_step_freezes_actor_groups_during_critic_warmup():
    w_actor, w_critic = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD(
        [{"params": [w_actor], "lr": 0.5, "name": "actor"}, {"params": [w_critic], "lr": 0.5, "name": "critic"}]
    )
    (w_actor.sum() + w_critic.sum()).backward()
    norm, stepped = deepspeed_step(_FakeStrategy(stage=2), opt, freeze_actor=True)
    assert float(norm) == 2.5 and stepped
    torch.testing.assert_close(w_actor.detach(), torch.ones(2))  # actor frozen (lr 0)
    torch.testing.assert_close(w_critic.detach(), torch.full((2,), 0.5))
    assert [g["lr"] for g in opt.param_groups] == [0.5, 0.5], "learning rates restored"


def test_fsdp_param_dtype_follows_trainer_precision():
    from rlinf_core.distributed.fsdp_sharding import fsdp_param_dtype
    from rlinf_core.distributed.strategies import FSDP2Strategy

    assert fsdp_param_dtype(FSDP2Strategy(), "bf16-mixed") == "bfloat16"  # fp32 shards, bf16 gathers
    assert fsdp_param_dtype(FSDP2Strategy(), "32-true") is None
    assert fsdp_param_dtype(FSDP2Strategy(param_dtype="float32"), "bf16-mixed") == "float32"


@pytest.mark.parametrize("user_config, want", [(None, 0.5), ({"gradient_clipping": 2.0}, 2.0)], ids=["module", "user"])
def test_deepspeed_clips_at_the_modules_clip_grad(user_config, want):
    """Lightning formats the DeepSpeed config at configure_model (before ``setup``) and writes gradient_clipping
    0.0 there: the module's ``optim.clip_grad`` must already be in it (it was not: DeepSpeed never clipped)."""
    from types import SimpleNamespace

    from lightning.pytorch.plugins.precision import Precision

    config = (
        None
        if user_config is None
        else {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}, **user_config}
    )
    strategy = DeepSpeedStrategy(stage=2, config=config, precision_plugin=Precision())
    trainer = SimpleNamespace(accumulate_grad_batches=1, gradient_clip_val=None)
    strategy.connect(SimpleNamespace(optim_cfg=SimpleNamespace(clip_grad=0.5), trainer=trainer))  # Trainer._run's first
    strategy._init_config_if_needed()  # what model_sharded_context (the Trainer's configure_model) calls first
    assert strategy.config["gradient_clipping"] == want


def test_deepspeed_on_cpu_skips_the_shared_memory_op_and_names_ranks_by_local_rank():
    """DeepSpeed's communication backend on CPU uses plain gloo (no 45-90 s JIT build of its shm op), and the
    device rank Lightning hands to deepspeed.initialize is the local rank (stock: None, which DeepSpeed refuses)."""
    import importlib

    import deepspeed.ops

    from rlinf_core.distributed.strategies import _skip_deepspeed_shm_op

    saved = dict(deepspeed.ops.__compatible_ops__)
    try:
        _skip_deepspeed_shm_op()
        # (`import deepspeed.comm.torch as m` would give the torch package: deepspeed.comm has a torch attribute)
        assert importlib.import_module("deepspeed.comm.torch").build_shm_op() is None
    finally:
        deepspeed.ops.__compatible_ops__.clear()
        deepspeed.ops.__compatible_ops__.update(saved)
    strategy = DeepSpeedStrategy(stage=2, parallel_devices=[torch.device("cpu")] * 2)
    strategy.set_world_ranks()
    assert strategy.root_device == torch.device("cpu", 0) and strategy.root_device.type == "cpu"
