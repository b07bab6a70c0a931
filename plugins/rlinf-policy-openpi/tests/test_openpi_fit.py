"""configs/metaworld/mt50_ppo_openpi_cpu_smoke.yaml trains (tiny π0, PPO, flow-SDE) and evaluates on real MetaWorld
simulators through the real ``rlinf fit`` CLI."""

import os
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from rlinf.cli import main  # noqa: E402
from rlinf_policy_openpi.make_tiny import make_tiny  # noqa: E402

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "metaworld" / "mt50_ppo_openpi_cpu_smoke.yaml"


def test_metaworld_ppo_openpi_cpu_smoke_config_runs(tmp_path):
    model = make_tiny(tmp_path / "tiny-pi0", layout="rlinf")
    main([
        "fit", "--config", str(CONFIG), f"--trainer.logger.init_args.save_dir={tmp_path}",
        f"--trainer.default_root_dir={tmp_path}", f"--model.init_args.policy.init_args.model_path={model}",
    ])
    (events,) = tmp_path.glob("metaworld_ppo_openpi_cpu_smoke/*/events.out.tfevents.*")
    acc = EventAccumulator(str(events))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    for tag in ("env/success_once", "env/episode_len", "eval/success_once", "train/actor/policy_loss",
                "train/critic/explained_variance", "train/actor/approx_kl"):
        assert tag in tags, f"{tag} missing from {sorted(tags)}"
    assert [e.value for e in acc.Scalars("eval/num_trajectories")] == [2.0]  # the task x 2 placements, once
    exported = next(tmp_path.glob("metaworld_ppo_openpi_cpu_smoke/*/policy"))
    assert (exported / "config.json").is_file() and (exported / "model.safetensors").is_file()
    from rlinf_policy_openpi.policy import OpenPIPolicy

    reloaded = OpenPIPolicy.from_pretrained(exported)  # the export is a checkpoint directory again
    assert (reloaded.num_action_chunks, reloaded.action_dim, reloaded.num_steps) == (5, 4, 3)
