"""The plugin pages stay true: the reference's generated tables (the Observation fields, the kits' settings) are what
the code says, the pages' code imports only from the documented places, the reference's ReachEnv facts hold, and the
migration table maps to modules that exist. ``python tests/core/test_plugin_guide.py`` rewrites the generated tables
in place."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "plugin_reference.md"  # the generated tables live here
PAGES = [ROOT / "docs" / f"plugin_{name}.md" for name in ("tutorial", "reference", "migration")]
GENERATED = re.compile(r"(<!-- generated: (\w+) .*?-->\n)(.*?)(<!-- end generated -->)", re.S)
ENV_SOURCES = [ROOT / "core/src/rlinf_core/builtin/toy_env.py", ROOT / "core/src/rlinf_core/envs/world_model_env.py",
               *sorted(ROOT.glob("plugins/*/src/*/env.py"))]  # fmt: skip


def _docstring_attributes(cls: type) -> dict[str, str]:
    """``Attributes:`` of a Google-style class docstring: name -> one-line text."""
    out: dict[str, str] = {}
    section = inspect.getdoc(cls).split("Attributes:", 1)[1]
    for line in section.splitlines():
        m = re.match(r"    (\w+): (.*)", line)
        if m:
            out[m.group(1)] = m.group(2)
        elif line.startswith("        ") and out:
            out[list(out)[-1]] += " " + line.strip()
    return out


def observe_fields() -> dict[str, dict[str, str]]:
    """Per env class whose ``_observe`` builds an Observation: field -> "always" or "by setting" (a conditional)."""
    out: dict[str, dict[str, str]] = {}
    for path in ENV_SOURCES:
        for cls in ast.walk(ast.parse(path.read_text())):
            if not isinstance(cls, ast.ClassDef):
                continue
            for fn in cls.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == "_observe":
                    for call in ast.walk(fn):
                        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "Observation":
                            out[cls.name] = {k.arg: "by setting" if isinstance(k.value, ast.IfExp) else "always"
                                             for k in call.keywords}  # fmt: skip
    return out


def observation_table() -> str:
    from rlinf_core.contracts.observation import Observation

    text, filled = _docstring_attributes(Observation), observe_fields()
    rows = ["| field | what | default | filled by |", "|---|---|---|---|"]
    for f in dataclasses.fields(Observation):
        default = "required" if f.default is dataclasses.MISSING else repr(f.default)
        envs = [f"{env} ({how})" if how != "always" else env for env, got in filled.items()
                if (how := got.get(f.name))]  # fmt: skip
        rows.append(f"| `{f.name}` | {text[f.name].replace('``', '`')} | {default} | {', '.join(envs)} |")
    return "\n".join(rows) + "\n"


def kit_settings(cls: type) -> list[tuple[str, str, str]]:
    """``(attribute, default, text)`` of every attribute a kit class documents with ``#:`` in its body."""
    lines, out, comment = inspect.getsource(cls).splitlines(), [], []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#:"):
            comment.append(stripped[2:].strip())
            continue
        m = re.match(r"    (\w+)\s*(?::[^=]*)?(?:=|$)", line)
        if comment and m:
            value = getattr(cls, m.group(1), None)
            default = "required" if m.group(1) not in vars(cls) else f"`{value!r}`"
            out.append((m.group(1), default, " ".join(comment)))
        comment = []
    return out


def _markdown(rst: str) -> str:
    """Docstring markup as Markdown: ``x`` and :meth:`x` become `x`."""
    return re.sub(r":\w+:`([^`]+)`", r"`\1`", rst.replace("``", "`"))


def kit_table() -> str:
    from rlinf_core.testing.conformance import EnvPluginTests, PolicyPluginTests
    from rlinf_core.testing.world_model_conformance import RewardModelPluginTests, WorldModelPluginTests

    rows = ["| kit | setting | default | what |", "|---|---|---|---|"]
    for kit in (EnvPluginTests, PolicyPluginTests, WorldModelPluginTests, RewardModelPluginTests):
        for name, default, text in kit_settings(kit):
            rows.append(f"| `{kit.__name__}` | `{name}` | {default} | {_markdown(text)} |")
        for name, fn in vars(kit).items():
            if callable(fn) and not name.startswith(("_", "test_")):
                stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
                args = list(inspect.signature(fn).parameters.values())[1:]
                params = ", ".join(stars.get(p.kind, "") + p.name for p in args)
                doc = _markdown((inspect.getdoc(fn) or "").split("\n\n")[0].replace("\n", " "))
                rows.append(f"| `{kit.__name__}` | `{name}({params})` | method | {doc} |")
    return "\n".join(rows) + "\n"


TABLES = {"observation": observation_table, "kits": kit_table}


def _generated(text: str) -> dict[str, str]:
    return {m.group(2): m.group(3) for m in GENERATED.finditer(text)}


