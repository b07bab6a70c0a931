"""The three checkpoint families load strictly into the same model; bad files fail in one line."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from rlinf_core.models.weights import CheckpointError
from rlinf_policy_openpi.checkpoint import (
    EMBED_KEY,
    LM_HEAD_KEY,
    UNUSED_KEYS,
    load_model,
    read_checkpoint,
    read_norm_stats,
)
from rlinf_policy_openpi.config import OpenPIConfigError, read_config, variant_from_keys

VISION_V4 = "paligemma_with_expert.paligemma.model.vision_tower.vision_model.embeddings.patch_embedding.weight"
VISION_V5 = "paligemma_with_expert.paligemma.model.vision_tower.embeddings.patch_embedding.weight"


@pytest.mark.parametrize("pi05", [False, True], ids=["pi0", "pi05"])
def test_three_layouts_load_strict_into_the_same_model(tiny, pi05):
    models = {}
    for layout in ("openpi", "lerobot", "rlinf"):
        model, ckpt = load_model(tiny(pi05=pi05, layout=layout))
        assert ckpt.layout == layout and ckpt.config.pi05 is pi05
        models[layout] = model.state_dict()
    ref = models["openpi"]
    for layout in ("lerobot", "rlinf"):
        assert models[layout].keys() == ref.keys()
        assert all(torch.equal(models[layout][k], ref[k]) for k in ref), layout


def test_files_are_in_the_released_form(tiny):
    openpi = load_file(str(tiny(layout="openpi") / "model.safetensors"))
    assert EMBED_KEY not in openpi and LM_HEAD_KEY in openpi and UNUSED_KEYS[0] in openpi  # save_model drops the tie
    assert VISION_V4 in openpi and not any(k.startswith("model.") for k in openpi)
    lerobot = load_file(str(tiny(layout="lerobot") / "model.safetensors"))
    assert VISION_V5 in lerobot and VISION_V4 not in lerobot
    cfg = json.loads((tiny(layout="openpi") / "config.json").read_text())
    assert {"action_dim", "action_horizon", "paligemma_variant", "action_expert_variant", "precision"} <= set(cfg)
    assert "pi05" not in cfg  # openpi's config.json has no π0.5 flag: the keys tell
    assert json.loads((tiny(pi05=True, layout="lerobot") / "config.json").read_text())["type"] == "pi05"


def test_make_tiny_cli(tmp_path, capsys):
    from rlinf_policy_openpi.make_tiny import main

    main(
        [
            str(tmp_path / "t"),
            "--pi05",
            "--layout",
            "rlinf",
            "--asset-id",
            "physical-intelligence/libero",
            "--action-horizon",
            "10",
        ]
    )
    assert "π0.5" in capsys.readouterr().out
    ckpt = read_checkpoint(tmp_path / "t", weights=False)
    assert ckpt.config.pi05 and ckpt.config.action_horizon == 10 and ckpt.layout == "rlinf"
    assert (tmp_path / "t" / "physical-intelligence" / "libero" / "norm_stats.json").is_file()
    with pytest.raises(ValueError, match="layout must be one of"):
        __import__("rlinf_policy_openpi.make_tiny").make_tiny.make_tiny(tmp_path / "u", layout="hf")


def test_embed_tokens_is_copied_from_lm_head(tiny):
    path = tiny(layout="openpi")
    model, _ = load_model(path)
    lm_head = load_file(str(path / "model.safetensors"))[LM_HEAD_KEY]
    assert torch.equal(model.paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight, lm_head)


def test_load_adopts_the_file_tensors(tiny, tmp_path):
    """The loader builds on the meta device and adopts the file's tensors: tied LM head, real buffers, file dtype
    (bf16 stays bf16; openpi's bf16 + fp32-norm mix is widened to fp32), same outputs as a plain build."""
    from rlinf_policy_openpi._modeling import OpenPIModel
    from rlinf_policy_openpi.testing import make_inputs

    model, ckpt = load_model(tiny(pi05=True))
    plain = OpenPIModel(ckpt.config)
    plain.load_state_dict(model.state_dict())
    assert not any(t.is_meta for t in list(model.parameters()) + list(model.buffers()))
    pg = model.paligemma_with_expert.paligemma
    assert pg.lm_head.weight is pg.model.language_model.embed_tokens.weight
    inputs = make_inputs(ckpt.config)
    with torch.no_grad():
        torch.testing.assert_close(model(*inputs)[0], plain(*inputs)[0], atol=0, rtol=0)
    for name, mixed in (("bf16", False), ("mixed", True)):
        shutil.copytree(tiny(layout="openpi"), tmp_path / name)
        f = tmp_path / name / "model.safetensors"
        state = {k: v if mixed and "norm" in k else v.to(torch.bfloat16) for k, v in load_file(str(f)).items()}
        save_file(state, str(f))
        loaded, _ = load_model(tmp_path / name)
        assert {p.dtype for p in loaded.parameters()} == {torch.float32 if mixed else torch.bfloat16}, name


def test_lerobot_policy_prefix_and_rlinf_heads(tiny, tmp_path):
    src = tiny(layout="lerobot")
    shutil.copytree(src, tmp_path / "ckpt")
    f = tmp_path / "ckpt" / "model.safetensors"
    save_file({f"model.{k}": v for k, v in load_file(str(f)).items()}, str(f))  # a lerobot policy state dict
    model, ckpt = load_model(tmp_path / "ckpt")
    assert ckpt.layout == "lerobot"
    _, rl = load_model(tiny(layout="rlinf"))
    assert set(rl.heads) == {"value_head"}
    assert rl.heads["value_head"]["mlp.0.weight"].shape == (512, 64)
    assert sorted(rl.heads["value_head"]) == [f"mlp.{i}.{p}" for i in (0, 2, 4, 6) for p in ("bias", "weight")]


def test_rlinf_full_weights_pt(tiny, tmp_path):
    state = {}
    for f in sorted(tiny(layout="rlinf").glob("*.safetensors")):
        state.update(load_file(str(f)))
    (tmp_path / "actor" / "model_state_dict").mkdir(parents=True)
    torch.save(state, tmp_path / "actor" / "model_state_dict" / "full_weights.pt")
    shutil.copy(tiny(layout="rlinf") / "config.json", tmp_path / "config.json")
    model, ckpt = load_model(tmp_path)
    assert ckpt.layout == "rlinf" and "value_head" in ckpt.heads
    from rlinf_core.models.meta import meta_init

    with meta_init():
        meta_model, meta_ckpt = load_model(tmp_path)
    assert meta_ckpt.config == ckpt.config and not meta_ckpt.state_dict
    assert next(meta_model.parameters()).is_meta
    assert {k: v.shape for k, v in meta_ckpt.heads["value_head"].items()} == {
        k: v.shape for k, v in ckpt.heads["value_head"].items()
    }  # the heads' tensors are read (they size the value head), the model's are not


def test_a_meta_build_sizes_the_saved_value_head(tiny):
    """``rlinf memory`` on an RLinf export with a critic: the value head is built with the saved widths."""
    from rlinf_core.models.meta import meta_init
    from rlinf_policy_openpi.policy import OpenPIPolicy

    path = str(tiny(layout="rlinf"))
    real = OpenPIPolicy(path)
    with meta_init():
        meta = OpenPIPolicy(path)
    assert meta.has_value_head and real.has_value_head
    shapes = {k: v.shape for k, v in real.openpi.value_head.state_dict().items()}
    assert {k: v.shape for k, v in meta.openpi.value_head.state_dict().items()} == shapes
    assert next(meta.openpi.value_head.parameters()).is_meta


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda s: s.pop("action_out_proj.bias"), r"missing key 'action_out_proj.bias' \(1 missing"),
        (lambda s: s.__setitem__("action_out_proj.extra", torch.zeros(1)), r"unexpected key 'action_out_proj.extra'"),
        (
            lambda s: s.__setitem__("action_in_proj.weight", torch.zeros(64, 7)),
            r"'action_in_proj.weight' has shape \[64, 7\]",
        ),
    ],
)
def test_bad_keys_are_one_line_errors(tiny, tmp_path, change, match):
    shutil.copytree(tiny(layout="openpi"), tmp_path / "ckpt")
    f = tmp_path / "ckpt" / "model.safetensors"
    state = load_file(str(f))
    change(state)
    save_file(state, str(f))
    with pytest.raises(CheckpointError, match=match) as err:
        load_model(tmp_path / "ckpt")
    assert "\n" not in str(err.value) and ("expected openpi names" in str(err.value) or "shape" in str(err.value))


