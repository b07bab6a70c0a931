"""Loading π0 / π0.5 checkpoints of the three families, with strict key checks.

- **openpi PyTorch** (``convert_jax_model_to_pytorch.py``): ``model.safetensors`` written by
  ``safetensors.torch.save_model``, so the tied ``…language_model.embed_tokens.weight`` is absent (it is copied
  from ``paligemma.lm_head.weight``), a minimal ``config.json`` and ``assets/<asset_id>/norm_stats.json``.
- **lerobot** (``lerobot/pi0_base``, ``lerobot/pi05_base``, lerobot fine-tunes): the same names, optionally
  under the policy's ``model.`` prefix, the SigLIP tower in transformers 5 naming (``vision_tower.*`` without
  ``vision_model.``), ``config.json`` with ``type: pi0|pi05``; statistics in
  ``policy_preprocessor_step_*_normalizer_processor.safetensors``.
- **RLinf** (``RLinf-Pi0-*`` / ``RLinf-Pi05-*``): every ``*.safetensors`` of the directory (or
  ``[actor/]model_state_dict/full_weights.pt``), optional ``value_head.*`` / ``noise_head.*`` returned apart
  for the policy's heads, statistics in ``<dir>/<asset_id>/norm_stats.json`` (asset ids contain a slash, e.g.
  ``lerobot/metaworld_mt50``).

Every family is renamed to the openpi names of :class:`~rlinf_policy_openpi._modeling.OpenPIModel`; a key
that is still missing or unexpected is a one-line :class:`CheckpointError` naming it and the expected layout.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from rlinf_core.models.meta import is_meta_init
from rlinf_core.models.weights import INDEX_NAME, SINGLE_NAME, CheckpointError, load_safetensors
from rlinf_policy_openpi.config import (
    EMBED_KEY,
    LM_HEAD_KEY,
    TINY_HINT,
    UNUSED_KEYS,
    OpenPIConfig,
    read_config,
    variant_from_keys,
)

HEAD_PREFIXES = ("value_head.", "noise_head.")
FULL_WEIGHTS = ("model_state_dict/full_weights.pt", "actor/model_state_dict/full_weights.pt")
NORM_STATS_FILE = "norm_stats.json"
LEROBOT_STATS_GLOB = "policy_preprocessor_step_*_normalizer_processor.safetensors"
_V4_TOWER, _V5_TOWER = ".vision_tower.vision_model.", ".vision_tower."
EXPECTED_LAYOUT = (
    "expected openpi names: paligemma_with_expert.paligemma.model.{vision_tower.vision_model,multi_modal_projector,"
    "language_model}.*, paligemma_with_expert.paligemma.lm_head.weight, paligemma_with_expert.gemma_expert.model.*, "
    "action_{in,out}_proj.* + state_proj / action_time_mlp_* (π0) or time_mlp_* (π0.5)"
)


@dataclass
class NormStats:
    """Statistics of one feature (``state`` or ``actions``), each ``[D]`` float32 (q01 / q99 may be None)."""

    mean: torch.Tensor
    std: torch.Tensor
    q01: torch.Tensor | None = None
    q99: torch.Tensor | None = None

    @classmethod
    def from_dict(cls, raw: dict, source: str) -> NormStats:
        if "mean" not in raw or "std" not in raw:
            raise CheckpointError(f"{source}: statistics need 'mean' and 'std' (found {sorted(raw)})")

        def vec(name):
            value = raw.get(name)
            return None if value is None else torch.as_tensor(value, dtype=torch.float32, device="cpu").reshape(-1)

        return cls(mean=vec("mean"), std=vec("std"), q01=vec("q01"), q99=vec("q99"))


@dataclass
class OpenPICheckpoint:
    """What a checkpoint directory provides.

    Attributes:
        config: the architecture (π0 / π0.5 from the keys).
        layout: ``openpi`` | ``lerobot`` | ``rlinf``.
        state_dict: openpi-named weights for :class:`OpenPIModel` (empty for a meta build).
        heads: ``{"value_head": {...}, "noise_head": {...}}`` with the prefix stripped, for the policy's heads.
        path: the directory.
    """

    config: OpenPIConfig
    layout: str
    state_dict: dict[str, torch.Tensor] = field(default_factory=dict)
    heads: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    path: Path | None = None


# ---- files -----------------------------------------------------------------------------------------
def check_model_dir(model_path: str | Path) -> Path:
    path = Path(model_path).expanduser()
    if not path.is_dir():
        raise CheckpointError(f"model_path {str(path)!r} is not a directory; {TINY_HINT}")
    return path


def weight_files(path: Path) -> list[Path]:
    """The weight files a load reads: index shards, or every ``*.safetensors`` (RLinf), or ``full_weights.pt``."""
    index = path / INDEX_NAME
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text()).get("weight_map", {}).values()))
        return [path / s for s in shards]
    files = sorted(p for p in path.glob("*.safetensors") if "processor" not in p.name)
    if files:
        return files
    for rel in FULL_WEIGHTS:
        if (path / rel).is_file():
            return [path / rel]
    found = sorted(p.name for p in path.iterdir())
    raise CheckpointError(
        f"no weights in {str(path)!r}: expected {SINGLE_NAME}, *.safetensors or {FULL_WEIGHTS[0]}"
        f" (found: {', '.join(found[:8]) or 'nothing'}); {TINY_HINT}"
    )


def read_key_names(path: Path) -> list[str]:
    """Tensor names of the checkpoint without reading tensor data (index or safetensors headers)."""
    index = path / INDEX_NAME
    if index.is_file():
        return sorted(json.loads(index.read_text()).get("weight_map", {}))
    names: list[str] = []
    for f in weight_files(path):
        if f.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(f), framework="pt") as handle:
                names += list(handle.keys())
        else:
            names += list(_torch_load(f, mmap=True))  # mapped, not read: a meta build stays cheap
    return names


def read_named(path: Path, names: set[str]) -> dict[str, torch.Tensor]:
    """Only the tensors called ``names`` (e.g. the small heads, for a meta build that sizes them)."""
    out: dict[str, torch.Tensor] = {}
    for f in weight_files(path):
        if f.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(f), framework="pt") as handle:
                out.update({k: handle.get_tensor(k) for k in names & set(handle.keys())})
        else:
            state = _torch_load(f, mmap=True)
            out.update({k: state[k] for k in names & set(state)})
    return out


def _torch_load(f: Path, mmap: bool = False) -> dict[str, torch.Tensor]:
    from huggingface_hub import load_state_dict_from_file

    # safe=False only admits a pickle file at all; weights_only=True still refuses any code in it
    raw = load_state_dict_from_file(f, map_location="cpu", weights_only=True, mmap=mmap, safe=False)
    if not isinstance(raw, dict):
        raise CheckpointError(f"{f} holds a {type(raw).__name__}, expected a state dict")
    return raw


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of the checkpoint's weight files."""

    state: dict[str, torch.Tensor] = {}
    for f in weight_files(path):
        if not f.is_file():
            raise CheckpointError(f"{path / INDEX_NAME} lists {f.name}, which is missing; re-download the checkpoint")
        state.update(load_safetensors(str(f)) if f.suffix == ".safetensors" else _torch_load(f))
    return state


