"""The released directory layout: strict STDiT3 / VAE keys with one-line errors, and the released size on meta."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from rlinf_core.models.meta import meta_init, parameter_count
from rlinf_core.models.weights import CheckpointError
from rlinf_wm_opensora._modeling import STDiT3Config, is_optional_key
from rlinf_wm_opensora.make_tiny import action_statistics
from rlinf_wm_opensora.testing import tiny_world_model
from rlinf_wm_opensora.world_model import OpenSoraWorldModel

WEIGHTS = "model-00001.safetensors"

# config.json as STDiT3_XL_2 saves it for the released checkpoint (Hugging Face PretrainedConfig fields included)
RELEASED_CONFIG = {
    "architectures": ["STDiT3"],
    "model_type": "STDiT3",
    "input_size": [12, 32, 32],
    "input_sq_size": 512,
    "in_channels": 4,
    "patch_size": [1, 2, 2],
    "hidden_size": 1152,
    "depth": 28,
    "num_heads": 16,
    "mlp_ratio": 4.0,
    "class_dropout_prob": 0.1,
    "pred_sigma": True,
    "drop_path": 0.0,
    "caption_channels": 4096,
    "model_max_length": 300,
    "qk_norm": True,
    "enable_flash_attn": True,
    "enable_layernorm_kernel": True,
    "enable_sequence_parallelism": False,
    "only_train_temporal": False,
    "freeze_y_embedder": False,
    "skip_y_embedder": False,
    "cfg": False,
    "training": False,
    "action_dim": 7,
    "pad_action_num": 4,
    "torch_dtype": "float32",
    "transformers_version": "4.36.2",
}
# stabilityai/sdxl-vae's vae/config.json
SDXL_VAE = {
    "_class_name": "AutoencoderKL",
    "act_fn": "silu",
    "block_out_channels": [128, 256, 512, 512],
    "down_block_types": ["DownEncoderBlock2D"] * 4,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
    "in_channels": 3,
    "latent_channels": 4,
    "layers_per_block": 2,
    "norm_num_groups": 32,
    "out_channels": 3,
    "sample_size": 1024,
    "scaling_factor": 0.13025,
}


def _copy(tmp_path):
    dst = tmp_path / "wm"
    shutil.copytree(tiny_world_model(), dst)
    return dst


def _rewrite(path, fn):
    state = load_file(str(path / WEIGHTS))
    fn(state)
    save_file(state, str(path / WEIGHTS))
    index = json.loads((path / "model.safetensors.index.json").read_text())
    index["weight_map"] = {k: WEIGHTS for k in state}
    (path / "model.safetensors.index.json").write_text(json.dumps(index))


def test_released_key_names_load_strict():
    model = OpenSoraWorldModel(str(tiny_world_model()))
    keys = set(load_file(str(tiny_world_model() / WEIGHTS)))
    assert keys == set(model.dit.state_dict())
    for key in (
        "spatial_blocks.0.attn.q_norm.weight",
        "temporal_blocks.1.attn.qkv.bias",
        "rope.freqs",
        "action_embedder.fc.0.weight",
        "action_embedder.none_action.weight",
        "t_block.1.weight",
        "final_layer.scale_shift_table",
        "y_embedder.y_proj.fc1.weight",
        "y_embedder.y_embedding",
        "spatial_blocks.0.cross_attn.kv_linear.weight",
        "fps_embedder.mlp.0.weight",
        "x_embedder.proj.weight",
        "t_embedder.mlp.2.bias",
        "spatial_blocks.1.mlp.fc2.weight",
    ):
        assert key in keys, key


def test_a_missing_key_is_a_one_line_error(tmp_path):
    path = _copy(tmp_path)
    _rewrite(path, lambda s: s.pop("temporal_blocks.1.attn.qkv.weight"))
    with pytest.raises(CheckpointError, match=r"'temporal_blocks.1.attn.qkv.weight' is missing") as exc:
        OpenSoraWorldModel(str(path))
    assert "\n" not in str(exc.value)


def test_an_unexpected_key_is_a_one_line_error(tmp_path):
    path = _copy(tmp_path)
    _rewrite(path, lambda s: s.__setitem__("module.extra.weight", torch.zeros(2)))
    with pytest.raises(CheckpointError, match=r"'module.extra.weight' is not an STDiT3 parameter"):
        OpenSoraWorldModel(str(path))


def test_a_wrong_shape_names_the_tensor(tmp_path):
    path = _copy(tmp_path)
    _rewrite(path, lambda s: s.__setitem__("t_block.1.weight", torch.zeros(3, 3)))
    with pytest.raises(CheckpointError, match=r"'t_block.1.weight' has shape \[3, 3\]"):
        OpenSoraWorldModel(str(path))


def test_unused_text_pathway_keys_may_be_absent(tmp_path):
    path = _copy(tmp_path)
    full = OpenSoraWorldModel(str(path))
    _rewrite(path, lambda s: [s.pop(k) for k in list(s) if is_optional_key(k)])
    model = OpenSoraWorldModel(str(path))
    for k, v in model.dit.state_dict().items():
        if not is_optional_key(k):
            assert torch.equal(v, full.dit.state_dict()[k]), k
    assert torch.equal(model.dit.rope.freqs, full.dit.rope.freqs)  # derived, the same either way


def test_vae_keys_are_strict_too(tmp_path):
    path = _copy(tmp_path)
    vae = path / "vae" / "diffusion_pytorch_model.safetensors"
    state = load_file(str(vae))
    state.pop(next(iter(state)))
    save_file(state, str(vae))
    with pytest.raises(ValueError, match="VAE key .* is missing"):
        OpenSoraWorldModel(str(path))


def test_vae_files_with_legacy_attention_names_load(tmp_path):
    path = _copy(tmp_path)
    vae = path / "vae" / "diffusion_pytorch_model.safetensors"
    state = load_file(str(vae))
    legacy = {
        k.replace(".to_q.", ".query.")
        .replace(".to_k.", ".key.")
        .replace(".to_v.", ".value.")
        .replace(".to_out.0.", ".proj_attn."): v
        for k, v in state.items()
    }
    assert any(".proj_attn." in k for k in legacy)
    save_file(legacy, str(vae))
    model = OpenSoraWorldModel(str(path))
    for k, v in model.vae.state_dict().items():
        assert torch.equal(v, state[k]), k


def test_action_statistics_errors_are_one_line(tmp_path):
    path = _copy(tmp_path)
    (path / "dataset_statistics.json").write_text(json.dumps({"proprio": {}}))
    with pytest.raises(ValueError, match=r"expected \{'action'"):
        OpenSoraWorldModel(str(path))
    with pytest.raises(FileNotFoundError, match="make_tiny"):
        OpenSoraWorldModel(str(tmp_path / "nowhere"))


def test_released_size_builds_on_meta(tmp_path):
    (tmp_path / "vae").mkdir()
    (tmp_path / "config.json").write_text(json.dumps(RELEASED_CONFIG))
    (tmp_path / "vae" / "config.json").write_text(json.dumps(SDXL_VAE))
    (tmp_path / "dataset_statistics.json").write_text(json.dumps(action_statistics()))
    with meta_init():
        model = OpenSoraWorldModel(str(tmp_path))
    assert model.config == STDiT3Config()  # the released architecture is the default
    assert model.image_size == 256 and model.latent_size == 32 and model.clip_frames == (4, 8)
    n = parameter_count(model.dit)
    assert n == 1_212_991_556, n  # Open-Sora's "1.1 B" STDiT3-XL/2 (+ the action encoder)
    assert 80e6 < parameter_count(model.vae) < 90e6  # the SDXL VAE: 83.7 M
    assert model.dit.spatial_blocks[27].attn.q_norm.weight.shape == (72,)
    assert model.dit.final_layer.linear.weight.shape == (32, 1152)  # 2x2 patch x 8 channels (pred_sigma)
    # the released shapes run through the forward: 256² frames → 4 x 32 x 32 latents, 4 + 8 frames, 7-D actions
    meta = dict(device="meta")
    out = model.dit(
        torch.empty(2, 4, 12, 32, 32, **meta),
        torch.empty(2, **meta),
        torch.empty(2, 8, 7, **meta),
        x_mask=torch.empty(2, 12, dtype=torch.bool, **meta),
        height=256,
        width=256,
    )
    assert out.shape == (2, 8, 12, 32, 32)


def _rlinf_layout(tmp_path):
    """The tiny model as RLinf's loader reads a directory: model-00001.safetensors, no config.json, no index."""
    path = _copy(tmp_path)
    sizes = json.loads((path / "config.json").read_text())
    (path / "config.json").unlink()
    (path / "model.safetensors.index.json").unlink()
    return path, sizes


