"""``rlinf new env|policy|world-model NAME``: write a plugin package that already installs, is listed by ``rlinf
plugins``, passes its conformance kit and trains with ``rlinf fit`` on the config it ships.

The files come from ``new_templates/`` (package data): ``{{key}}`` markers are replaced by the names derived from
NAME. Nothing is overwritten: an existing target directory is refused.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

TEMPLATES = Path(__file__).with_name("new_templates")
NAME = re.compile(r"[a-z][a-z0-9_]*\Z")
COMMENT_COLUMN = 40  # the README's shell comments start here, or further right for a long NAME


@dataclass(frozen=True)
class Kind:
    """What ``rlinf new KIND`` writes: distribution prefix, template files → paths, the classes, the config."""

    prefix: str
    modules: tuple[str, ...]  # templates in new_templates/<kind>/ written to src/<package>/<module>.py
    classes: tuple[str, ...]  # class name suffixes (after the CamelCase NAME)
    config: str
    description: str
    run: str  # the README's fit command ({name}: NAME) ...
    comment: str  # ... its comment ...
    expect: str  # ... and what it prints (measured on the template as written)


_EXPECT = """## What the example should print

    OMP_NUM_THREADS=1 rlinf fit --config {name}/{config}

runs 40 RL steps ({cpu} s of CPU after the start-up) and evaluates the greedy policy on the {episodes} held-out
initial states after steps 20 and 40; among its lines:

    step 1/40 | success_once {first} | ...
    eval after step 20: success_once {mid} over {episodes} episodes, ...
    eval after step 40: success_once {last} over {episodes} episodes, ...

