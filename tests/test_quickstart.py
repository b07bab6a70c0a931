"""The CPU quickstart pipeline end to end, at toy scale: demos -> SFT -> held-out eval -> GRPO -> report."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_quickstart_pipeline_writes_table_curve_videos_and_logs(tmp_path):
    out = tmp_path / "qs"
    small = [f"--rl-arg={a}" for a in (
        "--model.init_args.env.init_args.num_envs=8",
        "--model.init_args.rollout.env_workers=0",
        "--model.init_args.rollout.pipeline_stage_num=1",
        "--model.init_args.rollout.max_steps_per_rollout_epoch=16",
        "--model.init_args.env.init_args.max_episode_steps=16",
        "--model.init_args.eval_env.init_args.max_episode_steps=16",
        "--model.init_args.global_batch_size=16",
        "--model.init_args.micro_batch_size=16",
    )]  # fmt: skip
    cmd = [sys.executable, str(ROOT / "scripts" / "quickstart.py"), "--out", str(out), "--tasks", "reach-v3",
           "--demos-per-task", "1", "--sft-epochs", "1", "--rl-steps", "2", "--eval-trials", "2", *small]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = (out / "results.md").read_text()
    assert "| reach-v3 |" in report and "| **all** |" in report
    assert (out / "learning_curve.png").stat().st_size > 1000
    assert list((out / "videos" / "sft").rglob("*.mp4")) and list((out / "videos" / "rl").rglob("*.mp4"))
    assert list((out / "tensorboard" / "rl" / "version_0").glob("events.out.tfevents.*"))
    assert (out / "sft_policy" / "config.json").is_file()
    assert (out / "tensorboard" / "rl" / "version_0" / "policy" / "config.json").is_file()
    assert "success table:" in proc.stdout and str(out / "learning_curve.png") in proc.stdout
    assert "## README row" in report and re.search(r"^\| 0 \| \d+% → \d+% \| \*\*", report, re.M), report
    again = subprocess.run([*cmd, "--report-only"], capture_output=True, text=True, timeout=900)  # same numbers
    assert again.returncode == 0 and (out / "results.md").read_text() == report, again.stderr[-2000:]
