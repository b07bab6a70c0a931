"""A config written for N GPUs run on fewer says what changes, in one line at the start of fit."""

from pathlib import Path

from rlinf_core.cli.world_size import world_size_note


def test_note_numbers_for_the_seeds_libero_sizes():
    # libero/spatial.yaml: 8 envs per GPU, 16 rollout epochs x 64 chunk steps, global batch 16384, 8 GPUs
    samples = 16 * 64 * 8
    assert world_size_note(8, 8, 8, samples, 16384) is None
    assert world_size_note(None, 2, 8, samples, 16384) is None
    note = world_size_note(8, 2, 8, samples, 16384)
    assert "\n" not in note
    assert "16 envs in total instead of 64" in note
    assert "1 optimizer steps per RL step instead of 4" in note


def test_fit_prints_the_note_once_at_start(tmp_path, capsys, monkeypatch):
    """``memory.world_size`` (the config's target hardware, a section ``rlinf memory`` reads) is accepted by
    ``rlinf fit``, which prints the note; RLModule itself knows nothing of it."""
    from rlinf_core.cli.main import main

    monkeypatch.chdir(tmp_path)
    root = Path(__file__).resolve().parents[2]
    args = [
        "fit",
        "--config",
        str(root / "configs/toy/reach_grpo.yaml"),
        "--memory.world_size=8",
        "--trainer.max_epochs=1",
        "--trainer.logger.init_args.save_dir=runs",
        "--trainer.enable_progress_bar=false",
        "--model.init_args.env.init_args.num_envs=4",
        "--model.init_args.env.init_args.group_size=2",
        "--model.init_args.env.init_args.max_episode_steps=4",
        "--model.init_args.rollout.max_steps_per_rollout_epoch=4",
        "--model.init_args.global_batch_size=8",
        "--model.init_args.micro_batch_size=4",
        "--model.init_args.export_policy=false",
    ]
    assert main(args) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "written for 8 processes" in line]
    assert err == [
        "rlinf: this config was written for 8 processes but runs on 1: 4 envs in total instead of 32, "
        "1 optimizer steps per RL step instead of 8 (scale num_envs by 8/1 to keep the totals)"
    ]
    saved = (tmp_path / "runs/reach_grpo/version_0/config.yaml").read_text()
    assert "memory:\n  gpu_memory_gb: 80.0\n  world_size: 8\n" in saved


def test_global_batch_not_divisible_by_the_world_size_is_refused_at_start(tmp_path, capsys, monkeypatch):
    """2 DDP ranks, global batch 33: refused in one line by ``rlinf fit`` before any rank starts or a run
    directory is written (before, each optimizer step silently took 32 samples, 16 per rank)."""
    import pytest

    from rlinf_core.cli.main import main
    from rlinf_core.rl.buffer import batch_split_error

    assert batch_split_error(32, 2) is None and batch_split_error(33, 1) is None
    monkeypatch.chdir(tmp_path)
    root = Path(__file__).resolve().parents[2]
    args = [
        "fit",
        "--config",
        str(root / "configs/toy/reach_grpo.yaml"),
        "--trainer.devices=2",
        "--trainer.strategy=ddp",
        "--model.init_args.global_batch_size=33",
        "--model.init_args.micro_batch_size=8",
        "--trainer.logger.init_args.save_dir=runs",
    ]
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert lines[-1] == (
        "rlinf: error: global_batch_size (33) is not a multiple of the world size (2): each optimizer step would "
        "take 32 samples, not 33; set global_batch_size to a multiple of 2 (e.g. 32 or 34)"
    )
    assert not (tmp_path / "runs").exists()
