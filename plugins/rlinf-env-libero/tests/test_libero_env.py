"""Real LIBERO episodes: initial states, simulator reuse, observations, success, GRPO groups."""

import contextlib
import dataclasses
import gc
import os
import tempfile

os.environ.setdefault("LIBERO_CONFIG_PATH", tempfile.mkdtemp(prefix="libero-config-"))  # no user config.yaml

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from rlinf_core.models.conventions import open_fraction_to_signed_gripper  # noqa: E402
from rlinf_env_libero import LIBERO_130_PARTS, LiberoEnv, clear_sim_cache, load_tasks  # noqa: E402
from rlinf_env_libero.settings import LiberoRenderConfig as Render  # noqa: E402
from rlinf_env_libero.settings import LiberoSimConfig as Sim  # noqa: E402
from rlinf_env_libero.suites import load_init_states  # noqa: E402

SMALL = {"render": Render(image_size=64, fast_render=True)}
HOLD = [0, 0, 0, 0, 0, 0, -1]  # no motion, gripper open (robosuite convention)


@pytest.fixture(autouse=True)
def _idle_simulators_closed_after_each_test():
    """A test's own envs are closed or dropped when it ends; their simulators would otherwise wait in LIBERO's
    process-wide pool (up to four, about 0.75 GB each) for a later test that builds its own."""
    yield
    gc.collect()
    clear_sim_cache()


@pytest.fixture
def env():  # per test: beside a module-wide env's simulators, the tests that build their own passed 6 GB in the suite
    env = LiberoEnv(task_suite_name="libero_spatial", num_envs=2, sim=Sim(settle_steps=2), **SMALL)
    yield env
    env.close()


@contextlib.contextmanager
def configured(env, **attrs):
    """``env`` with attributes set for the block; a dict for a config group (``sim={"settle_steps": 0}``) replaces
    those fields of the group."""
    old = {k: getattr(env, k) for k in attrs}
    for k, v in attrs.items():
        setattr(env, k, dataclasses.replace(old[k], **v) if isinstance(v, dict) else v)
    try:
        yield env
    finally:
        for k, v in old.items():
            setattr(env, k, v)


def hold(env, steps):
    acts = torch.tensor(HOLD, dtype=torch.float32).repeat(env.num_envs, steps, 1)
    return env.chunk_step(acts)


def test_suite_index_without_simulators():
    sizes = {"libero_spatial": 10, "libero_object": 10, "libero_goal": 10, "libero_10": 10, "libero_90": 90}
    for suite, n in sizes.items():
        env = LiberoEnv(task_suite_name=suite)
        assert len(env.task_names) == n and env.num_reset_states == 50 * n
    assert [LiberoEnv(task_suite_name=s).max_episode_steps for s in sizes] == [240, 240, 320, 512, 512]
    env = LiberoEnv(task_suite_name="libero_130", trials_per_task=3)
    assert env.max_episode_steps == 512 and env.num_reset_states == 130 * 3
    tasks = load_tasks("libero_130")
    assert len({t.name for t in tasks}) == 130
    starts = np.cumsum([0] + [len(load_tasks(s)) for s in LIBERO_130_PARTS])[:-1]
    for suite, start in zip(LIBERO_130_PARTS, starts):
        assert tasks[start] == load_tasks(suite)[0] and env.task_suites[start] == suite
    assert env.task_names[120].startswith("libero_10/")
    rid = env.reset_state_id(121, 2)
    assert rid == 121 * 3 + 2 and env.task_ids([rid])[0] == 121 and env.trial_ids([rid])[0] == 2
    with pytest.raises(ValueError, match="no \\(task 0, trial 3\\)"):
        env.reset_state_id(0, 3)
    with pytest.raises(ValueError, match="libero_spatial"):
        LiberoEnv(task_suite_name="libero_100")
    assert env.instructions[0] == "pick up the black bowl between the plate and the ramekin and place it on the plate"


