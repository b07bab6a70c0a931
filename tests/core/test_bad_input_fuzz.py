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
    "configs/toy/reach_grpo.yaml",
    "configs/toy/reach_ppo.yaml",
    "configs/scale/reach_grpo_ddp_pipeline.yaml",
    "configs/openvla/reach_grpo_oft_tiny.yaml",
    "configs/maniskill/maniskill_ppo_openvla.yaml",
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
FLAGS = [
    ("abbreviated --seed", ["--seed=1"]),
    ("abbreviated --trainer.max_epoch", ["--trainer.max_epoch=3"]),
    ("unknown flag", ["--no_such_flag=1"]),
    ("bad yaml value", ["--model.init_args.optim.lr=[1"]),
]


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


# The keys that the same validators answer whatever the env and policy (optimizer, rollout, batch sizes, trainer,
# command-line flags) are mutated in these two configs (the built-in policy's and a plugin policy's); the env,
# algorithm and policy keys in every config.
SHARED_KEY_CONFIGS = {"configs/toy/reach_grpo.yaml", "configs/openvla/reach_grpo_oft_tiny.yaml"}
PER_CONFIG_KEYS = ("model.env.", "model.algorithm.", "model.policy.")


def _cases(tmp_path: Path):
    for name in CONFIGS:
        base = yaml.safe_load((ROOT / name).read_text())
        every = name in SHARED_KEY_CONFIGS
        for label, dotted, value in MUTATIONS:
            cfg = copy.deepcopy(base)
            if (every or dotted.startswith(PER_CONFIG_KEYS)) and _set(cfg, dotted, value):
                path = tmp_path / f"{len(list(tmp_path.iterdir()))}.yaml"
                path.write_text(yaml.safe_dump(cfg))
                yield f"{name}: {label}", ["--config", str(path)]
        for label, flags in FLAGS if every else ():
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
        lines = [
            ln
            for ln in err.splitlines()
            if ln.strip() and "LightningCLI's args" not in ln and not ln.startswith("Seed set")
        ]
        ok = info.value.code not in (0, None) and lines and lines[-1].startswith("rlinf: error: ")
        ok = ok and len(lines[-1]) <= MAX_LINE and "Traceback" not in err and "Namespace(" not in lines[-1]
        ok = ok and not any(ln.startswith("usage:") for ln in lines)
        if not ok:
            bad.append(f"{label}: exit {info.value.code}: {lines[-3:] if lines else err[-300:]}")
    assert n >= 130, f"only {n} fuzz cases"
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

    tokenizer = (
        "tokenizer.json",
        "tokenizer.model",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "added_tokens.json",
    )
    yield "config.json missing", rm("config.json"), [], "has no config.json"
    yield "config.json not JSON", write("config.json", b"{oops"), [], "config.json is not valid JSON"
    yield "config.json a list", write("config.json", b"[1, 2]"), [], "config.json holds a JSON list"
    yield "config.json empty", write("config.json", b""), [], "config.json is not valid JSON"
    yield "no text_config", config(lambda c: c.pop("text_config")), [], "has no text_config"
    yield (
        "text_config wrong type",
        config(lambda c: c["text_config"].update(hidden_size="big")),
        [],
        "text_config is not a valid Llama config",
    )
    yield (
        "unknown vision tower",
        config(lambda c: c.update(timm_model_ids=["x", "y"], timm_model_configs=None)),
        [],
        "unknown vision tower 'x'",
    )
    yield "n_action_bins text", config(lambda c: c.update(n_action_bins="many")), [], "n_action_bins must be an integer"
    yield (
        "arch_specifier unknown",
        config(lambda c: c.update(arch_specifier="no-align+linear")),
        [],
        "arch_specifier 'no-align+linear' not supported",
    )
    yield "tokenizer missing", rm(*tokenizer), [], "has no tokenizer"
    yield (
        "tokenizer.json corrupt",
        lambda d: (rm("tokenizer.model")(d), write("tokenizer.json", b"garbage")(d)),
        [],
        "cannot load the tokenizer",
    )
    yield "tokenizer_config.json corrupt", write("tokenizer_config.json", b"{oops"), [], "cannot load the tokenizer"
    yield (
        "wrong unnorm_key",
        lambda d: None,
        ["--model.init_args.policy.init_args.actions.unnorm_key=bridge_orig"],
        "unnorm_key 'bridge_orig' not in the norm stats of",
    )
    yield "norm stats missing", config(lambda c: c.pop("norm_stats")), [], "has no norm_stats; add them"
    yield (
        "norm stats without action",
        config(lambda c: c["norm_stats"]["reach"].pop("action")),
        [],
        "has no 'action' entry",
    )
    yield (
        "norm stats lack q01",
        config(lambda c: c["norm_stats"]["reach"]["action"].pop("q01")),
        [],
        "statistics lack 'q01'/'q99'",
    )
    yield (
        "norm stats wrong length",
        config(lambda c: c["norm_stats"]["reach"]["action"].update(q01=[0.0])),
        [],
        "q01/q99 must be equal-length",
    )
    yield (
        "norm stats of another action_dim",
        lambda d: None,
        ["--model.init_args.policy.init_args.actions.action_dim=7"],
        "action_dim=7 but norm_stats['reach'] has 2",
    )
    yield (
        "dataset_statistics.json not JSON",
        write("dataset_statistics.json", b"{oops"),
        [],
        "dataset_statistics.json is not valid JSON",
    )
    yield (
        "preprocessor_config.json not JSON",
        write("preprocessor_config.json", b"{oops"),
        [],
        "preprocessor_config.json is not valid JSON",
    )
    yield "shard missing", rm("model-00002-of-00002.safetensors"), [], "model-00002-of-00002.safetensors is missing"
    yield "index missing", rm("model.safetensors.index.json"), [], "no weights in"
    yield "index not JSON", write("model.safetensors.index.json", b"{oops"), [], "index.json is not valid JSON"
    yield "index without weight_map", write("model.safetensors.index.json", b"{}"), [], 'has no "weight_map"'
    yield (
        "all weights missing",
        rm("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"),
        [],
        "no weights in",
    )
    yield "shard truncated", truncate, [], "model-00001-of-00002.safetensors is truncated or corrupt"
    yield "shard empty", write("model-00001-of-00002.safetensors", b""), [], "is truncated or corrupt"
    yield "shard header garbage", write("model-00001-of-00002.safetensors", b"\xff" * 64), [], "is truncated or corrupt"
    yield (
        "tensor of wrong shape",
        shard(lambda s: first(s, lambda t: torch.zeros(3, 5))),
        [],
        "has shape (3, 5) in the checkpoint but",
    )

    def transpose(state):
        key = next(k for k in sorted(state) if state[k].dim() == 2 and state[k].shape[0] != state[k].shape[1])
        state[key] = state[key].t().contiguous()

    yield "tensor transposed", shard(transpose), [], "in the checkpoint but"
    yield (
        "config.json sizes do not match the weights",
        config(lambda c: c["text_config"].update(hidden_size=32)),
        [],
        "in the model built from config.json",
    )
    yield "tensor missing from its shard", shard(lambda s: s.pop(sorted(s)[-1])), [], "tensors not found in the shards"
    yield (
        "tensor of another model",
        shard(lambda s: s.update({"foo.bar": torch.zeros(1)})),
        [],
        "do not belong to an OpenVLA model, e.g. 'foo.bar'",
    )
    yield "integer tensor", shard(lambda s: first(s, lambda t: t.to(torch.int64))), [], "expected a floating-point"
    yield "NaN weights", shard(lambda s: first(s, lambda t: torch.full_like(t, math.nan))), [], "holds NaN or inf"
    yield (
        "LoRA adapter as model_path",
        lambda d: (rm("config.json")(d), write("adapter_config.json", b"{}")(d)),
        [],
        "is a LoRA adapter directory",
    )


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
        args = [
            "fit",
            "--config",
            str(ROOT / "configs/openvla/reach_grpo_oft_tiny.yaml"),
            f"--model.init_args.policy.init_args.model_path={model}",
            "--trainer.max_epochs=0",
            *flags,
        ]
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


