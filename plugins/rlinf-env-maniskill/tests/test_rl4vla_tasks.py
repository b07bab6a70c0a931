"""The PutOnPlateInScene25 family on synthetic assets (CPU physics, lavapipe): green screen, success rule,
episode ids, the OOD variants. The first scene build of a process compiles the renderer (~40 s)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from rlinf_env_maniskill import ManiSkillEnv, lavapipe
from rlinf_env_maniskill.settings import ManiSkillRenderConfig, ManiSkillSimConfig

os.environ.setdefault("OMP_NUM_THREADS", "1")

if not (lavapipe.is_installed() or lavapipe.nvidia_present() or os.environ.get("VK_ICD_FILENAMES")):
    pytest.skip(f"lavapipe is not installed (and no GPU): run {lavapipe.INSTALL_HINT}", allow_module_level=True)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    from rlinf_env_maniskill.synthetic_assets import write_synthetic_assets

    return write_synthetic_assets(tmp_path_factory.mktemp("rl4vla_assets"))


def make_env(synthetic, tasks, obj_set="train", **kw):
    make = {"obj_set": obj_set, "asset_dir": str(synthetic.asset_dir), "bridge_dir": str(synthetic.bridge_dir)}
    args = dict(
        tasks=tasks,
        sim=ManiSkillSimConfig(backend="cpu", control_mode=None, make_kwargs=make),
        render=ManiSkillRenderConfig(image_size=[480, 640], camera="3rd_view_camera"),
        action_format="bridge",
        reset_with="episode_id",
        trials_per_task=1000,
        include_state=True,
        num_envs=1,
    )
    args.update(kw)
    return ManiSkillEnv(**args)


@pytest.fixture(scope="module")
def main_env(synthetic):
    env = make_env(synthetic, ["PutOnPlateInScene25Main-v3"])
    yield env
    env.close()


def _u(env, slot=0, task=0):
    return env._sim_of(slot, task)[0].u


def test_green_screen_pixels_come_from_the_overlay_photo_and_the_rest_from_the_render(main_env, synthetic):
    import cv2
    from mani_skill.envs.sapien_env import BaseEnv

    obs = main_env.reset(np.array([777]))
    u = _u(main_env)
    raw = BaseEnv._get_obs_sensor_data(u)["3rd_view_camera"]  # the render without the task's override
    seg = raw["segmentation"][0, ..., 0]
    kept = torch.isin(seg, torch.cat([u.robot_link_ids, u.target_object_actor_ids]).to(seg.dtype))
    image = obs.main_images[0]
    key = list(
        u.overlay_images_numpy
        and __import__("json").loads((synthetic.carrot_dir / "more_table" / "model_db.json").read_text())
    )[int(u.select_overlay_ids[0])]
    photo = cv2.resize(
        cv2.cvtColor(cv2.imread(str(synthetic.carrot_dir / "more_table" / "imgs" / key)), cv2.COLOR_BGR2RGB), (640, 480)
    )
    assert 0.005 < kept.float().mean() < 0.5, "robot and objects are in view, and so is background"
    assert torch.equal(image[~kept], torch.from_numpy(photo)[~kept]), "background = the overlay photo"
    assert torch.equal(image[kept], raw["rgb"][0][kept]), "robot and object pixels = the render"
    assert (raw["rgb"][0][~kept] != torch.from_numpy(photo)[~kept]).any(-1).float().mean() > 0.5


def _carrot_and_plate(u):
    carrot = u.objs_carrot[u.carrot_names[int(u.select_carrot_ids[0])]]
    plate = u.objs_plate[u.plate_names[int(u.select_plate_ids[0])]]
    return carrot, plate


@pytest.mark.parametrize("offset, succeeds", [((0.0, 0.0), True), ((0.0, 0.2), False)])
def test_success_fires_for_a_placement_on_the_plate_not_beside_it(main_env, offset, succeeds):
    from mani_skill.utils.structs.pose import Pose

    main_env.reset(np.array([5]))
    u = _u(main_env)
    carrot, plate = _carrot_and_plate(u)
    target = plate.pose.p.clone()
    target[0, :2] += torch.tensor(offset)
    target[0, 2] += 0.04
    carrot.set_pose(Pose.create_from_pq(target, carrot.pose.q))
    hold = np.zeros((1, 1, 7), np.float32)
    hold[..., 6] = 1.0  # open gripper, no motion
    success = False
    for _ in range(6):
        out = main_env.chunk_step(torch.from_numpy(hold))
        success |= bool(out.success.any())
        if out.dones.any():
            break
    assert success is succeeds
    main_env.pop_episodes()


def test_episode_id_gives_the_same_scene_on_every_reset_worker_and_restart(main_env, synthetic):
    def scene(env):
        u = _u(env)
        carrot, plate = _carrot_and_plate(u)
        return (
            u.get_language_instruction()[0],
            int(u.select_overlay_ids[0]),
            carrot.pose.raw_pose.clone(),
            plate.pose.raw_pose.clone(),
        )

    main_env.reset(np.array([842]))
    first, first_img = scene(main_env), main_env._observe(np.arange(1)).main_images.clone()
    main_env.reset(np.array([99]))
    assert scene(main_env)[:2] != first[:2] or not torch.equal(scene(main_env)[2], first[2])
    main_env.reset(np.array([842]))
    again = scene(main_env)
    other = make_env(synthetic, ["PutOnPlateInScene25Main-v3"])  # another worker / a resumed run
    try:
        other.reset(np.array([842]))
        for a, b, c in zip(first, again, scene(other)):
            if torch.is_tensor(a):
                torch.testing.assert_close(a, b)
                torch.testing.assert_close(a, c)
            else:
                assert a == b == c
        assert torch.equal(other._observe(np.arange(1)).main_images, first_img)
    finally:
        other.close()
    u = _u(main_env)
    eid = 654321
    picks = u.decode_episode_id(torch.tensor([eid]))
    # upstream's digits: carrot // (plate·overlay·784·4), overlay // (784·4) % 16, pos // 4 % 784, quat % 4
    assert int(picks["carrot"]) == eid // (16 * 784 * 4) and int(picks["overlay"]) == eid // (784 * 4) % 16
    assert int(picks["pos"]) == eid // 4 % 784 and int(picks["quat"]) == eid % 4
    assert u.total_num_trials == 16 * 16 * 784 * 4


VARIANTS = [
    "PutOnPlateInScene25VisionImage-v1",
    "PutOnPlateInScene25Carrot-v1",
    "PutOnPlateInScene25Plate-v1",
    "PutOnPlateInScene25Instruct-v1",
    "PutOnPlateInScene25Position-v1",
    "PutOnPlateInScene25EEPose-v1",
    "PutOnPlateInScene25PositionChangeTo-v1",
    "PutOnPlateInScene25VisionTexture03-v1",
    "PutOnPlateInScene25VisionTexture05-v1",
    "PutOnPlateInScene25VisionWhole03-v1",
    "PutOnPlateInScene25VisionWhole05-v1",
    "PutOnPlateInScene25MultiCarrot-v1",
    "PutOnPlateInScene25MultiPlate-v1",
]


def test_every_ood_variant_builds_and_changes_what_it_claims(synthetic):
    from rlinf_env_maniskill.rl4vla.poses import HALF_EDGE, XY_CENTER
    from rlinf_env_maniskill.rl4vla.scene import INITIAL_QPOS

    env = make_env(synthetic, VARIANTS, obj_set="test", num_envs=len(VARIANTS), trials_per_task=50)
    try:
        obs = env.reset(np.arange(len(VARIANTS)) * 50 + 37)
        us = {task: _u(env, i, i) for i, task in enumerate(VARIANTS)}
        assert all(img.float().std() > 5 for img in obs.main_images)
        texts = dict(zip(VARIANTS, obs.task_descriptions))
        assert 16 <= int(us["PutOnPlateInScene25VisionImage-v1"].select_overlay_ids[0]) <= 20
        assert int(us["PutOnPlateInScene25VisionImage-v1"].select_carrot_ids[0]) < 16
        assert 16 <= int(us["PutOnPlateInScene25Carrot-v1"].select_carrot_ids[0]) <= 24
        assert int(us["PutOnPlateInScene25Carrot-v1"].select_overlay_ids[0]) < 16
        plate = us["PutOnPlateInScene25Plate-v1"]
        assert len(plate.plate_names) == 17 and int(plate.select_plate_ids[0]) >= 1
        assert texts["PutOnPlateInScene25Plate-v1"].endswith(f"plate {int(plate.select_plate_ids[0])}")
        instruct = texts["PutOnPlateInScene25Instruct-v1"]
        assert not instruct.startswith("put ") and "orange object" in instruct and "plate 0" in instruct
        position = us["PutOnPlateInScene25Position-v1"]
        carrot_xy = position.xyz_configs[int(position.select_pos_ids[0]), 0, :2]
        plate_xy = position.xyz_configs[int(position.select_pos_ids[0]), 1, :2]
        outside = lambda xy: (np.abs(xy - XY_CENTER) > HALF_EDGE + 1e-6).any()  # noqa: E731
        assert outside(carrot_xy) and outside(plate_xy) and int(position.select_quat_ids[0]) >= 4
        ee = us["PutOnPlateInScene25EEPose-v1"]
        qpos = ee.agent.robot.get_qpos()[0, :6].cpu().numpy()
        assert np.abs(qpos - INITIAL_QPOS[:6]).max() > 0.05
        _check_texture_and_distractor_variants(us)
        change = us["PutOnPlateInScene25PositionChangeTo-v1"]
        carrot, _ = _carrot_and_plate(change)
        hold = np.zeros((len(VARIANTS), 1, 7), np.float32)
        hold[..., 6] = 1.0
        start = carrot.pose.p[0, :2].clone()
        for _ in range(6):
            env.chunk_step(torch.from_numpy(hold))
        assert torch.linalg.norm(carrot.pose.p[0, :2] - start) > 0.1, "the carrot jumped at step 5"
    finally:
        env.close()


def _check_texture_and_distractor_variants(us):
    from mani_skill.envs.sapien_env import BaseEnv

    from rlinf_env_maniskill.rl4vla.scene import PutOnPlateInScene25

    change = {}
    for name in ("VisionTexture03", "VisionTexture05", "VisionWhole03", "VisionWhole05"):
        u = us[f"PutOnPlateInScene25{name}-v1"]
        raw = BaseEnv._get_obs_sensor_data(u)["3rd_view_camera"]
        plain = PutOnPlateInScene25._green_screen(u, raw["rgb"], raw["segmentation"])[0].float()
        ours = u._green_screen(raw["rgb"], raw["segmentation"])[0].float()
        kept = u._robot_object_mask(raw["segmentation"])[0]
        change[name] = ((ours - plain).abs()[kept].mean(), (ours - plain).abs()[~kept].mean())
    assert change["VisionTexture03"][0] > 1 and change["VisionTexture03"][1] == 0, "texture: robot/objects only"
    assert change["VisionTexture05"][0] > change["VisionTexture03"][0]
    assert change["VisionWhole03"][1] > 1 and change["VisionWhole05"][1] > change["VisionWhole03"][1], "whole image"
    for name, models, picks in (
        ("MultiCarrot", "objs_carrot", "select_carrot_ids"),
        ("MultiPlate", "objs_plate", "select_plate_ids"),
    ):
        u = us[f"PutOnPlateInScene25{name}-v1"]
        on_table = [n for n, a in getattr(u, models).items() if float(a.pose.p[0, 0]) < 0.5]
        assert len(on_table) == 2, f"{name}: the chosen model and one distractor on the table"
        assert int(u.select_extra_ids[0]) != int(getattr(u, picks)[0])
    assert 16 <= int(us["PutOnPlateInScene25MultiCarrot-v1"].select_extra_ids[0]) <= 24
    assert int(us["PutOnPlateInScene25MultiPlate-v1"].select_extra_ids[0]) >= 1