def test_reset_loads_the_given_initial_state(env):
    ids = np.array([env.reset_state_id(0, 7), env.reset_state_id(4, 3)])
    with configured(env, sim={"settle_steps": 0}):
        obs = env.reset(reset_state_ids=ids)
    for e, (task, trial) in enumerate([(0, 7), (4, 3)]):
        expected = load_init_states("libero_spatial", task)[trial]
        np.testing.assert_array_equal(env.simulator(e).sim.get_state().flatten(), expected)
        assert obs.task_descriptions[e] == env.instructions[task]
    assert env.reset_state_ids.tolist() == ids.tolist()
    assert obs.main_images.shape == (2, 64, 64, 3) and obs.states.shape == (2, 8)
    with pytest.raises(ValueError, match="out of range"):
        env.reset(reset_state_ids=np.array([0, env.num_reset_states]))


def test_resets_reuse_simulators_and_rebuild_only_on_task_change(env):
    env.reset(reset_state_ids=np.array([env.reset_state_id(0, 0), env.reset_state_id(0, 1)]))
    sims, builds = [env.simulator(0), env.simulator(1)], env.num_sim_builds
    env.reset(reset_state_ids=np.array([env.reset_state_id(0, 5), env.reset_state_id(0, 9)]))
    assert env.num_sim_builds == builds and [env.simulator(0), env.simulator(1)] == sims, "same task: no rebuild"
    env.reset(reset_state_ids=np.array([env.reset_state_id(0, 2), env.reset_state_id(1, 0)]))
    assert env.num_sim_builds == builds + 1 and env.simulator(0) is sims[0], "only the sub-env whose task changed"
    env.reset(reset_state_ids=np.array([env.reset_state_id(0, 3), env.reset_state_id(0, 4)]))
    assert env.num_sim_builds == builds + 1 and env.simulator(1) is sims[1], (
        "task 0's simulator came back from the cache"
    )


def test_state_is_eef_position_axis_angle_and_gripper(env):
    env.reset(reset_state_ids=np.array([3, 60]))
    out = hold(env, 2)
    for e in range(2):
        sim = env.simulator(e)
        robot = sim._robosuite.robots[0]
        data = sim.sim.data
        state = out.obs.states[e].double().numpy()
        # robosuite's observables (what LIBERO policies were trained on) are sampled within the
        # last control step, so they may lag the final physics sub-step slightly
        np.testing.assert_allclose(state[:3], data.site_xpos[robot.eef_site_id], atol=1e-4)
        np.testing.assert_allclose(state[6:], data.qpos[robot._ref_gripper_joint_pos_indexes], atol=1e-3)
        angle = np.linalg.norm(state[3:6])
        axis = state[3:6] / angle
        K = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
        rot = np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K  # Rodrigues
        body = sim.sim.model.body_name2id(robot.robot_model.eef_name)
        np.testing.assert_allclose(rot, data.xmat[body].reshape(3, 3), atol=1e-3)


def _bowl_pixels_without_and_with(env, size):
    """Render sub-env 0 with the bowl hidden and in place; return images and its projected pixel."""
    from robosuite.utils.camera_utils import get_camera_transform_matrix, project_points_from_world_to_camera

    sim = env.simulator(0)
    joint = "akita_black_bowl_1_joint0"
    qpos = sim.sim.data.get_joint_qpos(joint).copy()
    world_to_pixels = get_camera_transform_matrix(sim.sim, "agentview", size, size)
    row, col = project_points_from_world_to_camera(qpos[:3], world_to_pixels, size, size)
    hidden = qpos.copy()
    hidden[2] -= 5.0  # under the floor
    sim.sim.data.set_joint_qpos(joint, hidden)
    sim.refresh()
    without = env._observe(np.array([0])).main_images[0].numpy()
    sim.sim.data.set_joint_qpos(joint, qpos)
    sim.refresh()
    with_bowl = env._observe(np.array([0])).main_images[0].numpy()
    return without, with_bowl, (int(row), int(col))


