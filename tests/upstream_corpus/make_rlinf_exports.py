"""Write ``rlinf_pi0_export/`` and ``rlinf_openvla_oft_export/``: what RLinf v0.3's own export code writes for a π0
and an OpenVLA-OFT policy with a PPO value head (see README.md beside this file). RLinf's
``rlinf/utils/ckpt_convertor/fsdp_convertor/convert_pt_to_hf.py`` (``_save_hf_checkpoint``, full model, no LoRA)
calls ``copy_model_config_and_code(model_path, save_path)`` then
``save_state_dict_sharded_safetensors(model.state_dict(), save_path)`` from ``fsdp_convertor/utils.py``; the π0 value
head is RLinf's ``rlinf/models/embodiment/modules/value_head.py:ValueHead`` built as
``openpi_action_model.py`` builds it for π0 (hidden (512, 256, 128), relu, bias_last).

``rlinf.config`` (imported by utils.py for the dtype helpers and model registry, neither used on this path) is
stubbed. The model's state dict is this project's ``OpenPIModel`` loaded from ``openpi_pi0/`` (openpi's names; RLinf's
model subclasses openpi's ``PI0Pytorch``), each tensor cloned as FSDP's gathered full state dict holds them (the
tied ``embed_tokens`` / ``lm_head`` are two tensors there, which safetensors' ``save_file`` requires).

``rlinf_openvla_oft_export/``: the same two functions for RLinf's OpenVLA-OFT (``implement_version: rlinf``) as
``examples/embodiment/maniskill_ppo_openvlaoft.yaml`` trains it, full weights (``is_lora: False``): RLinf's
``openvla_oft/rlinf/__init__.py:get_model`` loads the base (here ``openvla_hf/``) with ``torch_dtype`` bfloat16
(``precision: bf16``) and ``OpenVLAOFTForRLActionPrediction`` adds ``ValueHead(input_dim=hidden_size,
hidden_sizes=(512, 128), output_dim=num_action_chunks, activation="gelu", bias_last=False)`` (``value_type:
action_level``, ``num_action_chunks: 8``, ``hidden_size`` = the LLM width); its state dict is openvla_hf's tensors in
bfloat16 plus ``value_head.*``. The convertor's ``torch_dtype`` is left unset, so the bfloat16 tensors are saved as they
are. ``get_model_save_helper("openvla_oft")`` writes side files only with ``use_film`` / ``use_proprio``, both off.

    .venv/bin/python tests/upstream_corpus/make_rlinf_exports.py <RLinf checkout at v0.3> [pi0|openvla_oft]
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import tempfile
import types
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rlinf_modules(rlinf: Path):
    config = types.ModuleType("rlinf.config")
    config.SupportedModel = str
    config.torch_dtype_from_precision = lambda precision: None
    sys.modules.update({"rlinf": types.ModuleType("rlinf"), "rlinf.config": config})
    utils = _load(rlinf / "rlinf/utils/ckpt_convertor/fsdp_convertor/utils.py", "rlinf_fsdp_utils")
    value_head = _load(rlinf / "rlinf/models/embodiment/modules/value_head.py", "rlinf_value_head")
    return utils, value_head


def _export(utils, state: dict, source: Path, out: Path, leave_out: tuple[str, ...] = ()) -> None:
    """RLinf's full-model path: copy_model_config_and_code(model_path, save_path), then the sharded save."""
    shutil.rmtree(out, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:  # the model_path RLinf trained from: the source's files
        base = Path(tmp) / "base"
        shutil.copytree(source, base, ignore=shutil.ignore_patterns(*leave_out))
        utils.copy_model_config_and_code(model_path=str(base), save_path=str(out))
    utils.save_state_dict_sharded_safetensors(state_dict=state, out_dir=str(out))


def export_pi0(rlinf: Path) -> None:
    import torch

    from rlinf_policy_openpi.checkpoint import load_model

    utils, value_head = _rlinf_modules(rlinf)
    source = HERE / "openpi_pi0"
    model, _ = load_model(source)
    torch.manual_seed(0)
    head = value_head.ValueHead(
        input_dim=model.config.expert_width,
        hidden_sizes=(512, 256, 128),
        output_dim=1,
        activation="relu",
        bias_last=True,
    )
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    state.update({f"value_head.{k}": v.detach().clone() for k, v in head.state_dict().items()})
    _export(utils, state, source, HERE / "rlinf_pi0_export")


def export_openvla_oft(rlinf: Path) -> None:
    import torch
    from safetensors.torch import load_file

    utils, value_head = _rlinf_modules(rlinf)
    source = HERE / "openvla_hf"
    state = {}
    for shard in sorted(source.glob("model-*.safetensors")):  # what from_pretrained(torch_dtype=bf16) holds
        state.update({k: v.to(torch.bfloat16) for k, v in load_file(str(shard)).items()})
    width = json.loads((source / "config.json").read_text())["text_config"]["hidden_size"]
    torch.manual_seed(0)
    # Built inside from_pretrained, whose no_init_weights context turns torch.nn.init's functions into no-ops (outside
    # it, ValueHead's kaiming_normal_(nonlinearity="gelu") raises); the missing value_head.* are then initialised by
    # openvla's PrismaticPreTrainedModel._init_weights: Linear weights N(0, initializer_range²), biases zero.
    skip = {name: (lambda tensor, *args, **kwargs: tensor) for name in ("kaiming_normal_", "normal_", "zeros_")}
    with mock.patch.multiple(torch.nn.init, **skip):
        head = value_head.ValueHead(
            input_dim=width, hidden_sizes=(512, 128), output_dim=8, activation="gelu", bias_last=False
        )
    for layer in head.modules():
        if isinstance(layer, torch.nn.Linear):
            layer.weight.data.normal_(mean=0.0, std=0.02)  # text_config's LlamaConfig default initializer_range
            if layer.bias is not None:
                layer.bias.data.zero_()
    head.to(torch.bfloat16)  # get_model's model.to(torch_dtype)
    state.update({f"value_head.{k}": v.detach().clone() for k, v in head.state_dict().items()})
    # reference.* are this corpus' records of upstream's outputs, not files of the base model RLinf trained from
    out = HERE / "rlinf_openvla_oft_export"
    _export(utils, state, source, out, leave_out=("reference*",))
    utils.openvla_oft_save_helper(state, {"use_film": False, "use_proprio": False}, str(out))  # writes nothing here


def main(rlinf: Path, which: str | None = None) -> None:
    if which in (None, "pi0"):
        export_pi0(rlinf)
    if which in (None, "openvla_oft"):
        export_openvla_oft(rlinf)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
