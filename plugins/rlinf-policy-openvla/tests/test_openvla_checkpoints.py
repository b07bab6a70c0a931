"""Real checkpoint layouts: tiny dirs, sharded save → load, Prismatic parameter names, loading errors."""

import dataclasses
import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from rlinf_core.models.lora import LoRAConfig
from rlinf_core.models.weights import CheckpointError, load_weights
from rlinf_policy_openvla import OpenVLAOFTPolicy, OpenVLAPolicy
from rlinf_policy_openvla.checkpoint import read_spec
from rlinf_policy_openvla.make_tiny import main as make_tiny_main
from rlinf_policy_openvla.settings import ActionConfig, InputConfig
from rlinf_policy_openvla.vit import TIMM_PRESETS

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels

TOKENIZER_FILES = [
    "tokenizer.model",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
]
PRISMATIC_KEYS = [
    "vision_backbone.featurizer.cls_token",
    "vision_backbone.featurizer.reg_token",
    "vision_backbone.featurizer.pos_embed",
    "vision_backbone.featurizer.patch_embed.proj.weight",
    "vision_backbone.featurizer.blocks.0.ls1.scale_factor",
    "vision_backbone.featurizer.blocks.1.attn.qkv.bias",
    "vision_backbone.featurizer.norm.weight",
    "vision_backbone.fused_featurizer.blocks.0.mlp.fc2.weight",
    "vision_backbone.fused_featurizer.attn_pool.latent",
    "vision_backbone.fused_featurizer.attn_pool.kv.weight",
    "projector.fc1.weight",
    "projector.fc3.bias",
    "language_model.model.embed_tokens.weight",
    "language_model.model.layers.1.self_attn.o_proj.weight",
    "language_model.model.norm.weight",
    "language_model.lm_head.weight",
]


def _copy(src, tmp_path, name="m"):
    dst = tmp_path / name
    shutil.copytree(src, dst)
    return dst


def _edit_config(path, fn):
    cfg = json.loads((path / "config.json").read_text())
    fn(cfg)
    (path / "config.json").write_text(json.dumps(cfg))