def test_images_have_the_orientation_openvla_was_trained_with(env):
    with configured(env, sim={"settle_steps": 0}):
        env.reset(reset_state_ids=np.array([0, 1]))
    size = env.render.image_size
    # 1) what OpenVLA-OFT's LIBERO eval feeds its policy: robosuite's frame rotated by 180 degrees
    raw_sim = env.simulator(0).sim
    raw_sim._render_context_offscreen.gl_ctx.make_current()
    raw = raw_sim.render(camera_name="agentview", width=size, height=size)
    with configured(env, render={"use_wrist_image": True}):
        obs = env._observe(np.array([0]))
    ours = obs.main_images[0].numpy()
    np.testing.assert_array_equal(ours, raw[::-1, ::-1])
    raw_wrist = raw_sim.render(camera_name="robot0_eye_in_hand", width=size, height=size)
    assert obs.wrist_images.shape == (1, size, size, 3) and obs.wrist_images.float().std() > 0
    np.testing.assert_array_equal(obs.wrist_images[0].numpy(), raw_wrist[::-1, ::-1])
    # 2) in that orientation the scene is upright (rows top-down) and mirrored left-right: the
    #    bowl shows up where the pinhole projection puts it, with the column mirrored
    without, with_bowl, (row, col) = _bowl_pixels_without_and_with(env, size)
    changed = np.abs(with_bowl.astype(int) - without.astype(int)).sum(-1) > 30
    assert changed.sum() > 10, "moving the bowl must change the image"
    rows, cols = np.nonzero(changed)
    centre = np.array([rows.mean(), cols.mean()])
    expected = np.array([row, size - 1 - col])
    assert np.linalg.norm(centre - expected) < 0.08 * size, (centre, expected)
    assert np.linalg.norm(centre - np.array([size - 1 - row, col])) > 0.15 * size, "upside-down would match here"
    assert np.linalg.norm(centre - np.array([row, col])) > 0.08 * size, "an un-mirrored image would match here"


def _put_bowl_on_plate(sim):
    data = sim.sim.data
    plate = data.get_joint_qpos("plate_1_joint0")
    bowl = data.get_joint_qpos("akita_black_bowl_1_joint0").copy()
    bowl[:3] = plate[:3] + np.array([0.0, 0.0, 0.02])
    data.set_joint_qpos("akita_black_bowl_1_joint0", bowl)
    data.set_joint_qvel("akita_black_bowl_1_joint0", np.zeros(6))
    sim.refresh()


def test_success_ends_the_episode_with_the_reward(env):
    with configured(env, reward={"coef": 5.0}):
        env.reset(reset_state_ids=np.array([env.reset_state_id(0, 0), env.reset_state_id(0, 1)]))
        env.pop_episodes()
        first = hold(env, 2)
        assert not first.success.any() and not first.dones.any() and (first.rewards == 0).all()
        _put_bowl_on_plate(env.simulator(0))
        out = hold(env, 8)
    k = int(np.argmax(out.success[0].numpy()))
    assert out.success[0, k] and out.terminations[0, k] and not out.terminations[0, :k].any()
    assert out.rewards[0, k] == 5.0 and out.rewards[0].sum() == 5.0
    assert not out.valid[0, k + 1 :].any(), "the episode is over after the success step"
    assert out.valid[1].all() and not out.dones[1].any()
    (record,) = env.pop_episodes()
    assert record["success_once"] == 1.0 and record["return"] == 5.0 and record["episode_len"] == 2 + k + 1
    assert record["task_id"] == 0 and not record["truncated"]