def test_variant_detection_and_conflicts(tiny, tmp_path):
    assert variant_from_keys(["model.time_mlp_in.weight"]) is True
    assert variant_from_keys(["state_proj.weight", "x"]) is False
    assert variant_from_keys(["x"]) is None
    with pytest.raises(OpenPIConfigError, match="both"):
        variant_from_keys(["state_proj.weight", "time_mlp_in.weight"])
    shutil.copytree(tiny(pi05=False, layout="lerobot"), tmp_path / "ckpt")
    cfg = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps({**cfg, "type": "pi05"}))
    with pytest.raises(OpenPIConfigError, match=r"says π0.5 but the weights are π0"):
        read_checkpoint(tmp_path / "ckpt")
    # openpi's minimal config.json: pi05 comes from the weights; a config.json-less directory works too
    assert read_checkpoint(tiny(pi05=True, layout="rlinf")).config.pi05
    assert read_config(tmp_path).action_horizon == 50  # no config.json: openpi defaults
    with pytest.raises(CheckpointError, match="no weights"):
        read_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="not a directory"):
        read_checkpoint(tmp_path / "nope")


def test_config_json_round_trips(tiny):
    import dataclasses

    from rlinf_policy_openpi.config import config_from_json
    from rlinf_policy_openpi.make_tiny import _lerobot_config

    for pi05 in (False, True):
        cfg = read_checkpoint(tiny(pi05=pi05), weights=False).config
        assert config_from_json(cfg.to_json()) == cfg
        lerobot = config_from_json(_lerobot_config(cfg))
        assert dataclasses.replace(lerobot, precision=cfg.precision) == cfg