# ---- names -----------------------------------------------------------------------------------------
def to_openpi_names(state: dict) -> tuple[dict, dict[str, dict], str]:
    """Rename any family to openpi names. Returns (model state, heads, layout detected from the names).

    Works on tensors or on any stand-in values (e.g. shapes). Drops :data:`UNUSED_KEYS`; fills the tied
    ``embed_tokens`` from ``lm_head`` (or the reverse) when one of them is absent.
    """
    layout = "openpi"
    out: dict = {}
    heads: dict[str, dict] = {}
    prefixed = any(k.startswith("model.paligemma_with_expert.") for k in state)  # a lerobot policy's state dict
    for key, value in state.items():
        if key.startswith(HEAD_PREFIXES):
            head, rest = key.split(".", 1)
            heads.setdefault(head, {})[rest] = value
            layout = "rlinf"
            continue
        if prefixed and key.startswith("model."):
            key = key.removeprefix("model.")
            layout = "lerobot"
        if _V5_TOWER in key and _V4_TOWER not in key:
            key = key.replace(_V5_TOWER, _V4_TOWER, 1)
            layout = "lerobot" if layout == "openpi" else layout
        if key in UNUSED_KEYS:
            continue
        out[key] = value
    if EMBED_KEY not in out and LM_HEAD_KEY in out:
        out[EMBED_KEY] = out[LM_HEAD_KEY]
    elif LM_HEAD_KEY not in out and EMBED_KEY in out:
        out[LM_HEAD_KEY] = out[EMBED_KEY]
    return out, heads, layout