def test_the_generated_tables_are_what_the_code_says():
    found = _generated(DOC.read_text())
    assert set(found) == set(TABLES), (
        f"docs/plugin_reference.md has generated tables {sorted(found)}, expected {sorted(TABLES)}"
    )
    for name, render in TABLES.items():
        assert found[name] == render(), f"the {name} table drifted: run `python {Path(__file__).relative_to(ROOT)}`"


def test_every_observation_field_is_listed_and_every_env_observe_is_seen():
    from rlinf_core.contracts.observation import Observation

    table = observation_table()
    assert all(f"| `{f.name}` |" in table for f in dataclasses.fields(Observation))
    filled = observe_fields()
    assert {"ReachEnv", "WorldModelEnv", "LiberoEnv", "ManiSkillEnv", "MetaWorldEnv"} <= set(filled), filled
    assert filled["ReachEnv"] == {"main_images": "always", "task_descriptions": "always", "states": "always"}


def test_the_kit_tables_list_the_settings_the_kits_read():
    table = kit_table()
    for name in (
        "image_size",
        "state_dim",
        "batch_size",
        "temperature",
        "env_class",
        "env_kwargs",
        "chunk",
        "eval_grid_states",
        "make_policy()",
        "make_observation(batch_size)",
        "instructions",
    ):
        assert f"`{name}" in table, name


def test_the_guide_imports_only_from_the_documented_places():
    from tests.core.test_import_graph import _allowed_for_plugins, _imports

    bad = []
    for page in PAGES:
        for block in re.findall(r"```python\n(.*?)```", page.read_text(), re.S):
            for base, names in _imports(ast.parse(block), "guide", False):
                if base.split(".")[0] == "rlinf_core" and not _allowed_for_plugins(base):
                    bad.append(f"{page.name}: from {base} import {', '.join(names)}")
    assert not bad, bad


def test_the_migration_table_maps_old_imports_to_names_that_exist():
    import importlib

    section = (ROOT / "docs" / "plugin_migration.md").read_text()
    rows = re.findall(r"^\| `(rlinf[\w.]*)` \| `(rlinf_core[\w.]*)` \| (.*) \|$", section, re.M)
    assert len(rows) >= 15, rows
    for old, new, names in rows:
        assert old.split(".")[0] == "rlinf", old
        target = importlib.import_module(new)
        for name in re.findall(r"`(\w+)`", names):
            assert hasattr(target, name), f"the migration table sends {old} to {new}, which has no {name}"


def test_reach_env_is_as_the_guide_says():
    import numpy as np
    import torch

    from rlinf_core.builtin.toy_env import ReachEnv

    section = DOC.read_text().split("### The built-in `ReachEnv`", 1)[1].split("\n## ", 1)[0]
    env = ReachEnv(num_envs=3, trials_per_task=20, max_episode_steps=5)
    obs = env.reset()
    assert "`action_dim = 2`" in section and env.action_dim == 2
    assert tuple(obs.main_images.shape) == (3, 32, 32, 3) and obs.main_images.dtype == torch.uint8
    targets = env.targets[np.arange(3), env.task]
    np.testing.assert_allclose(obs.states.numpy(), np.concatenate([env.pos, targets], 1))  # [x, y, tx, ty]
    assert "states `[x, y, tx, ty]`" in section and obs.states.dtype == torch.float32
    assert env.task_names == ["reach_red", "reach_green", "reach_blue"] and env.num_reset_states == 60
    assert "`reach_red`, `reach_green`, `reach_blue`" in section and "3 × `trials_per_task`" in section
    assert obs.task_descriptions[0] == "move to the red square" and '"move to the red square"' in section
    env.pos[:] = targets  # on the target: success, reward 1, terminated
    out = env.chunk_step(torch.zeros(3, 1, 2))
    assert out.rewards[:, 0].tolist() == [1.0] * 3 and out.terminations[:, 0].all() and out.success[:, 0].all()
    env.close()


def test_the_size_check_error_shown_is_the_one_rlinf_fit_prints():
    import pytest

    from rlinf_core.cli.action_sizes import check_action_sizes

    shown = re.search(r"```text\nrlinf: error: (model\.init_args\.env\.init_args\.world_model.*)\n```", DOC.read_text())
    cfg = {
        "model": {
            "init_args": {
                "env": {"init_args": {"world_model": {"init_args": {"action_dim": 3}}}},
                "policy": {"init_args": {"action_dim": 2}},
            }
        }
    }
    with pytest.raises(ValueError) as caught:
        check_action_sizes(cfg)
    assert shown and shown.group(1) == str(caught.value)


def write() -> None:
    text = DOC.read_text()
    text = GENERATED.sub(lambda m: m.group(1) + TABLES[m.group(2)]() + m.group(4), text)
    DOC.write_text(text)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "core" / "src"))
    write()