def test_ignore_terminations_keeps_going_and_rewards_the_change_once(env):
    with configured(env, ignore_terminations=True, max_episode_steps=6):
        env.reset(reset_state_ids=np.array([env.reset_state_id(0, 0), env.reset_state_id(0, 1)]))
        env.pop_episodes()
        _put_bowl_on_plate(env.simulator(0))
        out = hold(env, 6)
        assert not out.terminations.any() and out.truncations[:, -1].all()
        assert out.success[0, -1] and out.rewards[0].sum() == 1.0, "relative reward: +coef once"
        records = sorted(env.pop_episodes(), key=lambda r: r["reset_state_id"])
        assert records[0]["success_at_end"] == 1.0 and records[0]["success_once"] == 1.0
        assert records[1]["success_once"] == 0.0 and all(r["episode_len"] == 6 for r in records)


def test_gripper_convention_has_one_owner(env):
    """OpenVLA's [0, 1] gripper (1 = open) mapped by the policy-side convention drives robosuite's gripper."""
    with pytest.raises(ValueError, match="invert_gripper: true"):
        LiberoEnv(num_envs=1, gripper_action="openvla")
    policy_side = torch.zeros(2, 8, 7)
    policy_side[0, :, 6] = 0.0  # OpenVLA: 0 = close
    policy_side[1, :, 6] = 1.0  # OpenVLA: 1 = open
    chunk = open_fraction_to_signed_gripper(policy_side)
    assert chunk[0, 0, 6] == 1.0 and chunk[1, 0, 6] == -1.0
    env.reset(reset_state_ids=np.array([0, 0]))
    opening = env._observe(np.arange(2)).states[:, 6] - env._observe(np.arange(2)).states[:, 7]
    out = env.chunk_step(chunk)
    after = out.obs.states[:, 6] - out.obs.states[:, 7]
    assert after[0] < opening[0] - 0.02, "gripper 0 must close the fingers"
    assert after[1] > opening[1] - 0.002 and after[1] > after[0] + 0.03, "gripper 1 must keep them open"


def test_bad_actions_are_explained(env):
    env.reset(reset_state_ids=np.array([0, 1]))
    bad = torch.zeros(2, 2, 7)
    bad[1, 0, 3] = float("nan")
    with pytest.raises(ValueError, match="non-finite actions for sub-envs \\[1\\]"):
        env.chunk_step(bad)


def test_grpo_group_members_start_from_the_same_state():
    clear_sim_cache()  # the idle simulators of the tests above: with them and the module's env this test passed 6 GB
    env = LiberoEnv(num_envs=2, group_size=2, seed=3, task_id_filter=[0], sim=Sim(settle_steps=2), **SMALL)
    try:
        obs = env.reset()
        ids = env.reset_state_ids
        assert ids[0] == ids[1] and env.task_ids(ids)[0] == 0
        torch.testing.assert_close(obs.main_images[0], obs.main_images[1], rtol=0, atol=0)
        torch.testing.assert_close(obs.states[0], obs.states[1], rtol=0, atol=0)
        acts = (torch.rand(1, 4, 7, generator=torch.Generator().manual_seed(0)) * 2 - 1).repeat(2, 1, 1)
        out = env.chunk_step(acts)  # identical scenes + identical actions = identical episodes
        torch.testing.assert_close(out.obs.states[0], out.obs.states[1], rtol=0, atol=0)
        torch.testing.assert_close(out.obs.main_images[0], out.obs.main_images[1], rtol=0, atol=0)
        # a soft reset (no rebuild) of the used simulators replays the episode exactly
        builds = env.num_sim_builds
        again = env.reset(reset_state_ids=ids)
        torch.testing.assert_close(again.main_images, obs.main_images, rtol=0, atol=0)
        replay = env.chunk_step(acts)
        assert env.num_sim_builds == builds
        torch.testing.assert_close(replay.obs.states, out.obs.states, rtol=0, atol=0)
    finally:
        env.close()
        clear_sim_cache()


