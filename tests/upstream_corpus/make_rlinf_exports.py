"""Write ``rlinf_pi0_export/``: what RLinf v0.3's own export code writes for a π0 policy with a PPO value head (see
README.md beside this file). RLinf's ``rlinf/utils/ckpt_convertor/fsdp_convertor/convert_pt_to_hf.py``
(``_save_hf_checkpoint``, full model, no LoRA) calls ``copy_model_config_and_code(model_path, save_path)`` then
``save_state_dict_sharded_safetensors(model.state_dict(), save_path)`` from ``fsdp_convertor/utils.py``; the
value head is RLinf's ``rlinf/models/embodiment/modules/value_head.py:ValueHead`` built as
``openpi_action_model.py`` builds it for π0 (hidden (512, 256, 128), relu, bias_last).

    .venv/bin/python tests/upstream_corpus/make_rlinf_exports.py <RLinf checkout at v0.3>

``rlinf.config`` (imported by utils.py for the dtype helpers and model registry, neither used on this path) is
stubbed. The model's state dict is this project's ``OpenPIModel`` loaded from ``openpi_pi0/`` (openpi's names; RLinf's
model subclasses openpi's ``PI0Pytorch``), each tensor cloned as FSDP's gathered full state dict holds them (the
tied ``embed_tokens`` / ``lm_head`` are two tensors there, which safetensors' ``save_file`` requires).
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(rlinf: Path) -> None:
    import torch

    from rlinf_policy_openpi.checkpoint import load_model

    config = types.ModuleType("rlinf.config")
    config.SupportedModel = str
    config.torch_dtype_from_precision = lambda precision: None
    sys.modules.update({"rlinf": types.ModuleType("rlinf"), "rlinf.config": config})
    utils = _load(rlinf / "rlinf/utils/ckpt_convertor/fsdp_convertor/utils.py", "rlinf_fsdp_utils")
    value_head = _load(rlinf / "rlinf/models/embodiment/modules/value_head.py", "rlinf_value_head")

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
    out = HERE / "rlinf_pi0_export"
    shutil.rmtree(out, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:  # the model_path RLinf trained from: openpi_pi0's files
        base = Path(tmp) / "base"
        shutil.copytree(source, base)
        utils.copy_model_config_and_code(model_path=str(base), save_path=str(out))
    utils.save_state_dict_sharded_safetensors(state_dict=state, out_dir=str(out))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
