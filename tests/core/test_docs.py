"""Every hook has a documented heading with its exact signature (docs/plugin_reference.md)."""

import inspect
from pathlib import Path

from rlinf_core.plugins import hookspecs

DOC = Path(__file__).resolve().parents[2] / "docs" / "plugin_reference.md"


def test_every_hook_is_documented_with_its_signature():
    text = DOC.read_text()
    for name in hookspecs.HOOK_NAMES:
        params = ", ".join(inspect.signature(getattr(hookspecs, name)).parameters)
        assert f"### `{name}({params})`" in text, name


def test_every_metric_logged_is_documented():
    metrics_doc = (DOC.parent / "metrics.md").read_text()
    for name in [
        "train/actor/approx_kl",
        "train/actor/clip_fraction",
        "train/actor/clipped_ratio",
        "train/actor/grad_norm",
        "train/actor/lr",
        "train/actor/policy_loss",
        "train/critic/value_loss",
        "train/critic/value_clip_ratio",
        "train/critic/explained_variance",
        "train/entropy_loss",
        "train/loss",
        "rollout/advantages_max",
        "rollout/advantages_mean",
        "rollout/advantages_min",
        "rollout/rewards",
        "env/episode_len",
        "env/return",
        "env/reward",
        "env/success_once",
        "val/loss",
        "val/accuracy",
        "val/positive_recall",
    ]:
        assert f"`{name}`" in metrics_doc, name


def test_algorithm_equations_link_to_the_functions_that_implement_them():
    import importlib
    import inspect
    import re

    text = (DOC.parent / "algorithms.md").read_text()
    links = re.findall(r"\[`([\w.]+)`\]\(\.\./core/src/(rlinf_core/[\w/]+)\.py\)", text)
    assert len(links) >= 10
    for name, path in links:
        module = importlib.import_module(path.replace("/", "."))
        if name.startswith("rlinf_core."):
            assert module.__name__ == name, (name, path)
            continue
        obj = module
        for part in name.split("."):
            assert hasattr(obj, part), f"docs/algorithms.md links {name} to {path}, which has no {part}"
            owner, obj = obj, getattr(obj, part)
        assert callable(obj) or isinstance(inspect.getattr_static(owner, part), property), name


def test_the_readme_counts_the_hooks_and_lists_every_core_folder_and_doc():
    import re

    readme = (DOC.parents[1] / "README.md").read_text()
    number = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}[len(hookspecs.HOOK_NAMES)]
    hooks = re.search(rf"{number} hooks \(([^)]*)\)", readme)
    assert hooks, f"the README does not say '{number} hooks (...)'"
    assert re.findall(r"`(\w+)`", hooks.group(1)) == list(hookspecs.HOOK_NAMES)
    layout = readme.split("## Repository layout", 1)[1]
    listed = re.search(r"src/rlinf_core/\{([^}]*)\}", layout).group(1)
    package = DOC.parents[1] / "core" / "src" / "rlinf_core"
    folders = {p.name for p in package.iterdir() if p.is_dir() and not p.name.startswith("_")}
    assert sorted(re.sub(r"\s", "", listed).split(",")) == sorted(folders)
    docs_row = layout.split("\ndocs/", 1)[1].split("\nscripts/", 1)[0]
    missing = [p.name for p in sorted(DOC.parent.glob("*.md")) if p.name not in docs_row]
    assert not missing, f"the README's layout does not list docs {missing}"
