"""Shared VLA plumbing in core: sharded weights, norm stats, LoRA, optional imports, MuJoCo GL, conventions."""

import json
import os
import sys

import pytest
import torch
from torch import nn

from rlinf_core.envs import mujoco_gl
from rlinf_core.foundation.optional_deps import MissingDependencyError, require
from rlinf_core.models.conventions import open_fraction_to_signed_gripper, signed_gripper_to_open_fraction
from rlinf_core.models.lora import LoRAConfig, apply_lora, merged_state_dict
from rlinf_core.models.norm_stats import (
    bounds,
    normalize_bounds,
    read_norm_stats,
    resolve_unnorm_key,
    unnormalize_bounds,
)
from rlinf_core.models.value_head import ValueHead
from rlinf_core.models.weights import INDEX_NAME, CheckpointError, load_weights, save_weights


def test_sharded_weights_round_trip_with_index(tmp_path):
    state = {f"layer{i}.weight": torch.randn(64, 64) for i in range(4)}
    names = save_weights(state, tmp_path, num_shards=3)
    # huggingface_hub's greedy split: 4 equal tensors under the smallest limit giving <= 3 shards are 2 + 2
    assert names == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", INDEX_NAME]
    index = json.loads((tmp_path / INDEX_NAME).read_text())
    assert set(index["weight_map"]) == set(state) and index["metadata"]["total_size"] == 4 * 64 * 64 * 4
    loaded = load_weights(tmp_path)
    assert all(torch.equal(loaded[k], v) for k, v in state.items())
    index_from_transformers_layout = json.loads((tmp_path / INDEX_NAME).read_text())["weight_map"]
    assert index_from_transformers_layout["layer0.weight"] == "model-00001-of-00002.safetensors"
    save_weights(state, tmp_path)  # a single file replaces the stale shards
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no weights in .*make one"):
        load_weights(tmp_path, hint="make one")


def test_missing_shard_is_one_line(tmp_path):
    save_weights({"a": torch.zeros(1000), "b": torch.zeros(1000)}, tmp_path, max_shard_bytes=4000)
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model-00002-of-00002.safetensors is missing"):
        load_weights(tmp_path)


def test_norm_stats_dataset_statistics_and_no_noops(tmp_path):
    action = {"q01": [-1.0, 0.0], "q99": [1.0, 2.0], "mask": [True, False]}
    (tmp_path / "dataset_statistics.json").write_text(json.dumps({"libero_spatial_no_noops": {"action": action}}))
    stats = read_norm_stats(tmp_path, {"norm_stats": {"bridge_orig": {"action": action}}})
    assert sorted(stats) == ["bridge_orig", "libero_spatial_no_noops"]
    assert resolve_unnorm_key(stats, "libero_spatial", "ckpt") == "libero_spatial_no_noops"
    with pytest.raises(ValueError, match="set unnorm_key to one of: bridge_orig, libero_spatial_no_noops"):
        resolve_unnorm_key(stats, None, "ckpt")
    low, high, mask = bounds(action)
    x = torch.tensor([[0.5, 1.5], [3.0, -7.0]], dtype=torch.float64)
    norm = normalize_bounds(x, low, high, mask)
    torch.testing.assert_close(norm, torch.tensor([[0.5, 1.5], [1.0, -7.0]], dtype=torch.float64))
    torch.testing.assert_close(unnormalize_bounds(norm[:1], low, high, mask), x[:1])
    (tmp_path / "dataset_statistics.json").write_text(json.dumps({"action": action}))  # bare file: keyed by dir name
    assert list(read_norm_stats(tmp_path)) == [tmp_path.name]
    with pytest.raises(ValueError, match="lack 'min'/'max'"):
        bounds(action, "bounds")


class _Net(nn.Module):
    """Two blocks; the second never runs in forward (like Prismatic's last ViT block)."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8)])
        self.value_head = ValueHead(8, 1, hidden_sizes=(4,))

    def unused_parameter_prefixes(self):
        return ["blocks.1."]

    def forward(self, x):
        return self.blocks[0](x)


def test_lora_on_the_forward_path_only_and_merge(tmp_path):
    torch.manual_seed(0)
    net = _Net()
    targets = ["blocks.0", "blocks.1"]
    model = apply_lora(net, LoRAConfig(rank=2), default_targets=targets, modules_to_save=["value_head"])
    trainable = sorted(n for n, p in model.named_parameters() if p.requires_grad)
    assert any("blocks.0.lora_A" in n for n in trainable) and not any("blocks.1" in n for n in trainable)
    assert any("value_head" in n for n in trainable)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_()
    x = torch.randn(3, 8)
    merged = merged_state_dict(model)
    plain = _Net()
    plain.load_state_dict(merged)
    torch.testing.assert_close(plain(x), model(x))
    with pytest.raises(ValueError, match="match no layer on the forward path.*'blocks.1'"):
        apply_lora(_Net(), LoRAConfig(target_modules=["blocks.1"]), default_targets=[])


def test_missing_optional_dependency_is_one_line():
    assert require("json", "pip install json") is json
    with pytest.raises(MissingDependencyError, match=r"^LoRA needs no_such_pkg_rlinf .*`pip install no-such`$"):
        require("no_such_pkg_rlinf", "pip install no-such", "LoRA")


def test_mujoco_gl_selection(monkeypatch):
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.delenv("PYOPENGL_PLATFORM", raising=False)
    monkeypatch.delitem(sys.modules, "mujoco", raising=False)
    assert mujoco_gl.setup_gl(None, "SomeEnv") == "egl"
    assert os.environ["MUJOCO_GL"] == "egl" and os.environ["PYOPENGL_PLATFORM"] == "egl"
    with pytest.raises(ValueError, match="SomeEnv: gl_backend must be one of egl, osmesa"):
        mujoco_gl.setup_gl("glfw", "SomeEnv", backends=("egl", "osmesa"))
    monkeypatch.setitem(sys.modules, "mujoco", object())  # mujoco imported: the backend is fixed
    assert mujoco_gl.setup_gl(None, "SomeEnv") == "egl"
    with pytest.raises(RuntimeError, match="set MUJOCO_GL=osmesa before anything imports mujoco"):
        mujoco_gl.setup_gl("osmesa", "SomeEnv")


def test_gripper_convention_round_trip():
    a = torch.tensor([[0.1, 0.2, 0.0], [0.3, 0.4, 1.0]])
    signed = open_fraction_to_signed_gripper(a)
    assert signed[:, -1].tolist() == [1.0, -1.0] and torch.equal(signed[:, :2], a[:, :2])
    torch.testing.assert_close(signed_gripper_to_open_fraction(signed), a)


def test_save_weights_writes_views_of_a_flat_buffer(tmp_path):
    # DeepSpeed / FSDP hand out parameters as views into one flat buffer; huggingface_hub refuses to save a tensor
    # that does not cover its whole storage, so save_weights copies those (a bug a 2-rank DeepSpeed export found)
    flat = torch.arange(12, dtype=torch.float32)
    state = {"a.weight": flat[:6].view(2, 3), "b.weight": flat[6:].view(3, 2), "tied": torch.ones(2)}
    state["tied_too"] = state["tied"]
    save_weights(state, tmp_path)
    loaded = load_weights(tmp_path)
    assert torch.equal(loaded["a.weight"], flat[:6].view(2, 3)) and torch.equal(loaded["b.weight"], flat[6:].view(3, 2))
    assert torch.equal(loaded["tied"], torch.ones(2))
