"""rlinf_core.memory.estimate: placement arithmetic per strategy, the activation model, and ``rlinf memory``."""

import pytest
import torch
from torch import nn

from rlinf_core.cli.main import main
from rlinf_core.memory.estimate import (
    GiB,
    Stack,
    StrategySpec,
    activation_bytes,
    block_bytes_per_token,
    count_parameters,
    estimate,
)


def _model(trainable: bool = True) -> nn.Module:
    m = nn.Sequential(nn.Linear(1024, 1024, bias=False), nn.Linear(1024, 256, bias=False))  # 1.25 Mi params
    m[1].weight.requires_grad_(trainable)
    m[1].to(torch.bfloat16)
    return m


def _rows(rows) -> dict[str, float]:
    return {name.split(" (")[0]: gib * GiB for name, gib in rows}


def test_count_parameters_by_role():
    c = count_parameters(_model(trainable=False))
    assert (c.trainable, c.trainable_bytes) == (1024 * 1024, 4 * 1024 * 1024)
    assert (c.frozen, c.frozen_bytes) == (256 * 1024, 2 * 256 * 1024)
    assert c.fp32_matmul == 1024 * 1024


def test_placement_per_strategy():
    c = count_parameters(_model(trainable=False))
    t = c.trainable
    kw = dict(micro_batch_size=1, rollout_batch=1, autocast=True)
    ddp = _rows(estimate(c, [], strategy=StrategySpec("ddp", 8), **kw).train)
    assert ddp["weights"] == 4 * t + 2 * 256 * 1024 and ddp["gradients"] == 4 * t and ddp["AdamW state"] == 8 * t
    assert ddp["DDP gradient buckets"] == 4 * t and ddp["bf16 weight copies kept by autocast"] == 2 * t
    fsdp = _rows(estimate(c, [], strategy=StrategySpec("fsdp2", 8, param_dtype_bytes=2), **kw).train)
    assert fsdp["weight shards"] == (4 * t + 2 * 256 * 1024) / 8 and fsdp["AdamW state shards"] == 8 * t / 8
    assert "bf16 weight copies kept by autocast" not in fsdp  # gathered in bf16 once per unit
    zero = estimate(c, [], strategy=StrategySpec("deepspeed", 8, zero_stage=1), **kw)
    rows = _rows(zero.train)
    assert rows["weights"] == 2 * t + 2 * 256 * 1024  # DeepSpeed bf16: module in bf16 ...
    assert rows["fp32 master + AdamW state partitions"] == 12 * t / 8  # ... fp32 master + Adam partitioned
    off = estimate(c, [], strategy=StrategySpec("deepspeed", 8, zero_stage=2, offload_optimizer=True), **kw)
    assert not any(name.startswith("fp32 master") for name, _ in off.train)
    assert dict(off.host)["offloaded optimizer (per rank)"] > 0


def test_activation_model_and_checkpointing():
    llm = Stack("llm", "llama", layers=32, tokens=300, hidden=4096, ffn=11008, heads=32)
    assert block_bytes_per_token(llm, "mixed") == 34 * 4096 + 8 * 11008 + 4 * 32 + 8
    full = activation_bytes([llm], "mixed", batch=2)
    ckpt = activation_bytes([Stack(**{**llm.__dict__, "checkpointed": True})], "mixed", batch=2)
    assert full == 32 * 300 * 2 * block_bytes_per_token(llm, "mixed")
    # checkpointed: fp32 block inputs of every layer + one block recomputed in backward
    assert ckpt == 4 * 4096 * 300 * 2 * 32 + 300 * 2 * block_bytes_per_token(llm, "mixed")
    assert ckpt < full / 9


def test_rlinf_memory_command(capsys, tmp_path):
    assert main(["memory", "--config", "configs/toy/reach_ppo.yaml"]) == 0
    out = capsys.readouterr().out
    assert "per GPU, training step:" in out and "fits" in out and "rollout buffer" in out
    assert main(["memory", "--config", "configs/toy/reach_ppo.yaml", "--gpu_memory_gb", "0.5"]) == 1
    assert "DOES NOT FIT" in capsys.readouterr().out
    assert main(["memory", "--config", "missing.yaml"]) == 2
    assert "not found" in capsys.readouterr().err
    no_policy = tmp_path / "wm_fit.yaml"  # e.g. a world-model fine-tune: one line saying what is estimated
    no_policy.write_text("model:\n  class_path: WorldModelTrainer\n  init_args: {}\n")
    assert main(["memory", "--config", str(no_policy)]) == 2
    err = capsys.readouterr().err
    assert "world-model and reward-model fine-tuning are not estimated" in err and "model_path" not in err


