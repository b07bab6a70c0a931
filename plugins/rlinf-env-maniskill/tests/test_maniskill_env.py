"""Real ManiSkill episodes on the CPU backend with rendering (lavapipe on machines without a GPU).

The first camera render of a process compiles SAPIEN's pipelines on lavapipe (10-20 s); every
later env in the same process is cheap, so the tests share one process and mostly small envs.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import torch

from rlinf_core.testing.conformance import EnvPluginTests
from rlinf_env_maniskill import ManiSkillEnv, lavapipe
from rlinf_env_maniskill.settings import ManiSkillRenderConfig as Render
from rlinf_env_maniskill.settings import ManiSkillRewardConfig as Reward
from rlinf_env_maniskill.settings import ManiSkillSimConfig as Sim

os.environ.setdefault("OMP_NUM_THREADS", "1")

if not (lavapipe.is_installed() or lavapipe.nvidia_present() or os.environ.get("VK_ICD_FILENAMES")):
    pytest.skip(
        f"lavapipe is not installed (and no GPU): run {lavapipe.INSTALL_HINT}",
        allow_module_level=True,
    )

SMALL = dict(render=Render(image_size=32), trials_per_task=8, include_state=True, sim=Sim(backend="cpu"))


class TestManiSkillConformance(EnvPluginTests):
    env_class = ManiSkillEnv
    env_kwargs = SMALL


@pytest.fixture(scope="module")
def env():
    """Two PickCube sub-envs with 16-D states, shared by the tests below."""
    e = ManiSkillEnv(num_envs=2, **SMALL)
    e.reset(np.array([0, 0]))
    yield e
    e.close()


def _sim(env: ManiSkillEnv, slot: int):
    return env._sim_of(slot, int(env._slot_task[slot]))[0].u


def test_observation_layout_and_shared_initial_states(env):
    obs = env.reset(np.array([3, 3]))
    assert obs.main_images.shape == (2, 32, 32, 3) and obs.main_images.dtype == torch.uint8
    assert obs.states.shape == (2, 16) and obs.states.dtype == torch.float32
    assert obs.task_descriptions == ["pick up the red cube and move it to the green sphere"] * 2
    assert obs.main_images.float().std() > 10
    # one reset state id gives one initial state, on any sub-env (GRPO groups)
    torch.testing.assert_close(obs.main_images[0], obs.main_images[1])
    torch.testing.assert_close(obs.states[0], obs.states[1])
    other = env.reset(np.array([3, 4]))
    assert not torch.equal(other.states[0], other.states[1])
    torch.testing.assert_close(other.states[0], obs.states[0])


class _PickAndPlace:
    """Scripted PickCube expert on the env's 7-D actions: above the cube, down, close, carry to the goal."""

    def __init__(self) -> None:
        self.phase, self.grasp_step = 0, 0

    def action(self, u, step: int) -> np.ndarray:
        tcp, cube, goal = (x.pose.p[0].numpy() for x in (u.agent.tcp, u.cube, u.goal_site))
        gripper = 1.0
        if self.phase == 0:
            target = cube + [0, 0, 0.05]
            self.phase = 1 if np.linalg.norm(target - tcp) < 0.01 else 0
        if self.phase == 1:
            target = cube
            if np.linalg.norm(target - tcp) < 0.005:
                self.phase, self.grasp_step = 2, step
        if self.phase >= 2:
            gripper = -1.0
            target = cube if step - self.grasp_step < 3 else goal
        action = np.zeros(7, np.float32)
        action[:3] = np.clip((target - tcp) * 20.0, -1, 1)
        action[6] = gripper
        return action


def test_scripted_pick_and_place_is_detected_as_success(env):
    """A scripted grasp-and-carry through the env's own 7-D actions reaches PickCube's goal."""
    env.reset(np.array([3, 3]))
    u = _sim(env, 0)
    script = _PickAndPlace()
    for step in range(45):
        action = np.zeros((2, 1, 7), np.float32)
        action[0, 0] = script.action(u, step)
        action[1, 0, 6] = 1.0  # slot 1 stays put and must not succeed
        out = env.chunk_step(torch.from_numpy(action))
        if out.dones[0].any():
            break
    assert out.terminations[0, 0] and out.success[0, 0] and not out.truncations.any()
    assert out.rewards[0, 0] == 1.0 and out.rewards[1, 0] == 0.0
    assert not out.success[1].any()
    records = env.pop_episodes()
    assert len(records) == 1
    assert records[0]["success_once"] == 1.0 and records[0]["fail_once"] == 0.0
    assert records[0]["episode_len"] == step + 1 < env.max_episode_steps


