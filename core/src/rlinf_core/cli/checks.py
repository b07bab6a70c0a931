"""The documented checks before ``rlinf fit`` starts (docs/reliability.md, "Bad input"): one line each.

Three moments, each before anything is built or written:

- :func:`check_config_files`: the raw ``--config`` files (encoding, top level, duplicate keys, YAML tags that
  would construct Python objects), before jsonargparse reads them;
- :func:`check_config`: the parsed config (machine and launcher, accelerator / precision, Lightning flags that
  the manual optimization ignores, nonsensical combinations, the memory the sizes need), before any class is
  instantiated;
- :func:`check_before_fit`: the built trainer and module against ``--ckpt_path`` and the output directories,
  before the launcher starts a rank or a process group.

An error raises ``ValueError`` (printed by :func:`rlinf_core.cli.error_report.run_cli` as ``rlinf: error: ...``). What
might be deliberate is a warning: one ``rlinf: warning: ...`` line on the console at start, also written to the
run's logger (TensorBoard text ``rlinf/warnings``) once the run starts.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from rlinf_core.cli.action_sizes import check_action_sizes
from rlinf_core.cli.combos import check_built_module, check_combinations
from rlinf_core.cli.eval_only import check_trainable_policy
from rlinf_core.cli.machine import check_lightning_optimizer, check_machine, start_rendezvous_watchdog
from rlinf_core.cli.signatures import check_signature_values

WARNINGS: list[str] = []


_PENDING: list[str] = []


def warn(message: str) -> None:
    """One warning line on the console once every check has passed (a refused start shows only its error), and
    in the run's log once training starts."""
    WARNINGS.append(message)
    _PENDING.append(message)


def flush_warnings() -> None:
    first_rank = all(os.environ.get(k, "0") == "0" for k in ("RANK", "LOCAL_RANK", "NODE_RANK"))
    for message in _PENDING if first_rank else []:  # once per run, not once per rank
        print(f"rlinf: warning: {message}", file=sys.stderr)
    _PENDING.clear()


