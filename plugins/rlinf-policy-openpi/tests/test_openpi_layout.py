"""The plugin's module structure: no import circles, no methods patched onto the model at run time."""

from __future__ import annotations

import ast
from pathlib import Path

import rlinf_policy_openpi

PACKAGE = Path(rlinf_policy_openpi.__file__).parent


def _import_graph() -> dict[str, set[str]]:
    """Module → the package's modules it imports anywhere (top-level or inside functions)."""
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    graph = {}
    for name in modules:
        deps = set()
        for node in ast.walk(ast.parse((PACKAGE / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rlinf_policy_openpi"):
                parts = node.module.split(".")
                deps |= {parts[1]} if len(parts) > 1 else {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.Import):
                deps |= {a.name.split(".")[1] for a in node.names if a.name.startswith("rlinf_policy_openpi.")}
        graph[name] = deps - {name}
    return graph


def test_no_import_circles():
    graph = _import_graph()
    assert graph["checkpoint"] == {"_modeling", "config"} and "checkpoint" not in graph["_modeling"]

    def cycle_from(start, node, path):
        for dep in sorted(graph[node]):
            if dep == start:
                return path + [dep]
            if dep not in path:
                found = cycle_from(start, dep, path + [dep])
                if found:
                    return found
        return None

    cycles = [c for m in sorted(graph) if (c := cycle_from(m, m, [m]))]
    assert not cycles, " ; ".join(" -> ".join(c) for c in cycles)


def test_unused_prefixes_are_a_model_method_not_a_patch(tiny):
    from rlinf_policy_openpi.policy import OpenPIPolicy
    from rlinf_policy_openpi.settings import CriticConfig

    last = "paligemma_with_expert.paligemma.model.language_model.layers.1.mlp."
    for after_vlm in (False, True):
        policy = OpenPIPolicy(
            str(tiny(pi05=True)), add_value_head=True, critic=CriticConfig(after_vlm=after_vlm), train_expert_only=False
        )
        model = policy.openpi
        assert "unused_parameter_prefixes" not in vars(model)  # the class's method, not an instance attribute
        assert (last in model.unused_parameter_prefixes()) is not after_vlm
        frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
        assert any(n.startswith(last) for n in frozen) is not after_vlm  # no gradient reaches them: frozen


def test_constructor_is_a_small_schema_of_config_groups():
    import dataclasses
    import inspect

    from rlinf_policy_openpi.policy import OpenPIPolicy
    from rlinf_policy_openpi.settings import FLAT_KEYS, GROUPS

    params = list(inspect.signature(OpenPIPolicy.__init__).parameters)[1:]
    assert len(params) <= 12, params
    assert {"noise", "critic", "inputs", "lora"} <= set(params)
    for group, cls in GROUPS.items():  # every RLinf flat name lands on a field of its group
        names = {f.name for f in dataclasses.fields(cls)}
        assert {f for g, f in FLAT_KEYS.values() if g == group} <= names
