"""``rlinf memory --config X``: the per-GPU memory estimate of a training config (:mod:`rlinf_core.memory.estimate`).

The policy is built from the config at full size on the meta device (no weights read, no memory);
the strategy, precision, batch sizes and env sizes are read from the same YAML.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from rlinf_core.memory.estimate import GiB, MemoryEstimate, MemoryTarget, StrategySpec, count_parameters, estimate
from rlinf_core.plugins.manager import PluginError

DEFAULT_GPU_MEMORY_GB = MemoryTarget.gpu_memory_gb


def _meta_init():
    try:
        from rlinf_core.models.meta import meta_init
    except ImportError:  # pragma: no cover - before rlinf_core.models.meta exists the policy is built for real
        return contextlib.nullcontext()
    return meta_init()


def _init_args(node: Any) -> dict:
    if isinstance(node, dict):
        return dict(node.get("init_args") or {})
    return {}


def _class_name(node: Any) -> str:
    if isinstance(node, dict):
        return str(node.get("class_path", "")).rsplit(".", 1)[-1]
    return str(node or "").rsplit(".", 1)[-1]


def strategy_spec(trainer: dict) -> StrategySpec:
    """Placement from ``trainer.strategy`` / ``devices`` / ``num_nodes`` (``auto`` = DDP)."""
    devices = trainer.get("devices", 1)
    devices = int(devices) if str(devices).isdigit() else 1
    world = devices * int(trainer.get("num_nodes", 1) or 1)
    strat = trainer.get("strategy", "auto")
    name, args = _class_name(strat), _init_args(strat)
    mixed = str(trainer.get("precision", "32-true")) in ("bf16-mixed", "16-mixed")
    if name in ("FSDP2Strategy", "ModelParallelStrategy") or name.startswith("fsdp"):
        dtype = args.get("param_dtype")
        half = dtype in ("bfloat16", "float16") or (dtype is None and mixed)
        return StrategySpec("fsdp2", world, param_dtype_bytes=2 if half else 4)
    if name.startswith(("DeepSpeed", "deepspeed")):
        stage = int(args.get("stage", 2))
        if isinstance(strat, str) and "stage_" in strat:
            stage = int(strat.split("stage_")[1][0])
        return StrategySpec("deepspeed", world, zero_stage=stage, offload_optimizer=bool(args.get("offload_optimizer")))
    return StrategySpec("ddp", world)


class NoPolicyError(ValueError):
    """The config trains no policy (nothing for ``rlinf memory`` to estimate)."""


def build_policy(model_args: dict):
    """The config's policy at full size on the meta device."""
    from rlinf_core.plugins.manager import load_plugins

    registry = load_plugins(warn=False)
    node = model_args.get("policy")
    if not isinstance(node, dict) or "class_path" not in node:
        raise NoPolicyError(
            "the config has no model.init_args.policy.class_path: rlinf memory estimates RL / SFT "
            "configs of a policy (world-model and reward-model fine-tuning are not estimated)"
        )
    cls = registry.resolve("policy", node["class_path"])
    model_path = _init_args(node).get("model_path")
    if isinstance(model_path, str) and not Path(model_path).exists():
        # a placeholder path (/path/to/<released repo name>): the architecture is the released checkpoint's, so
        # a weightless released-form directory stands in for it (the policy class knows its released kinds)
        scratch = tempfile.mkdtemp(prefix="rlinf-memory-")
        atexit.register(shutil.rmtree, scratch, ignore_errors=True)
        path = cls.released_standin(model_path, scratch)
        if path is not None:
            print(
                f"rlinf memory: {model_path} is not on disk; estimating the released checkpoint it names "
                f"({Path(path).name}, weightless stand-in)",
                file=sys.stderr,
            )
            node = {**node, "init_args": {**_init_args(node), "model_path": path}}
    return _build_on_meta(cls, node, "policy")


def _build_on_meta(cls, node: dict, name: str):
    """``cls`` from a ``class_path`` / ``init_args`` node, through jsonargparse as `rlinf fit` builds it (typed
    settings, e.g. a LoRAConfig group, are converted), on the meta device (no file read); ``name`` prefixes the
    keys in jsonargparse's errors."""
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(cls, name)
    parsed = parser.parse_object({name: _init_args(node)})
    with _meta_init():
        return getattr(parser.instantiate(parsed), name)