# ---------------------------------------------------------------- the kinds of bad input, one by one
TOY = "configs/toy/reach_grpo.yaml"
FAST = ["--trainer.max_epochs=0"]


def _toy(**edits) -> dict:
    """The toy GRPO config with ``a__b__c=value`` edits (``init_args`` levels written out)."""
    cfg = yaml.safe_load((ROOT / TOY).read_text())
    for dotted, value in edits.items():
        keys = dotted.split("__")
        node = cfg
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return cfg


def _tiny_ckpt(path: Path, hidden_size: int = 64, critic: bool = False) -> Path:
    """A Lightning-style checkpoint of a TinyVLA RLModule (PPO's when ``critic``), written with torch.save."""
    import torch

    from rlinf_core.builtin.toy_policy import TinyVLAPolicy

    policy = TinyVLAPolicy(hidden_size=hidden_size, add_value_head=critic)
    groups = [{"name": "actor", "lr": 0.01, "params": [0]}] + (
        [{"name": "critic", "lr": 0.01, "params": [1]}] if critic else []
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "epoch": 0,
            "global_step": 1,
            "state_dict": {f"policy.{k}": v for k, v in policy.state_dict().items()},
            "optimizer_states": [{"state": {}, "param_groups": groups}],
        },
        path,
    )
    return path


