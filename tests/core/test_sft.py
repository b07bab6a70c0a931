"""Demo datasets and SFTModule: format, chunking, a short behaviour-cloning run, export, CLI."""

from __future__ import annotations

import json

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
import yaml

from rlinf_core.builtin.reach_demos import collect_reach_demos
from rlinf_core.builtin.toy_policy import TinyVLAPolicy
from rlinf_core.datasets.demos import DemoDataset, DemoWriter, read_meta
from rlinf_core.rl.config import OptimConfig
from rlinf_core.supervised.sft import SFTModule


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("demos")
    collect_reach_demos(root)
    return root


def test_format_and_chunking(demo_dir, tmp_path):
    meta = read_meta(demo_dir)
    assert meta["num_episodes"] == 30 and meta["num_successful"] == 30 and meta["env"] == "ReachEnv"
    ds = DemoDataset(demo_dir, num_action_chunks=3)
    assert len(ds) == sum(e["length"] for e in meta["episodes"])
    obs, chunk = ds[0]
    assert obs.main_images.shape == (1, 32, 32, 3) and obs.states.shape == (1, 4) and chunk.shape == (3, 2)
    # the last sample of an episode repeats the final action to fill the chunk
    first_len = meta["episodes"][0]["length"]
    _, last = ds[first_len - 1]
    raw = np.load(demo_dir / meta["episodes"][0]["file"])["actions"]
    assert torch.equal(last, torch.from_numpy(np.repeat(raw[-1:], 3, axis=0)))
    torch.testing.assert_close(ds[1][1][:2], torch.from_numpy(raw[1:3]))
    batch_obs, batch_actions = DemoDataset.collate([ds[i] for i in range(5)])
    assert len(batch_obs) == 5 and batch_actions.shape == (5, 3, 2)
    train, val = ds.split(0.25, seed=0)
    assert len(train.episodes) == 22 and len(val.episodes) == 8 and len(train) + len(val) == len(ds)
    with pytest.raises(FileExistsError):
        DemoWriter(demo_dir, action_dim=2)
    with pytest.raises(FileNotFoundError, match="meta.json"):
        DemoDataset(tmp_path)
    with pytest.raises(ValueError, match=r"actions must be float \[T, 2\]"):
        DemoWriter(tmp_path / "bad", action_dim=2).add(np.zeros((3, 8, 8, 3), np.uint8), np.zeros((3, 4)), "x", True)


def _mean_loss(policy, ds) -> float:
    obs, actions = DemoDataset.collate([ds[i] for i in range(len(ds))])
    with torch.no_grad():
        return float(policy.sft_loss(obs, actions))


def _greedy_l1(policy, ds) -> float:
    obs, actions = DemoDataset.collate([ds[i] for i in range(len(ds))])
    policy.eval()
    with torch.no_grad():
        return float((policy.act(obs, do_sample=False).actions - actions).abs().mean())


def test_short_sft_run_lowers_loss_and_exports(demo_dir, tmp_path):
    torch.manual_seed(0)
    policy = TinyVLAPolicy(action_dim=2, num_action_chunks=2, state_dim=4, add_value_head=False)
    ds = DemoDataset(demo_dir, num_action_chunks=2)
    before, l1_before = _mean_loss(policy, ds), _greedy_l1(policy, ds)
    module = SFTModule(
        policy,
        str(demo_dir),
        batch_size=32,
        val_fraction=0.2,
        optim=OptimConfig(lr=1e-2, lr_scheduler="cosine", lr_warmup_steps=5, clip_grad=None),
    )
    trainer = pl.Trainer(max_epochs=40, accelerator="cpu", logger=pl.loggers.TensorBoardLogger(tmp_path, name="sft"),
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(module)
    after = _mean_loss(policy, ds)
    assert after < 0.6 * before, (before, after)
    assert trainer.callback_metrics["val/loss"] < before
    assert _greedy_l1(policy, ds) < 0.7 * l1_before  # the greedy policy now imitates the expert
    # the export is what the RL config loads through model_path
    assert module.export_path == tmp_path / "sft" / "version_0" / "policy"
    loaded = TinyVLAPolicy(model_path=str(module.export_path))
    obs, _ = DemoDataset.collate([ds[i] for i in range(4)])
    policy.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded.act(obs, do_sample=False).actions, policy.act(obs, do_sample=False).actions)


def test_action_dim_mismatch_is_explained(demo_dir):
    module = SFTModule(TinyVLAPolicy(action_dim=3, num_action_chunks=2), str(demo_dir))
    with pytest.raises(ValueError, match="action_dim 2 but the policy TinyVLAPolicy has action_dim 3"):
        module.setup("fit")


def test_runs_through_rlinf_fit(demo_dir, tmp_path, monkeypatch):
    from rlinf_core.cli.main import main

    monkeypatch.chdir(tmp_path)
    config = {
        "trainer": {"max_epochs": 2, "accelerator": "cpu", "enable_progress_bar": False, "enable_checkpointing": False},
        "model": {
            "class_path": "SFTModule",
            "init_args": {
                "policy": {"class_path": "TinyVLAPolicy",
                           "init_args": {"action_dim": 2, "num_action_chunks": 2, "add_value_head": False}},
                "data_path": str(demo_dir),
                "batch_size": 64,
                "optim": {"lr": 1e-3},
                "export_dir": str(tmp_path / "exported"),
            },
        },
    }  # fmt: skip
    (tmp_path / "sft.yaml").write_text(yaml.safe_dump(config))
    main(["fit", "--config", str(tmp_path / "sft.yaml")])
    cfg = json.loads((tmp_path / "exported" / "config.json").read_text())
    assert cfg["num_action_chunks"] == 2 and (tmp_path / "exported" / "model.safetensors").is_file()
