"""LoRA through peft for any policy network: one :class:`LoRAConfig`, adapters only on the forward path.

A model may list the parameter-name prefixes of modules its forward never runs with a method
``unused_parameter_prefixes() -> list[str]`` (e.g. the last ViT block that Prismatic skips).
Adapters there would never get gradients, which multi-rank DDP rejects ("Expected to have
finished reduction"), so targets matching them are excluded, and a target list matching nothing
else fails in one line.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from rlinf_core.foundation.optional_deps import require
from rlinf_core.models.meta import is_meta_init
from rlinf_core.models.weights import load_safetensors as load_file

ADAPTER = "default"
PEFT_INSTALL = "pip install 'peft>=0.17'"
log = logging.getLogger(__name__)


@dataclass
class LoRAConfig:
    """LoRA settings of a policy (the YAML group ``lora:``; ``lora: null`` trains the full model).

    Args:
        rank: LoRA rank ``r``.
        alpha: LoRA alpha (None: equal to ``rank``).
        path: existing peft adapter directory to continue from (``adapter_config.json`` +
            ``adapter_model.safetensors``); its own rank / alpha / targets are used.
        target_modules: peft target modules, a regex over module names or a list of name
            suffixes (None: the policy's default targets).
    """

    rank: int = 32
    alpha: int | None = None
    path: str | None = None
    target_modules: str | list[str] | None = None

    def __post_init__(self) -> None:
        if self.rank < 1:
            raise ValueError(f"lora.rank must be >= 1, got {self.rank}")


def unused_prefixes(model: nn.Module) -> tuple[str, ...]:
    """Parameter-name prefixes of modules the model's forward never runs (its own declaration)."""
    fn = getattr(model, "unused_parameter_prefixes", None)
    return tuple(fn()) if callable(fn) else ()


def forward_path_split(model: nn.Module, config) -> tuple[list[str], list[str]]:
    """Module names a peft LoRA ``config`` targets, split into (on the forward path, never run)."""
    require("peft", PEFT_INSTALL, "LoRA")
    from peft.tuners.tuners_utils import check_target_module_exists

    unused = unused_prefixes(model)
    used, skipped = [], []
    for name, module in model.named_modules():
        if name and not list(module.children()) and check_target_module_exists(config, name):
            (skipped if unused and (name + ".").startswith(unused) else used).append(name)
    return used, skipped


def _restrict_to_forward_path(model: nn.Module, config, source: str) -> list[str]:
    """Exclude targets off the forward path (``config.exclude_modules``); one-line error if nothing is left."""
    used, skipped = forward_path_split(model, config)
    if not used:
        example = f" (it only matches modules the forward never runs, e.g. {skipped[0]!r})" if skipped else ""
        raise ValueError(
            f"LoRA target_modules {config.target_modules!r} from {source} match no layer on the forward path{example};"
            " list module names the forward runs (e.g. attention and MLP projections)"
        )
    if skipped:
        log.info("LoRA: %d target modules never run in the forward (e.g. %s): no adapter", len(skipped), skipped[0])
        config.exclude_modules = sorted(set(config.exclude_modules or []) | set(skipped))
    return skipped


def _freeze_unused(model: nn.Module) -> None:
    """Parameters of layers the forward never runs must not require grad (DDP); peft may re-enable some."""
    unused = unused_prefixes(model)
    if not unused:
        return
    for name, param in model.named_parameters():
        if name.replace(".base_layer.", ".").startswith(unused):
            param.requires_grad_(False)


def apply_lora(
    model: nn.Module,
    config: LoRAConfig,
    *,
    default_targets: str | list[str],
    modules_to_save: list[str] | None = None,
):
    """Wrap ``model`` in a trainable ``PeftModel``: a fresh adapter, or the one in ``config.path``.

    Args:
        model: the network (it may declare ``unused_parameter_prefixes()``).
        config: the LoRA settings.
        default_targets: targets when ``config.target_modules`` is None.
        modules_to_save: modules trained in full and saved with the adapter (e.g. ``["value_head"]``).

    An adapter loaded from ``config.path`` that has weights for modules off the forward path
    keeps them out (they never affect the output).
    """
    peft = require("peft", PEFT_INSTALL, "LoRA")
    save = list(modules_to_save or [])
    if config.path is None:
        lora = peft.LoraConfig(
            r=config.rank,
            lora_alpha=config.alpha or config.rank,
            lora_dropout=0.0,
            init_lora_weights="gaussian",
            target_modules=config.target_modules or default_targets,
            modules_to_save=save or None,
        )
        _restrict_to_forward_path(model, lora, "the policy config")
        wrapped = peft.get_peft_model(model, lora)
        _freeze_unused(model)
        return wrapped
    path = Path(config.path).expanduser()
    if not (path / "adapter_config.json").is_file():
        raise ValueError(f"lora.path {str(path)!r} has no adapter_config.json; expected a peft adapter directory")
    lora = peft.LoraConfig.from_pretrained(str(path))
    lora.inference_mode = False
    lora.modules_to_save = sorted(set(lora.modules_to_save or []) | set(save)) or None
    skipped = _restrict_to_forward_path(model, lora, str(path))
    wrapped = peft.get_peft_model(model, lora)
    _freeze_unused(model)
    if is_meta_init():  # architecture only: the adapter's weights are not read
        return wrapped
    state = _adapter_weights(path)
    state = {k: v for k, v in state.items() if not any(f"{m}.lora_" in k for m in skipped)}
    try:
        result = peft.set_peft_model_state_dict(wrapped, state)
    except RuntimeError as exc:  # size mismatches
        first = next((line.strip() for line in str(exc).splitlines() if "size mismatch" in line), str(exc)[:200])
        raise ValueError(f"adapter {str(path)!r} does not fit this model ({first}); was it trained on it?") from None
    missing_lora = [k for k in result.missing_keys if ".lora_" in k]
    if missing_lora or result.unexpected_keys:
        bad = (missing_lora or result.unexpected_keys)[0]
        raise ValueError(
            f"adapter {str(path)!r} does not fit this model (first bad key {bad!r}); was it trained on it?"
        )
    return wrapped


def _adapter_weights(path: Path) -> dict[str, torch.Tensor]:
    if (path / "adapter_model.safetensors").is_file():
        return load_file(str(path / "adapter_model.safetensors"))
    if (path / "adapter_model.bin").is_file():
        return torch.load(str(path / "adapter_model.bin"), map_location="cpu", weights_only=True)
    raise ValueError(f"no adapter_model.safetensors (or .bin) in {str(path)!r}")


def merged_state_dict(model) -> dict[str, torch.Tensor]:
    """Checkpoint-named tensors of a ``PeftModel`` with every LoRA delta merged in; the live model is untouched."""
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    out = {}
    for name, tensor in base.state_dict().items():
        if ".lora_" in name or ".original_module." in name:
            continue
        out[name.replace(".base_layer.", ".").replace(f".modules_to_save.{ADAPTER}.", ".")] = tensor.detach()
    for name, module in base.named_modules():
        if isinstance(module, LoraLayer) and ADAPTER in module.lora_A:
            weight = module.get_base_layer().weight
            out[f"{name}.weight"] = (weight + module.get_delta_weight(ADAPTER).to(weight.dtype)).detach()
    return out


def save_adapter(model, path: str | Path) -> None:
    """``adapter_config.json`` + ``adapter_model.safetensors`` (LoRA weights and modules to save)."""
    model.save_pretrained(str(path), save_embedding_layers=False)


__all__ = ["LoRAConfig", "apply_lora", "forward_path_split", "merged_state_dict", "save_adapter", "unused_prefixes"]