def test_config_defaults_and_overrides(tiny):
    pi0 = read_checkpoint(tiny(pi05=False), weights=False).config
    pi05 = read_checkpoint(tiny(pi05=True), weights=False, action_horizon=7).config
    assert (pi0.max_token_len, pi05.max_token_len) == (48, 200)
    assert (pi0.discrete_state_input, pi05.discrete_state_input) == (False, True)
    assert pi05.action_horizon == 7 and pi0.action_dim == 32 and pi0.num_image_tokens == 4
    with pytest.raises(OpenPIConfigError, match="pi05 cannot be overridden"):
        read_checkpoint(tiny(pi05=False), weights=False, pi05=True)
    with pytest.raises(OpenPIConfigError, match="unknown OpenPIConfig field 'horizon'"):
        read_checkpoint(tiny(pi05=False), weights=False, horizon=3)


def test_norm_stats_locations(tiny, tmp_path):
    openpi = read_norm_stats(tiny(layout="openpi"))  # assets/lerobot/metaworld_mt50/norm_stats.json
    assert read_norm_stats(tiny(layout="openpi"), "lerobot/metaworld_mt50")["state"].mean.equal(openpi["state"].mean)
    rlinf = read_norm_stats(tiny(layout="rlinf"), "lerobot/metaworld_mt50")  # <dir>/lerobot/metaworld_mt50/
    lerobot = read_norm_stats(tiny(layout="lerobot"))  # policy_preprocessor_step_3_normalizer_processor
    for stats in (rlinf, lerobot):
        assert all(
            torch.equal(getattr(stats[k], s), getattr(openpi[k], s))
            for k in ("state", "actions")
            for s in ("mean", "std", "q01", "q99")
        )
    with pytest.raises(CheckpointError, match="no norm stats found: expected .*/assets/physical-intelligence/libero"):
        read_norm_stats(tiny(layout="openpi"), "physical-intelligence/libero")
    shutil.copytree(tiny(layout="openpi"), tmp_path / "ckpt")
    shutil.copytree(tmp_path / "ckpt" / "assets" / "lerobot", tmp_path / "ckpt" / "assets" / "other")
    with pytest.raises(CheckpointError, match="set asset_id to one of: lerobot/metaworld_mt50, other/metaworld_mt50"):
        read_norm_stats(tmp_path / "ckpt")
    # deeper asset ids (RLinf's real-world recipes: <repo_id>/<subset>/norm_stats.json)
    shutil.rmtree(tmp_path / "ckpt" / "assets")
    shutil.copytree(tiny(layout="rlinf") / "lerobot", tmp_path / "ckpt" / "org" / "repo" / "tcp_v1")
    assert read_norm_stats(tmp_path / "ckpt")["state"].mean.equal(openpi["state"].mean)
    nested = read_norm_stats(tmp_path / "ckpt", "org/repo/tcp_v1/metaworld_mt50")
    assert nested["state"].mean.equal(openpi["state"].mean)
