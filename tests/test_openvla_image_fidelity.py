"""RLinf's OpenVLA / OFT configs, parsed through the real CLI, feed images as RLinf v0.3's code does.

RLinf's YAMLs say ``center_crop: True``, but the value is only passed to ``OpenVLAOFTConfig.from_pretrained`` and
read by nothing (RLinf v0.3 rlinf/models/embodiment/openvla_oft/rlinf/__init__.py:44-46; only
rlinf/envs/robotwin/robotwin_env.py crops), and its processor resizes tensors
(rlinf/models/embodiment/prismatic/processing_prismatic.py:51). So the parsed policy must not crop and must resize
tensors. The YAML-level check of every config from RLinf's guides is ``RLINF_IMAGES`` in tests/test_config_fidelity.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlinf_core.cli.main import main

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
# one config per family of RLinf's published OpenVLA / OFT runs (LIBERO GRPO / PPO / eval, ManiSkill OpenVLA / OFT /
# OOD eval, MetaWorld OFT, the world-model GRPO runs and their SFT evals)
FAMILIES = [
    "libero/spatial.yaml",
    "libero/ppo_goal.yaml",
    "libero/eval/libero_130_rl_spatial.yaml",
    "libero/eval/wan_sft_goal.yaml",
    "maniskill/maniskill_grpo_openvla.yaml",
    "maniskill/maniskill_ppo_openvlaoft.yaml",
    "maniskill/maniskill_ood_vision.yaml",
    "metaworld/mt50_grpo_openvlaoft.yaml",
    "opensora/libero_object_grpo_openvlaoft.yaml",
    "wan/wan_libero_spatial_grpo_openvlaoft.yaml",
]


@pytest.mark.parametrize("rel", FAMILIES)
def test_parsed_policy_neither_crops_nor_resizes_like_pil(rel, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", str(CONFIGS / rel), "--print_config"])
    assert exc.value.code in (0, None), capsys.readouterr().err[-2000:]
    policy = yaml.safe_load(capsys.readouterr().out)["model"]["init_args"]["policy"]
    assert policy["class_path"].endswith(("OpenVLAPolicy", "OpenVLAOFTPolicy"))
    args = policy["init_args"]["inputs"]
    assert (args["center_crop"], args["image_resize"]) == (False, "tensor"), rel
