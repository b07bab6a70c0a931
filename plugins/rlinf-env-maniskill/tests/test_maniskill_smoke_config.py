"""configs/maniskill/pickcube_cpu_smoke.yaml trains and evaluates end to end on the CPU."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlinf_env_maniskill import lavapipe

pytestmark = pytest.mark.slow

if not (lavapipe.is_installed() or lavapipe.nvidia_present() or os.environ.get("VK_ICD_FILENAMES")):
    pytest.skip(f"lavapipe is not installed (and no GPU): run {lavapipe.INSTALL_HINT}", allow_module_level=True)

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "maniskill" / "pickcube_cpu_smoke.yaml"


def test_pickcube_cpu_smoke_config_runs(tmp_path, monkeypatch):
    make_tiny = pytest.importorskip("rlinf_policy_openvla.make_tiny", reason="needs the rlinf-policy-openvla plugin")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from rlinf_core.cli.main import main

    ckpt = tmp_path / "tiny-oft"
    make_tiny.main([str(ckpt), "--action-dim", "7", "--proprio-dim", "16", "--norm-key", "maniskill"])
    monkeypatch.chdir(tmp_path)
    main(
        [
            "fit",
            "--config",
            str(CONFIG),
            f"--model.init_args.policy.init_args.model_path={ckpt}",
            f"--trainer.logger.init_args.save_dir={tmp_path / 'runs'}",
        ]
    )
    run = next((tmp_path / "runs" / "pickcube_cpu_smoke").glob("version_*"))
    table = next((run / "eval").glob("*.md")).read_text()
    assert "PickCube-v1" in table
    events = EventAccumulator(str(run)).Reload()
    scalars = events.Tags()["scalars"]
    # two RL steps of 2 envs x 16 steps: episodes of 12 steps end by truncation and auto-reset
    assert [e.value for e in events.Scalars("env/episode_len")] == [12.0, 12.0]
    assert "train/critic/value_loss" in scalars and "eval/success_once" in scalars
    assert (run / "policy").is_dir()
