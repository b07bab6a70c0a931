"""RLinf's combined OOD eval config runs through the real ``rlinf validate`` CLI on synthetic assets (tiny
OpenVLA-OFT, CPU physics, lavapipe; one task per column) and writes the seed's table layout."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from rlinf_env_maniskill import lavapipe

if not (lavapipe.is_installed() or lavapipe.nvidia_present() or os.environ.get("VK_ICD_FILENAMES")):
    pytest.skip(f"lavapipe is not installed (and no GPU): run {lavapipe.INSTALL_HINT}", allow_module_level=True)

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "maniskill" / "maniskill_ood_openvlaoft.yaml"
TASKS = [
    "Vision/PutOnPlateInScene25VisionImage-v1",
    "Semantic/PutOnPlateInScene25Carrot-v1",
    "Position/PutOnPlateInScene25Position-v1",
]


def test_ood_eval_config_writes_vision_semantic_position_average(tmp_path, capsys):
    make_tiny = pytest.importorskip("rlinf_policy_openvla.make_tiny", reason="needs the rlinf-policy-openvla plugin")
    from rlinf_core.cli.main import main
    from rlinf_env_maniskill.synthetic_assets import write_synthetic_assets

    assets = write_synthetic_assets(tmp_path / "assets")
    model = make_tiny.make_tiny(tmp_path / "tiny-oft", kind="oft", norm_keys=["bridge_orig"], action_dim=7)
    config = yaml.safe_load(CONFIG.read_text())
    del config["model"]["init_args"]["policy"]["init_args"]["lora"]  # no released adapter here: the tiny base only
    shipped = tmp_path / CONFIG.name
    shipped.write_text(yaml.safe_dump(config))
    ev = "--model.init_args.eval_env.init_args."
    make = json.dumps({"obj_set": "test", "asset_dir": str(assets.asset_dir), "bridge_dir": str(assets.bridge_dir)})
    try:
        main(
            [
                "validate",
                "--config",
                str(shipped),
                "--trainer.accelerator=cpu",
                "--trainer.devices=1",
                "--trainer.precision=32",
                f"--trainer.logger.init_args.save_dir={tmp_path}",
                f"--trainer.default_root_dir={tmp_path}",
                f"--model.init_args.policy.init_args.model_path={model}",
                "--model.init_args.policy.init_args.precision=fp32",
                "--model.init_args.policy.init_args.inputs.max_prompt_length=64",  # the tiny tokenizer splits finer
                "--model.init_args.rollout.show_progress=false",
                "--model.init_args.env.init_args.sim.backend=cpu",
                f"{ev}tasks={json.dumps(TASKS)}",
                f"{ev}sim.make_kwargs={make}",
                f"{ev}sim.backend=cpu",
                f"{ev}trials_per_task=1",
                f"{ev}num_envs=3",
                f"{ev}max_episode_steps=2",
                f"{ev}video_cfg={{save_video: false}}",
            ]
        )
    except SystemExit as exc:  # LightningCLI exits 0 after validate
        assert exc.code in (0, None)
    (table,) = tmp_path.glob("maniskill_ood_openvlaoft/*/eval/eval_epoch0.md")
    lines = table.read_text().splitlines()
    assert lines[0] == "| Vision | Semantic | Position | Average |"
    assert all(cell.strip().endswith("%") for cell in lines[2].strip("|").split("|"))
    (result,) = tmp_path.glob("maniskill_ood_openvlaoft/*/eval/eval_epoch0.json")
    data = json.loads(result.read_text())
    assert set(data["per_suite"]) == {"Vision", "Semantic", "Position"}
    assert data["metrics"]["eval/num_trajectories"] == 3.0
    assert "| Vision | Semantic | Position | Average |" in capsys.readouterr().out
