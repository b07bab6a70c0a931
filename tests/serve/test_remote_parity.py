"""``rlinf serve`` a tiny OpenVLA-OFT, then ``rlinf validate`` the shipped remote MetaWorld config against it: the
action chunks the env executes and the per-task success table equal a local ``rlinf validate`` of the same export
with the same seeds and grid, exactly.

Exact because both run here, in this process on this machine's CPU (same torch kernels; torch's default
ATEN_CPU_CAPABILITY), and the server runs the same batch of 4 observations the local eval runs (``--max-batch 4``:
one batched request per chunk); across machines or batch compositions the floating-point sums may differ.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lightning.pytorch  # noqa: F401 - binds its log handler to sys.stderr now, not to one test's capsys
import numpy as np
import pytest
import torch
import yaml
from tests.serve.conftest import serving

pytest.importorskip("metaworld")
pytest.importorskip("rlinf_env_metaworld")
pytest.importorskip("rlinf_policy_openvla")
from rlinf_core.cli.main import main  # noqa: E402
from rlinf_env_metaworld.env import MetaWorldEnv  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs/metaworld/remote_mt50.yaml"
GRID = [  # the shipped grid made small: 2 tasks x 2 placements, 4 envs, 64px fast renders, 2 chunks of 8
    "--model.init_args.eval_env.init_args.tasks=[button-press-topdown-v3, drawer-close-v3]",
    "--model.init_args.eval_env.init_args.trials_per_task=2",
    "--model.init_args.eval_env.init_args.num_envs=4",
    "--model.init_args.eval_env.init_args.max_episode_steps=16",
    "--model.init_args.eval_env.init_args.action_format=4d",
    "--model.init_args.eval_env.init_args.render.image_size=64",
    "--model.init_args.eval_env.init_args.render.fast_render=true",
    "--model.init_args.eval_env.init_args.video_cfg.save_video=false",
    "--model.init_args.env.init_args.action_format=4d",
    "--model.init_args.rollout.max_steps_per_rollout_epoch=16",
]


def _validate(capsys, monkeypatch, tmp_path: Path, name: str, *flags: str) -> tuple[dict, list[np.ndarray]]:
    """``rlinf validate`` of the shipped remote config with ``flags``: its eval JSON and the chunks the env ran."""
    chunks: list[np.ndarray] = []
    step = MetaWorldEnv.chunk_step

    def recording_step(self, actions):
        chunks.append(torch.as_tensor(actions).detach().cpu().float().numpy().copy())
        return step(self, actions)

    monkeypatch.setattr(MetaWorldEnv, "chunk_step", recording_step)
    logger = f"--trainer.logger.init_args.save_dir={tmp_path / 'runs'}"
    capsys.readouterr()
    try:
        code = main(
            ["validate", "--config", str(CONFIG), *GRID, logger, f"--trainer.logger.init_args.name={name}", *flags]
        )
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    monkeypatch.setattr(MetaWorldEnv, "chunk_step", step)
    (table,) = (tmp_path / "runs" / name).glob("version_*/eval/eval_epoch0.json")
    return json.loads(table.read_text()), chunks


def test_a_remote_metaworld_eval_of_a_served_oft_equals_the_local_eval(tmp_path, capsys, monkeypatch):
    from rlinf_policy_openvla.testing import tiny_checkpoint

    export = tiny_checkpoint(kind="oft", norm_keys=("metaworld",), action_dim=4)
    local_policy = tmp_path / "local_policy.yaml"
    policy = {"class_path": "OpenVLAOFTPolicy", "init_args": {"model_path": str(export)}}
    local_policy.write_text(yaml.safe_dump({"model": {"init_args": {"policy": policy}}}))
    local, local_chunks = _validate(capsys, monkeypatch, tmp_path, "local", "--config", str(local_policy))
    with serving(export, "openpi", "--mapping", "openvla-oft", "--max-batch", "4") as server:
        remote, remote_chunks = _validate(
            capsys, monkeypatch, tmp_path, "remote",
            f"--model.init_args.policy.init_args.url=ws://127.0.0.1:{server.port}",
            "--model.init_args.policy.init_args.action_dim=4",
            "--model.init_args.policy.init_args.num_action_chunks=8",
        )  # fmt: skip
    assert len(remote_chunks) == len(local_chunks) >= 2
    for mine, theirs in zip(remote_chunks, local_chunks):
        np.testing.assert_array_equal(mine, theirs)
    assert (
        remote["per_task"] == local["per_task"] and sum(r["num_trajectories"] for r in local["per_task"].values()) == 4
    )
    assert remote["metrics"]["eval/success_once"] == local["metrics"]["eval/success_once"]
    assert remote["metrics"]["eval/remote/requests"] == len(remote_chunks)  # one batched request per chunk


LIBERO_CONFIG = ROOT / "configs/libero/eval/remote_spatial.yaml"
LIBERO_GRID = [  # the shipped grid made small: 2 trials of one task, 2 envs, 64px renders, 2 chunks of 8 steps
    "--model.init_args.eval_env.init_args.reset_state_id_filter=[0, 1]",
    "--model.init_args.eval_env.init_args.num_envs=2",
    "--model.init_args.eval_env.init_args.max_episode_steps=16",
    "--model.init_args.eval_env.init_args.render.image_size=64",
    "--model.init_args.eval_env.init_args.render.fast_render=true",
    "--model.init_args.eval_env.init_args.sim.settle_steps=2",
    "--model.init_args.eval_env.init_args.video_cfg.save_video=false",
    "--model.init_args.rollout.max_steps_per_rollout_epoch=16",
]


def test_rlinf_validate_with_the_remote_libero_config_writes_the_local_evals_tables(tmp_path):
    """``rlinf validate --config libero/eval/remote_spatial.yaml --model.init_args.policy.init_args.url=ws://...``
    against ``rlinf serve`` of a tiny OFT, with the eval executing the policy's whole chunks of 8 on the env's renders
    (``image_size: null``, as the local policy sees them): the local ``rlinf validate``'s tables."""
    pytest.importorskip("rlinf_env_libero")
    from rlinf_policy_openvla.testing import tiny_checkpoint

    export = tiny_checkpoint(kind="oft")
    policy = {"class_path": "OpenVLAOFTPolicy", "init_args": {"model_path": str(export)}}
    (tmp_path / "local_policy.yaml").write_text(yaml.safe_dump({"model": {"init_args": {"policy": policy}}}))
    whole_chunks = {"init_args": {"num_action_chunks": 8, "image_size": None}}
    (tmp_path / "remote_policy.yaml").write_text(yaml.safe_dump({"model": {"init_args": {"policy": whole_chunks}}}))
    tables = {}
    with serving(export, "openpi", "--mapping", "libero", "--max-batch", "2") as server:
        runs = {
            "local": ["--config", str(tmp_path / "local_policy.yaml")],
            "remote": [
                "--config",
                str(tmp_path / "remote_policy.yaml"),
                f"--model.init_args.policy.init_args.url=ws://127.0.0.1:{server.port}",
            ],
        }
        for name, flags in runs.items():
            logger = [
                f"--trainer.logger.init_args.save_dir={tmp_path / 'runs'}",
                f"--trainer.logger.init_args.name={name}",
            ]
            # in a process of its own: LIBERO's simulators and the validate's modules leave gigabytes of native
            # memory behind in the process that ran them
            done = subprocess.run(
                [sys.executable, "-m", "rlinf_core.cli.main", "validate", "--config", str(LIBERO_CONFIG)]
                + [*LIBERO_GRID, *logger, *flags],
                capture_output=True,
                text=True,
                timeout=900,
                env={**os.environ, "OMP_NUM_THREADS": "1"},
            )
            assert done.returncode == 0, done.stderr[-3000:]
            (table,) = (tmp_path / "runs" / name).glob("version_*/eval/eval_epoch0.json")
            tables[name] = (json.loads(table.read_text()), table.with_suffix(".md").read_text())
    (local, local_md), (remote, remote_md) = tables["local"], tables["remote"]
    assert remote["per_task"] == local["per_task"] and remote_md == local_md
    assert sum(row["num_trajectories"] for row in remote["per_task"].values()) == 2
    assert remote["metrics"]["eval/return"] == local["metrics"]["eval/return"]
    assert remote["metrics"]["eval/remote/requests"] >= 2
