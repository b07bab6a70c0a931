"""``rlinf coevolve``: the co-evolution loop of ordinary rlinf runs (toy scale), its resume and its input errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rlinf_core.cli.coevolve import LoopError, load_loop, run_loop
from rlinf_core.cli.main import main

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TOY_LOOP = ROOT / "configs" / "toy" / "coevolve.yaml"


def small_toy_loop(tmp_path: Path) -> Path:
    """The shipped toy loop, one round, in-process, with fewer steps / epochs (the stages' own configs unchanged)."""
    loop = yaml.safe_load(TOY_LOOP.read_text())
    loop.update(out_dir=str(tmp_path / "loop"), rounds=1, launcher="in_process")
    quiet = {"trainer.enable_progress_bar": False}
    for stage in [s for s in loop["prelude"] + loop["stages"] if s["run"] != "exec"]:
        stage["args"] = {**stage["args"], **quiet}
    by_name = {s["name"]: s for s in loop["stages"]}
    by_name["world_model"]["args"]["trainer.max_epochs"] = 2
    by_name["reward_model"]["args"]["trainer.max_epochs"] = 1
    by_name["rl"]["args"].update({"trainer.max_epochs": 2, "trainer.check_val_every_n_epoch": 2})
    path = tmp_path / "loop.yaml"
    path.write_text(yaml.safe_dump(loop))
    return path


def test_toy_loop_runs_every_stage_feeds_paths_forward_and_resumes(tmp_path, capsys):
    path = small_toy_loop(tmp_path)
    assert main(["coevolve", "--config", str(path)]) == 0
    said = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("coevolve: the toy loop checks")]
    assert len(said) == 2 and "not learning" in said[0]  # what the toy loop is for, when it starts and ends
    out = tmp_path / "loop"
    records = json.loads((out / "coevolve.json").read_text())["records"]
    # no collect after the last round (feeds_next_round)
    assert [(r["round"], r["stage"]) for r in records] == [
        (0, "init"),
        (0, "baseline"),
        (0, "collect"),
        (1, "world_model"),
        (1, "reward_model"),
        (1, "rl"),
    ]
    by = {r["stage"]: r for r in records}
    rollouts = by["collect"]["outputs"]["rollouts"]
    assert sorted(Path(rollouts).glob("traj*.npy"))  # the recorder's episodes ...
    rl_argv = " ".join(by["rl"]["argv"])  # ... and the exports reached the RL stage by path
    for key in ("world_model", "reward_model"):
        assert f"={by[key]['outputs'][key]} " in rl_argv + " "
    assert f"init_data_path={rollouts}" in rl_argv
    assert (Path(by["rl"]["outputs"]["policy"]) / "config.json").is_file()
    # both evals ran in the real ReachEnv (3 tasks x 4 trials)
    assert by["baseline"]["eval"]["eval/num_trajectories"] == 12 and by["rl"]["eval"]["eval/num_trajectories"] == 12
    table = (out / "results.md").read_text()
    assert "| 0 | baseline |" in table and "| 1 | rl |" in table

    # a finished loop is not redone; an interrupted stage (no stage.json) is redone from nothing, alone
    marker = out / "round_1" / "rl" / "stage.json"
    marker.unlink()
    (out / "round_1" / "rl" / "leftover").write_text("partial")
    before = {
        r["stage"]: (out / f"round_{r['round']}" / r["stage"] / "stage.json").stat().st_mtime_ns
        for r in records
        if r["stage"] != "rl"
    }
    capsys.readouterr()
    assert main(["coevolve", "--config", str(path)]) == 0
    log = capsys.readouterr().out
    assert log.count("done earlier, skipped") == 5 and "round 1 stage rl: rlinf fit" in log
    assert not (out / "round_1" / "rl" / "leftover").exists() and marker.is_file()
    after = {
        r["stage"]: (out / f"round_{r['round']}" / r["stage"] / "stage.json").stat().st_mtime_ns
        for r in records
        if r["stage"] != "rl"
    }
    assert after == before