def test_rlinf_layout_without_config_or_index_loads_with_the_yaml_sizes(tmp_path, caplog):
    """RLinf reads ``model-00001.safetensors`` with sizes from its YAML (STDiT3-XL/2 + qk_norm, action_dim,
    pad_action_num) and needs neither config.json nor the index."""
    import logging

    path, sizes = _rlinf_layout(tmp_path)
    tiny = {k: sizes[k] for k in ("depth", "hidden_size", "num_heads", "caption_channels", "model_max_length",
                                  "image_size")}  # fmt: skip
    with caplog.at_level(logging.INFO, logger="rlinf_wm_opensora.world_model"):
        model = OpenSoraWorldModel(str(path), dit_config=tiny)
    reference = OpenSoraWorldModel(str(tiny_world_model()))
    assert model.config == reference.config and model.image_size == reference.image_size
    for key, value in reference.dit.state_dict().items():
        assert torch.equal(model.dit.state_dict()[key], value), key
    (line,) = [r.getMessage() for r in caplog.records]  # one line says which layout was read
    assert "no config.json: the released STDiT3-XL/2 sizes with dit_config" in line
    assert "model-00001.safetensors (no model.safetensors.index.json: found by name)" in line
    # the default is the released STDiT3-XL/2: tiny weights do not fit it, and the error says so in one line
    with pytest.raises(CheckpointError, match="released STDiT3-XL/2 or dit_config") as exc:
        OpenSoraWorldModel(str(path))
    assert "\n" not in str(exc.value)
    with pytest.raises(ValueError, match="unknown STDiT3 field"):
        OpenSoraWorldModel(str(path), dit_config={"depht": 2})