def test_the_gpu_size_lives_in_the_memory_section_not_in_rlmodule(tmp_path, capsys):
    import inspect

    import yaml

    from rlinf_core.memory.estimate import MemoryTarget
    from rlinf_core.rl.module import RLModule

    assert not {"gpu_memory_gb", "config_world_size"} & set(inspect.signature(RLModule).parameters)
    assert MemoryTarget().gpu_memory_gb == pytest.approx(80.0)
    cfg = yaml.safe_load(open("configs/toy/reach_ppo.yaml"))
    small = tmp_path / "small_gpu.yaml"
    small.write_text(yaml.safe_dump({**cfg, "memory": {"gpu_memory_gb": 0.5}}))
    assert main(["memory", "--config", str(small)]) == 1
    assert "of 0.5 GiB per GPU: DOES NOT FIT" in capsys.readouterr().out
    with pytest.raises(ValueError, match="memory.gpu_memory_gb must be > 0, got 0"):
        MemoryTarget(gpu_memory_gb=0)


def test_eval_only_configs_hold_no_optimizer(tmp_path):
    from rlinf_core.cli.memory import config_stage, estimate_config

    assert config_stage("# Run with:  rlinf validate --config x.yaml") == "validate"
    assert config_stage("# Run:   rlinf fit --config x.yaml (rlinf validate evaluates)") == "fit"
    fit, _ = estimate_config("configs/toy/reach_ppo.yaml")
    val, info = estimate_config("configs/toy/reach_ppo.yaml", stage="validate")
    assert info["stage"] == "validate" and not val.train and fit.train
    assert not any(name.startswith("AdamW") for name, _ in val.rollout)
    assert any(name.startswith("AdamW") for name, _ in fit.rollout)


def test_peak_mode_counts_live_tensors_of_a_meta_forward():
    from rlinf_core.memory.meta_peak import module_bytes, peak_bytes

    n, h, f = 64, 256, 1024
    with torch.device("meta"):
        mlp = nn.Sequential(nn.Linear(h, f), nn.GELU(), nn.Linear(f, h))
        x = torch.empty(n, h)
    # fc1's output and GELU's are both alive while GELU runs; fc1's is freed before fc2 allocates
    assert peak_bytes(lambda: mlp(x)) == 2 * n * f * 4
    assert peak_bytes(lambda: x.view(n, h)[:, :8]) == 0  # views allocate nothing
    assert module_bytes(mlp) == 4 * (h * f + f + f * h + h)


def test_estimate_counts_a_world_model_in_both_phases():
    from rlinf_core.memory.meta_peak import WorldModelMemory

    c = count_parameters(_model())
    kw = dict(strategy=StrategySpec("ddp", 1), micro_batch_size=1, rollout_batch=1, autocast=True)
    wm = WorldModelMemory(
        weights=(("DiT (bf16)", 3 * GiB), ("VAE (bf16)", GiB)),
        peaks=(("reset", GiB // 2), ("chunk", 2 * GiB), ("reward", GiB)),
    )
    base, with_wm = estimate(c, [], **kw), estimate(c, [], world_model=wm, **kw)
    assert with_wm.train_total == pytest.approx(base.train_total + 4)  # frozen weights stay while training
    assert with_wm.rollout_total == pytest.approx(base.rollout_total + 4 + 2)  # + the largest phase's peak
    text = with_wm.format()
    assert "world model: DiT (bf16)" in text and "world model: inference peak (chunk)" in text
    assert estimate(c, [], world_model=wm, gpu_memory_gib=7.0, **kw).fits is False
    assert estimate(c, [], gpu_memory_gib=7.0, **kw).fits


def test_world_model_that_cannot_run_on_meta_reports_weights_and_a_note():
    from rlinf_core.builtin.toy_world_model import ToyRewardModel, ToyWorldModel
    from rlinf_core.memory.meta_peak import module_bytes, world_model_env_memory
    from rlinf_core.models.meta import meta_init

    with meta_init():
        wm, rm = ToyWorldModel(), ToyRewardModel()
    mem = world_model_env_memory(wm, rm, num_envs=4, chunk=2, device_type="cpu")
    assert mem.weight_bytes == sum(module_bytes(m) for m in wm.children()) + module_bytes(rm)
    assert any("ToyWorldModel: inference peak not measured" in n and "meta" in n for n in mem.notes)
    with pytest.raises(ValueError, match="meta-built"):  # a real model is never profiled by running it
        ToyWorldModel().memory_profile(1, 2)


def test_rollout_buffer_reads_the_image_size_of_a_render_group():
    """Plugin envs group their image size under ``render:``; ``rlinf memory`` sizes the stored images with it (not
    with the policy's input size) as it does with a top-level ``image_size``."""
    from types import SimpleNamespace

    from rlinf_core.cli.memory import _buffer_bytes_per_rank

    policy = SimpleNamespace(num_action_chunks=1, action_dim=1, image_size=8, num_images_in_input=1)
    rollout = {"max_steps_per_rollout_epoch": 1}

    def size(env_args: dict) -> float:
        return _buffer_bytes_per_rank({"env": {"init_args": {"num_envs": 1, **env_args}}, "rollout": rollout}, policy)

    top, grouped, none = size({"image_size": 64}), size({"render": {"image_size": 64}}), size({})
    assert top == grouped and grouped - none == 3 * (64 * 64 - 8 * 8)
