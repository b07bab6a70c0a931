"""Every shipped GPU config builds its policy at full size on the meta device (no weights, no GPU).

Each config is parsed by the real ``rlinf`` CLI (LightningCLI + jsonargparse, plugins resolved by short
name) with ``model_path`` pointing at a released-form directory of the checkpoint it names (written by
``rlinf_policy_openvla.released``), and its policy is instantiated by jsonargparse under
:func:`rlinf_core.models.meta.meta_init`. Checks: the architecture is the released one (parameter names, shapes,
count) and LoRA adapters sit only on layers the forward runs. Add per-config checks with the
``built_policy`` fixture: ``policy, cfg = built_policy(config)`` (``cfg`` = the parsed config as a dict).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
ALL_GPU_CONFIGS = sorted(
    p
    for p in (ROOT / "configs").rglob("*.yaml")
    if not p.name.startswith("_") and (yaml.safe_load(p.read_text()).get("trainer") or {}).get("accelerator") == "gpu"
)
# RL / eval configs (a policy); the world-model training configs build their model on meta in their plugin's tests;
# a remote eval's policy (RemotePolicy) runs on its server: nothing to build here (tests/serve/test_remote_*.py)
GPU_CONFIGS = [
    p
    for p in ALL_GPU_CONFIGS
    if "policy" in (yaml.safe_load(p.read_text())["model"].get("init_args") or {})
    and yaml.safe_load(p.read_text())["model"]["init_args"]["policy"]["class_path"] != "RemotePolicy"
]
CHECKED_IN_PLUGIN_TESTS = {
    "wan/wan_world_model_fit.yaml": "plugins/rlinf-wm-wan/tests/test_wan_configs.py",
    "maniskill/remote_ood_plate25.yaml": "tests/serve/test_remote_policy.py",
}
POLICY = "model.init_args.policy.init_args"


PERFORMANCE_DOC = ROOT / "docs" / "performance.md"


def performance_table() -> dict[str, tuple[float | None, float | None]]:
    """docs/performance.md's table of shipped GPU configs: ``{config: (training step GiB, rollout GiB)}`` (a cell
    of several values, ``25.0 / 21.0 GiB``, gives one per config of the row's ``{a, b}``, in order)."""
    import re

    table = {}
    for line in PERFORMANCE_DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not line.startswith("| ") or len(cells) != 6 or ".yaml" not in cells[0]:
            continue
        pattern = cells[0].split(" (")[0]
        brace = re.search(r"\{(.*?)\}", pattern)
        names = (
            [pattern[: brace.start()] + n.strip() + pattern[brace.end() :] for n in brace.group(1).split(",")]
            if brace
            else [pattern]
        )
        columns = []
        for cell in cells[3:5]:
            values = [float(v) for v in re.findall(r"\d+\.\d+", re.sub(r"\(.*?\)", "", cell))]
            columns.append(values * len(names) if len(values) == 1 else values or [None] * len(names))
        for i, name in enumerate(names):
            table[name] = (columns[0][i], columns[1][i])
    return table


# eval configs of a policy exported by one of our fit configs (``<run name>/policy``): the kind it was trained from
EXPORTED_FROM = {"libero_130_grpo_openvlaoft": "rlinf-openvla-oft-libero-130"}


def _policy_class(config: Path) -> str:
    return yaml.safe_load(config.read_text())["model"]["init_args"]["policy"]["class_path"].rsplit(".", 1)[-1]


OPENPI_CONFIGS = [p for p in GPU_CONFIGS if _policy_class(p) == "OpenPIPolicy"]
OPENVLA_CONFIGS = [p for p in GPU_CONFIGS if p not in OPENPI_CONFIGS]


def released_kind(model_path: str) -> str:
    """The released checkpoint kind whose repo the config's ``model_path`` names (its last path component):
    an ``rlinf_policy_openvla.released`` kind, or an ``rlinf_policy_openpi.released`` name."""
    from rlinf_policy_openpi.released import RELEASED as OPENPI_RELEASED
    from rlinf_policy_openvla.released import RELEASED

    path = Path(model_path)
    if path.name == "policy" and path.parent.name in EXPORTED_FROM:
        return EXPORTED_FROM[path.parent.name]
    name = path.name
    for kind, spec in RELEASED.items():
        if any(repo.split("/")[-1] == name for repo in spec.repos):
            return kind
    if name in OPENPI_RELEASED:
        return name
    raise AssertionError(
        f"model_path {model_path!r} names no released checkpoint in rlinf_policy_openvla.released "
        "or rlinf_policy_openpi.released"
    )


