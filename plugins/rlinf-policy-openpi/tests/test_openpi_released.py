"""Released π0 / π0.5 directories (real config.json + real safetensors header) build on the meta device."""

import math

import pytest
import torch
from safetensors import safe_open

from rlinf_core.models.meta import meta_init, parameter_count
from rlinf_policy_openpi.checkpoint import EMBED_KEY, UNUSED_KEYS, load_model, read_norm_stats, to_openpi_names
from rlinf_policy_openpi.released import (
    EXPERT_LM_HEAD_PARAMETERS,
    PI0_FILE_PARAMETERS,
    PI0_PARAMETERS,
    PI05_PARAMETERS,
    RELEASED,
    released_tensor_shapes,
    write_released_dir,
)
from rlinf_policy_openpi.transforms import PromptTokenizer, find_tokenizer


def test_derived_counts():
    pi0 = sum(math.prod(s) for s in released_tensor_shapes(False).values())
    pi05 = sum(math.prod(s) for s in released_tensor_shapes(True).values())
    assert pi0 == PI0_FILE_PARAMETERS == PI0_PARAMETERS + EXPERT_LM_HEAD_PARAMETERS
    assert pi05 == PI05_PARAMETERS + EXPERT_LM_HEAD_PARAMETERS
    expert = {k: s for k, s in released_tensor_shapes(False).items() if ".gemma_expert.model." in k}
    assert sum(math.prod(s) for s in expert.values()) == 311_464_960  # openpi gemma.py: "311M params"


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_released_dir_builds_on_meta_with_real_key_names(tmp_path, name):
    spec = RELEASED[name]
    path = write_released_dir(tmp_path / "ckpt", name)
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:  # the header a download has
        file_keys = set(f.keys())
    assert file_keys == set(released_tensor_shapes(spec.pi05, spec.layout))
    with meta_init():
        model, ckpt = load_model(path)
    cfg = ckpt.config
    assert (cfg.pi05, cfg.action_horizon, cfg.vlm_width, cfg.expert_width, cfg.num_image_tokens) == (
        spec.pi05,
        spec.action_horizon,
        2048,
        1024,
        256,
    )
    assert cfg.max_token_len == (200 if spec.pi05 else 48) and ckpt.layout in (spec.layout, "openpi")
    state = model.state_dict()
    assert all(t.is_meta for t in state.values())
    assert parameter_count(model) == (PI05_PARAMETERS if spec.pi05 else PI0_PARAMETERS)
    # the model's names are the file's names in openpi form: + tied embed_tokens, - the unused expert lm_head
    renamed, _, _ = to_openpi_names(dict.fromkeys(file_keys))
    assert set(state) == set(renamed) == (set(released_tensor_shapes(spec.pi05)) | {EMBED_KEY}) - set(UNUSED_KEYS)
    shapes = released_tensor_shapes(spec.pi05)
    wrong = {k: tuple(state[k].shape) for k in shapes if k in state and tuple(state[k].shape) != shapes[k]}
    assert not wrong
    if spec.asset_id:
        assert read_norm_stats(path, spec.asset_id)["actions"].mean.shape == (spec.action_dim,)
    tok = PromptTokenizer(find_tokenizer(path), cfg.max_token_len)
    assert tok.vocab_size == cfg.vocab_size == 257152 and tok(["reach the goal"])[0][0, 0] == 2


def test_meta_build_reads_no_tensor_data(tmp_path):
    path = write_released_dir(tmp_path / "ckpt", "pi0_base")
    assert (path / "model.safetensors").stat().st_size > 7e9  # a sparse file: only the header is real
    with meta_init():
        model, _ = load_model(path)
    assert next(model.parameters()).device == torch.device("meta")
