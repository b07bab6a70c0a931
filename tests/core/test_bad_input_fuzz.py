"""Bad input, one line: the shipped configs mutated (wrong types, unknown keys, out-of-range and negative values,
incompatible combinations, unknown classes, missing model paths, abbreviated flags), each run in-process through
``rlinf fit``: every case must exit with a status != 0 and end with one short ``rlinf: error:`` line, never a
traceback, and no failed start may leave a run directory behind."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import yaml

from rlinf.cli import main

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = [
    "configs/toy/reach_grpo.yaml", "configs/toy/reach_ppo.yaml", "configs/scale/reach_grpo_ddp_pipeline.yaml",
    "configs/openvla/reach_grpo_oft_tiny.yaml", "configs/maniskill/maniskill_ppo_openvla.yaml",
]
MAX_LINE = 400

# (name, path in the config, value): ``init_args`` levels are filled in by _set
MUTATIONS = [
    ("lr negative", "model.optim.lr", -1.0),
    ("lr text", "model.optim.lr", "fast"),
    ("lr inf", "model.optim.lr", math.inf),
    ("lr nan", "model.optim.lr", math.nan),
    ("clip_grad negative", "model.optim.clip_grad", -1.0),
    ("clip_grad zero", "model.optim.clip_grad", 0.0),
    ("clip_grad nan", "model.optim.clip_grad", math.nan),
    ("beta1 > 1", "model.optim.adam_beta1", 1.5),
    ("min_lr > lr", "model.optim.min_lr", 10.0),
    ("temperature 0", "model.rollout.temperature_train", 0.0),
    ("temperature < 0", "model.rollout.temperature_eval", -1.0),
    ("rollout_epoch 0", "model.rollout.rollout_epoch", 0),
    ("rollout_epoch negative", "model.rollout.rollout_epoch", -2),
    ("rollout length negative", "model.rollout.max_steps_per_rollout_epoch", -3),
    ("rollout length 0", "model.rollout.max_steps_per_rollout_epoch", 0),
    ("rollout length text", "model.rollout.max_steps_per_rollout_epoch", "long"),
    ("pipeline stages 0", "model.rollout.pipeline_stage_num", 0),
    ("global batch 0", "model.global_batch_size", 0),
    ("global batch negative", "model.global_batch_size", -128),
    ("micro batch 0", "model.micro_batch_size", 0),
    ("micro batch negative", "model.micro_batch_size", -4),
    ("global batch float", "model.global_batch_size", 12.5),
    ("num_envs negative", "model.env.num_envs", -4),
    ("num_envs 0", "model.env.num_envs", 0),
    ("num_envs text", "model.env.num_envs", "many"),
    ("group_size not dividing", "model.env.group_size", 7),
    ("group_size 0", "model.env.group_size", 0),
    ("episode steps 0", "model.env.max_episode_steps", 0),
    ("auto_reset text", "model.env.auto_reset", "maybe"),
    ("unknown model key", "model.bogus", 1),
    ("unknown env key", "model.env.bogus", 1),
    ("unknown trainer key", "trainer.bogus", 1),
    ("unknown optim key", "model.optim.bogus", 1),
    ("check_val 0", "trainer.check_val_every_n_epoch", 0),
    ("check_val negative", "trainer.check_val_every_n_epoch", -1),
    ("update_epoch 0", "model.algorithm.update_epoch", 0),
    ("update_epoch huge", "model.algorithm.update_epoch", 10**9),
    ("clip ratio negative", "model.algorithm.clip_ratio_low", -0.2),
    ("gamma > 1", "model.algorithm.gamma", 1.5),
    ("gae_lambda negative", "model.algorithm.gae_lambda", -0.1),
    ("unknown algorithm", "model.algorithm.class_path", "NoSuchAlgorithm"),
    ("unknown env", "model.env.class_path", "NoSuchEnv"),
    ("unknown policy", "model.policy.class_path", "NoSuchPolicy"),
    ("missing model path", "model.policy.model_path", "/nonexistent/openvla-7b"),
    ("devices text", "trainer.devices", "several"),
    ("max_epochs text", "trainer.max_epochs", "ten"),
]
FLAGS = [("abbreviated --seed", ["--seed=1"]), ("abbreviated --trainer.max_epoch", ["--trainer.max_epoch=3"]),
         ("unknown flag", ["--no_such_flag=1"]), ("bad yaml value", ["--model.init_args.optim.lr=[1"])]


def _set(cfg: dict, dotted: str, value) -> bool:
    """Set ``dotted`` in ``cfg``, descending through ``init_args``; False when the path does not apply."""
    keys = dotted.split(".")
    node = cfg
    for key in keys[:-1]:
        if not isinstance(node, dict):
            return False
        if key not in node and isinstance(node.get("init_args"), dict) and key in node["init_args"]:
            node = node["init_args"]
        if key not in node:
            if key in ("optim", "rollout") and "init_args" in node:
                node = node["init_args"]
                node[key] = node.get(key) or {}
            else:
                return False
        node = node[key]
    last = keys[-1]
    if isinstance(node, dict) and "init_args" in node and last != "class_path":
        node = node["init_args"]
    if not isinstance(node, dict):
        return False
    if last == "model_path" and last not in node:
        return False
    if last in ("gamma", "gae_lambda") and "PPO" not in str(cfg["model"]["init_args"]["algorithm"]["class_path"]):
        return False
    node[last] = value
    return True


def _cases(tmp_path: Path):
    for name in CONFIGS:
        base = yaml.safe_load((ROOT / name).read_text())
        for label, dotted, value in MUTATIONS:
            cfg = copy.deepcopy(base)
            if _set(cfg, dotted, value):
                path = tmp_path / f"{len(list(tmp_path.iterdir()))}.yaml"
                path.write_text(yaml.safe_dump(cfg))
                yield f"{name}: {label}", ["--config", str(path)]
        for label, flags in FLAGS:
            yield f"{name}: {label}", ["--config", str(ROOT / name), *flags]


def test_fuzzed_configs_fail_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a run directory would appear under runs/ here (or the configs' save_dir)
    cfgs = tmp_path / "cfgs"
    cfgs.mkdir()
    runs = tmp_path / "runs"  # the shipped configs log under runs/ (relative)
    bad, n = [], 0
    for label, args in _cases(cfgs):
        n += 1
        capsys.readouterr()
        with pytest.raises(SystemExit) as info:
            main(["fit", *args])
        err = capsys.readouterr().err
        lines = [ln for ln in err.splitlines() if ln.strip() and "LightningCLI's args" not in ln
                 and not ln.startswith("Seed set")]
        ok = info.value.code not in (0, None) and lines and lines[-1].startswith("rlinf: error: ")
        ok = ok and len(lines[-1]) <= MAX_LINE and "Traceback" not in err and "Namespace(" not in lines[-1]
        ok = ok and not any(ln.startswith("usage:") for ln in lines)
        if not ok:
            bad.append(f"{label}: exit {info.value.code}: {lines[-3:] if lines else err[-300:]}")
    assert n >= 200, f"only {n} fuzz cases"
    assert not bad, f"{len(bad)}/{n} not answered in one line:\n" + "\n".join(bad[:20])
    assert not runs.exists() or not any(runs.rglob("version_*")), "a failed start left a run directory"
