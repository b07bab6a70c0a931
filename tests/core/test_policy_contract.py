"""The contracts declare everything the core reads of a policy, a world model and the RL loop.

Scans the core's source with ``ast`` for reads of a policy (``policy.x``, ``self.policy.x``, ``getattr(policy, "x")``,
``hasattr(policy, "x")``, ``cls.x`` where ``cls`` is a policy class in ``rlinf memory`` / ``rlinf serve``) and
checks that :class:`rlinf_core.contracts.policy.Policy` (or ``nn.Module``) declares each name, with a default, so a
plugin never has to guess an attribute the core looks for; the same for a world model
(:class:`rlinf_core.contracts.world_model.WorldModel`), and for what callbacks read of the LightningModule they are
given (:class:`rlinf_core.contracts.rl_loop.RLLoop`). Cost: ~1 s (parses the core's files once).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rlinf_core.contracts.policy import Policy
from rlinf_core.contracts.rl_loop import RLLoop
from rlinf_core.contracts.world_model import WorldModel

CORE = Path(__file__).resolve().parents[2] / "core" / "src" / "rlinf_core"
POLICY_NAMES = {"policy", "_policy"}
#: files whose ``cls`` is a policy class
POLICY_CLASS_FILES = {"cli/memory.py", "serve/loading.py"}
#: files whose ``policy`` is a config dict (``model.init_args.policy``), not a policy
CONFIG_DICT_FILES = {"cli/combos.py"}


def _is_policy(node: ast.AST, rel: str) -> bool:
    if isinstance(node, ast.Name):
        return node.id in POLICY_NAMES or (node.id == "cls" and rel in POLICY_CLASS_FILES)
    return isinstance(node, ast.Attribute) and node.attr in POLICY_NAMES


def _named(names: set[str]):
    def match(node: ast.AST, rel: str) -> bool:
        return (isinstance(node, ast.Name) and node.id in names) or (
            isinstance(node, ast.Attribute) and node.attr in names
        )

    return match


def reads(tree: ast.AST, rel: str, is_it=_is_policy) -> tuple[set[str], set[str]]:
    """Names read of the object ``is_it`` recognises in one module: ``(attributes read, names probed with getattr /
    hasattr)``."""
    out: set[str] = set()
    probed: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_it(node.value, rel):
            out.add(node.attr)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and is_it(node.args[0], rel)
            and isinstance(node.args[1], ast.Constant)
        ):
            probed.add(node.args[1].value)
    return out | probed, probed


def policy_reads(tree: ast.AST, rel: str) -> set[str]:
    """Names read of a policy in one module."""
    return reads(tree, rel)[0]


def test_the_scan_finds_duck_typed_reads():
    tree = ast.parse(
        "def f(policy, self):\n    policy.a\n    getattr(self.policy, 'b', None)\n    hasattr(policy, 'c')\n"
    )
    assert policy_reads(tree, "x.py") == {"a", "b", "c"}


def test_the_policy_contract_declares_every_attribute_the_core_reads():
    # an nn.Module's own attributes and a class's (__name__) included
    declared = set(dir(Policy())) | set(Policy.__annotations__) | set(dir(type))
    undeclared = {}
    for path in sorted(CORE.rglob("*.py")):
        rel = str(path.relative_to(CORE))
        if rel.startswith(("builtin/", "testing/")) or rel in CONFIG_DICT_FILES:  # a plugin, the kits, configs
            continue
        for name in policy_reads(ast.parse(path.read_text()), rel):
            if name not in declared:
                undeclared.setdefault(name, []).append(rel)
    assert not undeclared, f"the core reads these of a policy, but Policy does not declare them: {undeclared}"


@pytest.mark.parametrize(
    "name, default",
    [
        ("model_path", None),
        ("precision", None),
        ("num_images_in_input", 1),
        ("image_size", None),
        ("FLAT_SETTINGS", {}),
        ("compute_dtype", None),
        ("has_value_head", False),
        ("unnorm_key", None),
        ("model_type", None),
    ],
)
def test_declared_attributes_have_defaults(name, default):
    assert getattr(Policy, name) == default


def test_declared_methods_default_to_nothing():
    assert Policy.released_standin("/path/to/openvla-7b", "/tmp/nowhere") is None
    policy = Policy()
    assert policy.memory_profile() is None and policy.unused_parameter_prefixes() == []


def _core_files():
    for path in sorted(CORE.rglob("*.py")):
        rel = str(path.relative_to(CORE))
        if not rel.startswith(("builtin/", "testing/")):  # a plugin, the kits
            yield rel, ast.parse(path.read_text())


def test_the_world_model_contract_declares_every_attribute_the_core_reads():
    declared = set(dir(WorldModel)) | set(WorldModel.__annotations__) | set(dir(type))
    is_world_model = _named({"world_model", "_world_model"})
    undeclared = {}
    for rel, tree in _core_files():
        if rel == "memory/estimate.py":  # its world_model is a WorldModelMemory (memory cannot import the contracts)
            continue
        for name in reads(tree, rel, is_world_model)[0] - declared:
            undeclared.setdefault(name, []).append(rel)
    assert not undeclared, f"the core reads these of a world model, but WorldModel does not declare them: {undeclared}"


#: where a LightningModule is handed to code that serves any module (callbacks, resume checks, the multi-rank probe
#: of the tests); callbacks read nothing else of it
CALLBACK_FILES = ("callbacks/", "cli/resume_checks.py", "testing/multirank.py")


def test_callbacks_read_the_rl_loop_only_through_its_protocol():
    """No private reads of the module, no probing of a name :class:`RLLoop` declares (``isinstance(pl_module,
    RLLoop)`` says whether it is the RL loop), and nothing read that neither RLLoop nor LightningModule declares."""
    import lightning.pytorch as pl

    protocol = set(RLLoop.__annotations__) | {n for n in vars(RLLoop) if not n.startswith("_")}
    declared = protocol | set(dir(pl.LightningModule))
    is_module = _named({"pl_module", "module", "model"})
    bad = []
    for path in sorted(CORE.rglob("*.py")):
        rel = str(path.relative_to(CORE))
        if not rel.startswith(CALLBACK_FILES):
            continue
        read, probed = reads(ast.parse(path.read_text()), rel, is_module)
        bad += [f"{rel}: {name} (private)" for name in read if name.startswith("_") and name not in declared]
        bad += [f"{rel}: probes {name} (use isinstance(pl_module, RLLoop))" for name in probed & protocol]
        if not rel.startswith("callbacks/"):
            continue
        # trained_module: the supervised trainers' (callbacks may not import rlinf_core.supervised)
        bad += [
            f"{rel}: {name} (undeclared)" for name in read - declared - {"trained_module"} if not name.startswith("_")
        ]
    assert not bad, "callbacks read the module outside rlinf_core.contracts.rl_loop.RLLoop:\n" + "\n".join(bad)


def test_the_rl_module_is_an_rl_loop():
    from rlinf_core.builtin.toy_env import ReachEnv
    from rlinf_core.builtin.toy_policy import TinyVLAPolicy
    from rlinf_core.rl.algorithms.ppo import PPO
    from rlinf_core.rl.config import RolloutConfig
    from rlinf_core.rl.module import RLModule

    env = ReachEnv(num_envs=4, max_episode_steps=4, auto_reset=True)
    rollout = RolloutConfig(max_steps_per_rollout_epoch=4, show_progress=False)
    module = RLModule(env, TinyVLAPolicy(), PPO(), rollout=rollout, global_batch_size=8, micro_batch_size=8)
    assert isinstance(module, RLLoop) and module.train_envs == [] and module.step_metrics == {}