class _DuplicateKey(ValueError):
    pass


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (PyYAML lets the last one win silently)."""


def _mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise _DuplicateKey(
                f"duplicate key {key!r} at line {key_node.start_mark.line + 1} (first at line "
                f"{seen[key] + 1}): the last one would silently win; keep one"
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def _config_paths(argv: list[str]) -> list[str]:
    paths = []
    for i, arg in enumerate(argv):
        if arg in ("--config", "-c") and i + 1 < len(argv):
            paths.append(argv[i + 1])
        elif arg.startswith("--config="):
            paths.append(arg.split("=", 1)[1])
    return paths


def read_config_file(path: str | Path) -> dict:
    """The mapping in a config file, or ``ValueError`` naming the file and what is wrong with it."""
    raw = Path(path).read_bytes()
    name = f"config {path}"
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or (len(raw) > 1 and raw[1:2] == b"\x00"):
        raise ValueError(f"{name} is UTF-16 encoded: save it as UTF-8")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{name} is not a UTF-8 text file (byte {exc.start}): is it a YAML config?") from None
    if "\x00" in text:
        raise ValueError(f"{name} holds NUL bytes: is it a YAML config?")
    if not text.strip() or all(ln.lstrip().startswith("#") for ln in text.splitlines() if ln.strip()):
        raise ValueError(f"{name} is empty: it needs at least `model:` (see `rlinf configs`)")
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as exc:
        raise ValueError(f"{name}: {exc}") from None
    except yaml.constructor.ConstructorError as exc:
        mark = exc.problem_mark
        where = f" (line {mark.line + 1})" if mark is not None else ""
        if "python/" in str(exc.problem):
            raise ValueError(
                f"{name}{where}: YAML tag {str(exc.problem).split()[-1]} refused: a config cannot "
                "construct Python objects; write the value plainly or use class_path"
            ) from None
        raise ValueError(f"{name}{where}: {exc.problem}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ValueError(f"{name}{where}: invalid YAML ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(data, dict):
        raise ValueError(
            f"{name}: the top level is a {type(data).__name__}, expected a mapping of sections (trainer:, model:, ...)"
        )
    for section in ("trainer", "model", "checkpoint"):
        if section in data and data[section] is not None and not isinstance(data[section], (dict, str)):
            raise ValueError(f"{name}: {section}: is a {type(data[section]).__name__}, expected a mapping")
    if isinstance(data.get("seed_everything"), bool) and data["seed_everything"]:
        raise ValueError(
            f"{name}: seed_everything: true would pick a random seed that no config records: give "
            "an integer seed (e.g. seed_everything: 0)"
        )
    _check_class_nodes(data, "", name)
    return data


def _check_class_nodes(node: Any, path: str, name: str) -> None:
    """Every ``class_path`` node: no unknown sibling keys, and a dotted path that imports."""
    if isinstance(node, list):
        for i, item in enumerate(node):
            _check_class_nodes(item, f"{path}[{i}]", name)
        return
    if not isinstance(node, dict):
        return
    if "class_path" in node:
        extra = sorted(map(str, set(node) - {"class_path", "init_args", "dict_kwargs", "__path__"}))
        if extra:
            raise ValueError(
                f"{name}: {path}.{extra[0]}: unknown key beside class_path / init_args (move it under {path}.init_args)"
            )
        cp = node["class_path"]
        if isinstance(cp, str) and "." in cp and path.rpartition(".")[2].split("[")[0] not in _PLUGIN_KEYS:
            _check_dotted(cp, f"{path}.class_path", name)
    for key, value in node.items():
        _check_class_nodes(value, f"{path}.{key}" if path else str(key), name)


_PLUGIN_KEYS = ("env", "eval_env", "policy", "world_model", "reward_model")  # resolved by the plugin registry


def _check_dotted(class_path: str, where: str, name: str) -> None:

    module_name, _, attr = class_path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"{name}: {where}: {class_path} cannot be imported ({exc})") from None
    if not hasattr(module, attr):
        close = difflib.get_close_matches(attr, [n for n in dir(module) if n[:1].isupper()], n=1)
        hint = f"; did you mean {module_name}.{close[0]}?" if close else ""
        raise ValueError(f"{name}: {where}: {module_name} has no {attr}{hint}")


def check_config_files(argv: list[str]) -> None:
    """:func:`read_config_file` for every ``--config`` that is a file (jsonargparse reports missing ones)."""
    WARNINGS.clear()
    _PENDING.clear()
    if "core" in {n.strip() for n in os.environ.get("RLINF_BLOCK_PLUGINS", "").split(",")}:
        warn(
            "RLINF_BLOCK_PLUGINS=core is ignored: the built-in core plugin (ReachEnv, TinyVLAPolicy, the toy "
            "world model) is always loaded; remove core from it"
        )
    for arg in argv:
        if arg.split("=", 1)[0] == "--seed_everything" and arg.partition("=")[2].lower() in ("true", "yes", "on"):
            raise ValueError(
                "--seed_everything true would pick a random seed that no config records: give an integer seed"
            )
    _ARGV[:] = argv
    from rlinf_core.cli.configs import missing_config_message

    for path in _config_paths(argv):
        if path.endswith((".yaml", ".yml", ".json")) and "\n" not in path and not Path(path).exists():  # not YAML text
            raise ValueError(missing_config_message(path))
    given = any(a.split("=")[0] in ("--model", "--model.class_path") for a in argv)
    files = [(path, read_config_file(path)) for path in _config_paths(argv) if Path(path).is_file()]
    models = [(path, data["model"]) for path, data in files if isinstance(data.get("model"), dict)]
    # layered configs (--config base.yaml --config overrides.yaml): one file naming model.class_path is enough
    if models and not given and not any("class_path" in model for _, model in models):
        _unknown_plugin_classes_first()
        raise ValueError(
            f"config {models[0][0]}: model: has no class_path (e.g. class_path: RLModule with its init_args)"
        )


_ARGV: list[str] = []


def _unknown_plugin_classes_first() -> None:
    """An unknown env / policy class is the more useful line (the plugin registry names the choices)."""
    from rlinf_core.cli.class_paths import check_config_class_paths
    from rlinf_core.plugins.manager import PluginError, load_plugins

    try:
        check_config_class_paths(_ARGV, load_plugins())
    except PluginError as exc:
        raise ValueError(str(exc)) from None


def check_config(config: Any, subcommand: str | None = "fit") -> None:
    """The parsed subcommand config (a jsonargparse ``Namespace``), before any class is instantiated (the start
    warnings are shown here for other subcommands than ``fit``, at :func:`check_before_fit` for ``fit``)."""
    _check_config(config, training=subcommand == "fit")
    if subcommand != "fit":
        flush_warnings()


def _check_config(config: Any, training: bool = True) -> None:
    cfg = config.as_dict() if hasattr(config, "as_dict") else dict(config)
    seed = cfg.get("seed_everything")
    if isinstance(seed, bool) and seed is not False:
        raise ValueError(
            "seed_everything: true would pick a random seed that no config records: give an "
            "integer seed (e.g. seed_everything: 0)"
        )
    trainer = cfg.get("trainer") or {}
    for key in ("default_root_dir",):
        if trainer.get(key) and Path(str(trainer[key])).is_file():
            raise ValueError(f"trainer.{key} {trainer[key]} is an existing file, not a directory")
    logger = trainer.get("logger")
    for item in logger if isinstance(logger, list) else [logger]:
        save_dir = ((item or {}).get("init_args") or {}).get("save_dir") if isinstance(item, dict) else None
        if save_dir and Path(str(save_dir)).is_file():
            raise ValueError(f"trainer.logger.init_args.save_dir {save_dir} is an existing file, not a directory")
    if training:
        check_trainable_policy(cfg)
    check_machine(trainer, warn, training)
    check_signature_values(cfg)
    check_lightning_optimizer(cfg)
    check_combinations(cfg, warn)
    check_action_sizes(cfg)
    check_memory(cfg)


def check_memory(cfg: dict) -> None:
    """Refuse, before anything is allocated, sizes whose rollout buffer (host RAM) or per-GPU peak does not
    fit, estimated by ``rlinf memory``'s estimator on a meta-device policy."""
    from rlinf_core.cli.memory import build_policy, estimate_policy

    model_args = (cfg.get("model") or {}).get("init_args") or {}
    if not isinstance(model_args, dict) or "policy" not in model_args or "env" not in model_args:
        return
    try:
        est, _ = estimate_policy(build_policy(model_args), cfg)
    except Exception:  # noqa: BLE001 - no estimate (e.g. a missing model_path): instantiation reports it
        return
    host = sum(v for _, v in est.host)
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    if host > ram:
        raise ValueError(
            f"the rollout buffer needs about {host:,.0f} GiB of host RAM per node, this machine has "
            f"{ram:,.0f} GiB: lower env.num_envs / rollout.max_steps_per_rollout_epoch / "
            "rollout_epoch (`rlinf memory --config ...` shows the estimate)"
        )
    accelerator = str((cfg.get("trainer") or {}).get("accelerator", "auto"))
    import torch

    if accelerator == "cpu" and est.peak + host > ram:
        raise ValueError(
            f"the run needs about {est.peak + host:,.0f} GiB of RAM (model, optimizer, activations and "
            f"rollout buffer), this machine has {ram:,.0f} GiB: lower the sizes (`rlinf memory "
            "--config ...` shows the rows)"
        )
    if accelerator in ("gpu", "cuda", "auto") and torch.cuda.is_available():
        gpu = torch.cuda.get_device_properties(0).total_memory / 1024**3
        if est.peak > gpu:
            raise ValueError(
                f"the run needs about {est.peak:,.1f} GiB per GPU, this GPU has {gpu:,.1f} GiB: "
                "see `rlinf memory --config ...` for the rows and lower the sizes"
            )