@pytest.fixture(scope="session")
def released_dir(tmp_path_factory):
    """``released_dir(kind)``: a released-form model directory (one per kind per session)."""
    from rlinf_policy_openpi.released import RELEASED as OPENPI_RELEASED
    from rlinf_policy_openpi.released import write_released_dir as write_openpi_dir
    from rlinf_policy_openvla.released import write_released_dir

    dirs: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind in OPENPI_RELEASED:
            if kind not in dirs:
                dirs[kind] = write_openpi_dir(tmp_path_factory.mktemp("openpi"), kind)
            return dirs[kind]
        if kind not in dirs:
            first = next((d for k, d in dirs.items() if k not in OPENPI_RELEASED), None)  # same tokenizer files
            dirs[kind] = write_released_dir(tmp_path_factory.mktemp(kind), kind, tokenizer_from=first)
        return dirs[kind]

    return get


@pytest.fixture(scope="session")
def released_adapter(tmp_path_factory):
    from rlinf_policy_openvla.released import write_released_adapter

    return write_released_adapter(tmp_path_factory.mktemp("adapter"), "RLinf/RLinf-OpenVLAOFT-ManiSkill-Base-Lora")


def _parse(config: Path, overrides: list[str]) -> dict:
    """The config as the ``rlinf`` CLI parses it (no class is instantiated)."""
    from rlinf_core.cli import main as cli  # the module

    cli.load_plugins().import_classes()  # YAML short names resolve among imported classes, as in rlinf fit
    import lightning.pytorch as pl

    import rlinf_core.rl.algorithms  # noqa: F401 - short names as in cli.main
    import rlinf_core.rl.module  # noqa: F401
    from rlinf_core.cli.lightning import RLinfCLI, trainer_defaults

    class ParseOnly(RLinfCLI):
        def instantiate_classes(self) -> None:  # parsing and validation only
            pass

    from unittest import mock

    # the configs are written for GPU nodes: every pre-fit check runs except "this machine has the GPUs / the RAM"
    with (
        mock.patch("rlinf_core.cli.checks.check_machine", lambda *args, **kwargs: None),
        mock.patch("rlinf_core.cli.checks.check_memory", lambda cfg: None),
    ):
        parsed = ParseOnly(
            pl.LightningModule,
            None,
            subclass_mode_model=True,
            run=False,
            args=["--config", str(config), *overrides],
            seed_everything_default=0,
            trainer_defaults=trainer_defaults(),
        )
    return parsed.config.as_dict()


def _instantiate_policy(policy_cfg: dict):
    """The policy built by jsonargparse from its parsed ``class_path`` / ``init_args``, on the meta device."""
    from jsonargparse import ArgumentParser

    from rlinf_core import Policy
    from rlinf_core.models.meta import meta_init

    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--policy", type=Policy)
    with meta_init():
        return parser.instantiate(parser.parse_object({"policy": policy_cfg})).policy


_BUILT: dict = {}


@pytest.fixture
def built_policy(released_dir, released_adapter):
    """``built_policy(config) -> (policy, cfg)``: the config's policy at full size on meta, and the parsed config."""

    def build(config: Path):
        if config not in _BUILT:
            raw = yaml.safe_load(config.read_text())["model"]["init_args"]["policy"]["init_args"]
            overrides = [f"--{POLICY}.model_path={released_dir(released_kind(raw['model_path']))}"]
            if (raw.get("lora") or {}).get("path"):
                overrides.append(f"--{POLICY}.lora.path={released_adapter}")
            cfg = _parse(config, overrides)
            _BUILT[config] = (_instantiate_policy(cfg["model"]["init_args"]["policy"]), cfg)
        return _BUILT[config]

    return build


def _base_name(name: str) -> str | None:
    """Released tensor name of a (peft-wrapped) parameter; None for adapters and heads a checkpoint may lack."""
    if ".lora_" in name or name.startswith(("value_head.", "proprio_projector.")):
        return None
    return name.replace(".base_layer.", ".")


