"""Side-by-side check of our PutOnPlateInScene25 tasks against RLinf v0.3's own task code (CPU, lavapipe).

Runs every env id of RLinf's published table once with RLinf's modules (loaded from a checkout: ``git clone -b v0.3
https://github.com/RLinf/RLinf``; only ``rlinf/envs/maniskill/tasks`` is imported, its package ``__init__`` files
are skipped) and once with ``rlinf_env_maniskill.rl4vla``, in two processes, on the same assets (real, or the
stand-ins of ``rlinf maniskill-assets synthesize DIR``), and compares per episode id: the decoded
picks, the instruction, the green-screened first image, the object / plate / robot poses after reset and after
steps, the ``evaluate`` flags, and success after placing the carrot on the plate::

    OMP_NUM_THREADS=1 python scripts/rl4vla_upstream_parity.py --rlinf /path/to/RLinf --assets DIR
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import numpy as np

ENV_IDS = [
    "PutOnPlateInScene25Main-v3",
    "PutOnPlateInScene25VisionImage-v1",
    "PutOnPlateInScene25VisionTexture03-v1",
    "PutOnPlateInScene25VisionTexture05-v1",
    "PutOnPlateInScene25VisionWhole03-v1",
    "PutOnPlateInScene25VisionWhole05-v1",
    "PutOnPlateInScene25Carrot-v1",
    "PutOnPlateInScene25Plate-v1",
    "PutOnPlateInScene25Instruct-v1",
    "PutOnPlateInScene25MultiCarrot-v1",
    "PutOnPlateInScene25MultiPlate-v1",
    "PutOnPlateInScene25Position-v1",
    "PutOnPlateInScene25EEPose-v1",
    "PutOnPlateInScene25PositionChangeTo-v1",
]
EPISODE_IDS = [0, 4242, 123457]


def _load_upstream(rlinf_root: Path) -> None:
    """Import RLinf's task modules by path, with bare parent packages (no ``rlinf/__init__`` side effects)."""
    base = rlinf_root / "rlinf"
    for name, folder in (
        ("rlinf", base),
        ("rlinf.envs", base / "envs"),
        ("rlinf.envs.maniskill", base / "envs/maniskill"),
        ("rlinf.envs.maniskill.tasks", base / "envs/maniskill/tasks"),
    ):
        module = types.ModuleType(name)
        module.__path__ = [str(folder)]
        sys.modules[name] = module
    importlib.import_module("rlinf.envs.maniskill.tasks.put_on_in_scene_multi")
    importlib.import_module("rlinf.envs.maniskill.tasks.variants")


def run(side: str, rlinf_root: Path, asset_dir: Path, bridge_dir: Path, out: Path) -> None:
    from rlinf_env_maniskill import lavapipe

    lavapipe.configure()
    import gymnasium as gym
    import torch
    from mani_skill.utils.structs.pose import Pose

    kw = dict(
        obj_set="test",
        obs_mode="rgb+segmentation",
        num_envs=1,
        sim_backend="physx_cpu",
        render_backend="cpu",
        sensor_configs=dict(shader_pack="default"),
        reward_mode="none",
    )
    if side == "upstream":
        _load_upstream(rlinf_root)
    else:
        import rlinf_env_maniskill.rl4vla  # noqa: F401

        kw.update(asset_dir=str(asset_dir), bridge_dir=str(bridge_dir))
    result = {}
    for env_id in ENV_IDS:
        env = gym.make(env_id, **kw).unwrapped
        for eid in EPISODE_IDS:
            key = f"{env_id}/{eid}"
            obs, _ = env.reset(seed=[0], options={"episode_id": torch.tensor([eid % env.total_num_trials])})
            carrot = env.objs_carrot[env.carrot_names[int(env.select_carrot_ids[0])]]
            plate = env.objs_plate[env.plate_names[int(env.select_plate_ids[0])]]

            def poses():
                return np.concatenate(
                    [
                        carrot.pose.raw_pose[0].numpy(),
                        plate.pose.raw_pose[0].numpy(),
                        env.agent.robot.get_qpos()[0].numpy(),
                    ]
                )

            result[key + "/picks"] = np.array(
                [int(getattr(env, f"select_{n}_ids")[0]) for n in ("carrot", "plate", "overlay", "pos", "quat")]
            )
            result[key + "/text"] = np.array(env.get_language_instruction()[0])
            result[key + "/image0"] = obs["sensor_data"]["3rd_view_camera"]["rgb"][0].numpy()
            result[key + "/poses0"] = poses()
            hold = torch.zeros(1, 7)
            hold[0, 6] = 1.0
            for _ in range(6):  # past PositionChangeTo's jump at step 5
                obs, _, _, _, info = env.step(hold)
            result[key + "/poses6"] = poses()
            result[key + "/image6"] = obs["sensor_data"]["3rd_view_camera"]["rgb"][0].numpy()
            result[key + "/info6"] = np.array(
                [float(info[k][0]) for k in ("success", "is_src_obj_grasped", "consecutive_grasp", "carrot_plate_dist")]
            )
            target = plate.pose.p.clone()
            target[0, 2] += 0.04
            carrot.set_pose(Pose.create_from_pq(target, carrot.pose.q))
            placed = []
            for _ in range(4):
                _, _, _, _, info = env.step(hold)
                placed.append(float(info["success"][0]))
            result[key + "/placed"] = np.array(placed)
        env.close()
    np.savez(out, **result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rlinf", type=Path, required=True, help="a checkout of RLinf v0.3")
    parser.add_argument("--assets", type=Path, required=True, help="a synthesize DIR (or use --asset-dir/--bridge-dir)")
    parser.add_argument("--only", nargs="*", default=None, help="env ids to compare (default: all 14)")
    parser.add_argument("--side", choices=["upstream", "ours"], default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    asset_dir, bridge_dir = args.assets / "maniskill_assets", args.assets / "ms_data"
    if args.only:
        ENV_IDS[:] = args.only
    if args.side:
        run(args.side, args.rlinf, asset_dir, bridge_dir, args.out)
        return
    work = Path(tempfile.mkdtemp(prefix="rl4vla-parity-"))
    (work / "ms").mkdir()
    (work / "ms" / "data").symlink_to(bridge_dir.resolve())  # RLinf reads the Bridge files from MS_ASSET_DIR/data
    env = {**os.environ, "MS_ASSET_DIR": str(work / "ms"), "MANISKILL_ASSET_DIR": str(asset_dir.resolve())}
    for side in ("upstream", "ours"):
        cmd = [
            sys.executable,
            __file__,
            "--rlinf",
            str(args.rlinf),
            "--assets",
            str(args.assets),
            "--side",
            side,
            "--out",
            str(work / f"{side}.npz"),
            *(["--only", *args.only] if args.only else []),
        ]
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    up, ours = np.load(work / "upstream.npz"), np.load(work / "ours.npz")
    worst: dict[str, float] = {}
    for key in up.files:
        a, b = up[key], ours[key]
        diff = float(a != b) if a.dtype.kind == "U" else float(np.abs(a.astype(float) - b.astype(float)).max())
        env_id = key.split("/")[0]
        worst[env_id] = max(worst.get(env_id, 0.0), diff)
    for env_id, diff in worst.items():
        placed = [int(ours[f"{env_id}/{e}/placed"][-1]) for e in EPISODE_IDS]
        print(f"{env_id:42s} max |ours - RLinf| = {diff:.3g}   success after placing: {placed}")


if __name__ == "__main__":
    main()
