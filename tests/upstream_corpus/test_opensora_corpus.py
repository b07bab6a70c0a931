"""The RLinf/opensora fork's training checkpoint (``opensora_fork_ckpt/``, written by the fork's ``CheckpointIO.save``
through colossalai's ``Booster.save_model``; see README.md) loads into ``OpenSoraWorldModel`` through a YAML
``world_model`` block and computes the fork's own ``STDiT3.forward`` output (``opensora_fork_ckpt_reference``)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlinf_core.models.weights import load_pth_state_dict, load_safetensors
from rlinf_core.testing.numerics import assert_close_reordered
from rlinf_wm_opensora.testing import FLOAT32_SUMS

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels

HERE = Path(__file__).resolve().parent
CKPT = HERE / "opensora_fork_ckpt"
REF = load_file(str(HERE / "opensora_fork_ckpt_reference.safetensors"))


@pytest.fixture(scope="module")
def side_files():
    """The VAE and statistics a fork checkpoint lacks (its trainer saves the DiT only): the tiny ones of
    ``make_tiny`` at 32 px, whose VAE has the 4 latent channels the checkpoint's DiT takes."""
    from rlinf_wm_opensora.testing import tiny_world_model

    tiny = tiny_world_model()  # 32 px: the cached directory the plugin's tests share
    return tiny / "vae", tiny / "dataset_statistics.json"


def from_yaml(model_path: Path, **init_args):
    """The world model a config's ``world_model:`` block builds (class resolved by its registered short name)."""
    import yaml
    from jsonargparse import ArgumentParser

    from rlinf_core.contracts import WorldModel
    from rlinf_core.plugins.manager import load_plugins

    load_plugins(warn=False).resolve("world_model", "OpenSoraWorldModel")  # imports it, as the CLI's plugin load
    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(WorldModel, "world_model")
    block = {"class_path": "OpenSoraWorldModel", "init_args": {"model_path": str(model_path), **init_args}}
    cfg = parser.parse_string(yaml.safe_dump({"world_model": block}))
    return parser.instantiate(cfg).world_model


def fork_forward(wm) -> torch.Tensor:
    with torch.no_grad():
        return wm.dit(REF["x"], REF["t"], REF["actions"], x_mask=REF["x_mask"], height=32, width=32)


@pytest.mark.parametrize("dit_weights", ["ema", "model"])
def test_fork_training_checkpoint_loads_from_yaml_as_the_fork_computes(side_files, dit_weights, caplog):
    vae, stats = side_files
    caplog.set_level(logging.INFO, logger="rlinf_wm_opensora.world_model")
    wm = from_yaml(
        CKPT, vae_path=str(vae), stats_path=str(stats), image_size=32, dit_weights=dit_weights, inference_dtype="fp32"
    )
    shard = CKPT / "model" / "model-00001.safetensors"
    written = load_pth_state_dict(CKPT / "ema.pt") if dit_weights == "ema" else load_safetensors(shard)
    loaded = wm.dit.state_dict()
    assert set(written) == set(loaded)
    # without a training step (see README) ema.pt holds model/'s values: the log line says which file was read
    source = "ema.pt (training checkpoint, the EMA)" if dit_weights == "ema" else "model/model.safetensors.index.json"
    assert f"weights from {source}" in caplog.text and "sizes from model/config.json" in caplog.text
    for k, v in written.items():
        assert torch.equal(loaded[k], v.float()), k
    assert wm.config.depth == 2 and wm.config.hidden_size == 32  # from model/config.json (colossalai writes it)
    out = fork_forward(wm)
    # the fork's own forward, computed on another machine: float32 reordering (rlinf_wm_opensora FLOAT32_SUMS)
    assert_close_reordered(out, REF[f"out_{dit_weights}"], *FLOAT32_SUMS)  # condition frames too
    # the world model's own velocity call: the first in_channels of the same output
    with torch.no_grad():
        v = wm.velocity(REF["x"], REF["t"], wm.normalize_actions(torch.zeros(2, 8, 7)), REF["x_mask"])
        expected = wm.dit(
            REF["x"], REF["t"], wm.normalize_actions(torch.zeros(2, 8, 7)), x_mask=REF["x_mask"], height=32, width=32
        )
    assert torch.equal(v, expected[:, :4])


def test_fork_model_dir_with_vae_loads_as_the_released_layout(side_files, tmp_path):
    """RLinf's release is the fork's ``model/`` files beside ``vae/`` and the statistics: that directory loads
    without any option, with colossalai's ``config.json`` and float ``total_size`` index."""
    vae, stats = side_files
    shutil.copytree(CKPT / "model", tmp_path / "wm")
    shutil.copytree(vae, tmp_path / "wm" / "vae")
    shutil.copy(stats, tmp_path / "wm")
    wm = from_yaml(tmp_path / "wm", image_size=32, inference_dtype="fp32")
    assert_close_reordered(fork_forward(wm), REF["out_model"], *FLOAT32_SUMS)


def test_fork_training_checkpoint_without_vae_names_the_options(capsys):
    from rlinf_core.cli.error_report import run_cli
    from rlinf_wm_opensora import OpenSoraWorldModel

    with pytest.raises(FileNotFoundError) as info:
        OpenSoraWorldModel(str(CKPT), image_size=32)
    message = str(info.value)
    assert "\n" not in message and "training checkpoint" in message
    assert "vae_path" in message and "stats_path" in message
    with pytest.raises((TypeError, ValueError)) as info:  # the YAML route reports the same line
        from_yaml(CKPT, image_size=32)
    assert message in str(info.value)
    with pytest.raises(SystemExit) as exit_info:  # and the CLI (rlinf fit / validate) prints it as one line
        run_cli(lambda: from_yaml(CKPT, image_size=32))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlinf: error: ") and "vae_path" in err[0]


def test_dit_weights_is_checked(side_files):
    vae, stats = side_files
    with pytest.raises(ValueError, match="dit_weights must be one of ema, model"):
        from_yaml(CKPT, vae_path=str(vae), stats_path=str(stats), dit_weights="last")