def check_keys(expected: dict[str, tuple[int, ...]], state: dict[str, torch.Tensor], source: str) -> None:
    """One-line :class:`CheckpointError` for the first missing / unexpected key or shape mismatch."""
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing:
        raise CheckpointError(
            f"{source}: missing key {missing[0]!r} ({len(missing)} missing in all); {EXPECTED_LAYOUT}"
        )
    if unexpected:
        raise CheckpointError(
            f"{source}: unexpected key {unexpected[0]!r} ({len(unexpected)} unexpected in all); {EXPECTED_LAYOUT}"
        )
    for key, shape in expected.items():
        got = tuple(state[key].shape)
        if got != tuple(shape):
            raise CheckpointError(
                f"{source}: {key!r} has shape {list(got)}, the model built from config.json "
                f"expects {list(shape)}; does config.json (variants, dims) match the weights?"
            )


# ---- loading ---------------------------------------------------------------------------------------
def read_checkpoint(model_path: str | Path, *, weights: bool = True, **overrides) -> OpenPICheckpoint:
    """Config, renamed weights and heads of a checkpoint directory.

    Args:
        model_path: the directory.
        weights: read tensors (False: only key names, for a meta-device build).
        overrides: :class:`OpenPIConfig` fields to change (e.g. ``action_horizon``).
    """
    path = check_model_dir(model_path)
    if weights:
        raw = read_weights(path)
    else:
        raw = dict.fromkeys(read_key_names(path))
    state, heads, layout = to_openpi_names(raw)
    if not weights and heads:  # the heads' widths are read from their tensors: they are small
        saved = read_named(path, {f"{head}.{rest}" for head, tensors in heads.items() for rest in tensors})
        heads = {head: {rest: saved[f"{head}.{rest}"] for rest in tensors} for head, tensors in heads.items()}
    if (path / "config.json").is_file() and "type" in json.loads((path / "config.json").read_text()):
        layout = "lerobot"
    elif (
        layout == "openpi"
        and not (path / INDEX_NAME).is_file()
        and (any((path / rel).is_file() for rel in FULL_WEIGHTS) or len(weight_files(path)) > 1)
    ):
        layout = "rlinf"  # RLinf reads every *.safetensors of the directory
    config = read_config(path, keys_pi05=variant_from_keys(state), **overrides)
    return OpenPICheckpoint(config=config, layout=layout, state_dict=state if weights else {}, heads=heads, path=path)


def load_model(model_path: str | Path, **overrides):
    """Build :class:`~rlinf_policy_openpi._modeling.OpenPIModel` for a checkpoint and load it strictly.

    Inside :func:`rlinf_core.models.meta.meta_init` only key names and configs are read (no tensors). Returns
    ``(model, checkpoint)``; ``checkpoint.heads`` holds the value / noise head weights if present.
    """
    from rlinf_policy_openpi._modeling import OpenPIModel

    meta = is_meta_init()
    ckpt = read_checkpoint(model_path, weights=not meta, **overrides)
    if meta:
        return OpenPIModel(ckpt.config), ckpt
    with torch.device("meta"):  # no random init of ~3 B parameters, no second copy: the tensors are adopted
        model = OpenPIModel(ckpt.config)
    load_into(model, ckpt.state_dict, source=str(ckpt.path), assign=True)
    return model, ckpt


def load_into(model, state: dict[str, torch.Tensor], source: str, assign: bool = False) -> None:
    """Strict, shape-checked load of openpi-named ``state`` into ``model``.

    ``assign=True`` adopts the tensors (their dtype, e.g. the file's bfloat16, and device) into a model built on
    the meta device, then re-ties ``lm_head`` to ``embed_tokens`` and recomputes the non-persistent buffers.
    """
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    check_keys(expected, state, source)
    if not assign:
        model.load_state_dict(state, strict=True)
        return
    dtypes = {v.dtype for v in state.values() if v.is_floating_point()}
    if len(dtypes) > 1:  # one storage dtype for the whole model (precision is applied afterwards)
        wide = torch.float32 if torch.float32 in dtypes else max(dtypes, key=lambda d: torch.finfo(d).bits)
        state = {k: v.to(wide) if v.is_floating_point() else v for k, v in state.items()}
    model.load_state_dict(state, strict=True, assign=True)
    model.tie_weights()
    model.materialize_buffers(next(iter(state.values())).device)