def test_a_failed_stage_stops_the_loop_in_one_line_and_leaves_no_marker(tmp_path, capsys):
    loop = {
        "out_dir": str(tmp_path / "out"),
        "launcher": "in_process",
        "rounds": 1,
        "stages": [
            {
                "name": "rl",
                "run": "fit",
                "config": "toy/reach_grpo.yaml",
                "args": {"model.init_args.env.init_args.num_envs": 7},
            }
        ],
    }
    path = tmp_path / "loop.yaml"
    path.write_text(yaml.safe_dump(loop))
    assert main(["coevolve", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "round 1 stage rl failed (exit 2)" in err[0] and "num_envs (7)" in err[0], err
    assert not (tmp_path / "out" / "round_1" / "rl" / "stage.json").exists()
    assert json.loads((tmp_path / "out" / "coevolve.json").read_text())["records"] == []  # summary written anyway


def test_exec_stages_outputs_and_variables(tmp_path):
    loop = {
        "out_dir": str(tmp_path / "out"),
        "rounds": 2,
        "vars": {"seed": 5},
        "stages": [
            {
                "name": "make",
                "run": "exec",
                "outputs": {"made": "${stage_dir}/made.txt"},
                "command": [
                    "${python}",
                    "-c",
                    "import sys; open(sys.argv[1], 'w').write(sys.argv[2])",
                    "${stage_dir}/made.txt",
                    "round ${round} seed ${seed} after $${made}",
                ],
            },
            {
                "name": "use",
                "run": "exec",
                "feeds_next_round": True,
                "command": [
                    "${python}",
                    "-c",
                    "import sys; assert open(sys.argv[1]).read().startswith('round')",
                    "${made}",
                ],
            },
        ],
    }
    path = tmp_path / "loop.yaml"
    path.write_text(yaml.safe_dump(loop))
    records = run_loop(load_loop(path), log=lambda _: None)
    assert [(r["round"], r["stage"]) for r in records] == [(1, "make"), (1, "use"), (2, "make")]
    assert (tmp_path / "out" / "round_2" / "make" / "made.txt").read_text() == "round 2 seed 5 after ${made}"


@pytest.mark.parametrize(
    "loop, message",
    [
        ({"stages": [{"name": "a", "run": "fit"}]}, "a fit stage needs a config"),
        ({"stages": [{"name": "a", "run": "train", "config": "x.yaml"}]}, "run must be one of fit, validate, exec"),
        ({"stages": [{"name": "a", "config": "x.yaml", "epochs": 3}]}, "unknown key 'epochs'"),
        ({"stage": []}, "unknown key 'stage'; loop keys: out_dir, rounds"),
        ({"rounds": -1}, "rounds must be an integer >= 0"),
        (
            {"stages": [{"name": "a", "config": "x.yaml"}, {"name": "a", "config": "y.yaml"}]},
            "two stages are named 'a'",
        ),
        ({"launcher": "thread"}, "launcher must be one of subprocess, in_process, got 'thread'"),
        ({"rounds": "two"}, "rounds: Not of type NonNegativeInt"),
        (
            {"stages": [{"name": "a", "config": "x.yaml", "feeds_next_round": "maybe"}]},
            "stages[0] (a): feeds_next_round: Expected a <class 'bool'>",
        ),
        ({"stages": [{"name": "a", "config": "x.yaml", "args": {"k": "${nope}"}}]}, "unknown variable ${nope}; known:"),
    ],
)
def test_bad_loop_files_fail_in_one_line(tmp_path, capsys, loop, message):
    path = tmp_path / "loop.yaml"
    path.write_text(yaml.safe_dump({"out_dir": str(tmp_path / "out"), **loop}))
    assert main(["coevolve", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlinf coevolve: error: ") and message in err[0], err


def test_missing_output_is_reported(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "out_dir": str(tmp_path / "out"),
                "stages": [
                    {
                        "name": "a",
                        "run": "exec",
                        "command": ["${python}", "-c", "pass"],
                        "outputs": {"x": "${stage_dir}/x"},
                    }
                ],
            }
        )
    )
    with pytest.raises(LoopError, match="round 1 stage a finished but did not write its output x="):
        run_loop(load_loop(path), log=lambda _: None)


def test_the_in_process_launcher_runs_the_installed_rlinf_command():
    """No special case in ``rlinf``'s dispatch: coevolve finds the command through its console-script entry point."""
    from rlinf_core.cli.coevolve import installed_rlinf_main

    assert installed_rlinf_main() is main