def _kind_cases(tmp: Path):
    """(kind, label, args, expected part of the one error line). Files are written under ``tmp``."""
    n = iter(range(10**6))

    def cfg_file(cfg, raw: bytes | None = None) -> str:
        path = tmp / "cfgs" / f"{next(n)}.yaml"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(raw if raw is not None else yaml.safe_dump(cfg).encode())
        return str(path)

    def fit(cfg=None, *flags, raw=None):
        return ["--config", cfg_file(cfg if cfg is not None else _toy(), raw), *FAST, *flags]

    pol, env, ro = (
        "model__init_args__policy__init_args__",
        "model__init_args__env__init_args__",
        "model__init_args__rollout__",
    )
    # 1. what the machine / launcher cannot give (num_nodes without a launcher: also as a subprocess below)
    yield 1, "devices 512", fit(_toy(trainer__devices=512)), "trainer.devices: 512 but this machine has"
    yield 1, "devices list beyond", fit(_toy(trainer__devices=[0, 999])), "names a device this machine lacks"
    yield 1, "num_nodes 2", fit(_toy(trainer__num_nodes=2)), "torchrun --nnodes"
    yield 1, "num_nodes 4 flag", fit(None, "--trainer.num_nodes=4"), "needs a launcher"
    # 2. sizes: ranges at parse time, products by the memory estimate
    yield (
        2,
        "action chunks 0",
        fit(_toy(**{pol + "num_action_chunks": 0})),
        "policy.init_args.num_action_chunks must be in",
    )
    yield 2, "bins 1", fit(_toy(**{pol + "num_bins": 1})), "policy.init_args.num_bins must be in"
    yield 2, "bins huge", fit(_toy(**{pol + "num_bins": 10**8})), "policy.init_args.num_bins must be in"
    yield 2, "hidden 0", fit(_toy(**{pol + "hidden_size": 0})), "policy.init_args.hidden_size must be in"
    yield 2, "image size 0", fit(_toy(**{env + "image_size": 0})), "env.init_args.image_size must be in"
    yield 2, "num_envs huge", fit(_toy(**{env + "num_envs": 2**30})), "GiB of host RAM per node, this machine has"
    yield 2, "rollout steps huge", fit(_toy(**{ro + "max_steps_per_rollout_epoch": 2**30})), "GiB of host RAM"
    # 3. YAML structure, named by key path
    bad = _toy()
    bad["model"]["bogus"] = 1
    yield 3, "sibling of model class_path", fit(bad), "model.bogus: unknown key beside class_path"
    bad = _toy()
    bad["model"]["init_args"]["env"]["num_env"] = 8
    yield 3, "sibling of env class_path", fit(bad), "model.init_args.env.num_env: unknown key beside class_path"
    yield (
        3,
        "null num_envs",
        fit(_toy(**{env + "num_envs": None})),
        "model.init_args.env.init_args.num_envs: null given, expected int",
    )
    yield 3, "null hidden_size", fit(_toy(**{pol + "hidden_size": None})), "policy.init_args.hidden_size: null given"
    yield (
        3,
        "misspelled callback",
        fit(_toy(trainer__callbacks=[{"class_path": "lightning.pytorch.callbacks.LearningRateMonitr"}])),
        "did you mean lightning.pytorch.callbacks.LearningRateMonitor",
    )
    yield (
        3,
        "dotted path missing",
        fit(_toy(trainer__callbacks=[{"class_path": "nope_pkg.mod.Cls"}])),
        "trainer.callbacks[0].class_path: nope_pkg.mod.Cls cannot be imported",
    )
    yield 3, "unknown profiler", fit(_toy(trainer__profiler="fancy")), "trainer.profiler: unknown profiler 'fancy'"
    for label, text in (("garbage", b"\x00\xffgarbage"), ("a list", b"[1, 2]"), ("bins text", None)):
        model = tmp / f"tiny_{label.replace(' ', '_')}"
        model.mkdir()
        cfg_json = {
            "action_dim": 2,
            "num_action_chunks": 2,
            "num_bins": "many",
            "hidden_size": 64,
            "state_dim": 4,
            "add_value_head": False,
        }
        (model / "config.json").write_bytes(text if text is not None else json.dumps(cfg_json).encode())
        yield (
            3,
            f"model dir config.json {label}",
            fit(_toy(**{pol + "model_path": str(model)})),
            f"{model / 'config.json'}",
        )
    # 4. combinations: errors (the warnings are in test_combinations_warn_in_one_line_at_start)
    yield 4, "GRPO greedy", fit(_toy(**{ro + "do_sample": False})), "every advantage is zero"
    yield (
        4,
        "GRPO critic warm-up",
        fit(_toy(model__init_args__optim={"lr": 0.01, "critic_warmup_steps": 5})),
        "optim.critic_warmup_steps: 5 with GRPO",
    )
    yield (
        4,
        "accumulate_grad_batches",
        fit(_toy(trainer__accumulate_grad_batches=4)),
        "set model.init_args.global_batch_size",
    )
    yield 4, "gradient_clip_val", fit(_toy(trainer__gradient_clip_val=0.5)), "set model.init_args.optim.clip_grad"
    yield 4, "gradient_clip_algorithm", fit(_toy(trainer__gradient_clip_algorithm="value")), "optim.clip_grad"
    # 5. seed_everything: true, non-finite floats
    yield 5, "seed true", fit(_toy(seed_everything=True)), "seed_everything: true would pick a random seed"
    yield 5, "seed true flag", fit(None, "--seed_everything=true"), "seed_everything true would pick"
    yield (
        5,
        "lr .inf",
        fit(raw=(ROOT / TOY).read_bytes().replace(b"lr: 1.0e-2", b"lr: .inf")),
        "optim.lr must be a finite number",
    )
    yield (
        5,
        "step_size .nan",
        fit(
            raw=yaml.safe_dump(_toy())
            .encode()
            .replace(b"auto_reset: false", b"auto_reset: false\n        step_size: .nan")
        ),
        "step_size: nan given, expected a finite",
    )
    # 6. malformed files
    for label, raw, expected in (
        ("empty", b"", "is empty"),
        ("comments only", b"# nothing\n", "is empty"),
        ("list top level", b"- trainer\n- model\n", "the top level is a list"),
        ("scalar top level", b"fit\n", "the top level is a str"),
        ("trainer a list", b"trainer: [1, 2]\nmodel: {class_path: RLModule}\n", "trainer: is a list"),
        ("binary garbage", bytes(range(256)) * 4, "is not a UTF-8 text file"),
        ("UTF-16", (ROOT / TOY).read_text().encode("utf-16"), "is UTF-16 encoded"),
        ("model without class_path", b"model:\n  init_args: {global_batch_size: 8}\n", "model: has no class_path"),
        ("duplicate key", (ROOT / TOY).read_bytes() + b"seed_everything: 3\n", "duplicate key 'seed_everything'"),
        ("invalid YAML", b"model: [1\n", "invalid YAML"),
    ):
        yield 6, label, ["--config", cfg_file(None, raw), *FAST], expected
    # 7. checkpoints that do not fit (written under tmp/ckpts)
    corrupt = tmp / "ckpts" / "corrupt.ckpt"
    corrupt.parent.mkdir(exist_ok=True)
    corrupt.write_bytes(b"PK\x03\x04" + b"\x00" * 64)
    yield 7, "corrupt ckpt zip", fit(None, f"--ckpt_path={corrupt}"), "is truncated or corrupt"
    yield (
        7,
        "PPO ckpt into GRPO",
        fit(None, f"--ckpt_path={_tiny_ckpt(tmp / 'ckpts/ppo.ckpt', critic=True)}"),
        "holds a PPO run but the config trains with GRPO",
    )
    yield (
        7,
        "other model size",
        fit(None, f"--ckpt_path={_tiny_ckpt(tmp / 'ckpts/h32.ckpt', hidden_size=32)}"),
        "it is a checkpoint of another model size",
    )
    yield 7, "last with none", fit(None, "--ckpt_path=last"), "ckpt_path: last has no checkpoint"
    # 8. accelerators
    yield 8, "gpu without one", fit(_toy(trainer__accelerator="gpu")), "trainer.accelerator: gpu but this machine"
    yield 8, "mps without one", fit(_toy(trainer__accelerator="mps")), "mps but MPS"
    yield 8, "devices 0", fit(_toy(trainer__devices=0)), "trainer.devices: 0 asks for no device"
    yield 8, "DeepSpeed on CPU", fit(_toy(trainer__strategy="deepspeed")), "runs on CUDA GPUs only"
    yield 8, "64-true", fit(_toy(trainer__precision="64-true")), "trainer.precision: 64-true is not supported"
    # 9. outputs that collide (the earlier run's files are checked unchanged by the test)
    earlier = tmp / "runs" / "reach_grpo" / "version_0"
    earlier.mkdir(parents=True)
    (earlier / "config.yaml").write_text("earlier run\n")
    yield (
        9,
        "pinned logger.version",
        fit(None, "--trainer.logger.init_args.version=0"),
        "holds an earlier run's outputs",
    )
    (tmp / "a_file").write_text("keep me\n")
    yield (
        9,
        "default_root_dir a file",
        fit(_toy(trainer__default_root_dir=str(tmp / "a_file"))),
        "trainer.default_root_dir",
    )
    yield 9, "logger save_dir a file", fit(None, f"--trainer.logger.init_args.save_dir={tmp / 'a_file'}"), "save_dir"
    other = tmp / "other_run" / "checkpoints"
    _tiny_ckpt(other / "epoch=0-step=1.ckpt", hidden_size=48)
    yield (
        9,
        "resume in place with another model",
        fit(None, f"--ckpt_path={other.parent}"),
        "checkpoint of another model size",
    )


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_each_kind_of_bad_input_fails_in_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
    """Every kind of bad input (1–9; 10 below): exit status 2, one ``rlinf: error:`` line naming the key or file,
    no traceback, and the directory (earlier runs, checkpoints, configs) unchanged."""
    monkeypatch.chdir(tmp_path)
    for var in ("TORCHELASTIC_RUN_ID", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    cases = list(_kind_cases(tmp_path))
    before = _tree(tmp_path)
    bad, kinds = [], {}
    for kind, label, args, expected in cases:
        kinds[kind] = kinds.get(kind, 0) + 1
        capsys.readouterr()
        try:
            code = main(["fit", *args])
        except SystemExit as exc:
            code = exc.code
        err = capsys.readouterr().err
        lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("Seed set")]
        errors = [ln for ln in lines if ln.startswith("rlinf: error: ")]
        ok = code == 2 and len(errors) == 1 and errors[0] == lines[-1] and expected in errors[0]
        ok = ok and len(errors[0]) <= MAX_LINE and "Traceback" not in err
        if not ok:
            bad.append(f"[{kind}] {label}: exit {code}: {lines[-2:] if lines else err[-300:]}")
        after = _tree(tmp_path)
        if after != before:
            bad.append(f"[{kind}] {label}: wrote {sorted(set(after) ^ set(before))[:3]} or changed a file")
            before = after
    assert all(kinds.get(k, 0) >= 3 for k in range(1, 10)), kinds
    assert not bad, f"{len(bad)}/{len(cases)}:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "edits, flags, expected",
    [
        ({"model__init_args__micro_batch_size": 256}, [], "micro_batch_size (256) is larger than global_batch_size"),
        ({"model__init_args__micro_batch_size": 48}, [], "is not a multiple of micro_batch_size (48)"),
        ({"model__init_args__optim": {"lr": 0.01, "value_lr": 0.001}}, [], "optim.value_lr is ignored with GRPO"),
        ({"model__init_args__optim": {"lr": 0.01, "lr_warmup_steps": 10**6}}, [], "longer than the whole run"),
        ({"model__init_args__rollout__max_steps_per_rollout_epoch": 12}, [], "shorter than env.max_episode_steps"),
        (
            {
                "model__init_args__algorithm__init_args__filter_rewards": True,
                "model__init_args__algorithm__init_args__rewards_lower_bound": 0.3,
                "model__init_args__algorithm__init_args__rewards_upper_bound": 0.35,
            },
            [],
            "keeps no group of success scores",
        ),
        ({"trainer__precision": "16-mixed"}, [], "trainer.precision: 16-mixed on CPU"),
    ],
)
def test_combinations_warn_in_one_line_at_start(tmp_path, capsys, monkeypatch, edits, flags, expected):
    """What might be deliberate starts, with one ``rlinf: warning:`` line on the console (docs/reliability.md)."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_toy(**edits)))
    assert main(["fit", "--config", str(path), *FAST, *flags]) == 0
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("rlinf: warning: ")]
    assert len(warnings) == 1 and expected in warnings[0], warnings


def test_a_python_yaml_tag_is_refused_before_anything_is_built(tmp_path, capsys, monkeypatch):
    """Kind 6, security: ``!!python/object/apply`` would run code while loading; it is refused first. The tag
    would create a directory, and no trainer or module may have been constructed."""
    import lightning.pytorch as pl

    built = []
    monkeypatch.setattr(pl.Trainer, "__init__", lambda self, *a, **k: built.append("trainer") or None)
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "pwned"
    text = (
        (ROOT / TOY)
        .read_text()
        .replace("seed_everything: 0", f"seed_everything: !!python/object/apply:os.mkdir ['{marker}']")
    )
    for i, tagged in enumerate((text, text.replace("max_epochs: 80", "max_epochs: !!python/name:os.system"))):
        path = tmp_path / f"tag{i}.yaml"
        path.write_text(tagged)
        with pytest.raises(SystemExit) as info:
            main(["fit", "--config", str(path)])
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert info.value.code == 2 and "refused: a config cannot construct Python objects" in last, last
    assert not marker.exists() and not built and not (tmp_path / "runs").exists()


def _fake_plugins(tmp_path, monkeypatch, plugins: dict[str, str]):
    """Entry points of fake plugins (name -> module source) added to the installed ones for ``rlinf fit``."""
    from importlib.metadata import EntryPoint

    import rlinf_core.plugins.manager as manager

    eps = []
    for name, source in plugins.items():
        (tmp_path / f"{name}.py").write_text(source)
        eps.append(EntryPoint(name=name, value=name, group="rlinf"))
    monkeypatch.syspath_prepend(str(tmp_path))
    real = manager.entry_points
    monkeypatch.setattr(manager, "entry_points", lambda group: [*real(group=group), *eps])
    monkeypatch.setattr(manager, "_REGISTRY", None)


BROKEN = "import not_a_real_module_xyz\n"
TYPO = "from rlinf_core.plugins.hookspecs import hookimpl\n@hookimpl\ndef register_env(register):\n    pass\n"
NOT_ENV = (
    "from rlinf_core.plugins.hookspecs import hookimpl\nclass NotAnEnv:\n    pass\n"
    "@hookimpl\ndef register_envs(register):\n    register(NotAnEnv)\n"
)


@pytest.mark.parametrize(
    "source, needed, expected",
    [
        (BROKEN, False, "plugin '{name}' from "),
        (TYPO, False, "unknown hook 'register_env'"),
        (NOT_ENV, False, "registered <class '{name}.NotAnEnv'> as env"),
        (BROKEN, True, "{name}"),
        (NOT_ENV, True, "{name}"),
    ],
)
def test_broken_plugins_warn_when_not_needed_and_fail_in_one_line_when_needed(
    tmp_path, capsys, monkeypatch, source, needed, expected
):
    """Kind 10: one warning line at start when the run does not use the plugin; one error line naming the
    plugin (and what to do) when it does."""
    monkeypatch.chdir(tmp_path)
    name = f"fake_plugin_{len(source)}_{int(needed)}"  # one module name per case (sys.modules keeps imports)
    expected = expected.format(name=name)
    _fake_plugins(tmp_path, monkeypatch, {name: source})
    flags = ["--model.init_args.env.class_path=NotAnEnv"] if needed else []
    try:
        code = main(["fit", "--config", str(ROOT / TOY), *FAST, *flags])
    except SystemExit as exc:
        code = exc.code
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("rlinf: ")]
    if needed:
        assert code == 2 and lines[-1].startswith("rlinf: error: ") and expected in lines[-1], lines
        assert "rlinf plugins" in lines[-1] and not (tmp_path / "runs").exists()
    else:
        assert code == 0 and [ln for ln in lines if ln.startswith("rlinf: warning: ")], lines
        assert expected in next(ln for ln in lines if ln.startswith("rlinf: warning: ")), lines


def test_blocking_the_core_plugin_warns_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RLINF_BLOCK_PLUGINS", "core")
    assert main(["fit", "--config", str(ROOT / TOY), *FAST]) == 0
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("rlinf: warning: ")]
    assert len(warnings) == 1 and "RLINF_BLOCK_PLUGINS=core is ignored" in warnings[0], warnings


def _rlinf(args: list[str], env: dict, cwd: Path, timeout: int = 300):
    import os
    import subprocess
    import sys

    base = {
        k: v
        for k, v in os.environ.items()
        if k
        not in ("TORCHELASTIC_RUN_ID", "SLURM_NTASKS", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
    }
    return subprocess.run(
        [sys.executable, "-m", "rlinf_core.cli.main", "fit", "--config", str(ROOT / TOY), *FAST, *args],
        env={**base, "OMP_NUM_THREADS": "1", **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def test_num_nodes_without_a_launcher_and_a_rendezvous_that_cannot_complete_do_not_hang(tmp_path):
    """Kind 1, the hang: as the user runs it (a real process, under a timeout). Without a launcher, two nodes
    fail at once with the torchrun line; under a launcher whose other node never comes, the rendezvous times
    out with a message (RLINF_RENDEZVOUS_TIMEOUT) instead of waiting forever."""
    import socket

    out = _rlinf(["--trainer.num_nodes=2"], {}, tmp_path, timeout=300)
    last = out.stderr.strip().splitlines()[-1]
    assert out.returncode == 2 and "torchrun --nnodes" in last and "Traceback" not in out.stderr, out.stderr[-800:]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        "WORLD_SIZE": "2",
        "RANK": "0",
        "LOCAL_RANK": "0",
        "NODE_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "RLINF_RENDEZVOUS_TIMEOUT": "3",
    }
    out = _rlinf(
        [
            "--trainer.num_nodes=2",
            "--trainer.devices=1",
            "--trainer.max_epochs=1",
            f"--trainer.default_root_dir={tmp_path}",
        ],
        env,
        tmp_path,
        timeout=300,
    )
    last = out.stderr.strip().splitlines()[-1]
    assert out.returncode == 2 and "rendezvous of 2 ranks" in last and "did not complete within 3 s" in last, (
        out.stderr[-800:]
    )
    assert not any(tmp_path.iterdir()), "a start that never formed its process group wrote files"


def _planted(cls, name):
    original = getattr(cls, name)

    def bug(self, *args, **kwargs):
        original(self, *args, **kwargs)
        return torch_zeros() + None  # the planted bug: TypeError, which counts as bad input while parsing

    return bug


def torch_zeros():
    import torch

    return torch.zeros(1)


@pytest.mark.parametrize("where", ["policy act", "env step", "callback"])
def test_a_bug_inside_training_keeps_its_traceback_under_one_line_naming_the_module(
    tmp_path, capsys, monkeypatch, where
):
    """A TypeError planted in a policy's act, an env's step or a callback is a bug, not bad input:
    no exit 2, the exception propagates with its traceback, headed by ``rlinf: bug in <module> during training
    (not a config error)``. A bad value while the config is parsed stays one line."""
    from rlinf_core.builtin.toy_env import ReachEnv
    from rlinf_core.builtin.toy_policy import TinyVLAPolicy
    from rlinf_core.callbacks.summary import RunSummary

    monkeypatch.chdir(tmp_path)
    cls, name = {
        "policy act": (TinyVLAPolicy, "act"),
        "env step": (ReachEnv, "_step"),
        "callback": (RunSummary, "on_fit_start"),
    }[where]
    monkeypatch.setattr(cls, name, _planted(cls, name))
    small = [
        "--trainer.max_epochs=1",
        "--model.init_args.env.init_args.num_envs=8",
        "--trainer.enable_checkpointing=false",
        "--model.init_args.global_batch_size=16",
        "--model.init_args.micro_batch_size=16",
    ]
    with pytest.raises(TypeError):
        main(["fit", "--config", str(ROOT / TOY), *small])
    err = capsys.readouterr().err
    head = [ln for ln in err.splitlines() if ln.startswith("rlinf: ")]
    assert head and head[-1].startswith(f"rlinf: bug in {__name__} during training (not a config error)"), head
    assert not any(ln.startswith("rlinf: error:") for ln in head)
    with pytest.raises(SystemExit) as info:  # bad input in the same session: still one line
        main(["fit", "--config", str(ROOT / TOY), "--model.init_args.global_batch_size=many"])
    assert info.value.code == 2 and capsys.readouterr().err.strip().splitlines()[-1].startswith("rlinf: error:")


def test_start_warnings_are_also_in_the_run_log(tmp_path, capsys, monkeypatch):
    """The start warnings reach the run's TensorBoard log (text ``rlinf/warnings``) once training starts."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.chdir(tmp_path)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_toy(model__init_args__micro_batch_size=12)))
    small = [
        "--trainer.max_epochs=1",
        "--model.init_args.env.init_args.num_envs=8",
        "--trainer.enable_checkpointing=false",
        "--model.init_args.global_batch_size=16",
        "--model.init_args.export_policy=false",
    ]
    assert main(["fit", "--config", str(path), *small]) == 0
    assert "is not a multiple of micro_batch_size (12)" in capsys.readouterr().err
    events = EventAccumulator(str(next((tmp_path / "runs").rglob("events.out.tfevents.*")).parent)).Reload()
    tags = events.Tags()["tensors"]
    assert "rlinf/warnings/text_summary" in tags, tags
    text = events.Tensors("rlinf/warnings/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "is not a multiple of micro_batch_size (12)" in text