def test_state_snapshot_and_restore_used_to_freeze_finished_gpu_rows(env):
    """A GPU batch keeps stepping finished rows and restores them; the same calls on a CPU sim."""
    from rlinf_env_maniskill import _sim as simmod

    env.reset(np.array([2, 2]))
    u = _sim(env, 0)
    rows = torch.tensor([0])
    snapshot = simmod._stack([simmod._rows(u.get_state_dict(), rows)])
    before = env._observe(np.arange(1)).states.clone()
    push = np.zeros((2, 2, 7), np.float32)
    push[:, :, 0] = 1.0
    env.chunk_step(torch.from_numpy(push))
    assert not torch.allclose(env._observe(np.arange(1)).states, before)
    u.set_state_dict(snapshot, rows)
    torch.testing.assert_close(env._observe(np.arange(1)).states, before)
    env.pop_episodes()


def test_truncation_keeps_the_final_observation_and_auto_resets():
    env = ManiSkillEnv(num_envs=2, max_episode_steps=3, auto_reset=True, **SMALL)
    ref = ManiSkillEnv(num_envs=2, **SMALL)
    try:
        env.reset(np.array([1, 2]))
        push = np.zeros((2, 4, 7), np.float32)
        push[:, :, 0] = 0.8  # move the gripper along +x every sub-step
        out = env.chunk_step(torch.from_numpy(push))
        assert out.truncations[:, 2].all() and not out.terminations.any()
        assert out.valid[:, :3].all() and not out.valid[:, 3].any(), "no step after the truncation"
        assert out.final_obs_env_ids.tolist() == [0, 1]
        # the final observation is the state after exactly 3 steps, not after 4 or after the reset
        ref.reset(np.array([1, 2]))
        for _ in range(3):
            ref.chunk_step(torch.from_numpy(push[:, :1]))
        expected = ref._observe(np.arange(2))
        torch.testing.assert_close(out.final_obs.states, expected.states)
        assert (out.final_obs.main_images.float() - expected.main_images.float()).abs().mean() < 1.0
        # the returned observation already belongs to the next episodes (fresh initial states)
        new_ids = env.reset_state_ids
        fresh = ref.reset(new_ids)
        torch.testing.assert_close(out.obs.states, fresh.states)
        assert not torch.allclose(out.obs.states, out.final_obs.states)
        assert [r["truncated"] for r in env.pop_episodes()] == [True, True]
    finally:
        env.close()
        ref.close()


def test_dense_relative_reward_and_bridge_actions():
    dense = ManiSkillEnv(num_envs=1, reward=Reward(mode="dense", relative=True), **SMALL)
    bridge = ManiSkillEnv(num_envs=1, action_format="bridge", **SMALL)
    try:
        dense.reset(np.array([5]))
        bridge.reset(np.array([5]))
        act = np.zeros((1, 3, 7), np.float32)
        act[..., 2] = -0.5  # down towards the cube
        act[..., 6] = 1.0
        out = dense.chunk_step(torch.from_numpy(act))
        raw = _sim(dense, 0).get_reward(obs=None, action=None, info=_sim(dense, 0).get_info())
        # relative rewards telescope to the current normalized dense reward
        assert out.rewards.sum().item() == pytest.approx(float(raw), abs=1e-5)
        assert 0.0 < float(raw) <= 1.0
        # bridge format: metres / radians / gripper in [0, 1] -> the same motion
        metric = act.copy()
        metric[..., 2] = -0.05
        metric[..., 6] = 1.0
        bridge.chunk_step(torch.from_numpy(metric))
        torch.testing.assert_close(bridge._observe(np.arange(1)).states, dense._observe(np.arange(1)).states)
    finally:
        dense.close()
        bridge.close()


def test_several_tasks_in_one_env():
    env = ManiSkillEnv(num_envs=2, tasks=["PickCube-v1", "PushCube-v1"], **{**SMALL, "trials_per_task": 2})
    try:
        assert env.num_reset_states == 4 and env.task_names == ["PickCube-v1", "PushCube-v1"]
        obs = env.reset(np.array([0, 3]))
        assert obs.task_descriptions[0].startswith("pick up the red cube")
        assert obs.task_descriptions[1].startswith("push the blue cube")
        obs = env.reset(np.array([2, 1]))  # slots swap tasks
        assert obs.task_descriptions[0].startswith("push") and obs.task_descriptions[1].startswith("pick")
        out = env.chunk_step(torch.zeros(2, 2, 7))
        assert out.valid.all()
    finally:
        env.close()


