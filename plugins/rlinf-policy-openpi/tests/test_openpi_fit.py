"""configs/metaworld/mt50_ppo_openpi_cpu_smoke.yaml trains (tiny π0, PPO, flow-SDE) and evaluates on real MetaWorld
simulators through the real ``rlinf fit`` CLI; the tiny π0.5 (critic after the VLM) through the same config."""

import os
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import pytest  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from rlinf_core.cli.main import main  # noqa: E402
from rlinf_policy_openpi.make_tiny import make_tiny  # noqa: E402

pytestmark = pytest.mark.slow

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "metaworld" / "mt50_ppo_openpi_cpu_smoke.yaml"


POLICY = "--model.init_args.policy.init_args"
PI05 = [
    f"{POLICY}.critic.after_vlm=true",
    f"{POLICY}.critic.detach_input=false",
    "--trainer.max_epochs=1",
    "--trainer.check_val_every_n_epoch=1",
]  # one RL step and the eval: π0.5 trains through the same loop


@pytest.mark.parametrize("pi05", [False, True], ids=["pi0", "pi05"])
def test_metaworld_ppo_openpi_cpu_smoke_config_runs(tmp_path, pi05):
    model = make_tiny(tmp_path / "tiny", pi05=pi05, layout="rlinf")
    main(
        [
            "fit",
            "--config",
            str(CONFIG),
            f"--trainer.logger.init_args.save_dir={tmp_path}",
            f"--trainer.default_root_dir={tmp_path}",
            f"{POLICY}.model_path={model}",
            *(PI05 if pi05 else []),
        ]
    )
    (events,) = tmp_path.glob("metaworld_ppo_openpi_cpu_smoke/*/events.out.tfevents.*")
    acc = EventAccumulator(str(events))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    for tag in (
        "env/success_once",
        "env/episode_len",
        "eval/success_once",
        "train/actor/policy_loss",
        "train/critic/explained_variance",
        "train/actor/approx_kl",
    ):
        assert tag in tags, f"{tag} missing from {sorted(tags)}"
    assert [e.value for e in acc.Scalars("eval/num_trajectories")] == [2.0]  # the task x 2 placements, once
    exported = next(tmp_path.glob("metaworld_ppo_openpi_cpu_smoke/*/policy"))
    assert (exported / "config.json").is_file() and (exported / "model.safetensors").is_file()
    from rlinf_policy_openpi.policy import OpenPIPolicy

    reloaded = OpenPIPolicy.from_pretrained(exported)  # the export is a checkpoint directory again
    assert (reloaded.num_action_chunks, reloaded.action_dim, reloaded.num_steps) == (5, 4, 3)
    assert (reloaded.is_pi05, reloaded.value_after_vlm) == (pi05, pi05)