def test_tiny_checkpoint_has_the_real_layout(tmp_path):
    make_tiny_main(
        [
            str(tmp_path / "t"),
            "--kind",
            "openvla",
            "--norm-key",
            "bridge_orig",
            "--norm-key",
            "fractal",
            "--num-shards",
            "3",
        ]
    )
    path = tmp_path / "t"
    for name in [
        "config.json",
        "model.safetensors.index.json",
        "preprocessor_config.json",
        "generation_config.json",
        *TOKENIZER_FILES,
    ]:
        assert (path / name).is_file(), name
    index = json.loads((path / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert shards == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert set(PRISMATIC_KEYS) <= set(index["weight_map"])
    cfg = json.loads((path / "config.json").read_text())
    assert (
        cfg["model_type"] == "openvla"
        and cfg["n_action_bins"] == 256
        and set(cfg["norm_stats"]) == {"bridge_orig", "fractal"}
    )
    # the tokenizer loads with plain transformers; the action ids are the last 256 of the text vocabulary
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    assert tok.pad_token_id == cfg["pad_token_id"] == cfg["text_config"]["vocab_size"] - cfg["pad_to_multiple_of"]
    assert tok.convert_ids_to_tokens(tok.pad_token_id) == "<PAD>"
    prompt = "In: What action should the robot take to stack the cups?\nOut:"
    assert max(tok(prompt, add_special_tokens=False)["input_ids"]) < cfg["pad_token_id"] - 256
    assert OpenVLAPolicy(model_path=str(path), actions=ActionConfig(unnorm_key="bridge_orig")).num_action_chunks == 1


def test_sharded_save_load_round_trip(tmp_path, tiny_oft, obs):
    policy = OpenVLAOFTPolicy(
        model_path=str(tiny_oft),
        add_value_head=True,
        actions=ActionConfig(num_action_chunks=2, unnorm_key="libero_spatial"),
    )
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.01 * torch.randn_like(p))  # differ from the source checkpoint
    policy.save_pretrained(tmp_path / "out", max_shard_bytes=200_000)
    out = tmp_path / "out"
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 3
    assert all((out / n).is_file() for n in TOKENIZER_FILES + ["dataset_statistics.json", "preprocessor_config.json"])
    saved = load_weights(out)
    own = policy.state_dict_for_export()
    assert set(saved) == set(own) and any(k.startswith("value_head.mlp.") for k in saved)
    assert all(torch.equal(saved[k], own[k]) for k in own)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["rlinf"]["actions"]["unnorm_key"] == "libero_spatial" and cfg["rlinf"]["class"] == "OpenVLAOFTPolicy"
    assert "libero_spatial_no_noops" in cfg["norm_stats"]
    loaded = OpenVLAOFTPolicy(model_path=str(out))
    assert (loaded.num_action_chunks, loaded.has_value_head, loaded.attention_mode) == (2, True, "bidirectional")
    with torch.no_grad():
        a, b = policy.act(obs, do_sample=False), loaded.act(obs, do_sample=False)
    torch.testing.assert_close(a.actions, b.actions, rtol=0, atol=0)
    torch.testing.assert_close(a.values, b.values, rtol=0, atol=0)
    # a single file below the shard limit
    policy.save_pretrained(tmp_path / "single")
    assert (tmp_path / "single" / "model.safetensors").is_file()
    assert not (tmp_path / "single" / "model.safetensors.index.json").exists()


def test_bf16_weights_and_precision(tmp_path, tiny_oft, obs):
    model = _copy(tiny_oft, tmp_path)
    state = load_weights(model)
    for f in model.glob("model*.safetensors*"):
        f.unlink()
    save_file({k: v.to(torch.bfloat16) for k, v in state.items()}, str(model / "model.safetensors"))
    fp32 = OpenVLAOFTPolicy(model_path=str(model), actions=ActionConfig(num_action_chunks=2))
    assert next(fp32.parameters()).dtype == torch.float32
    bf16 = OpenVLAOFTPolicy(model_path=str(model), precision="bf16", actions=ActionConfig(num_action_chunks=2))
    # bf16 compute, fp32 master weights: trainable parameters fp32, frozen (unused) ones bf16
    assert {p.dtype for p in bf16.parameters() if p.requires_grad} == {torch.float32}
    assert {p.dtype for p in bf16.parameters() if not p.requires_grad} == {torch.bfloat16}
    assert bf16.compute_dtype == torch.bfloat16
    with torch.no_grad():
        out = bf16.act(obs, do_sample=True)
    assert out.logprobs.dtype == torch.float32
    # the same bf16 passes on the same shapes, in one process: equal (no rounding bound on bf16 is tight enough)
    torch.testing.assert_close(bf16.evaluate(obs, out.record).logprobs, out.logprobs, rtol=0, atol=0)
    with torch.no_grad():  # the forward really computes in bf16 (autocast), not in the fp32 of the weights
        assert not torch.equal(fp32.evaluate(obs, out.record).logprobs, bf16.evaluate(obs, out.record).logprobs)
    import rlinf_core.models.precision

    rlinf_core.models.precision._warned.clear()  # the warning is shown once per process
    with pytest.warns(UserWarning, match="bf16-true stores trainable weights"):
        pure = OpenVLAOFTPolicy(
            model_path=str(model),
            precision="bf16-true",
            actions=ActionConfig(num_action_chunks=2),
        )
    assert {p.dtype for p in pure.parameters()} == {torch.bfloat16}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not twice
        OpenVLAOFTPolicy(model_path=str(model), precision="bf16-true", actions=ActionConfig(num_action_chunks=2))


def test_v4_style_text_config_and_timm_presets(tmp_path, tiny_oft):
    """Real configs carry a transformers-4 Llama dump and name the vision towers by timm id only."""
    model = _copy(tiny_oft, tmp_path)

    def v4(cfg):
        tc = cfg["text_config"]
        tc.pop("rope_parameters", None)
        tc.update(
            {
                "rope_theta": 10000.0,
                "rope_scaling": None,
                "torch_dtype": "bfloat16",
                "model_type": "llama",
                "_name_or_path": "meta-llama/Llama-2-7b-hf",
                "architectures": ["LlamaForCausalLM"],
            }
        )

    _edit_config(model, v4)
    assert (
        OpenVLAOFTPolicy(
            model_path=str(model), actions=ActionConfig(num_action_chunks=1)
        ).vla.text_config.rope_parameters["rope_theta"]
        == 10000.0
    )

    def real_ids(cfg):
        cfg.pop("timm_model_configs")
        cfg["timm_model_ids"] = ["vit_large_patch14_reg4_dinov2.lvd142m", "vit_so400m_patch14_siglip_224"]
        cfg["image_sizes"] = [224, 224]

    _edit_config(model, real_ids)
    spec = read_spec(model)
    assert [v.width for v in spec.vision] == [1024, 1152] and spec.vision_dim == 2176 and spec.num_patches == 256
    assert spec.vision[0] == TIMM_PRESETS["vit_large_patch14_reg4_dinov2.lvd142m"]
    with pytest.raises(
        CheckpointError, match=r"in the checkpoint but \([\d, ]+\) in the model built from config.json \(\d+ mismatches"
    ):
        OpenVLAOFTPolicy(model_path=str(model))


def test_official_proprio_projector_file(tmp_path, obs):
    from rlinf_policy_openvla.testing import tiny_checkpoint

    src = tiny_checkpoint(kind="oft", proprio_dim=8)
    model = _copy(src, tmp_path)
    _edit_config(model, lambda cfg: cfg["rlinf"]["inputs"].pop("image_resize"))  # an official export: no record
    state = load_weights(model)
    proprio = {
        f"module.{k.removeprefix('proprio_projector.')}": v
        for k, v in state.items()
        if k.startswith("proprio_projector.")
    }
    assert proprio
    for f in model.glob("model*.safetensors*"):
        f.unlink()
    save_file(
        {k: v for k, v in state.items() if not k.startswith("proprio_projector.")}, str(model / "model.safetensors")
    )
    torch.save(proprio, model / "proprio_projector--50000_checkpoint.pt")
    a = OpenVLAOFTPolicy(
        model_path=str(src),
        actions=ActionConfig(num_action_chunks=2),
        inputs=InputConfig(use_proprio=True),
    )
    b = OpenVLAOFTPolicy(
        model_path=str(model),
        actions=ActionConfig(num_action_chunks=2),
        inputs=InputConfig(use_proprio=True),
    )
    assert b.image_resize == "pil"  # official OFT side files: the official pipeline's PIL resize
    b.image_resize = a.image_resize  # compare the weights alone
    with torch.no_grad():
        torch.testing.assert_close(a.act(obs, do_sample=False).logprobs, b.act(obs, do_sample=False).logprobs)
    (model / "proprio_projector--50000_checkpoint.pt").unlink()
    with pytest.raises(CheckpointError, match="no proprio projector weights"):
        OpenVLAOFTPolicy(model_path=str(model), inputs=InputConfig(use_proprio=True))


def _settings(p):
    return (
        p.unnorm_key,
        p.num_action_chunks,
        p.num_images_in_input,
        p.has_value_head,
        p.value_type,
        p.prompts.max_prompt_length,
        p.image_resize,
        p.attention_mode,
    )


def _trained(tiny_oft):
    return OpenVLAOFTPolicy.from_pretrained(  # RLinf's flat names are put into their groups
        tiny_oft,
        num_action_chunks=3,
        num_images_in_input=2,
        add_value_head=True,
        value_type="action_level",
        max_prompt_length=40,
        image_resize="pil",
        attention_mode="causal",
    )


TRAINED = ("libero_spatial_no_noops", 3, 2, True, "action_level", 40, "pil", "causal")


def test_every_route_to_a_saved_directory_restores_the_settings(tmp_path, tiny_oft):
    from jsonargparse import ArgumentParser

    from rlinf_core.serve.loading import LoadOptions, load_policy

    policy = _trained(tiny_oft)
    assert _settings(policy) == TRAINED
    policy.save_pretrained(tmp_path / "export")
    record = json.loads((tmp_path / "export" / "config.json").read_text())["rlinf"]
    assert record["actions"]["num_action_chunks"] == 3 and record["inputs"]["max_prompt_length"] == 40
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(OpenVLAOFTPolicy, "policy")
    yaml = parser.instantiate(parser.parse_args([f"--policy.model_path={tmp_path / 'export'}"])).policy
    assert parser.get_defaults().policy.actions.num_action_chunks == 8  # OFT's real default, in --print_config
    for loaded in (
        OpenVLAOFTPolicy.from_pretrained(tmp_path / "export"),
        OpenVLAOFTPolicy(model_path=str(tmp_path / "export")),
        yaml,
        load_policy(str(tmp_path / "export"), LoadOptions()).policy,
    ):
        assert _settings(loaded) == TRAINED
    again = OpenVLAOFTPolicy.from_pretrained(tmp_path / "export", inputs=InputConfig(max_prompt_length=50))
    assert (again.prompts.max_prompt_length, again.num_images_in_input) == (50, 2)  # unset fields: the recorded ones
    assert OpenVLAOFTPolicy.from_pretrained(tmp_path / "export", image_resize="tensor").image_resize == "tensor"
    # an override equal to the default wins over the recorded value too
    assert OpenVLAOFTPolicy.from_pretrained(tmp_path / "export", attention_mode="bidirectional").attention_mode == (
        "bidirectional"
    )


def test_a_directory_saved_under_the_earlier_settings_key_loads_the_same(tmp_path, tiny_oft, obs):
    """``fixtures/saved_oft_config.json`` is the ``config.json`` that ``save_pretrained`` wrote for ``_trained``'s
    policy when OpenVLA recorded its settings under ``rlinf_policy`` (they are under ``rlinf`` now, as for every
    model): such a directory loads with the settings it recorded."""
    from rlinf_core.serve.loading import LoadOptions, load_policy

    policy = _trained(tiny_oft)
    policy.save_pretrained(tmp_path / "export")
    shutil.copy(Path(__file__).parent / "fixtures" / "saved_oft_config.json", tmp_path / "export" / "config.json")
    assert "rlinf_policy" in json.loads((tmp_path / "export" / "config.json").read_text())
    loaded = OpenVLAOFTPolicy.from_pretrained(tmp_path / "export")
    served = load_policy(str(tmp_path / "export"), LoadOptions()).policy  # the class name is recorded there too
    assert _settings(loaded) == _settings(served) == TRAINED
    two_views = dataclasses.replace(obs, wrist_images=obs.main_images.flip(1))
    with torch.no_grad():
        a, b = policy.act(two_views, do_sample=False), loaded.act(two_views, do_sample=False)
    torch.testing.assert_close(a.actions, b.actions, rtol=0, atol=0)


# ---- errors: one line with the cause and a hint ------------------------------------------------------
def _one_line(exc_info):
    msg = str(exc_info.value)
    assert "\n" not in msg, msg
    return msg


def test_missing_directory_and_files(tmp_path, tiny_oft):
    with pytest.raises(CheckpointError, match="is not a directory; create a tiny") as e:
        OpenVLAOFTPolicy(model_path=str(tmp_path / "nope"))
    _one_line(e)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="has no config.json") as e:
        OpenVLAOFTPolicy(model_path=str(tmp_path / "empty"))
    _one_line(e)
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapter_config.json").write_text("{}")
    with pytest.raises(CheckpointError, match="is a LoRA adapter directory; set model_path to the base model"):
        OpenVLAOFTPolicy(model_path=str(tmp_path / "adapter"))

    model = _copy(tiny_oft, tmp_path)
    (model / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model-00002-of-00002.safetensors is missing") as e:
        OpenVLAOFTPolicy(model_path=str(model))
    _one_line(e)
    for f in model.glob("model*"):
        f.unlink()
    with pytest.raises(CheckpointError, match="no weights in .*expected model.safetensors"):
        OpenVLAOFTPolicy(model_path=str(model))

    model = _copy(tiny_oft, tmp_path, "notok")
    for name in TOKENIZER_FILES:
        (model / name).unlink()
    with pytest.raises(CheckpointError, match="has no tokenizer .*copy the tokenizer files") as e:
        OpenVLAOFTPolicy(model_path=str(model))
    _one_line(e)


def test_wrong_settings_are_explained(tmp_path, tiny_oft, obs):
    with pytest.raises(ValueError, match="not in the norm stats .*available: libero_spatial_no_noops"):
        OpenVLAOFTPolicy(model_path=str(tiny_oft), actions=ActionConfig(unnorm_key="bridge_orig"))
    with pytest.raises(ValueError, match="action_dim=4 but norm_stats.*has 7"):
        OpenVLAOFTPolicy(model_path=str(tiny_oft), actions=ActionConfig(action_dim=4))
    with pytest.raises(ValueError, match="use class_path: OpenVLAPolicy"):
        OpenVLAOFTPolicy(model_path=str(tiny_oft), model_type="openvla")
    with pytest.raises(ValueError, match="has no adapter_config.json"):
        OpenVLAOFTPolicy(model_path=str(tiny_oft), lora=LoRAConfig(path=str(tiny_oft)))
    with pytest.raises(ValueError, match="lora.rank must be >= 1"):
        LoRAConfig(rank=0)
    with pytest.raises(ValueError, match="attention_mode 'full' not supported"):
        OpenVLAOFTPolicy(model_path=str(tiny_oft), attention_mode="full")
    with pytest.raises(ValueError, match="precision 'fp8' not supported"):
        OpenVLAOFTPolicy(model_path=str(tiny_oft), precision="fp8")
    with pytest.raises(ValueError, match="no proprio stats; set proprio_dim"):
        OpenVLAOFTPolicy(model_path=str(tiny_oft), inputs=InputConfig(use_proprio=True))
    short = OpenVLAOFTPolicy(
        model_path=str(tiny_oft),
        actions=ActionConfig(num_action_chunks=1),
        inputs=InputConfig(max_prompt_length=8),
    )
    with pytest.raises(ValueError, match="> max_prompt_length=8; raise max_prompt_length"):
        short.act(obs)
    policy = OpenVLAOFTPolicy(model_path=str(tiny_oft), actions=ActionConfig(num_action_chunks=2))
    with pytest.raises(ValueError, match=r"expected \[B, 2, 7\]"):
        policy.evaluate(obs, {"action_tokens": torch.zeros(3, 3, 7, dtype=torch.long)})


def test_shape_mismatch_names_the_parameter(tmp_path, tiny_oft):
    model = _copy(tiny_oft, tmp_path)
    _edit_config(model, lambda cfg: cfg["text_config"].update(intermediate_size=96))
    with pytest.raises(
        CheckpointError,
        match=r"'language_model.model.layers.0.mlp.gate_proj.weight' has shape \(128, 64\) "
        r"in the checkpoint but \(96, 64\)",
    ) as e:
        OpenVLAOFTPolicy(model_path=str(model))
    _one_line(e)
    model = _copy(tiny_oft, tmp_path, "extra")
    state = load_file(str(model / "model-00001-of-00002.safetensors"))
    state["foo.bar"] = torch.zeros(1)
    save_file(state, str(model / "model-00001-of-00002.safetensors"))
    index = json.loads((model / "model.safetensors.index.json").read_text())
    index["weight_map"]["foo.bar"] = "model-00001-of-00002.safetensors"
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="do not belong to an OpenVLA model, e.g. 'foo.bar'"):
        OpenVLAOFTPolicy(model_path=str(model))
