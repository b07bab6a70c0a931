"""World-model fine-tuning of the tiny Wan through `rlinf fit` (core WorldModelTrainer, the shipped smoke config)."""

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from rlinf_core.cli.main import main
from rlinf_core.world_models.init_data import save_init_trajectory
from rlinf_wm_wan import WanWorldModel

pytestmark = pytest.mark.slow

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "wan"


def _episodes(root: Path, n: int = 4, length: int = 20, size: int = 64) -> Path:
    """Recorded-episode files: a block sliding right by the x action, per-frame success at the end."""
    rng = np.random.default_rng(0)
    for i in range(n):
        frames = np.full((length, size, size, 3), 90, np.uint8)
        actions = np.zeros((length, 7), np.float32)
        actions[1:, 0] = rng.uniform(0.5, 1.0)
        actions[:, -1] = -1.0
        x = 4
        for t in range(length):
            x = min(size - 12, x + int(round(2 * actions[t, 0])))
            frames[t, 24:36, x : x + 8] = (200, 60, 40)
        success = np.arange(length) >= length - 3
        save_init_trajectory(root / f"traj{i}.npy", frames, "put the bowl on the plate", actions, success)
    return root


def test_world_model_fit_exports_a_release_that_loads(tiny_wan, tmp_path):
    data = _episodes(tmp_path / "rollouts")
    main(
        [
            "fit",
            "--config",
            str(CONFIGS / "wan_world_model_fit_cpu_smoke.yaml"),
            f"--model.init_args.world_model.init_args.model_path={tiny_wan}",
            f"--model.init_args.data_path={data}",
            "--trainer.max_epochs=1",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
            f"--trainer.logger.init_args.save_dir={tmp_path / 'runs'}",
        ]
    )
    export = next((tmp_path / "runs").glob("*/version_*/world_model"))
    assert (export / "model-00001.safetensors").is_file() and (export / "Wan2.2_VAE.pth").is_file()
    assert (export / "resnet_rm.pth").is_file() and (export / "dataset").is_dir()  # a complete release directory
    tuned, base = WanWorldModel(model_path=str(export)), WanWorldModel(model_path=str(tiny_wan))
    changed = [k for k, v in tuned.dit.state_dict().items() if not torch.equal(v, base.dit.state_dict()[k])]
    assert changed and all(torch.equal(v, base.vae.state_dict()[k]) for k, v in tuned.vae.state_dict().items())


def test_static_clip_augmentation_and_the_5b_recipe(tiny_wan):
    model = WanWorldModel(model_path=str(tiny_wan), static_clip_prob=1.0)
    frames = torch.randint(0, 256, (2, 13, 64, 64, 3), dtype=torch.uint8)
    loss = model.training_loss(frames, torch.rand(2, 13, 7), generator=torch.Generator().manual_seed(0))
    pad = torch.zeros(2, 13, 7) - torch.tensor([0.0] * 6 + [1.0])
    still = model.training_loss(frames[:, :1].expand_as(frames), pad, generator=torch.Generator().manual_seed(0))
    assert loss.item() == pytest.approx(still.item(), rel=1e-6)  # every clip replaced by its frame 0, pad actions
    with pytest.raises(ValueError, match="static_clip_prob"):
        WanWorldModel(model_path=str(tiny_wan), static_clip_prob=2.0)
    cfg = yaml.safe_load((CONFIGS / "wan_world_model_fit.yaml").read_text())["model"]["init_args"]
    assert cfg["world_model"]["init_args"]["static_clip_prob"] == 0.05 and cfg["optim"]["lr"] == 1e-5