def test_every_offline_task_builds_renders_and_steps():
    from rlinf_env_maniskill.tasks import OFFLINE_TASKS

    tasks = list(OFFLINE_TASKS)
    env = ManiSkillEnv(num_envs=len(tasks), tasks=tasks, **{**SMALL, "trials_per_task": 1})
    try:
        obs = env.reset(np.arange(len(tasks)))
        for task, image in zip(tasks, obs.main_images):
            assert image.float().std() > 5, f"{task}: blank camera image"
        out = env.chunk_step(torch.zeros(len(tasks), 2, 7))
        assert out.valid.all() and out.obs.main_images.float().std(dim=(1, 2, 3)).min() > 5
        assert [t.split()[0] for t in out.obs.task_descriptions][:2] == ["pick", "push"]
    finally:
        env.close()


@pytest.mark.parametrize(
    "task, asset_env, needle",
    [
        ("PutOnPlateInScene25Main-v3", None, "hf download --repo-type dataset RLinf/maniskill_assets"),
        ("PutOnPlateInScene25Main-v3", "empty", "bridge_table_1_v1.glb"),
        ("PutCarrotOnPlateInScene-v1", None, "download_asset bridge_v2_real2sim"),
    ],
)
def test_missing_assets_fail_fast_with_the_install_command(task, asset_env, needle, monkeypatch, tmp_path):
    if asset_env:
        monkeypatch.setenv("MANISKILL_ASSET_DIR", str(tmp_path))
    else:
        monkeypatch.delenv("MANISKILL_ASSET_DIR", raising=False)
    env = ManiSkillEnv(num_envs=1, tasks=[task], **{**SMALL, "include_state": False})
    t0 = time.time()
    with pytest.raises(RuntimeError) as info:
        env.reset()
    assert time.time() - t0 < 30
    message = str(info.value)
    assert task in message and needle in message and "\n" not in message


def test_unknown_task_suggests_a_name():
    env = ManiSkillEnv(num_envs=1, tasks=["PickCub-v1"], instructions={"PickCub-v1": "x"}, **SMALL)
    with pytest.raises(ValueError, match="did you mean PickCube-v1"):
        env.reset()


def test_arguments_are_checked_without_starting_the_simulator():
    with pytest.raises(ValueError, match=r"reward.mode must be one of"):
        Reward(mode="shaped")
    with pytest.raises(ValueError, match="render.image_size"):
        Render(image_size=[1, 2, 3])
    with pytest.raises(TypeError, match=r"flat setting 'reward_mode': it is reward.mode now"):
        ManiSkillEnv(reward_mode="dense")
    env = ManiSkillEnv(tasks=["PickCube-v1", "PegInsertionSide-v1"])
    assert env.max_episode_steps == 100 and ManiSkillEnv().max_episode_steps == 50
    assert not env._built and env._sims == {}
    assert env.episode_metrics == ("fail_once",), "fail_once is logged as env/fail_once and eval/fail_once"


def test_grasp_shaped_relative_reward_follows_rlinf():
    """reward.mode grasp + reward.relative: per-step change of 0.1·grasped + 0.1·consecutive_grasp
    + 1·(success ∧ grasped), checked against the simulator's own info at every step."""
    from rlinf_env_maniskill._sim import grasp_shaped_reward

    env = ManiSkillEnv(num_envs=1, reward=Reward(mode="grasp", relative=True), **SMALL)
    try:
        env.reset(np.array([3]))
        u = _sim(env, 0)
        script, prev, rewards, shaped = _PickAndPlace(), 0.0, [], []
        for step in range(45):
            action = script.action(u, step).reshape(1, 1, 7)
            out = env.chunk_step(torch.from_numpy(action))
            info = u.get_info()
            now = float(grasp_shaped_reward(info, np.asarray(info["success"]).reshape(1), 1)[0])
            assert out.rewards[0, 0].item() == pytest.approx(now - prev, abs=1e-6)
            prev = now
            rewards.append(out.rewards[0, 0].item())
            shaped.append(now)
            if out.dones[0].any():
                break
        assert out.success[0, 0]
        assert 0.1 in [round(s, 6) for s in shaped]  # grasped before success
        assert sum(rewards) == pytest.approx(1.1, abs=1e-5)  # telescopes to grasped (0.1) + success (1)
    finally:
        env.close()
    with pytest.raises(ValueError, match="reward.mode"):
        Reward(mode="shaped")


BRIDGE_K = [[623.588, 0, 319.501], [0, 623.588, 239.545], [0, 0, 1]]  # ManiSkill's Bridge 3rd_view_camera, 640x480


