"""RLinf's LIBERO-130 eval-only configs run through the real ``rlinf validate`` CLI (tiny OFT, CPU, one task)."""

import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("LIBERO_CONFIG_PATH", tempfile.mkdtemp(prefix="libero-config-"))  # no user config.yaml

from rlinf_core.cli.main import main  # noqa: E402
from rlinf_env_libero import clear_sim_cache  # noqa: E402
from rlinf_policy_openvla.make_tiny import make_tiny  # noqa: E402

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "libero" / "eval" / "libero_130_rl_spatial.yaml"


def test_libero_130_rl_eval_config_runs_two_sampled_passes(tmp_path):
    model = make_tiny(tmp_path / "tiny-oft", kind="oft", norm_keys=["libero_130_no_noops_trajall"], action_dim=7)
    ev = "--model.init_args.eval_env.init_args."
    try:
        main(
            [
                "validate",
                "--config",
                str(CONFIG),
                "--trainer.accelerator=cpu",
                "--trainer.devices=1",
                "--trainer.precision=32",
                f"--trainer.logger.init_args.save_dir={tmp_path}",
                f"--trainer.default_root_dir={tmp_path}",
                f"--model.init_args.policy.init_args.model_path={model}",
                "--model.init_args.policy.init_args.precision=fp32",
                "--model.init_args.rollout.show_progress=false",
                f"{ev}max_episode_steps=8",
                f"{ev}trials_per_task=1",
                f"{ev}task_id_filter=[0]",
                f"{ev}render.image_size=32",
                f"{ev}render.fast_render=true",
                f"{ev}num_envs=2",
            ]
        )
    except SystemExit as exc:  # LightningCLI exits 0 after validate
        assert exc.code in (0, None)
    finally:
        clear_sim_cache()
    (result,) = tmp_path.glob("libero_130_rl_spatial/*/eval/eval_epoch0.json")
    data = json.loads(result.read_text())
    # eval_rollout_epoch 2: the (task 0, trial 0) grid is visited once per pass, on LIBERO-Spatial
    assert data["metrics"]["eval/num_trajectories"] == 2.0
    assert data["metrics"]["eval/episode_len"] == 8.0
    assert data["per_suite"]["libero_spatial"]["num_trajectories"] == 2
