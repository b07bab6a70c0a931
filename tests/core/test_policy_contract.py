"""The Policy contract declares everything the core reads of a policy.

Scans the core's source with ``ast`` for reads of a policy (``policy.x``, ``self.policy.x``, ``getattr(policy, "x")``,
``hasattr(policy, "x")``, ``cls.x`` where ``cls`` is a policy class in ``rlinf memory`` / ``rlinf serve``) and
checks that :class:`rlinf_core.contracts.policy.Policy` (or ``nn.Module``) declares each name, with a default, so a
plugin never has to guess an attribute the core looks for. Cost: ~1 s (parses the core's files once).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rlinf_core.contracts.policy import Policy

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


def policy_reads(tree: ast.AST, rel: str) -> set[str]:
    """Names read of a policy in one module."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_policy(node.value, rel):
            out.add(node.attr)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and _is_policy(node.args[0], rel)
            and isinstance(node.args[1], ast.Constant)
        ):
            out.add(node.args[1].value)
    return out


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
    ],
)
def test_declared_attributes_have_defaults(name, default):
    assert getattr(Policy, name) == default


def test_declared_methods_default_to_nothing():
    assert Policy.released_standin("/path/to/openvla-7b", "/tmp/nowhere") is None
    policy = Policy()
    assert policy.memory_profile() is None and policy.unused_parameter_prefixes() == []