def test_rlinf_layout_defaults_to_the_released_sizes_and_finds_shards_by_name(tmp_path):
    from rlinf_wm_opensora.layout import load_dit_state

    (tmp_path / "vae").mkdir()
    (tmp_path / "vae" / "config.json").write_text(json.dumps(SDXL_VAE))
    (tmp_path / "dataset_statistics.json").write_text(json.dumps(action_statistics()))
    with meta_init():  # no config.json: the released STDiT3-XL/2 (as the YAML's type) at 256²
        model = OpenSoraWorldModel(str(tmp_path))
    assert model.config == STDiT3Config() and model.image_size == 256
    assert parameter_count(model.dit) == 1_212_991_556
    # two shards, no index: both are read
    path, _ = _rlinf_layout(tmp_path / "sharded")
    state = load_file(str(path / WEIGHTS))
    keys = sorted(state)
    (path / WEIGHTS).unlink()
    save_file({k: state[k] for k in keys[::2]}, str(path / "model-00001-of-00002.safetensors"))
    save_file({k: state[k] for k in keys[1::2]}, str(path / "model-00002-of-00002.safetensors"))
    got, source = load_dit_state(path, hint="")
    assert sorted(got) == keys and all(torch.equal(got[k], state[k]) for k in keys)
    assert source.startswith("model-00001-of-00002.safetensors, model-00002-of-00002.safetensors")
    with pytest.raises(ValueError, match="dit_config is only for directories without one"):
        OpenSoraWorldModel(str(tiny_world_model()), dit_config={"depth": 2})
