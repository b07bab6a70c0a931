"""LoRA through peft: the real target modules, value head saved with the adapter, merge-and-export."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import nn

from rlinf.meta import is_meta_init

try:
    import peft
except ImportError as exc:  # pragma: no cover
    raise ImportError(f"LoRA needs peft ({exc}); install it with `pip install 'peft>=0.17'`") from exc

ADAPTER = "default"
log = logging.getLogger(__name__)


def default_target_modules(vla: nn.Module) -> str:
    """Regex over module names: RLinf's LoRA targets, restricted to layers that run.

    Vision towers (``attn.qkv``, ``attn.proj``, ``mlp.fc1``, ``mlp.fc2`` of every block but the last,
    whose output Prismatic never reads), projector ``fc1..fc3``, and Llama's attention and MLP
    projections plus ``lm_head``. Written as a regex so SigLIP's projections are not matched by
    accident and the value head never gets an adapter.
    """
    towers = []
    for name in ("featurizer", "fused_featurizer"):
        tower = getattr(vla.vision_backbone, name, None)
        if tower is not None:
            used = "|".join(str(i) for i in range(tower.spec.depth - 1))
            towers.append(rf"vision_backbone\.{name}\.blocks\.({used})\.(attn\.(qkv|proj)|mlp\.fc[12])")
    llm = r"language_model\.(model\.layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)|lm_head)"
    return "|".join([*towers, r"projector\.fc[123]", llm])


def forward_path_split(vla: nn.Module, config) -> tuple[list[str], list[str]]:
    """Module names a LoRA ``config`` targets, split into (on the forward path, never run).

    Prismatic reads the second-to-last ViT block, so a target list like RLinf's (``proj``, ``qkv``,
    ``fc1``, ``q``, ``kv``, ...) also matches the last block and SigLIP's attention pool: adapters
    there never get gradients, which multi-rank DDP rejects ("Expected to have finished reduction").
    """
    from peft.tuners.tuners_utils import check_target_module_exists

    unused = tuple(vla.unused_parameter_prefixes())
    used, skipped = [], []
    for name, module in vla.named_modules():
        if name and not list(module.children()) and check_target_module_exists(config, name):
            (skipped if (name + ".").startswith(unused) else used).append(name)
    return used, skipped


def _restrict_to_forward_path(vla: nn.Module, config, source: str) -> list[str]:
    """Exclude targets off the forward path (``config.exclude_modules``); one-line error if nothing is left."""
    used, skipped = forward_path_split(vla, config)
    if not used:
        example = f" (it only matches modules the forward never runs, e.g. {skipped[0]!r})" if skipped else ""
        raise ValueError(
            f"LoRA target_modules {config.target_modules!r} from {source} match no layer on the forward path{example};"
            " target the projections of the ViT blocks before the last, the projector and the Llama layers"
        )
    if skipped:
        log.info("LoRA: %d target modules never run in the forward (e.g. %s): no adapter", len(skipped), skipped[0])
        config.exclude_modules = sorted(set(config.exclude_modules or []) | set(skipped))
    return skipped


def _freeze_unused(model, vla: nn.Module) -> None:
    """Parameters of layers the forward never runs must not require grad (DDP); peft may re-enable some."""
    unused = tuple(vla.unused_parameter_prefixes())
    for name, param in vla.named_parameters():
        plain = name.replace(".base_layer.", ".")
        if plain.startswith(unused):
            param.requires_grad_(False)


def apply_lora(
    vla: nn.Module,
    *,
    rank: int,
    alpha: int | None,
    target_modules: str | list[str] | None,
    lora_path: str | None,
    with_value_head: bool,
):
    """Wrap ``vla`` in a trainable ``PeftModel`` (fresh adapter, or the one in ``lora_path``).

    Adapters go only on modules the forward runs (see :func:`forward_path_split`); an adapter
    loaded from ``lora_path`` that has weights for the others keeps them out (they never affect
    the output).
    """
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

    save = ["value_head"] if with_value_head else []
    if lora_path is None:
        config = LoraConfig(
            r=rank,
            lora_alpha=alpha or rank,
            lora_dropout=0.0,
            init_lora_weights="gaussian",
            target_modules=target_modules or default_target_modules(vla),
            modules_to_save=save or None,
        )
        _restrict_to_forward_path(vla, config, "the policy config")
        model = get_peft_model(vla, config)
        _freeze_unused(model, vla)
        return model
    path = Path(lora_path).expanduser()
    if not (path / "adapter_config.json").is_file():
        raise ValueError(f"lora_path {str(path)!r} has no adapter_config.json; expected a peft adapter directory")
    config = LoraConfig.from_pretrained(str(path))
    config.inference_mode = False
    config.modules_to_save = sorted(set(config.modules_to_save or []) | set(save)) or None
    skipped = _restrict_to_forward_path(vla, config, str(path))
    model = get_peft_model(vla, config)
    _freeze_unused(model, vla)
    if is_meta_init():  # architecture only: the adapter's weights are not read
        return model
    state = _adapter_weights(path)
    state = {k: v for k, v in state.items() if not any(f"{m}.lora_" in k for m in skipped)}
    try:
        result = set_peft_model_state_dict(model, state)
    except RuntimeError as exc:  # size mismatches
        first = next((line.strip() for line in str(exc).splitlines() if "size mismatch" in line), str(exc)[:200])
        raise ValueError(f"adapter {str(path)!r} does not fit this model ({first}); was it trained on it?") from None
    missing_lora = [k for k in result.missing_keys if ".lora_" in k]
    if missing_lora or result.unexpected_keys:
        bad = (missing_lora or result.unexpected_keys)[0]
        raise ValueError(f"adapter {str(path)!r} does not fit this model (first bad key {bad!r}); was it trained on it?")
    return model


def _adapter_weights(path: Path) -> dict[str, torch.Tensor]:
    if (path / "adapter_model.safetensors").is_file():
        from safetensors.torch import load_file

        return load_file(str(path / "adapter_model.safetensors"))
    if (path / "adapter_model.bin").is_file():
        return torch.load(str(path / "adapter_model.bin"), map_location="cpu", weights_only=True)
    raise ValueError(f"no adapter_model.safetensors (or .bin) in {str(path)!r}")


def merged_state_dict(model) -> dict[str, torch.Tensor]:
    """Checkpoint-named tensors with every LoRA delta merged in; the live model is left untouched."""
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
    """``adapter_config.json`` + ``adapter_model.safetensors`` (LoRA weights and the value head)."""
    model.save_pretrained(str(path), save_embedding_layers=False)


__all__ = ["apply_lora", "default_target_modules", "forward_path_split", "merged_state_dict", "save_adapter", "peft"]