@pytest.mark.parametrize("config", OPENVLA_CONFIGS, ids=[str(p.relative_to(ROOT / "configs")) for p in OPENVLA_CONFIGS])
def test_gpu_config_builds_the_released_architecture(config, built_policy):
    from rlinf_core.models.meta import parameter_count
    from rlinf_policy_openvla.released import OPENVLA_7B_PARAMETERS, released_tensor_shapes

    policy, cfg = built_policy(config)
    init = cfg["model"]["init_args"]["policy"]["init_args"]
    vla = policy.vla
    assert all(p.is_meta for p in vla.parameters()), "a tensor was materialised"
    shapes = released_tensor_shapes()
    built = {_base_name(n): tuple(p.shape) for n, p in vla.named_parameters() if _base_name(n)}
    assert sorted(built) == sorted(shapes), "parameter names differ from the released checkpoint"
    assert {k: v for k, v in built.items() if v != shapes[k]} == {}
    assert sum(p.numel() for n, p in vla.named_parameters() if _base_name(n)) == OPENVLA_7B_PARAMETERS
    assert parameter_count(vla) >= OPENVLA_7B_PARAMETERS
    assert policy.has_value_head == bool(init.get("add_value_head"))

    # LoRA: adapters only on layers the forward runs, nothing trainable off the forward path
    unused = tuple(vla.unused_parameter_prefixes())
    trainable = [n for n, p in vla.named_parameters() if p.requires_grad]
    assert trainable and not [n for n in trainable if n.replace(".base_layer.", ".").startswith(unused)]
    lora = [n for n in trainable if ".lora_" in n]
    assert bool(lora) == bool(init.get("lora"))
    if lora:
        assert not [n for n in trainable if _base_name(n)], "LoRA run with trainable base weights"
        assert any(n.startswith("language_model.model.layers.31.") for n in lora)


@pytest.mark.parametrize("config", OPENPI_CONFIGS, ids=[str(p.relative_to(ROOT / "configs")) for p in OPENPI_CONFIGS])
def test_openpi_gpu_config_builds_the_released_architecture(config, built_policy):
    """π0 / π0.5 configs: the released architecture (openpi names and shapes, 3.24 B / 3.35 B parameters) on meta,
    PaliGemma frozen (``train_expert_only``), the critic where the config puts it."""
    from rlinf_policy_openpi.checkpoint import EMBED_KEY, UNUSED_KEYS
    from rlinf_policy_openpi.released import PI0_PARAMETERS, PI05_PARAMETERS, RELEASED, released_tensor_shapes

    policy, cfg = built_policy(config)
    init = cfg["model"]["init_args"]["policy"]["init_args"]
    raw = yaml.safe_load(config.read_text())["model"]["init_args"]["policy"]["init_args"]
    spec = RELEASED[released_kind(raw["model_path"])]  # cfg's model_path is the released-form directory
    model = policy.openpi
    assert policy.is_pi05 == spec.pi05 and all(p.is_meta for p in model.parameters()), "a tensor was materialised"
    heads = ("value_head.", "noise_head.")
    built = {n: tuple(p.shape) for n, p in model.state_dict().items() if not n.startswith(heads)}
    shapes = {k: v for k, v in released_tensor_shapes(spec.pi05).items() if k not in UNUSED_KEYS}
    assert set(built) == set(shapes) | {EMBED_KEY}, "parameter names differ from the released checkpoint"
    assert {k: v for k, v in shapes.items() if built[k] != v} == {}
    base = sum(p.numel() for n, p in model.named_parameters() if not n.startswith(heads))
    assert base == (PI05_PARAMETERS if spec.pi05 else PI0_PARAMETERS)
    assert policy.has_value_head
    assert model.value_head.mlp[0].in_features == (2048 if (init.get("critic") or {}).get("after_vlm") else 1024)
    assert (policy.num_action_chunks, policy.action_dim, policy.config.action_horizon) == (5, 4, spec.action_horizon)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and not [n for n in trainable if n.startswith("paligemma_with_expert.paligemma.")]
    assert any(n.startswith("paligemma_with_expert.gemma_expert.") for n in trainable)


def test_every_gpu_config_is_checked():
    others = {str(p.relative_to(ROOT / "configs")) for p in ALL_GPU_CONFIGS if p not in GPU_CONFIGS}
    assert others == set(CHECKED_IN_PLUGIN_TESTS)
    for config, test in CHECKED_IN_PLUGIN_TESTS.items():
        assert config.split("/")[-1] in (ROOT / test).read_text()
    assert len(GPU_CONFIGS) >= 10 and len(OPENPI_CONFIGS) >= 3
    assert {
        released_kind(yaml.safe_load(p.read_text())["model"]["init_args"]["policy"]["init_args"]["model_path"])
        for p in GPU_CONFIGS
    }  # each names a known released checkpoint (raises otherwise)


