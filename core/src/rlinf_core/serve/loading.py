"""The policy to serve, loaded as ``rlinf validate`` gets it.

- An exported directory (``save_pretrained`` / Hugging Face layout: ``<run>/policy``, an SFT export or a
  released checkpoint): ``PolicyClass.from_pretrained(dir, **overrides)``; the class is read from what
  ``save_pretrained`` recorded in ``config.json`` or named with ``--policy-class``.
- A run's checkpoint (``last.ckpt``, any ``*.ckpt``, or a run directory: its newest good checkpoint): the
  policy is built from the run's ``config.yaml`` (``model.init_args.policy``) and the checkpoint's
  ``policy.*`` weights are loaded into it; a trainable-only (LoRA) checkpoint gets its frozen weights from
  the policy's ``model_path``, checked as a resume checks them (:func:`rlinf_core.run.checkpointing.restore_frozen`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from rlinf_core.contracts.policy import Policy
from rlinf_core.foundation.signatures import constructor_parameters
from rlinf_core.models.settings import read_record, writer_class
from rlinf_core.plugins.manager import PluginError, load_plugins
from rlinf_core.serve.errors import ServeError


@dataclass
class LoadOptions:
    """How to load the policy.

    Args:
        policy_class: registered name or dotted path of the policy class (default: recorded in the checkpoint).
        config: the run's ``config.yaml`` for a ``*.ckpt`` (default: found beside it or one level up).
        unnorm_key: dataset statistics the actions are un-normalised with (policies that have several).
        num_action_chunks: actions per chunk the policy returns (default: the checkpoint's).
        precision: the policy's ``precision`` setting (``fp32``, ``bf16``, ``bf16-true``, ...), as in training.
        device: torch device to run on (``cpu``, ``cuda``, ``cuda:1``).
        settings: any other constructor setting, ``{"name": value}`` or ``{"group.field": value}`` (``--set``),
            e.g. ``inputs.tokenizer_path`` for an RLinf π0 export, which carries no tokenizer.
    """

    policy_class: str | None = None
    config: str | None = None
    unnorm_key: str | None = None
    num_action_chunks: int | None = None
    precision: str | None = None
    device: str = "cpu"
    settings: dict[str, Any] = field(default_factory=dict)

    def overrides(self) -> dict[str, Any]:
        """Flat names (``unnorm_key``) and whole groups (``{"inputs": {"tokenizer_path": ...}}``)."""
        given = {
            "unnorm_key": self.unnorm_key,
            "num_action_chunks": self.num_action_chunks,
            "precision": self.precision,
        }
        out: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        for key, value in self.settings.items():
            group, _, name = key.rpartition(".")
            if group:
                out[group] = {**(out.get(group) or {}), name: value}
            else:
                out[key] = value
        return out


@dataclass
class LoadedPolicy:
    policy: Policy
    source: str  #: ``export`` or ``checkpoint``
    path: str


def _registry():

    try:
        return load_plugins(warn=False)
    except PluginError as exc:
        raise ServeError(str(exc)) from None


def _resolve_class(name: str) -> type:

    try:
        cls = _registry().resolve("policy", name)
    except PluginError as exc:
        raise ServeError(str(exc)) from None
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        raise ServeError(f"{name} is not a Policy class")
    return cls


def _check_overrides(cls: type, overrides: dict[str, Any]) -> None:
    params = constructor_parameters(cls)
    unsupported = sorted(set(overrides) - set(params) - set(cls.FLAT_SETTINGS))
    if unsupported:
        flags = ", ".join("--" + k.replace("_", "-") for k in unsupported)
        raise ServeError(f"{cls.__name__} has no setting {', '.join(unsupported)}; drop {flags}")


@contextmanager
def _unknown_group_field(opts: LoadOptions) -> Iterator[None]:
    """A ``--set GROUP.FIELD`` the group's dataclass has no field for: one line, not the constructor's traceback."""
    try:
        yield
    except TypeError as exc:
        if not any("." in key for key in opts.settings) or "unexpected keyword argument" not in str(exc):
            raise
        raise ServeError(f"--set: {exc}") from None


def _with_overrides(cls: type, init_args: dict, overrides: dict[str, Any]) -> dict:
    """``init_args`` with the overrides set; a policy's ``FLAT_SETTINGS`` (flat name → (config group, field)) puts
    a flat override such as ``unnorm_key`` into its group (``actions: {unnorm_key: ...}``)."""
    nested = cls.FLAT_SETTINGS
    params = constructor_parameters(cls)
    for key, value in overrides.items():
        if key in nested and key not in params:
            group, name = nested[key]
            init_args[group] = {**(init_args.get(group) or {}), name: value}
        elif isinstance(value, dict) and isinstance(init_args.get(key), dict):  # a group: the fields given
            init_args[key] = {**init_args[key], **value}
        else:
            init_args[key] = value
    return init_args


def recorded_class(export_dir: Path) -> str | None:
    """The policy class ``save_pretrained`` recorded in ``config.json`` (its name or ``model_type``)."""
    name = writer_class(read_record(export_dir / "config.json"))
    if name is not None:
        return name
    try:
        model_type = json.loads((export_dir / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    for entry in _registry().classes.values():
        cls = entry.cls if entry.kind == "policy" and model_type else None
        if isinstance(cls, type) and issubclass(cls, Policy) and cls.model_type == model_type:
            return entry.name
    return None


def _load_export(path: Path, opts: LoadOptions) -> Policy:
    name = opts.policy_class or recorded_class(path)
    if name is None:
        names = ", ".join(_registry().names("policy"))
        raise ServeError(
            f"{path}/config.json does not say which policy class wrote it; pass --policy-class (one of: {names})"
        )
    cls = _resolve_class(name)
    overrides = opts.overrides()
    _check_overrides(cls, overrides)
    with _unknown_group_field(opts):
        return cls.from_pretrained(path, **overrides)


def _run_config(ckpt: Path, given: str | None) -> dict:

    candidates = [Path(given)] if given else [ckpt.parent / "config.yaml", ckpt.parent.parent / "config.yaml"]
    for cfg in candidates:
        if cfg.is_file():
            return yaml.safe_load(cfg.read_text()) or {}
    where = given or f"{candidates[0]} or {candidates[1]}"
    raise ServeError(f"no run config at {where}; pass the run's config.yaml with --config")


def _policy_spec(config: dict) -> dict:
    model = config.get("model") or {}
    args = model.get("init_args", model) if isinstance(model, dict) else {}
    spec = args.get("policy") if isinstance(args, dict) else None
    if not isinstance(spec, dict) or "class_path" not in spec:
        raise ServeError("the run config has no model.init_args.policy with a class_path (is it an RL/SFT run?)")
    return spec


def _load_checkpoint(ckpt: Path, opts: LoadOptions) -> Policy:
    from rlinf_core.run.checkpoint_files import CheckpointError, load_checkpoint_file
    from rlinf_core.run.checkpointing import restore_frozen

    spec = _policy_spec(_run_config(ckpt, opts.config))
    cls = _resolve_class(opts.policy_class or spec["class_path"])
    overrides = opts.overrides()
    _check_overrides(cls, overrides)
    with _unknown_group_field(opts):
        policy = cls(**_with_overrides(cls, dict(spec.get("init_args") or {}), overrides))
    try:  # weights_only: a downloaded checkpoint holding a pickled callable is refused, never run
        checkpoint = load_checkpoint_file(ckpt, map_location="cpu")
    except CheckpointError as exc:
        raise ServeError(str(exc)) from None
    holder = torch.nn.Module()
    holder.policy = policy  # the RLModule / SFTModule attribute name: state-dict keys "policy.*"
    state = {k: v for k, v in checkpoint.get("state_dict", {}).items() if k.startswith("policy.")}
    if not state:
        raise ServeError(f"{ckpt} holds no policy.* weights (not an rlinf run checkpoint?)")
    try:
        restore_frozen(holder, {**checkpoint, "state_dict": state})
        holder.load_state_dict(state, strict=True)
    except (ValueError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0]
        raise ServeError(f"{ckpt} does not fit the policy its config builds: {first}") from None
    return policy


def load_policy(path: str, opts: LoadOptions) -> LoadedPolicy:
    """Load ``path`` (export directory, ``*.ckpt`` or run directory) on ``opts.device``, in eval mode."""
    from rlinf_core.run.checkpoint_files import CheckpointError, resolve_resume_path

    p = Path(path)
    if not p.exists():
        raise ServeError(f"--policy {path}: no such file or directory")
    if p.is_dir() and (p / "config.json").is_file():
        source, policy = "export", _load_export(p, opts)
    elif p.is_dir() and not any(p.glob("*.ckpt")) and not (p / "checkpoints").is_dir() and (p / "policy").is_dir():
        source, policy = "export", _load_export(p / "policy", opts)
    else:
        try:
            ckpt = Path(resolve_resume_path(str(p)))
        except CheckpointError as exc:
            raise ServeError(str(exc)) from None
        source, p, policy = "checkpoint", ckpt, _load_checkpoint(ckpt, opts)
    try:
        policy = policy.to(torch.device(opts.device))
    except (RuntimeError, AssertionError) as exc:
        raise ServeError(f"--device {opts.device}: {str(exc).splitlines()[0]}") from None
    policy.eval()
    return LoadedPolicy(policy=policy, source=source, path=str(p))