def test_camera_with_fixed_intrinsic_must_render_at_its_native_size():
    """ManiSkill keeps a camera's pixel intrinsics when its size is overridden: the Bridge scenes'
    640x480 camera rendered at 224x224 would show an off-centre crop. The env refuses, naming the size."""
    from rlinf_env_maniskill._sim import check_camera_size

    check_camera_size("T", "3rd_view_camera", BRIDGE_K, (480, 640))
    check_camera_size("T", "base_camera", None, (224, 224))  # fov cameras scale with the size
    with pytest.raises(ValueError, match=r"image_size: \[480, 640\]"):
        check_camera_size("T", "3rd_view_camera", BRIDGE_K, (224, 224))
    # the same check on a real simulator: PickCube's camera given the Bridge intrinsics at 32x32
    sensor = {"sensor_configs": {"intrinsic": BRIDGE_K, "fov": None, "width": 32, "height": 32}}
    kw = {**SMALL, "sim": Sim(backend="cpu", make_kwargs=sensor)}
    env = ManiSkillEnv(num_envs=1, **kw)
    try:
        with pytest.raises(ValueError, match=r"image_size: \[480, 640\]"):
            env.reset(np.array([0]))
    finally:
        env.close()


def test_reset_with_episode_id_places_every_group_member_in_the_id_s_scene(monkeypatch):
    """RLinf resets RL4VLA's tasks with ``options={"episode_id": id}`` and a constant seed; the task decodes the
    id into its scene. Reset by seed, such a task draws the id from the torch RNG ManiSkill seeds with the episode
    seed: a fixed pseudo-random scene per trial, not the trial's own id."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # task_modules: [episode_id_task]
    from episode_id_task import cube_xy

    kwargs = dict(
        SMALL,
        tasks=["EpisodeIdPickCube-v1"],
        sim=Sim(backend="cpu", task_modules=["episode_id_task"]),
        trials_per_task=16,
        instructions={"EpisodeIdPickCube-v1": "pick up the cube"},
        num_envs=2,
    )

    def cubes(env):
        return torch.stack([env._sim_of(slot, 0)[0].u.cube.pose.p[0, :2].cpu() for slot in range(env.num_envs)])

    env = ManiSkillEnv(reset_with="episode_id", **kwargs)
    try:
        env.reset(np.array([5, 11]))
        assert torch.allclose(cubes(env), cube_xy(torch.tensor([5, 11])), atol=1e-4)
        env.reset(np.array([2, 2]))  # a GRPO group: one scene
        assert torch.allclose(cubes(env), cube_xy(torch.tensor([2, 2])), atol=1e-4)
    finally:
        env.close()

    env = ManiSkillEnv(reset_with="seed", **kwargs)
    try:
        scenes = []
        for trial in range(6):
            env.reset(np.array([trial, trial]))
            c = cubes(env)
            assert torch.allclose(c, c[:1].expand_as(c), atol=1e-4), "one seed, one scene"
            scenes.append(c[0])
        assert not all(torch.allclose(c, cube_xy(torch.tensor([t]))[0], atol=1e-4) for t, c in enumerate(scenes))
    finally:
        env.close()

    with pytest.raises(ValueError, match="exceeds the 16 episode ids of 'EpisodeIdPickCube-v1'"):
        bad = ManiSkillEnv(reset_with="episode_id", **{**kwargs, "trials_per_task": 17})
        try:
            bad.reset(np.array([0, 0]))
        finally:
            bad.close()
    with pytest.raises(ValueError, match="'PickCube-v1' has none: use reset_with: seed"):
        bad = ManiSkillEnv(reset_with="episode_id", **SMALL, num_envs=1)
        try:
            bad.reset(np.array([0]))
        finally:
            bad.close()


def test_images_come_through_the_task_s_own_observation_path(monkeypatch):
    """A task that edits its pixels in ``_get_obs_sensor_data`` (RL4VLA's green screen) is seen edited: background
    pixels show the task's overlay, robot pixels the render (the env used to capture cameras directly)."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    from overlay_task import OVERLAY

    env = ManiSkillEnv(
        num_envs=1,
        tasks=["OverlayPickCube-v1"],
        instructions={"OverlayPickCube-v1": "pick"},
        **{**SMALL, "render": Render(image_size=64), "sim": Sim(backend="cpu", task_modules=["overlay_task"])},
    )
    try:
        for step in range(2):
            obs = env.reset(np.array([1])) if step == 0 else env.chunk_step(torch.zeros(1, 1, 7)).obs
            u = _sim(env, 0)
            image = obs.main_images[0]
            robot = torch.isin(u.last_segmentation[0].cpu(), u.robot_ids.to(u.last_segmentation.dtype))
            assert 0 < robot.sum() < robot.numel() / 2, "the camera sees some robot"
            assert (image[~robot] == OVERLAY).all(), "every non-robot pixel is the task's overlay"
            torch.testing.assert_close(image[robot], u.last_raw_rgb[0].cpu()[robot][:, :3].to(torch.uint8))
            assert (u.last_raw_rgb[0].cpu()[~robot][:, :3] != OVERLAY).any(dim=-1).float().mean() > 0.9
    finally:
        env.close()