def test_released_dir_copy_is_a_full_model_dir(released_dir, tmp_path):
    path = released_dir("openvla-7b-rlvla-warmup")
    copy = Path(shutil.copytree(path, tmp_path / "copy"))
    assert (copy / "config.json").is_file() and (copy / "tokenizer.model").is_file()


@pytest.mark.parametrize("config", GPU_CONFIGS, ids=[str(p.relative_to(ROOT / "configs")) for p in GPU_CONFIGS])
def test_gpu_config_trains_fp32_weights_and_fits_its_gpu(config, built_policy):
    """bf16 compute with fp32 master weights, and the per-GPU memory estimate (``rlinf memory``) fits."""
    import torch

    from rlinf_core.cli.memory import config_stage, estimate_policy

    policy, cfg = built_policy(config)
    trainable = {p.dtype for p in policy.parameters() if p.requires_grad}
    assert trainable == {torch.float32}, f"trainable parameters in {trainable}: AdamW would round small updates away"
    if cfg["trainer"]["precision"] == "bf16-mixed":
        assert policy.compute_dtype == torch.bfloat16
        assert {p.dtype for p in policy.parameters() if not p.requires_grad} <= {torch.bfloat16}
    est, info = estimate_policy(policy, cfg, stage=config_stage(config.read_text()))
    assert est.fits, est.format(f"{config.name} {info}")
    if "world_model" in (cfg["model"]["init_args"]["env"].get("init_args") or {}):
        # the world model shares the GPU: its weights in both phases, its measured inference peak in the rollout
        wm_train = [gib for name, gib in est.train if name.startswith("world model: ")]
        wm_rollout = dict(est.rollout)
        peak = next(gib for name, gib in est.rollout if name.startswith("world model: inference peak"))
        assert len(wm_train) == 3 and sum(wm_train) > 2.0 and peak > 1.0, est.format(config.name)
        assert "world_model" in info and sum(v for k, v in wm_rollout.items() if k.startswith("world model")) > 3.0
    assert est.gpu_memory_gib == (cfg.get("memory") or {}).get("gpu_memory_gb", 80.0)
    shown = performance_table().get(str(config.relative_to(ROOT / "configs")))
    if shown is not None:  # docs/performance.md's row is what `rlinf memory` prints, to its 0.1 GiB
        for doc, total in zip(shown, (est.train_total, est.rollout_total)):
            assert doc is None or abs(doc - total) <= 0.051, (
                f"docs/performance.md shows {shown}, the estimate "
                f"is {est.train_total:.2f} / {est.rollout_total:.2f} GiB"
            )


def test_rlinf_memory_prints_a_shipped_config(released_dir, capsys):
    from rlinf_core.cli.main import main

    config = ROOT / "configs" / "libero" / "spatial.yaml"
    assert main(["memory", "--config", str(config), "--model_path", str(released_dir("openvla-oft-sft-libero"))]) == 0
    out = capsys.readouterr().out
    assert "fsdp2 x8" in out and "gathered policy for the rollout" in out and "fits" in out
    assert "with ckpt" in out and "parameters: 7541237184" in out
    # docs/performance.md's breakdown of this config shows the same two totals
    import re

    block = PERFORMANCE_DOC.read_text().split("Breakdown of `configs/libero/spatial.yaml`:")[1].split("```")[1]
    totals = lambda text: sorted(float(v) for v in re.findall(r"total +(\d+\.\d+) GiB", text))  # noqa: E731
    assert totals(block) == totals(out), (totals(block), totals(out))


def test_rlinf_memory_prints_the_world_model_of_a_shipped_config(released_dir, capsys):
    from rlinf_core.cli.main import main

    config = ROOT / "configs" / "wan" / "wan_libero_spatial_grpo_openvlaoft.yaml"
    assert main(["memory", "--config", str(config), "--model_path", str(released_dir("openvla-oft-sft-libero"))]) == 0
    out = capsys.readouterr().out
    assert (
        "world model: WanActionTransformer (bf16)" in out and "world model: inference peak (chunk of 8, 8 envs)" in out
    )
    assert "world_model: 10.72 GiB weights" in out and "fits" in out