def _build_component(registry, node: Any, what: str):
    """A world-model env's ``world_model`` / ``reward_model`` node built on the meta device."""
    if not isinstance(node, dict) or "class_path" not in node:
        raise ValueError(f"the world-model env has no {what}.class_path")
    return _build_on_meta(registry.resolve("world_model", node["class_path"]), node, what)


def world_model_memory(model_args: dict, chunk: int, accelerator: str = "gpu"):
    """The :class:`~rlinf_core.memory.meta_peak.WorldModelMemory` of the training env when it is a world-model env
    (``env.init_args`` has ``world_model`` and ``reward_model``), else None."""
    env = _init_args(model_args.get("env"))
    if "world_model" not in env:
        return None
    from rlinf_core.memory.meta_peak import world_model_env_memory
    from rlinf_core.plugins.manager import load_plugins

    device_type = "cpu" if str(accelerator) == "cpu" else "cuda"
    key = json.dumps(
        [
            _architecture_key(env["world_model"]),
            _architecture_key(env.get("reward_model")),
            env.get("num_envs", 1),
            chunk,
            device_type,
        ],
        sort_keys=True,
        default=str,
    )
    if key not in _WM_CACHE:  # a meta run of a 1-5 B model's chunk takes seconds; configs often share one
        registry = load_plugins(warn=False)
        wm = _build_component(registry, env["world_model"], "world_model")
        rm = _build_component(registry, env.get("reward_model"), "reward_model")
        size = wm.image_size or 256
        _WM_CACHE[key] = world_model_env_memory(wm, rm, int(env.get("num_envs", 1)), chunk, device_type, size)
    return _WM_CACHE[key]


_WM_CACHE: dict[str, Any] = {}


def _architecture_key(node: Any) -> Any:
    """A component node with paths that do not exist replaced by one marker: meta builds from placeholder paths
    (``/path/to/...``) all build the released architecture, so such configs share one measurement."""
    if isinstance(node, dict):
        return {k: _architecture_key(v) for k, v in node.items()}
    if isinstance(node, str) and node.startswith("/") and not Path(node).exists():
        return "<absent path>"
    return node


