"""LoRA with RLinf's adapter target list: only layers on the forward path get adapters and gradients."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlinf_core.models.lora import LoRAConfig
from rlinf_policy_openvla import OpenVLAOFTPolicy
from rlinf_policy_openvla.released import RLINF_LORA_TARGETS
from rlinf_policy_openvla.settings import ActionConfig

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent


def test_unused_prefixes_are_exactly_the_layers_without_gradients(tiny_oft, obs):
    policy = OpenVLAOFTPolicy(str(tiny_oft), add_value_head=True, actions=ActionConfig(num_action_chunks=2))
    for p in policy.parameters():
        p.requires_grad_(True)
    record = policy.act(obs).record
    out = policy.evaluate(obs, record, compute_values=True)
    (out.logprobs.sum() + out.values.sum()).backward()
    no_grad = {n for n, p in policy.vla.named_parameters() if p.grad is None}
    unused = tuple(policy.vla.unused_parameter_prefixes())
    declared = {n for n, _ in policy.vla.named_parameters() if n.startswith(unused)}
    assert no_grad == declared and any("attn_pool" in n for n in declared)


def test_rlinf_targets_get_adapters_only_on_the_forward_path(tiny_oft):
    policy = OpenVLAOFTPolicy(str(tiny_oft), lora=LoRAConfig(target_modules=RLINF_LORA_TARGETS))
    unused = tuple(policy.vla.unused_parameter_prefixes())
    lora = [n for n, _ in policy.vla.named_parameters() if ".lora_" in n]
    assert lora and not [n for n in lora if n.startswith(unused)]
    assert any(n.startswith("vision_backbone.fused_featurizer.blocks.0.attn.qkv") for n in lora)
    assert any(n.startswith("language_model.lm_head") for n in lora)
    assert not [n for n, p in policy.vla.named_parameters() if p.requires_grad and n.startswith(unused)]


def test_targets_only_off_the_forward_path_fail_in_one_line(tiny_oft):
    with pytest.raises(ValueError, match="match no layer on the forward path.*attn_pool"):
        OpenVLAOFTPolicy(str(tiny_oft), lora=LoRAConfig(target_modules=["q", "kv"]))


def test_two_rank_ddp_lora_update_with_rlinf_targets(tiny_oft, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(HERE / "ddp_lora_probe.py"),
        str(tiny_oft),
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["start"] == ranks[1]["start"]
    assert ranks[0]["end"] == ranks[1]["end"], "ranks updated differently"
    assert ranks[0]["end"] != ranks[0]["start"], "the update changed nothing"
    assert any("value_head" in n for n in ranks[0]["trainable"])
    assert torch.distributed.is_available()