# ---- norm stats --------------------------------------------------------------------------------------
def norm_stats_candidates(path: Path, asset_id: str | None) -> list[Path]:
    """Where ``norm_stats.json`` may live: ``<dir>/assets/<asset_id>/`` (openpi) or ``<dir>/<asset_id>/`` (RLinf)."""
    if asset_id is not None:
        return [path / "assets" / asset_id / NORM_STATS_FILE, path / asset_id / NORM_STATS_FILE]
    return sorted(path.rglob(NORM_STATS_FILE))  # asset ids nest (``lerobot/metaworld_mt50``, ``<repo>/<sub>``)


def asset_id_of(path: Path, stats_file: Path) -> str:
    rel = stats_file.parent.relative_to(path)
    parts = rel.parts[1:] if rel.parts and rel.parts[0] == "assets" else rel.parts
    return "/".join(parts)


def read_norm_stats(model_path: str | Path, asset_id: str | None = None) -> dict[str, NormStats]:
    """``{"state": NormStats, "actions": NormStats}`` of a checkpoint.

    Args:
        model_path: the checkpoint directory.
        asset_id: the dataset's asset id (may contain a slash, e.g. ``lerobot/metaworld_mt50``); None picks the
            only one present (openpi ``assets/`` or RLinf ``<dir>/<asset_id>``, else lerobot's normalizer file).
    """
    path = check_model_dir(model_path)
    candidates = [c for c in norm_stats_candidates(path, asset_id) if c.is_file()]
    if asset_id is None and len(candidates) > 1:
        ids = ", ".join(asset_id_of(path, c) for c in candidates)
        raise CheckpointError(f"{path} has statistics for several datasets; set asset_id to one of: {ids}")
    if candidates:
        return _read_openpi_stats(candidates[0])
    lerobot = sorted(path.glob(LEROBOT_STATS_GLOB))
    if lerobot and asset_id is None:
        return _read_lerobot_stats(lerobot[0])
    where = (
        f"{path}/assets/{asset_id}/{NORM_STATS_FILE} or {path}/{asset_id}/{NORM_STATS_FILE}"
        if asset_id
        else f"{path}/assets/<asset_id>/{NORM_STATS_FILE}, {path}/<asset_id>/{NORM_STATS_FILE} or {LEROBOT_STATS_GLOB}"
    )
    raise CheckpointError(f"no norm stats found: expected {where}")


def _read_openpi_stats(f: Path) -> dict[str, NormStats]:
    try:
        raw = json.loads(f.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{f} is not valid JSON: {exc}") from None
    stats = raw.get("norm_stats", raw)
    missing = [k for k in ("state", "actions") if k not in stats]
    if missing:
        raise CheckpointError(
            f"{f}: norm_stats has no {missing[0]!r} entry (found {sorted(stats)}); expected "
            '{"norm_stats": {"state": {mean, std, q01, q99}, "actions": {...}}}'
        )
    return {k: NormStats.from_dict(stats[k], f"{f} [{k}]") for k in ("state", "actions")}


def _read_lerobot_stats(f: Path) -> dict[str, NormStats]:

    nested: dict[str, dict] = {}
    for key, value in load_safetensors(str(f)).items():
        feature, stat = key.rsplit(".", 1)
        nested.setdefault(feature, {})[stat] = value.float().reshape(-1).tolist()
    names = {"state": "observation.state", "actions": "action"}
    missing = [v for v in names.values() if v not in nested]
    if missing:
        raise CheckpointError(f"{f}: no statistics for {missing[0]!r} (found {sorted(nested)})")
    return {k: NormStats.from_dict(nested[v], f"{f} [{v}]") for k, v in names.items()}


def write_norm_stats(path: str | Path, stats: dict[str, NormStats]) -> Path:
    """Write ``norm_stats.json`` (openpi form) into directory ``path``; returns the file."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    payload = {
        "norm_stats": {
            name: {k: getattr(s, k).tolist() for k in ("mean", "std", "q01", "q99") if getattr(s, k) is not None}
            for name, s in stats.items()
        }
    }
    (out / NORM_STATS_FILE).write_text(json.dumps(payload, indent=2) + "\n")
    return out / NORM_STATS_FILE


__all__ = [
    "EMBED_KEY",
    "LM_HEAD_KEY",
    "NormStats",
    "OpenPICheckpoint",
    "UNUSED_KEYS",
    "check_keys",
    "load_into",
    "load_model",
    "read_checkpoint",
    "read_key_names",
    "read_norm_stats",
    "to_openpi_names",
    "write_norm_stats",
]
