"""Every ``rlinf`` command the README shows runs as written, or as a cheap variant of it (fewer RL steps, one
round): the extra arguments of each are in ``CHEAP`` and only shorten the run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHORT = [
    "--trainer.max_epochs=2",
    "--trainer.check_val_every_n_epoch=2",
    "--model.init_args.rollout.show_progress=false",
]
# README command -> extra arguments of its cheap variant (None: covered elsewhere, with the reason)
CHEAP: dict[str, list[str] | str] = {
    "rlinf fit --config configs/toy/reach_grpo.yaml": SHORT,
    "rlinf fit --config configs/toy/reach_grpo.yaml --model.init_args.optim.lr=3e-3 --trainer.max_epochs=10": SHORT,
    "rlinf fit --config configs/toy/reach_grpo.yaml --print_config": [],
    "rlinf validate --config configs/toy/reach_grpo.yaml --ckpt_path runs/reach_grpo/version_0/checkpoints/last.ckpt": [
        "--model.init_args.rollout.show_progress=false"
    ],
    "rlinf fit --config configs/toy/reach_grpo.yaml --ckpt_path runs/reach_grpo/version_0": [
        "--trainer.max_epochs=3",
        "--trainer.check_val_every_n_epoch=3",
        "--model.init_args.rollout.show_progress=false",
    ],
    "rlinf memory --config configs/libero/spatial.yaml": [],
    "rlinf plot runs/reach_grpo/version_0": [],
    "rlinf configs": [],
    "rlinf plugins": [],
    "rlinf coevolve --config toy/coevolve.yaml": "tests/core/test_coevolve.py runs the toy loop",
    "rlinf fit --config toy/reach_grpo.yaml": [*SHORT, "--trainer.logger.init_args.name=short_name"],
    "rlinf serve --policy runs/libero_spatial_grpo/version_0/policy": (
        "tests/serve/ start the server on exported policies"
    ),
    "rlinf wm-score actions --world_model ToyWorldModel --episodes DIR": (
        "tests/core/test_wm_scoring.py runs this line, with its defaults, on recorded toy episodes"
    ),
    "rlinf serve --policy openvla-7b --protocol openvla --device cuda --precision bf16": (
        "needs a GPU and the 7 B weights"
    ),
}


def readme_commands() -> list[str]:
    """The ``rlinf ...`` lines of the README's bash blocks, without their comments."""
    text = (ROOT / "README.md").read_text()
    lines = [ln.split("  #")[0].strip() for block in re.findall(r"```bash\n(.*?)```", text, re.S)
             for ln in block.splitlines()]  # fmt: skip
    return [ln for ln in lines if ln.startswith("rlinf ")]


def test_every_readme_command_has_a_variant_here():
    assert readme_commands(), "no rlinf commands found in the README"
    missing = [c for c in readme_commands() if c not in CHEAP]
    assert not missing, f"add these README commands to CHEAP in {Path(__file__).name}: {missing}"


@pytest.mark.slow
def test_readme_commands_run(tmp_path, monkeypatch, capsys):
    from rlinf_core.cli.main import main

    (tmp_path / "configs").symlink_to(ROOT / "configs")
    monkeypatch.chdir(tmp_path)  # the README runs them from the repository root; runs/ lands here
    for command in readme_commands():
        extra = CHEAP[command]
        if isinstance(extra, str):
            continue
        try:
            rc = main(command.split()[1:] + extra)
        except SystemExit as exc:
            rc = exc.code
        out = capsys.readouterr()
        assert rc in (0, None), f"`{command}` exited {rc}: {out.err[-1500:]}"
    assert (tmp_path / "runs/reach_grpo/version_0/learning_curve.png").is_file()
    assert (tmp_path / "runs/short_name/version_0/config.yaml").is_file()


def test_every_placeholder_model_path_names_a_released_checkpoint():
    """`rlinf memory` works on every shipped config without weights: each placeholder ``model_path`` names a
    released checkpoint whose weightless stand-in the policy's plugin writes."""
    import yaml

    pytest.importorskip("rlinf_policy_openvla")
    pytest.importorskip("rlinf_policy_openpi")
    from rlinf_policy_openpi.released import RELEASED as OPENPI
    from rlinf_policy_openvla.released import kind_of_path

    unknown = []
    for path in sorted((ROOT / "configs").rglob("*.yaml")):
        policy = ((yaml.safe_load(path.read_text()) or {}).get("model") or {}).get("init_args", {}).get("policy")
        model_path = (policy or {}).get("init_args", {}).get("model_path") if isinstance(policy, dict) else None
        if isinstance(model_path, str) and model_path.startswith("/path/to/"):
            if kind_of_path(model_path) is None and Path(model_path).name not in OPENPI:
                unknown.append(f"{path.relative_to(ROOT)}: {model_path}")
    assert not unknown, unknown
