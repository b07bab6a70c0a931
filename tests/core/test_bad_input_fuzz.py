"""Bad input, one line: the shipped configs mutated (wrong types, unknown keys, out-of-range and negative values,
incompatible combinations, unknown classes, missing model paths, abbreviated flags), each run in-process through
``rlinf fit``: every case must exit with a status != 0 and end with one short ``rlinf: error:`` line, never a
traceback, and no failed start may leave a run directory behind."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import lightning.pytorch  # noqa: F401 - binds its log handler to sys.stderr now, not to one test's capsys
import pytest
import yaml

from rlinf_core.cli.main import main

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


def _corruptions():
    """(name, edit of a copied tiny OpenVLA-OFT directory, extra flags, expected part of the error line)."""
    import torch
    from safetensors.torch import load_file, save_file

    def config(fn):
        def edit(d: Path):
            cfg = json.loads((d / "config.json").read_text())
            fn(cfg)
            (d / "config.json").write_text(json.dumps(cfg))
            (d / "dataset_statistics.json").unlink(missing_ok=True)  # norm stats only from config.json
        return edit

    def shard(fn):
        def edit(d: Path):
            path = d / "model-00001-of-00002.safetensors"
            state = load_file(str(path))
            fn(state)
            save_file(state, str(path))
        return edit

    def first(state, fn):
        key = sorted(state)[0]
        state[key] = fn(state[key])

    def rm(*names):
        return lambda d: [(d / n).unlink() for n in names]

    def write(name, data: bytes):
        return lambda d: (d / name).write_bytes(data)

    def truncate(d: Path):
        path = d / "model-00001-of-00002.safetensors"
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    tokenizer = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json",
                 "added_tokens.json")
    yield "config.json missing", rm("config.json"), [], "has no config.json"
    yield "config.json not JSON", write("config.json", b"{oops"), [], "config.json is not valid JSON"
    yield "config.json a list", write("config.json", b"[1, 2]"), [], "config.json holds a JSON list"
    yield "config.json empty", write("config.json", b""), [], "config.json is not valid JSON"
    yield "no text_config", config(lambda c: c.pop("text_config")), [], "has no text_config"
    yield "text_config wrong type", config(lambda c: c["text_config"].update(hidden_size="big")), [], \
        "text_config is not a valid Llama config"
    yield "unknown vision tower", config(lambda c: c.update(timm_model_ids=["x", "y"], timm_model_configs=None)), \
        [], "unknown vision tower 'x'"
    yield "n_action_bins text", config(lambda c: c.update(n_action_bins="many")), [], "n_action_bins must be an integer"
    yield "arch_specifier unknown", config(lambda c: c.update(arch_specifier="no-align+linear")), [], \
        "arch_specifier 'no-align+linear' not supported"
    yield "tokenizer missing", rm(*tokenizer), [], "has no tokenizer"
    yield "tokenizer.json corrupt", lambda d: (rm("tokenizer.model")(d), write("tokenizer.json", b"garbage")(d)), [], \
        "cannot load the tokenizer"
    yield "tokenizer_config.json corrupt", write("tokenizer_config.json", b"{oops"), [], "cannot load the tokenizer"
    yield "wrong unnorm_key", lambda d: None, ["--model.init_args.policy.init_args.unnorm_key=bridge_orig"], \
        "unnorm_key 'bridge_orig' not in the norm stats of"
    yield "norm stats missing", config(lambda c: c.pop("norm_stats")), [], "has no norm_stats; add them"
    yield "norm stats without action", config(lambda c: c["norm_stats"]["reach"].pop("action")), [], \
        "has no 'action' entry"
    yield "norm stats lack q01", config(lambda c: c["norm_stats"]["reach"]["action"].pop("q01")), [], \
        "statistics lack 'q01'/'q99'"
    yield "norm stats wrong length", config(lambda c: c["norm_stats"]["reach"]["action"].update(q01=[0.0])), [], \
        "q01/q99 must be equal-length"
    yield "norm stats of another action_dim", lambda d: None, ["--model.init_args.policy.init_args.action_dim=7"], \
        "action_dim=7 but norm_stats['reach'] has 2"
    yield "dataset_statistics.json not JSON", write("dataset_statistics.json", b"{oops"), [], \
        "dataset_statistics.json is not valid JSON"
    yield "preprocessor_config.json not JSON", write("preprocessor_config.json", b"{oops"), [], \
        "preprocessor_config.json is not valid JSON"
    yield "shard missing", rm("model-00002-of-00002.safetensors"), [], "model-00002-of-00002.safetensors is missing"
    yield "index missing", rm("model.safetensors.index.json"), [], "no weights in"
    yield "index not JSON", write("model.safetensors.index.json", b"{oops"), [], "index.json is not valid JSON"
    yield "index without weight_map", write("model.safetensors.index.json", b"{}"), [], 'has no "weight_map"'
    yield "all weights missing", rm("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                    "model.safetensors.index.json"), [], "no weights in"
    yield "shard truncated", truncate, [], "model-00001-of-00002.safetensors is truncated or corrupt"
    yield "shard empty", write("model-00001-of-00002.safetensors", b""), [], "is truncated or corrupt"
    yield "shard header garbage", write("model-00001-of-00002.safetensors", b"\xff" * 64), [], \
        "is truncated or corrupt"
    yield "tensor of wrong shape", shard(lambda s: first(s, lambda t: torch.zeros(3, 5))), [], \
        "has shape (3, 5) in the checkpoint but"
    def transpose(state):
        key = next(k for k in sorted(state) if state[k].dim() == 2 and state[k].shape[0] != state[k].shape[1])
        state[key] = state[key].t().contiguous()

    yield "tensor transposed", shard(transpose), [], "in the checkpoint but"
    yield "config.json sizes do not match the weights", config(lambda c: c["text_config"].update(hidden_size=32)), \
        [], "in the model built from config.json"
    yield "tensor missing from its shard", shard(lambda s: s.pop(sorted(s)[-1])), [], "tensors not found in the shards"
    yield "tensor of another model", shard(lambda s: s.update({"foo.bar": torch.zeros(1)})), [], \
        "do not belong to an OpenVLA model, e.g. 'foo.bar'"
    yield "integer tensor", shard(lambda s: first(s, lambda t: t.to(torch.int64))), [], "expected a floating-point"
    yield "NaN weights", shard(lambda s: first(s, lambda t: torch.full_like(t, math.nan))), [], "holds NaN or inf"
    yield "LoRA adapter as model_path", lambda d: (rm("config.json")(d), write("adapter_config.json", b"{}")(d)), [], \
        "is a LoRA adapter directory"


def test_corrupt_model_directories_fail_in_one_line(tmp_path, capsys, monkeypatch):
    """A tiny OpenVLA-OFT directory in the released layout, corrupted one way per case (config.json, tokenizer,
    norm stats, index, shards, tensor shapes / dtypes / values), run through ``rlinf fit``: one line naming the
    cause, exit status 2, no run directory."""
    pytest.importorskip("rlinf_policy_openvla")
    import shutil

    from rlinf_policy_openvla.make_tiny import make_tiny

    base = make_tiny(tmp_path / "base", action_dim=2, norm_keys=["reach"])
    monkeypatch.chdir(tmp_path)
    bad, n = [], 0
    for i, (label, edit, flags, expected) in enumerate(_corruptions()):
        model = tmp_path / f"m{i}"
        shutil.copytree(base, model)
        edit(model)
        args = ["fit", "--config", str(ROOT / "configs/openvla/reach_grpo_oft_tiny.yaml"),
                f"--model.init_args.policy.init_args.model_path={model}", "--trainer.max_epochs=0", *flags]
        n += 1
        capsys.readouterr()
        try:
            code = main(args)
        except SystemExit as exc:
            code = exc.code
        err = capsys.readouterr().err
        lines = [ln for ln in err.splitlines() if ln.strip()]
        ok = code == 2 and lines and lines[-1].startswith("rlinf: error: ") and expected in lines[-1]
        ok = ok and len(lines[-1]) <= MAX_LINE and "Traceback" not in err
        ok = ok and not any(ln.startswith(("usage:", "rlinf: error:")) for ln in lines[:-1])
        if not ok:
            bad.append(f"{label}: exit {code}: {lines[-3:] if lines else err[-300:]}")
    assert n >= 30, f"only {n} corrupt-directory cases"
    assert not bad, f"{len(bad)}/{n} not answered in one line:\n" + "\n".join(bad)
    assert not (tmp_path / "runs").exists(), "a failed start left a run directory"