def check_before_fit(trainer: Any, model: Any, ckpt_path: str | None) -> None:
    """The built trainer and module against ``--ckpt_path``, then the run phase begins (errors inside training
    are bugs from here on); warnings go to the run's log."""
    from rlinf_core.cli.resume_checks import check_resume

    check_resume(trainer, model, ckpt_path)
    check_built_module(trainer, model, warn)
    for env in (getattr(model, "env", None), getattr(model, "eval_env", None)):
        check_inputs = getattr(getattr(env, "unwrapped", env), "check_inputs", None)
        if callable(check_inputs):  # files an env reads (a WorldModelEnv's initial states): a config error, in one line
            check_inputs()
    flush_warnings()
    start_rendezvous_watchdog(trainer)
    trainer.callbacks.insert(0, _RunPhase())  # first, so its on_fit_start runs before the other callbacks


def _run_phase_callback_base():
    from lightning.pytorch.callbacks import Callback

    return Callback


class _RunPhase(_run_phase_callback_base()):
    """Marks the training window (``on_fit_start`` .. ``on_train_end``) for :mod:`rlinf_core.cli.error_report` and
    logs the start warnings."""

    def on_fit_start(self, trainer, pl_module) -> None:  # after setup and the checkpoint restore
        from rlinf_core.cli import error_report

        error_report.PHASE = "run"
        experiment = getattr(trainer.logger, "experiment", None) if trainer.is_global_zero else None
        if WARNINGS and hasattr(experiment, "add_text"):
            experiment.add_text("rlinf/warnings", "\n\n".join(WARNINGS), 0)

    def on_train_end(self, trainer, pl_module) -> None:
        from rlinf_core.cli import error_report

        error_report.PHASE = "config"
