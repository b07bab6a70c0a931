"""Released checkpoints' config.json (minimal text_config) build the real openvla-7b architecture on the meta device."""

import json
from pathlib import Path

import pytest

from rlinf_core.models.meta import meta_init, parameter_count
from rlinf_core.models.weights import INDEX_NAME
from rlinf_policy_openvla import OpenVLAOFTPolicy, OpenVLAPolicy
from rlinf_policy_openvla.checkpoint import read_spec
from rlinf_policy_openvla.released import (
    OPENVLA_7B_INDEX_BYTES,
    OPENVLA_7B_PARAMETERS,
    RELEASED,
    released_tensor_shapes,
    write_released_dir,
)
from rlinf_policy_openvla.settings import ActionConfig, InputConfig

_DIRS: dict = {}


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    def get(kind: str):
        if kind not in _DIRS:
            _DIRS[kind] = write_released_dir(tmp_path_factory.mktemp(kind), kind)
        return _DIRS[kind]

    return get


def test_reconstructed_index_matches_the_published_total():
    shapes = released_tensor_shapes()
    numel = sum(int(__import__("math").prod(s)) for s in shapes.values())
    assert numel == OPENVLA_7B_PARAMETERS and 2 * numel == OPENVLA_7B_INDEX_BYTES


def test_minimal_text_config_reads_llama2_7b_defaults(released):
    path = released("openvla-7b")
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["text_config"] == {
        "model_type": "llama",
        "pad_token_id": 32000,
        "torch_dtype": "bfloat16",
        "vocab_size": 32064,
    }
    spec = read_spec(path)  # KeyError: 'hidden_size' before
    llama = spec.llama_config
    assert (spec.llm_dim, llama.num_hidden_layers, llama.num_attention_heads, llama.intermediate_size) == (
        4096,
        32,
        32,
        11008,
    )
    assert spec.action_vocab_size == 32000 and spec.vision_dim == 2176


@pytest.mark.parametrize("kind", sorted(RELEASED))
def test_released_kind_builds_openvla_7b_on_meta(released, kind):
    path = released(kind)
    stats_key = RELEASED[kind].norm_keys[-1]
    cls = OpenVLAPolicy if kind.startswith("openvla-7b") else OpenVLAOFTPolicy
    with meta_init():
        policy = cls(model_path=str(path), precision="bf16", actions=ActionConfig(unnorm_key=stats_key))
    state = policy.model.state_dict()
    assert parameter_count(policy.model) == OPENVLA_7B_PARAMETERS
    assert all(t.is_meta for t in state.values())
    shapes = released_tensor_shapes()
    index = json.loads((path / INDEX_NAME).read_text())["weight_map"]
    assert sorted(state) == sorted(index) == sorted(shapes)  # no missing / unexpected keys
    wrong = {k: (tuple(state[k].shape), shapes[k]) for k in shapes if tuple(state[k].shape) != shapes[k]}
    assert not wrong
    # tokenizer with the real vocabulary: action ids are [31744, 32000), <PAD> = 32000
    assert len(policy.tokenizer) == 32001 and policy.tokenizer.pad_token_id == 32000
    assert policy.action_tokenizer.token_begin == 31744
    assert policy.action_dim == RELEASED[kind].action_dim


def test_meta_build_reads_no_weights(released, tmp_path):
    path = released("openvla-oft-sft-libero")
    # the index names shards that do not exist: a real load fails in one line, a meta build never opens them
    with pytest.raises(ValueError, match="missing"):
        OpenVLAOFTPolicy(model_path=str(path), actions=ActionConfig(unnorm_key="libero_10_no_noops"))
    with meta_init():
        policy = OpenVLAOFTPolicy(
            model_path=str(path),
            add_value_head=True,
            value_type="chunk_level",
            actions=ActionConfig(unnorm_key="libero_10_no_noops"),
        )
    assert policy.vla.value_head.mlp[0].weight.is_meta


def test_official_oft_with_proprio_on_meta(released):
    path = released("openvla-oft-official-libero")
    with meta_init():
        policy = OpenVLAOFTPolicy(
            model_path=str(path),
            actions=ActionConfig(unnorm_key="libero_spatial"),
            inputs=InputConfig(use_proprio=True),
        )
    assert policy.unnorm_key == "libero_spatial_no_noops" and policy.proprio_dim == 8
    assert tuple(policy.vla.proprio_projector.fc1.weight.shape) == (4096, 8)


def test_tiny_checkpoint_writes_the_released_form(tiny_oft):
    text = json.loads((tiny_oft / "config.json").read_text())["text_config"]
    assert {"model_type", "pad_token_id", "torch_dtype", "vocab_size"} <= set(text)
    assert "rms_norm_eps" not in text and "max_position_embeddings" not in text  # defaults are left out
    assert read_spec(tiny_oft).llm_dim == text["hidden_size"]


def test_bad_text_config_is_one_line(tiny_oft, tmp_path):
    import shutil

    from rlinf_policy_openvla.checkpoint import CheckpointError

    bad = Path(shutil.copytree(tiny_oft, tmp_path / "bad"))
    cfg = json.loads((bad / "config.json").read_text())
    cfg["text_config"]["model_type"] = "mistral"
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="text_config.model_type 'mistral' not supported"):
        read_spec(bad).llm_dim
