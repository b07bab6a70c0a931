"""The shipped example of RL inside a world model (``toy/grpo_in_world_model.yaml``) through the real CLI, from a
working directory that is not the config's: its initial states are found beside the packaged config."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml

from rlinf_core.builtin.toy_world_model import TOY_DIRECTIONS, write_toy_init_states
from rlinf_core.cli.configs import find_shipped_config
from rlinf_core.cli.main import main
from rlinf_core.world_models.init_data import load_init_trajectory

CONFIG = "toy/grpo_in_world_model.yaml"


def test_the_shipped_initial_states_are_what_the_generator_writes(tmp_path):
    shipped = sorted((find_shipped_config(CONFIG).parent / "toy_world_model_init_states").glob("*.npy"))
    fresh = write_toy_init_states(tmp_path)
    assert [p.name for p in shipped] == [p.name for p in fresh] and len(shipped) == 32
    for a, b in zip(shipped, fresh):
        (x,), (y,) = load_init_trajectory(a), load_init_trajectory(b)
        assert np.array_equal(x["image"], y["image"]) and x["instruction"] == y["instruction"]
        assert np.array_equal(x["delta_action"], y["delta_action"])


def test_the_shipped_config_learns_inside_the_world_model_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no toy_world_model_init_states here: read beside the packaged config
    main(["fit", "--config", CONFIG, "--trainer.max_epochs=10", "--trainer.check_val_every_n_epoch=10",
          "--trainer.enable_progress_bar=false"])  # fmt: skip
    run = tmp_path / "runs" / "grpo_in_world_model" / "version_0"
    saved = yaml.safe_load((run / "config.yaml").read_text())
    init = Path(saved["model"]["init_args"]["env"]["init_args"]["init_data_path"])
    assert init.is_absolute() and init == find_shipped_config(CONFIG).parent / "toy_world_model_init_states"
    (table,) = run.glob("eval/*.json")
    report = json.loads(table.read_text())
    tasks = report["per_task"]
    assert sorted(tasks) == sorted(TOY_DIRECTIONS)  # one task per instruction, named by it
    assert all(t["num_trajectories"] == 8 for t in tasks.values())
    # the untrained greedy policy does not move the square (0 %); 87.5 % measured after these 10 RL steps
    assert report["metrics"]["eval/success_once"] >= 0.5, report


def test_a_policy_that_reads_states_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    """docs/world_models.md, "Choosing a policy": a world model gives no states, so a policy left at
    ``state_dim: 4`` stops at its first step with the line the docs quote."""
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    try:
        code = main(["fit", "--config", CONFIG, "--model.init_args.policy.init_args.state_dim=4",
                     "--trainer.max_epochs=1", "--trainer.enable_progress_bar=false"])  # fmt: skip
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and "Traceback" not in err and lines[-1].startswith("rlinf: error: "), err[-2000:]
    assert "policy TinyGaussianPolicy cannot read the observations of env WorldModelEnv" in lines[-1]
    assert "expects states [B, 4], got None" in lines[-1] and "state_dim" in lines[-1]