@pytest.mark.parametrize("gripper, expected", [("neutral", 0.0), ("open", -1.0)])
def test_settle_steps_command_the_configured_gripper(env, gripper, expected):
    """RLinf's experiment configs settle 15 zero-action steps with the gripper neutral
    (reset_gripper_open: false); OpenVLA-OFT's eval holds the gripper open."""
    env.reset(reset_state_ids=np.array([0, 1]))  # builds (or reuses) both simulators
    sent = []
    sims = [env.simulator(e) for e in range(2)]
    originals = [sim.env.step for sim in sims]
    for sim, orig in zip(sims, originals):
        sim.env.step = lambda a, _orig=orig: (sent.append(np.array(a, dtype=float)), _orig(a))[1]
    try:
        with configured(env, sim={"settle_steps": 3, "settle_gripper": gripper}):
            env.reset(reset_state_ids=np.array([0, 1]))
    finally:
        for sim, orig in zip(sims, originals):
            sim.env.step = orig
    assert len(sent) == 6
    for action in sent:
        np.testing.assert_array_equal(action, [0, 0, 0, 0, 0, 0, expected])
    with pytest.raises(ValueError, match="sim.settle_gripper"):
        Sim(settle_gripper="closed")
    with pytest.raises(TypeError, match=r"flat setting 'settle_gripper': it is sim.settle_gripper now"):
        LiberoEnv(settle_gripper="open")


FIXTURES = ("wooden_cabinet_1_main", "flat_stove_1_main", "wine_rack_1_main")  # libero_goal's scene


def _fixture_positions(sim_model) -> np.ndarray:
    return np.stack([np.array(sim_model.body_pos[sim_model.body_name2id(name)]) for name in FIXTURES])


def test_rlinf_placement_seed_puts_fixtures_where_rlinfs_libero_does():
    """RLinf seeds numpy in every sub-env's process before each reset with ``(seed + rank) * n + e`` (rank 0,
    seed 0: sub-env ``e`` gets ``e``), so a sub-env's fixtures land in the same place every episode. Reference:
    LIBERO's own ``OffScreenRenderEnv`` built, seeded and reset as RLinf's env worker does."""
    from libero.libero.envs import OffScreenRenderEnv

    task = load_tasks("libero_goal")[0]
    init = load_init_states("libero_goal", 0)
    kw = dict(task_suite_name="libero_goal", num_envs=2, render=Render(obs_mode="state"), task_id_filter=[0])
    rlinf = LiberoEnv(sim=Sim(settle_steps=0, placement_seed="rlinf"), **kw)
    ours = LiberoEnv(sim=Sim(settle_steps=0), **kw)
    reference = OffScreenRenderEnv(bddl_file_name=task.bddl_file, camera_heights=64, camera_widths=64)
    try:
        rlinf.reset(reset_state_ids=np.array([0, 1]))
        first = [_fixture_positions(rlinf.simulator(e).sim.model) for e in range(2)]
        for e in range(2):  # RLinf's worker e: env.seed(0 * 2 + e) -> np.random.seed(e), reset, set_init_state
            reference.seed(e)
            reference.reset()
            reference.set_init_state(init[e])
            np.testing.assert_array_equal(first[e], _fixture_positions(reference.sim.model))
        assert not np.array_equal(first[0], first[1])  # two sub-envs, two seeds
        rlinf.reset(reset_state_ids=np.array([2, 3]))  # other trials: each sub-env keeps its fixture placement
        for e in range(2):
            np.testing.assert_array_equal(_fixture_positions(rlinf.simulator(e).sim.model), first[e])
        ours.reset(reset_state_ids=np.array([0, 1]))  # per_trial: the placement follows the (task, trial) id
        per_trial = [_fixture_positions(ours.simulator(e).sim.model) for e in range(2)]
        assert not np.array_equal(per_trial[0], first[0])
        ours.reset(reset_state_ids=np.array([1, 0]))
        np.testing.assert_array_equal(_fixture_positions(ours.simulator(0).sim.model), per_trial[1])
    finally:
        reference.close()
        rlinf.close()
        ours.close()
        clear_sim_cache()
    with pytest.raises(ValueError, match="sim.placement_seed"):
        Sim(placement_seed="zero")