def _buffer_bytes_per_rank(model_args: dict, policy) -> float:
    """Rollout buffer in host RAM per rank: uint8 images, states and per-token records of every sample."""
    env = _init_args(model_args.get("env"))
    ro = model_args.get("rollout") or {}
    C = policy.num_action_chunks
    steps = int(ro.get("max_steps_per_rollout_epoch", 100))
    samples = int(ro.get("rollout_epoch", 1)) * (steps // C) * int(env.get("num_envs", 1))
    size = env.get("image_size", (env.get("render") or {}).get("image_size"))  # plugin envs group it under render:
    if size is None:
        size = policy.image_size or 224
    size = size if isinstance(size, (list, tuple)) else (size, size)
    views = int(policy.num_images_in_input or 1)
    image = views * size[0] * size[1] * 3
    per_token = C * policy.action_dim * (8 + 4 + 4)  # action token ids, old log-probs, advantages
    return samples * (image + 4 * 64 + per_token)


def config_stage(text: str) -> str:
    """``validate`` for eval-only configs (the header says ``rlinf validate``, never ``rlinf fit``), else ``fit``."""
    return "validate" if "rlinf validate" in text and "rlinf fit" not in text else "fit"


def estimate_config(
    path: str | Path,
    gpu_memory_gb: float | None = None,
    policy_overrides: dict | None = None,
    stage: str | None = None,
) -> tuple[MemoryEstimate, dict]:
    """The estimate for a config file (``policy_overrides``: policy init args, e.g. ``model_path``;
    ``stage``: ``fit`` or ``validate``, default from the config's header, :func:`config_stage`)."""
    text = Path(path).read_text()
    cfg = yaml.safe_load(text) or {}
    stage = stage or config_stage(text)
    model_args = _init_args(cfg.get("model") or {})
    if policy_overrides:
        policy_node = dict(model_args.get("policy") or {})
        policy_node["init_args"] = {**_init_args(policy_node), **policy_overrides}
        model_args["policy"] = policy_node
    cfg = {**cfg, "model": {**(cfg.get("model") or {}), "init_args": model_args}}
    return estimate_policy(build_policy(model_args), cfg, gpu_memory_gb, stage)


def estimate_policy(
    policy, cfg: dict, gpu_memory_gb: float | None = None, stage: str = "fit"
) -> tuple[MemoryEstimate, dict]:
    """The estimate for an already built (meta) ``policy`` and its config dict (``trainer``, ``model``)."""
    trainer = cfg.get("trainer") or {}
    model_args = _init_args(cfg.get("model") or {})
    if _class_name(model_args.get("algorithm")) == "GRPO":
        for p in policy.value_parameters():  # RLModule.setup freezes the unused critic
            p.requires_grad_(False)
    strategy = strategy_spec(trainer)
    counts = count_parameters(policy)
    profile = policy.memory_profile()
    stacks = list(profile.stacks) if profile is not None else []
    precision = str(trainer.get("precision", "32-true"))
    compute = policy.compute_dtype
    autocast = precision.endswith("-mixed") or (compute is not None and compute.itemsize == 2)
    env = _init_args(model_args.get("env"))
    ro = model_args.get("rollout") or {}
    stages = int(ro.get("pipeline_stage_num", 1))
    eval_envs = int(_init_args(model_args.get("eval_env")).get("num_envs", 0) or 0)
    rollout_batch = max(1, int(env.get("num_envs", 1)) // stages, eval_envs)
    devices = trainer.get("devices", 1)
    per_node = int(devices) if str(devices).isdigit() else 1
    gpu = gpu_memory_gb or float((cfg.get("memory") or {}).get("gpu_memory_gb") or DEFAULT_GPU_MEMORY_GB)
    wm = world_model_memory(model_args, int(policy.num_action_chunks), trainer.get("accelerator", "gpu"))
    est = estimate(
        counts,
        stacks,
        strategy=strategy,
        micro_batch_size=int(model_args.get("micro_batch_size", 32)),
        rollout_batch=rollout_batch,
        autocast=autocast,
        offload_optimizer_in_rollout=bool(model_args.get("offload_optimizer", False)),
        kv_cache_tokens=profile.kv_cache_tokens if profile else 0,
        kv_cache_width=profile.kv_cache_width if profile else 0,
        kv_cache_layers=profile.kv_cache_layers if profile else 0,
        other_bytes=profile.other_bytes if profile else None,
        buffer_bytes_per_node=_buffer_bytes_per_rank(model_args, policy) * per_node,
        gpu_memory_gib=gpu,
        training=stage != "validate",
        world_model=wm,
    )
    info = {
        "stage": stage,
        "policy": type(policy).__name__,
        "parameters": counts.total,
        "trainable": counts.trainable,
        "strategy": f"{strategy.kind} x{strategy.world_size}"
        + (f" ZeRO-{strategy.zero_stage}" if strategy.kind == "deepspeed" else ""),
        "precision": f"trainer {precision}, policy {policy.precision or 'n/a'}",
        "gradient_checkpointing": any(s.checkpointed for s in stacks),
    }
    if wm is not None:
        info["world_model"] = f"{wm.weight_bytes / GiB:.2f} GiB weights + {wm.peak[1] / GiB:.2f} GiB peak"
    return est, info


def memory_command(argv: list[str]) -> int:
    """``rlinf memory --config X [--gpu_memory_gb G]``: print the estimate; exit 1 if it does not fit."""
    parser = argparse.ArgumentParser(
        prog="rlinf memory", description="Print the per-GPU memory estimate of a training config."
    )
    parser.add_argument("--config", "-c", required=True, help="training config (YAML)")
    parser.add_argument(
        "--gpu_memory_gb",
        type=float,
        default=None,
        help="memory of one GPU (default: the config's memory.gpu_memory_gb, else 80)",
    )
    parser.add_argument("--model_path", default=None, help="override the policy's model_path (a checkpoint directory)")
    parser.add_argument(
        "--stage",
        choices=["fit", "validate"],
        default=None,
        help="fit (training) or validate (eval only); default: validate if the config's header "
        "runs it with `rlinf validate` only",
    )
    opts = parser.parse_args(argv)
    if not Path(opts.config).is_file():
        print(f"rlinf memory: error: config file {opts.config} not found", file=sys.stderr)
        return 2
    try:
        overrides = {"model_path": opts.model_path} if opts.model_path else None
        est, info = estimate_config(opts.config, opts.gpu_memory_gb, overrides, opts.stage)
    except (ValueError, OSError, KeyError, TypeError, PluginError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        hint = "" if isinstance(exc, NoPolicyError) else " (is model_path a real checkpoint directory?)"
        print(f"rlinf memory: error: {msg}{hint}", file=sys.stderr)
        return 2
    head = ", ".join(f"{k}: {v}" for k, v in info.items())
    print(est.format(f"{opts.config} — {head}"))
    return 0 if est.fits else 1
