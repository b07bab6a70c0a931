"""MetaWorldEnv: the rlinf env contract, real MetaWorld episodes, task sets and rendering."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

os.environ.setdefault("MUJOCO_GL", "egl")

from rlinf_core.testing.conformance import EnvPluginTests  # noqa: E402
from rlinf_env_metaworld import DIFFICULTY, INSTRUCTIONS, ML45_TEST, ML45_TRAIN, MT10, MT50, MetaWorldEnv  # noqa: E402
from rlinf_env_metaworld.settings import MetaWorldRenderConfig as Render  # noqa: E402
from rlinf_env_metaworld.settings import MetaWorldSimConfig as Sim  # noqa: E402


class TestMetaWorldConformance(EnvPluginTests):
    env_class = MetaWorldEnv
    env_kwargs = {"task_set": "MT1", "task_name": "reach-v3", "render": Render(image_size=64), "trials_per_task": 4}


def test_task_sets_match_installed_metaworld():
    from metaworld import env_dict

    assert MT50 == list(env_dict.MT50_V3) and len(MT50) == 50
    assert MT10 == list(env_dict.MT10_V3)
    assert ML45_TRAIN == list(env_dict.ML45_V3["train"]) and len(ML45_TRAIN) == 45
    assert ML45_TEST == list(env_dict.ML45_V3["test"]) and len(ML45_TEST) == 5
    assert sorted(t for group in DIFFICULTY.values() for t in group) == sorted(MT50)


#: sha256 over "task<TAB>description<NL>" of LeRobot's TASK_DESCRIPTIONS in sorted task order, computed from
#: huggingface/lerobot@271d92dc:src/lerobot/envs/metaworld_config.json (= RLinf v0.3's copy), not from our file
UPSTREAM_TASK_DESCRIPTIONS_SHA256 = "5eaf68b3a6cc078d6718b0f553f65b5a09aecdcb5d242f72156d0d826bf9373b"


def test_instructions_are_lerobots_task_descriptions_for_all_50_tasks():
    import hashlib

    from metaworld import env_dict

    from rlinf_env_metaworld.tasks import INSTRUCTIONS_SOURCE

    assert sorted(INSTRUCTIONS) == sorted(env_dict.MT50_V3)  # one for every task metaworld lists
    digest = hashlib.sha256("".join(f"{k}\t{v}\n" for k, v in sorted(INSTRUCTIONS.items())).encode()).hexdigest()
    assert digest == UPSTREAM_TASK_DESCRIPTIONS_SHA256
    assert INSTRUCTIONS["assembly-v3"] == "Pick up a nut and place it onto a peg"
    assert INSTRUCTIONS["push-back-v3"] == "Push the puck to a goal"  # upstream words it like push-v3
    assert INSTRUCTIONS["push-v3"] == "Push the puck to a goal"
    assert INSTRUCTIONS["faucet-open-v3"] == "Rotate the faucet counter-clockwise"
    assert INSTRUCTIONS["window-close-v3"] == "Push and close a window"
    assert INSTRUCTIONS_SOURCE["repo"] == "huggingface/lerobot"
    assert INSTRUCTIONS_SOURCE["path"] == "src/lerobot/envs/metaworld_config.json"
    assert len(INSTRUCTIONS_SOURCE["commit"]) == 40
    env = MetaWorldEnv(task_set="MT50")
    assert env.instructions == [INSTRUCTIONS[t] for t in MT50]


def test_task_set_selection_and_errors():
    assert MetaWorldEnv(task_set="MT50").task_names == MT50
    assert MetaWorldEnv(task_set="MT10", trials_per_task=3).num_reset_states == 30
    assert MetaWorldEnv(task_set="ML45").task_names == ML45_TRAIN
    test_env = MetaWorldEnv(task_set="ML45", split="test")
    assert test_env.task_names == ML45_TEST and test_env.hide_goal
    assert MetaWorldEnv(task_set="MT1", task_name="push-v3").task_names == ["push-v3"]
    assert MetaWorldEnv(tasks=["push-v3", "reach-v3"]).task_difficulties == ["hard", "easy"]
    with pytest.raises(ValueError, match="valid: MT1, MT10, MT50, ML45"):
        MetaWorldEnv(task_set="MT49")
    with pytest.raises(ValueError, match="pick-place-v3"):
        MetaWorldEnv(task_set="MT1", task_name="pick-plaec-v3")
    with pytest.raises(ValueError, match="no test split"):
        MetaWorldEnv(task_set="MT10", split="test")


def test_a_task_typo_gets_a_did_you_mean_before_the_list():
    """The closest task name comes first, not buried after the 50 valid ones."""
    from rlinf_env_metaworld.tasks import resolve_tasks

    for kwargs, expected in (
        ({"task_set": "MT1", "task_name": "pick-plaec-v3"}, "'pick-place-v3'"),
        ({"task_set": "MT1", "task_name": "push"}, "'push-v3'"),
        ({"task_set": "MT1", "tasks": ["reach-v3", "door-opn-v3"]}, "'door-open-v3'"),
        ({"task_set": "mt10"}, "'MT10'"),
    ):
        with pytest.raises(ValueError) as info:
            resolve_tasks(**kwargs)
        text = str(info.value)
        assert f"did you mean {expected}?" in text and text.index("did you mean") < text.index("valid:"), text


def _run_expert(env: MetaWorldEnv, chunk: int, ids: np.ndarray) -> list[dict]:
    obs = env.reset(ids)
    done = torch.zeros(env.num_envs, dtype=torch.bool)
    while not done.all():
        assert obs.main_images.shape[1:] == (env.render.image_size, env.render.image_size, 3)
        out = env.chunk_step(env.expert_actions(chunk))
        obs, done = out.obs, done | out.dones.any(1)
    return sorted(env.pop_episodes(), key=lambda e: e["reset_state_id"])


def test_scripted_expert_succeeds_through_chunk_interface():
    env = MetaWorldEnv(tasks=["reach-v3", "button-press-topdown-v3"], num_envs=2, render=Render(image_size=64),
                       trials_per_task=3, max_episode_steps=100)  # fmt: skip
    try:
        closed_loop = _run_expert(env, 1, np.array([0, 4]))
        renders = env.num_renders
        chunked = _run_expert(env, 8, np.array([0, 4]))
        chunk_renders = env.num_renders - renders
    finally:
        env.close()
    for episodes in (closed_loop, chunked):
        assert [e["task_id"] for e in episodes] == [0, 1]
        assert all(e["success_once"] == 1.0 and not e["truncated"] for e in episodes)
        assert all(e["return"] == 1.0 for e in episodes)  # sparse reward, success ends the episode
    # the chunked expert replays the closed-loop expert exactly (lookahead + rewind is deterministic)
    assert [e["episode_len"] for e in chunked] == [e["episode_len"] for e in closed_loop]
    # render only at chunk boundaries: one image per sub-env per chunk (+ reset), not per step
    longest = max(e["episode_len"] for e in chunked)
    assert chunk_renders <= 2 * (longest // 8 + 2)
    assert renders > 2 * (longest // 8 + 2)


def test_reset_state_is_deterministic_and_trials_differ():
    env = MetaWorldEnv(task_set="MT1", task_name="pick-place-v3", num_envs=1, render=Render(image_size=64),
                       trials_per_task=3, state_type="full")  # fmt: skip
    held_out = env.clone(trial_seed=1)
    try:
        a = env.reset(np.array([1]))
        env.chunk_step(torch.rand(1, 4, 4) * 2 - 1)
        env.reset(np.array([2]))
        b = env.reset(np.array([1]))
        c = env.reset(np.array([2]))
        d = held_out.reset(np.array([1]))
    finally:
        env.close()
        held_out.close()
    torch.testing.assert_close(a.states, b.states)
    assert torch.equal(a.main_images, b.main_images)
    assert not torch.allclose(a.states, c.states)  # another trial: another object/goal placement
    assert not torch.allclose(a.states, d.states)  # another trial_seed: held-out placements
    assert a.states[0, -3:].abs().sum() > 0  # MT tasks observe the goal


def test_eval_grid_covers_every_task_and_trial_once():
    env = MetaWorldEnv(task_set="ML45", split="test", trials_per_task=2, num_envs=2, render=Render(image_size=32),
                       is_eval=True, auto_reset=True, ignore_terminations=True, max_episode_steps=2,
                       state_type="full")  # fmt: skip
    try:
        obs = env.reset()
        assert obs.task_descriptions == [INSTRUCTIONS["bin-picking-v3"]] * 2
        assert (obs.states[:, -3:] == 0).all()  # ML45 hides the goal from the policy
        for _ in range(30):
            if env.eval_finished:
                break
            env.chunk_step(torch.zeros(2, 2, 4))
        records = env.pop_episodes()
    finally:
        env.close()
    assert env.eval_finished
    assert sorted(r["reset_state_id"] for r in records) == list(range(10))
    per_task = {}
    for r in records:
        per_task.setdefault(env.task_names[r["task_id"]], []).append(r["success_once"])
    assert sorted(per_task) == sorted(ML45_TEST) and all(len(v) == 2 for v in per_task.values())


def test_cameras_flip_and_fast_render_switch():
    kw = dict(task_set="MT1", task_name="reach-v3", num_envs=1, trials_per_task=1)
    flipped, raw, slow = (
        MetaWorldEnv(render=Render(image_size=48), **kw),
        MetaWorldEnv(render=Render(image_size=48, flip_corner_cameras=False), **kw),
        MetaWorldEnv(render=Render(image_size=48, fast_render=False), **kw),
    )
    wrist = MetaWorldEnv(render=Render(image_size=48, wrist_camera_name="gripperPOV", camera_name="topview"), **kw)
    try:
        a, b, c, w = (e.reset(np.array([0])) for e in (flipped, raw, slow, wrist))
        assert torch.equal(a.main_images[0], b.main_images[0].flip(0, 1))
        assert flipped._slots[0].env.model.vis.quality.shadowsize == 0
        assert slow._slots[0].env.model.vis.quality.shadowsize > 0
        assert not torch.equal(a.main_images, c.main_images)
        assert w.wrist_images is not None and w.wrist_images.shape == (1, 48, 48, 3)
        assert not torch.equal(w.wrist_images, w.main_images)
        # the sky/floor of the corner camera is at the top after the flip: top rows brighter than bottom
        img = a.main_images[0].float()
        assert img[:8].mean() != img[-8:].mean()
    finally:
        for e in (flipped, raw, slow, wrist):
            e.close()
    with pytest.raises(ValueError, match="gripperPOV"):
        MetaWorldEnv(render=Render(image_size=48, camera_name="wrist"), **kw).reset(np.array([0]))


def test_env_can_be_stepped_from_different_threads():
    """Pipelined rollouts step stage envs from a thread pool: the GL context must follow."""
    from concurrent.futures import ThreadPoolExecutor

    env = MetaWorldEnv(
        task_set="MT1", task_name="reach-v3", num_envs=1, render=Render(image_size=32), trials_per_task=1
    )
    other = env.clone()
    try:
        first = env.reset(np.array([0])).main_images
        other.reset(np.array([0]))
        for _ in range(2):
            with ThreadPoolExecutor(max_workers=1) as pool:
                out = pool.submit(env.chunk_step, torch.zeros(1, 1, 4)).result()
                pool.submit(other.chunk_step, torch.zeros(1, 1, 4)).result()
            assert out.obs.main_images.float().std() > 0
        again = env.reset(np.array([0])).main_images
    finally:
        env.close()
        other.close()
    assert torch.equal(first, again)


def test_corner4_is_rlinfs_moved_corner2():
    """RLinf sets corner2's position to [0.75, 0.075, 0.7] "to align with SFT"; in MetaWorld 3 that
    renders exactly what corner4 renders."""
    kw = dict(task_set="MT1", task_name="reach-v3", num_envs=1, trials_per_task=1)
    corner4 = MetaWorldEnv(render=Render(image_size=48, camera_name="corner4"), **kw)
    moved = MetaWorldEnv(render=Render(image_size=48, camera_name="corner2"), **kw)
    try:
        a = corner4.reset(np.array([0])).main_images
        moved.reset(np.array([0]))
        import mujoco

        sim = moved._slots[0].env
        sim.model.cam_pos[moved._camera_ids[0]] = [0.75, 0.075, 0.7]  # as RLinf, before its episode starts
        mujoco.mj_forward(sim.model, sim.data)  # camera poses in world frame follow the model
        moved._stale[:] = True
        b = moved._observe(np.array([0])).main_images
        unmoved = MetaWorldEnv(render=Render(image_size=48, camera_name="corner2"), **kw)
        c = unmoved.reset(np.array([0])).main_images
        unmoved.close()

        def diff(x, y):
            return (x.int() - y.int()).abs().float().mean().item()

        assert diff(a, b) < 1.0  # same view up to a few anti-aliased pixels (0.16 / 255 measured)
        assert diff(a, c) > 10.0
    finally:
        corner4.close()
        moved.close()


def test_7d_actions_drive_xyz_and_gripper_only():
    """action_format 7d (RLinf's OpenVLA-OFT with 7-D norm stats): dims 0-2 and 6 reach the arm,
    rotation dims 3-5 are ignored, as RLinf's prepare_actions_for_metaworld."""
    kw = dict(task_set="MT1", task_name="reach-v3", num_envs=1, render=Render(image_size=16), trials_per_task=1)
    four, seven = MetaWorldEnv(**kw), MetaWorldEnv(action_format="7d", **kw)
    try:
        assert (four.action_dim, seven.action_dim) == (4, 7)
        four.reset(np.array([0]))
        seven.reset(np.array([0]))
        expert7 = seven.expert_actions(3)
        expert4 = four.expert_actions(3)
        torch.testing.assert_close(expert7[..., [0, 1, 2, 6]], expert4)
        assert expert7[..., 3:6].eq(0).all()
        noisy = expert7.clone()
        noisy[..., 3:6] = torch.tensor([0.9, -0.7, 0.5])  # rotations must change nothing
        a, b = four.chunk_step(expert4), seven.chunk_step(noisy)
        torch.testing.assert_close(a.obs.states, b.obs.states)
        with pytest.raises(ValueError, match="D=7"):
            seven.chunk_step(expert4)
    finally:
        four.close()
        seven.close()
    with pytest.raises(ValueError, match="action_format"):
        MetaWorldEnv(action_format="6d", **kw)


def test_settle_steps_take_rlinfs_zero_actions_before_the_first_frame():
    """RLinf steps every reset MetaWorld env 15 + 1 times with zero actions before its first
    observation (RLinf v0.3 rlinf/envs/metaworld/metaworld_env.py:312-316): ``settle_steps: 16``."""
    kw = dict(task_set="MT1", task_name="pick-place-v3", num_envs=1, render=Render(image_size=48), trials_per_task=2,
              state_type="full", max_episode_steps=50)  # fmt: skip
    settled, plain = MetaWorldEnv(sim=Sim(settle_steps=16), **kw), MetaWorldEnv(**kw)
    try:
        first = settled.reset(np.array([1]))
        raw = plain.reset(np.array([1]))
        after = plain.chunk_step(torch.zeros(1, 16, 4)).obs  # the same 16 zero actions, by hand
        assert torch.equal(first.main_images, after.main_images)
        torch.testing.assert_close(first.states, after.states, rtol=0, atol=0)
        assert not torch.equal(first.main_images, raw.main_images)  # the arm and objects moved meanwhile
        settled.chunk_step(torch.zeros(1, 3, 4))
        settled.flush_episodes()
        (record,) = settled.pop_episodes()
        assert record["episode_len"] == 3  # the settle steps are not part of the episode
    finally:
        settled.close()
        plain.close()
    with pytest.raises(ValueError, match="sim.settle_steps"):
        Sim(settle_steps=-1)
    with pytest.raises(TypeError, match=r"flat setting 'settle_steps': it is sim.settle_steps now"):
        MetaWorldEnv(settle_steps=16)
