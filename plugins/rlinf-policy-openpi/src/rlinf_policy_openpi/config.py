"""π0 / π0.5 architecture settings read from a checkpoint's ``config.json`` (no torch, no transformers).

Three ``config.json`` forms are understood:

- **openpi PyTorch** (``examples/convert_jax_model_to_pytorch.py``): only ``{action_dim, action_horizon,
  paligemma_variant, action_expert_variant, precision}``. openpi hard-codes the rest (SigLIP So400m/14 at
  224 px, PaliGemma vocabulary 257152, ``max_token_len`` 48 for π0 / 200 for π0.5) and stores no π0.5
  flag: the weights tell (``time_mlp_in.*`` = π0.5, ``state_proj.*`` = π0, see :func:`variant_from_keys`).
  Optional extras written by our tiny checkpoints and honoured here: ``pi05``, ``max_token_len``,
  ``discrete_state_input``, ``vocab_size`` and ``dims: {paligemma|action_expert|vision: {...}}`` (partial
  overrides of the named variant's sizes).
- **lerobot** (``PI0Config`` / ``PI05Config``): ``type: pi0|pi05``, ``chunk_size``, ``max_action_dim``,
  ``tokenizer_max_length`` and the same variant names.
- **none** (some fine-tuned directories ship weights only): every default, π0 / π0.5 from the keys.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

#: the token embedding's key in openpi checkpoints (tied to the LM head; not saved twice)
EMBED_KEY = "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"

PALIGEMMA_VOCAB = 257152
LANGUAGE_PAD_LEN = {False: 48, True: 200}  # openpi Pi0Config.max_token_len default, keyed by pi05
IMAGE_KEYS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")  # openpi's three camera slots, in order
TINY_HINT = "create a tiny test checkpoint with `python -m rlinf_policy_openpi.make_tiny DIR`"
# Weight names the model and the checkpoint readers share (here, so that neither imports the other).
EMBED_KEY = "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"  # tied to LM_HEAD_KEY
LM_HEAD_KEY = "paligemma_with_expert.paligemma.lm_head.weight"
UNUSED_KEYS = ("paligemma_with_expert.gemma_expert.lm_head.weight",)  # present in released files, never used


class OpenPIConfigError(ValueError):
    """A ``config.json`` (or override) that does not describe a π0 / π0.5 model."""


@dataclass(frozen=True)
class GemmaDims:
    """Sizes of one Gemma stack (openpi ``gemma.Config``).

    Args:
        width: hidden size.
        depth: number of decoder layers (the VLM and the action expert must have the same depth).
        mlp_dim: GeGLU intermediate size.
        num_heads: query heads.
        num_kv_heads: key / value heads (1 = multi-query attention).
        head_dim: size of one head (the two stacks must agree: they attend jointly).
    """

    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    num_kv_heads: int
    head_dim: int


@dataclass(frozen=True)
class SiglipDims:
    """Sizes of the SigLIP vision tower (openpi hard-codes So400m/14 at 224 px).

    Args:
        width: hidden size (1152).
        depth: encoder layers (27).
        mlp_dim: MLP size (4304).
        num_heads: attention heads (16).
        patch_size: patch size in pixels (14).
        image_size: input resolution (224): images are resized with padding to it.
    """

    width: int = 1152
    depth: int = 27
    mlp_dim: int = 4304
    num_heads: int = 16
    patch_size: int = 14
    image_size: int = 224

    @property
    def num_tokens(self) -> int:
        return (self.image_size // self.patch_size) ** 2


# openpi src/openpi/models/gemma.py get_config
VARIANTS: dict[str, GemmaDims] = {
    "dummy": GemmaDims(width=64, depth=4, mlp_dim=128, num_heads=8, num_kv_heads=1, head_dim=16),
    "gemma_300m": GemmaDims(width=1024, depth=18, mlp_dim=4096, num_heads=8, num_kv_heads=1, head_dim=256),
    "gemma_2b": GemmaDims(width=2048, depth=18, mlp_dim=16_384, num_heads=8, num_kv_heads=1, head_dim=256),
}
VARIANTS["gemma_300m_lora"] = VARIANTS["gemma_300m"]  # LoRA variants only add adapters (merged in released files)
VARIANTS["gemma_2b_lora"] = VARIANTS["gemma_2b"]


def variant_dims(name: str, overrides: dict | None = None) -> GemmaDims:
    """Sizes of an openpi Gemma variant, optionally with some of them overridden."""
    if name not in VARIANTS:
        raise OpenPIConfigError(f"unknown Gemma variant {name!r}; known: {', '.join(VARIANTS)}")
    return _replace(VARIANTS[name], overrides, f"dims of {name}")


def _replace(obj, overrides: dict | None, what: str):
    if not overrides:
        return obj
    known = {f.name for f in dataclasses.fields(obj)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise OpenPIConfigError(f"{what}: unknown field {unknown[0]!r}; known: {', '.join(sorted(known))}")
    return dataclasses.replace(obj, **{k: int(v) for k, v in overrides.items()})


@dataclass(frozen=True)
class OpenPIConfig:
    """Architecture of a π0 / π0.5 model (the sizes :class:`~rlinf_policy_openpi._modeling.OpenPIModel` builds).

    Args:
        pi05: π0.5 (adaRMS time conditioning in the expert, no state token) instead of π0.
        action_dim: padded state / action width of the model (32 in every released checkpoint).
        action_horizon: H, the number of action tokens (openpi 50; RLinf's MetaWorld / LIBERO fine-tunes 5-10).
        max_token_len: language tokens in the prefix (None: 48 for π0, 200 for π0.5, as openpi).
        paligemma_variant: openpi Gemma variant of the VLM (``gemma_2b``; ``dummy`` for tests).
        action_expert_variant: openpi Gemma variant of the action expert (``gemma_300m``).
        vlm: sizes of the VLM text stack (None: those of ``paligemma_variant``).
        expert: sizes of the action expert (None: those of ``action_expert_variant``).
        vision: SigLIP sizes (default So400m/14 at 224 px).
        vocab_size: text vocabulary (PaliGemma's 257152).
        num_images: camera slots in the prefix (openpi always uses 3; missing cameras are masked).
        discrete_state_input: π0.5 only: the normalised state is written into the prompt as 256-bin tokens
            (None: openpi's default, True for π0.5; RLinf's MetaWorld / LIBERO π0.5 configs set False).
        precision: dtype the checkpoint was saved in (``bfloat16`` / ``float32``), informative.
    """

    pi05: bool = False
    action_dim: int = 32
    action_horizon: int = 50
    max_token_len: int | None = None
    paligemma_variant: str = "gemma_2b"
    action_expert_variant: str = "gemma_300m"
    vlm: GemmaDims | None = None
    expert: GemmaDims | None = None
    vision: SiglipDims = field(default_factory=SiglipDims)
    vocab_size: int = PALIGEMMA_VOCAB
    num_images: int = 3
    discrete_state_input: bool | None = None
    precision: str = "bfloat16"

    def __post_init__(self) -> None:
        if self.vlm is None:
            object.__setattr__(self, "vlm", variant_dims(self.paligemma_variant))
        if self.expert is None:
            object.__setattr__(self, "expert", variant_dims(self.action_expert_variant))
        if self.max_token_len is None:
            object.__setattr__(self, "max_token_len", LANGUAGE_PAD_LEN[bool(self.pi05)])
        if self.discrete_state_input is None:
            object.__setattr__(self, "discrete_state_input", bool(self.pi05))
        if self.discrete_state_input and not self.pi05:
            raise OpenPIConfigError("discrete_state_input is a π0.5 option; π0 feeds the state as a continuous token")
        vlm, expert = self.vlm, self.expert
        if vlm.depth != expert.depth:
            raise OpenPIConfigError(
                f"the VLM ({vlm.depth} layers) and the action expert ({expert.depth}) must have "
                "the same depth: they attend jointly layer by layer"
            )
        if (vlm.num_heads, vlm.num_kv_heads, vlm.head_dim) != (expert.num_heads, expert.num_kv_heads, expert.head_dim):
            raise OpenPIConfigError(
                f"the VLM and the action expert must share num_heads / num_kv_heads / head_dim (got {vlm} and {expert})"
            )
        if not 1 <= self.num_images <= len(IMAGE_KEYS):
            raise OpenPIConfigError(f"num_images must be 1..{len(IMAGE_KEYS)} (camera slots), got {self.num_images}")
        for name in ("action_dim", "action_horizon", "max_token_len", "vocab_size"):
            if int(getattr(self, name)) < 1:
                raise OpenPIConfigError(f"{name} must be >= 1, got {getattr(self, name)}")

    @property
    def vlm_width(self) -> int:
        return self.vlm.width

    @property
    def expert_width(self) -> int:
        return self.expert.width

    @property
    def num_image_tokens(self) -> int:
        """Tokens per camera slot (256 for So400m/14 at 224 px)."""
        return self.vision.num_tokens

    @property
    def suffix_len(self) -> int:
        """State token (π0 only) + H action tokens."""
        return self.action_horizon + (0 if self.pi05 else 1)

    def replace(self, **changes) -> OpenPIConfig:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict:
        """The openpi ``config.json`` form, plus the extras that differ from openpi's defaults."""
        out = {
            "action_dim": self.action_dim,
            "action_horizon": self.action_horizon,
            "paligemma_variant": self.paligemma_variant,
            "action_expert_variant": self.action_expert_variant,
            "precision": self.precision,
        }
        default = OpenPIConfig(
            pi05=self.pi05, paligemma_variant=self.paligemma_variant, action_expert_variant=self.action_expert_variant
        )
        if self.pi05:
            out["pi05"] = True
        for name in ("max_token_len", "discrete_state_input", "vocab_size"):
            if getattr(self, name) != getattr(default, name):
                out[name] = getattr(self, name)
        dims = {}
        for key, ours, theirs in (
            ("paligemma", self.vlm, default.vlm),
            ("action_expert", self.expert, default.expert),
            ("vision", self.vision, default.vision),
        ):
            diff = {
                f.name: getattr(ours, f.name)
                for f in dataclasses.fields(ours)
                if getattr(ours, f.name) != getattr(theirs, f.name)
            }
            if diff:
                dims[key] = diff
        if dims:
            out["dims"] = dims
        return out


# ---- reading ---------------------------------------------------------------------------------------------
_OPENPI_KEYS = {
    "action_dim",
    "action_horizon",
    "paligemma_variant",
    "action_expert_variant",
    "precision",
    "pi05",
    "max_token_len",
    "discrete_state_input",
    "vocab_size",
    "dims",
    "num_images",
}


def variant_from_keys(keys: Iterable[str]) -> bool | None:
    """π0.5 (True) or π0 (False) from checkpoint key names, None when neither marker is present.

    π0.5 has ``time_mlp_in.*`` and adaRMS ``...gemma_expert...norm.dense.*``; π0 has ``state_proj.*`` and
    ``action_time_mlp_in.*``. Any ``model.`` prefix (lerobot policies) is ignored.
    """
    names = {k.removeprefix("model.") for k in keys}
    pi05 = any(k.startswith("time_mlp_in.") for k in names)
    pi0 = any(k.startswith(("state_proj.", "action_time_mlp_in.")) for k in names)
    if pi05 and pi0:
        raise OpenPIConfigError(
            "checkpoint has both π0 keys (state_proj / action_time_mlp_*) and π0.5 keys "
            "(time_mlp_*); it is not an openpi π0 or π0.5 model"
        )
    return True if pi05 else (False if pi0 else None)


def config_from_json(raw: dict, *, pi05: bool | None = None, source: str = "config.json") -> OpenPIConfig:
    """:class:`OpenPIConfig` from a parsed ``config.json`` (openpi or lerobot form).

    Args:
        raw: the parsed JSON.
        pi05: the variant read from the weights (wins over nothing, must agree with an explicit flag).
        source: named in errors.
    """
    dims = dict(raw.get("dims") or {})
    bad = sorted(set(dims) - {"paligemma", "action_expert", "vision"})
    if bad:
        raise OpenPIConfigError(f"{source}: dims.{bad[0]} unknown; use paligemma / action_expert / vision")
    vision = dict(dims.get("vision") or {})
    if "type" in raw:  # lerobot PI0Config / PI05Config
        kind = str(raw["type"])
        if kind not in ("pi0", "pi05"):
            raise OpenPIConfigError(f"{source}: lerobot policy type {kind!r} is not pi0 / pi05")
        flag = kind == "pi05"
        if raw.get("image_resolution") and "image_size" not in vision:
            vision["image_size"] = int(raw["image_resolution"][0])
        fields = {
            "action_dim": raw.get("max_action_dim", 32),
            "action_horizon": raw.get("chunk_size", 50),
            "max_token_len": raw.get("tokenizer_max_length"),
            "precision": raw.get("dtype", "float32"),
        }
    else:
        unknown = sorted(set(raw) - _OPENPI_KEYS)
        if unknown and not ({"action_horizon", "paligemma_variant"} & set(raw)):
            raise OpenPIConfigError(
                f"{source} is not an openpi / lerobot π0 config (unexpected key {unknown[0]!r}); expected openpi's "
                "{action_dim, action_horizon, paligemma_variant, action_expert_variant, precision} or lerobot's "
                f"'type: pi0|pi05'; {TINY_HINT}"
            )
        flag = raw.get("pi05")
        fields = {
            "action_dim": raw.get("action_dim", 32),
            "action_horizon": raw.get("action_horizon", 50),
            "max_token_len": raw.get("max_token_len"),
            "precision": raw.get("precision", "bfloat16"),
            "discrete_state_input": raw.get("discrete_state_input"),
            "num_images": raw.get("num_images", 3),
        }
    pg, ae = raw.get("paligemma_variant", "gemma_2b"), raw.get("action_expert_variant", "gemma_300m")
    kwargs = {
        **fields,
        "paligemma_variant": pg,
        "action_expert_variant": ae,
        "vlm": variant_dims(pg, dims.get("paligemma")),
        "expert": variant_dims(ae, dims.get("action_expert")),
        "vision": _replace(SiglipDims(), vision, f"{source}: dims.vision"),
        "vocab_size": raw.get("vocab_size", PALIGEMMA_VOCAB),
    }
    if flag is not None and pi05 is not None and bool(flag) != pi05:
        raise OpenPIConfigError(
            f"{source} says {'π0.5' if flag else 'π0'} but the weights are "
            f"{'π0.5 (time_mlp_in.*)' if pi05 else 'π0 (state_proj.*)'}"
        )
    kwargs["pi05"] = bool(flag if flag is not None else pi05)
    for key in ("action_dim", "action_horizon", "vocab_size", "num_images"):
        if key in kwargs:
            kwargs[key] = int(kwargs[key])
    return OpenPIConfig(**kwargs)


def read_config(model_path: str | Path, *, keys_pi05: bool | None = None, **overrides) -> OpenPIConfig:
    """:class:`OpenPIConfig` of a checkpoint directory (``config.json`` optional), with ``overrides`` applied.

    Args:
        model_path: the checkpoint directory.
        keys_pi05: the variant read from the weights' key names (see :func:`variant_from_keys`).
        overrides: OpenPIConfig fields to change (e.g. ``action_horizon`` from the policy's settings).
    """
    path = Path(model_path)
    cfg_file = path / "config.json"
    raw: dict = {}
    if cfg_file.is_file():
        try:
            raw = json.loads(cfg_file.read_text())
        except json.JSONDecodeError as exc:
            raise OpenPIConfigError(f"{cfg_file} is not valid JSON: {exc}") from None
    config = config_from_json(raw, pi05=keys_pi05, source=str(cfg_file))
    if overrides:
        known = {f.name for f in dataclasses.fields(OpenPIConfig)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise OpenPIConfigError(f"unknown OpenPIConfig field {unknown[0]!r}; known: {', '.join(sorted(known))}")
        if "pi05" in overrides and overrides["pi05"] != config.pi05:
            raise OpenPIConfigError(
                f"{path}: the checkpoint is {'π0.5' if config.pi05 else 'π0'}; pi05 cannot be "
                "overridden (the weights differ)"
            )
        config = config.replace(**overrides)
    return config


__all__ = [
    "EMBED_KEY",
    "LM_HEAD_KEY",
    "UNUSED_KEYS",
    "GemmaDims",
    "IMAGE_KEYS",
    "LANGUAGE_PAD_LEN",
    "OpenPIConfig",
    "OpenPIConfigError",
    "PALIGEMMA_VOCAB",
    "SiglipDims",
    "VARIANTS",
    "config_from_json",
    "read_config",
    "variant_dims",
    "variant_from_keys",
]
