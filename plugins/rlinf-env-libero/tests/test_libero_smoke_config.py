"""The CPU smoke config trains (tiny OpenVLA-OFT, GRPO) and evaluates through the real ``rlinf fit`` CLI on LIBERO."""

import os
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("LIBERO_CONFIG_PATH", tempfile.mkdtemp(prefix="libero-config-"))  # no user config.yaml

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from rlinf_core.cli.main import main  # noqa: E402
from rlinf_env_libero import clear_sim_cache  # noqa: E402
from rlinf_policy_openvla.make_tiny import make_tiny  # noqa: E402

pytestmark = pytest.mark.slow

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "libero" / "spatial_cpu_smoke.yaml"


def test_spatial_cpu_smoke_config_runs(tmp_path):
    model = make_tiny(tmp_path / "tiny-oft", kind="oft", norm_keys=["libero_spatial_no_noops"], action_dim=7)
    try:
        main(
            [
                "fit",
                "--config",
                str(CONFIG),
                f"--trainer.logger.init_args.save_dir={tmp_path}",
                f"--trainer.default_root_dir={tmp_path}",
                f"--model.init_args.policy.init_args.model_path={model}",
            ]
        )
    finally:
        clear_sim_cache()
    (events,) = tmp_path.glob("libero_spatial_cpu_smoke/*/events.out.tfevents.*")
    acc = EventAccumulator(str(events))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    for tag in ("env/success_once", "env/episode_len", "eval/success_once", "train/actor/policy_loss"):
        assert tag in tags, f"{tag} missing from {sorted(tags)}"
    assert acc.Scalars("env/num_trajectories")[0].value == 2.0  # one GRPO group of 2
    assert 0 < acc.Scalars("env/episode_len")[0].value <= 16.0
    assert [e.value for e in acc.Scalars("eval/num_trajectories")] == [2.0]  # task 0 x 2 trials, once each