Before training, `rlinf validate --config {name}/{config}` gives {before} on the same evaluation. Measured on the
template as `rlinf new` writes it, on an AMD EPYC CPU (torch's AVX-512 kernels; another CPU's rounding can move a
run by an episode or two). When you replace the toy parts, a run like this one is the check that the loop still
learns.
"""
EXPECT_ENV = _EXPECT.format_map(
    {
        "cpu": 16,
        "episodes": 16,
        "first": "47.4%",
        "mid": "87.5%",
        "last": "93.8%",
        "before": "31.2 %",
        "name": "{name}",
        "config": "{config}",
    }
)
EXPECT_POLICY = _EXPECT.format_map(
    {
        "cpu": 13,
        "episodes": 24,
        "first": "18.2%",
        "mid": "100.0%",
        "last": "100.0%",
        "before": "12.5 %",
        "name": "{name}",
        "config": "{config}",
    }
)
EXPECT_WORLD_MODEL = _EXPECT.format_map(
    {
        "cpu": 13,
        "episodes": 16,
        "first": "21.9%",
        "mid": "75.0%",
        "last": "100.0%",
        "before": "25.0 %",
        "name": "{name}",
        "config": "{config}",
    }
)

KINDS = {
    "env": Kind(
        "rlinf-env-",
        ("env",),
        ("Env",),
        "ppo.yaml",
        "an rlinf env plugin.",
        "rlinf fit --config {name}/ppo.yaml",
        "PPO with core's TinyGaussianPolicy",
        EXPECT_ENV,
    ),
    "policy": Kind(
        "rlinf-policy-",
        ("policy",),
        ("Policy",),
        "ppo.yaml",
        "an rlinf policy plugin.",
        "rlinf fit --config {name}/ppo.yaml",
        "PPO on core's ReachEnv",
        EXPECT_POLICY,
    ),
    "world-model": Kind(
        "rlinf-wm-",
        ("world_model", "init_states"),
        ("WorldModel", "RewardModel"),
        "grpo.yaml",
        "an rlinf world-model plugin.",
        "rlinf fit --config {name}/grpo.yaml",
        "GRPO inside the world model",
        EXPECT_WORLD_MODEL,
    ),
}


def plan(kind: str, name: str) -> dict[str, str]:
    """``{relative path: text}`` of the package ``rlinf new KIND NAME`` writes."""
    spec = KINDS[kind]
    package = spec.prefix.replace("-", "_") + name
    values = {
        "kind": kind,
        "name": name,
        "dist": spec.prefix + name.replace("_", "-"),
        "package": package,
        "Class": "".join(part.capitalize() for part in name.split("_")),
        "description": "",
    }
    values["description"] = f"{values['Class']}: {spec.description}"
    commands = [
        ("pip install -e '.[test]'", "the package, and pytest for the conformance kit"),
        ("rlinf plugins", f"lists {name} ({values['dist']} 0.1.0) and what it registers"),
        ("pytest tests", "the conformance kit on your classes"),
        ("export OMP_NUM_THREADS=1", "one thread per process: faster on a busy CPU (docs/performance.md)"),
        (spec.run.format(name=name), spec.comment),
    ]
    column = max(COMMENT_COLUMN, *(len(c) + 2 for c, _ in commands))
    values["commands"] = "\n".join(f"{c.ljust(column)}# {comment}" for c, comment in commands)
    values["expect"] = spec.expect.format(name=name, config=spec.config)
    files = {
        "pyproject.toml": "common/pyproject.toml",
        "README.md": "common/README.md",
        f"src/{package}/__init__.py": "common/__init__.py",
        f"src/{package}/plugin.py": f"{kind}/plugin.py",
        f"tests/test_{name}.py": f"{kind}/test.py",
        f"src/{package}/configs/{name}/{spec.config}": f"{kind}/config.yaml",
        **{f"src/{package}/{module}.py": f"{kind}/{module}.py" for module in spec.modules},
    }
    out = {}
    for path, template in files.items():
        text = (TEMPLATES / f"{template}.tmpl").read_text()
        for key, value in values.items():
            text = text.replace("{{" + key + "}}", value)
        assert "{{" not in text, f"unfilled marker in {template}"
        out[path] = text
    return out


def class_names(kind: str, name: str) -> list[str]:
    camel = "".join(part.capitalize() for part in name.split("_"))
    return [camel + suffix for suffix in KINDS[kind].classes]


def _refusal(kind: str, name: str, target: Path) -> str | None:
    """Why NAME cannot be used (one line), or None."""
    if not NAME.match(name):
        return (
            f"NAME {name!r} must be lower case letters, digits and underscores, starting with a letter "
            "(e.g. gridworld, my_robot)"
        )
    if target.exists():
        return f"{target} already exists: choose another NAME or --dir (rlinf new overwrites nothing)"
    from rlinf_core.plugins.manager import load_plugins

    registry = load_plugins(warn=False)
    taken = [c for c in class_names(kind, name) if c in registry.classes]
    if taken:
        owner = registry.classes[taken[0]].distribution
        return (
            f"the class name {taken[0]} is already registered by {owner} (short class names are unique): choose "
            "another NAME"
        )
    if name in registry.plugins:
        dist = registry.plugins[name].distribution
        return f"a plugin named {name!r} is already installed ({dist}): choose another NAME"
    return None


def new_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="rlinf new",
        description="Write a plugin package (pyproject, entry point, the class, conformance tests "
        "and a config) that installs, is listed by `rlinf plugins`, passes its kit and trains with `rlinf fit`.",
    )
    parser.add_argument("kind", choices=sorted(KINDS), help="what the plugin adds")
    parser.add_argument(
        "name", help="plugin name: lower case, e.g. gridworld (package rlinf_env_gridworld, class GridworldEnv)"
    )
    parser.add_argument("--dir", default=".", help="directory to create the package in (default: here)")
    opts = parser.parse_args(argv)
    files = plan(opts.kind, opts.name) if NAME.match(opts.name) else {}
    dist = KINDS[opts.kind].prefix + opts.name.replace("_", "-")
    target = Path(opts.dir) / dist
    why = _refusal(opts.kind, opts.name, target)
    if why:
        print(f"rlinf new: error: {why}", file=sys.stderr)
        return 2
    for rel, text in files.items():
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        (target / rel).write_text(text)
    if opts.kind == "world-model":
        write_init_states(target, opts.name)
    print(f"wrote {target}/ ({', '.join(class_names(opts.kind, opts.name))}); next:")
    print(f"  pip install -e '{target}[test]' && rlinf plugins && pytest {target}/tests")
    print(f"  {KINDS[opts.kind].run.format(name=opts.name)}")
    return 0


def write_init_states(target: Path, name: str) -> list[Path]:
    """Run the written world-model package's own ``init_states.py`` (the template, as written) to put its initial
    states beside its config, ``src/<package>/configs/NAME/init_states/`` (package data)."""
    import runpy

    package = KINDS["world-model"].prefix.replace("-", "_") + name
    module = runpy.run_path(str(target / "src" / package / "init_states.py"), run_name=f"{package}.init_states")
    return module["write_init_states"](target / "src" / package / "configs" / name / "init_states")
