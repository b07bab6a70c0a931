"""The ManiSkill/SAPIEN side of :class:`~rlinf_env_maniskill.env.ManiSkillEnv` (heavy imports).

Import only after :func:`rlinf_env_maniskill.lavapipe.configure` and after ``MS_ASSET_DIR`` is
set: SAPIEN picks its Vulkan driver and ManiSkill its asset folder at import time.

A :class:`SimBatch` is one ManiSkill gym env holding ``n`` sub-envs of one task: ``n = 1`` with the
CPU physics (ManiSkill's CPU backend supports one env per gym env), ``n = num_envs`` with the GPU
physics. ManiSkill is made in a visual ``obs_mode`` (``rgb+segmentation`` by default, as RLinf makes its envs)
and stepped through ``env.unwrapped``; camera images come from the task's own ``_get_obs_sensor_data`` (the
sensor data of its observation: RL4VLA's green screen, texture transforms), not from the cameras directly. They
are rendered when the env returns an observation (chunk boundaries), not on every control step: the unwrapped
env's ``_obs_mode`` is set to ``none`` after construction, which skips the observation ManiSkill would build in
``step``/``reset`` (3x the cost of a physics step on lavapipe), while ``obs_mode_struct`` keeps the textures the
task's override expects.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import mani_skill
import mani_skill.envs  # noqa: F401  (registers the tasks)
import numpy as np
import torch
from mani_skill.utils import assets, download_asset
from mani_skill.utils.registration import REGISTERED_ENVS

from rlinf_env_maniskill.assets import AssetError
from rlinf_env_maniskill.tasks import OFFLINE_TASKS, rl4vla_hint


class MissingAssetError(RuntimeError):
    """A ManiSkill task needs assets that are not downloaded (never prompts, never downloads)."""


def ms_asset_root() -> str:
    """The ``MS_ASSET_DIR`` ManiSkill was imported with (assets live in its ``data`` folder)."""
    return str(mani_skill.ASSET_DIR.parent)


def _expand(asset_id: str) -> list[str]:
    if asset_id in assets.DATA_GROUPS:
        return assets.expand_data_group_into_individual_data_source_ids(asset_id)
    return [asset_id]


def missing_assets(task: str) -> list[str]:
    """Asset ids ``task`` needs (its own and its default robot's) that are not downloaded."""
    spec = REGISTERED_ENVS[task]
    ids = [i for a in (spec.asset_download_ids or []) for i in _expand(a)]
    robot = inspect.signature(spec.cls.__init__).parameters.get("robot_uids")
    if robot is not None and isinstance(robot.default, str) and robot.default in assets.DATA_GROUPS:
        ids += _expand(robot.default)
    return [i for i in dict.fromkeys(ids) if i in assets.DATA_SOURCES and not assets.is_data_source_downloaded(i)]


def _download_hint(ids: list[str]) -> str:
    root = ms_asset_root()
    cmds = "; ".join(f"MS_ASSET_DIR={root} python -m mani_skill.utils.download_asset {i} -y" for i in ids)
    return f"download once with: {cmds} (or set cache_dir to a folder that has them)"


def ensure_task_available(task: str) -> None:
    """Raise one clear line if ``task`` is unknown or its assets are missing."""
    if task not in REGISTERED_ENVS:
        if task.startswith("PutOnPlateInScene25"):
            raise MissingAssetError(rl4vla_hint(task, ms_asset_root()))
        close = difflib.get_close_matches(task, list(REGISTERED_ENVS), n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise ValueError(
            f"unknown ManiSkill task {task!r}: {hint}tasks that work offline: {', '.join(OFFLINE_TASKS)} "
            "(register your own with task_modules)"
        )
    missing = missing_assets(task)
    if missing:
        raise MissingAssetError(
            f"ManiSkill task {task!r} needs asset(s) {', '.join(missing)} that are not in "
            f"{mani_skill.ASSET_DIR}: {_download_hint(missing)}"
        )


def has_language(task: str) -> bool:
    """The task writes its own instructions (``get_language_instruction``, as RL4VLA's tasks do)."""
    return hasattr(REGISTERED_ENVS[task].cls, "get_language_instruction")


@contextlib.contextmanager
def _no_download_prompt(task: str) -> Iterator[None]:
    """Turn ManiSkill's interactive ``(y|n)`` asset prompt into an error for the whole make."""
    original = download_asset.prompt_yes_no

    def refuse(message: str) -> bool:
        message = " ".join(message.split())
        raise MissingAssetError(f"ManiSkill task {task!r} needs assets: {message} {_download_hint(['<asset id>'])}")

    download_asset.prompt_yes_no = refuse
    try:
        yield
    finally:
        download_asset.prompt_yes_no = original


_RENDER_KEEPALIVE: dict[str, Any] = {}


def keep_render_context(device: str) -> None:
    """Hold one SAPIEN render system for the life of the process.

    SAPIEN drops its Vulkan context when the last scene is gone, and building it again costs the
    full first-render setup (10-20 s on lavapipe) for the next env; keeping one alive makes every
    env after the first cheap.
    """
    if device not in _RENDER_KEEPALIVE:
        import sapien

        _RENDER_KEEPALIVE[device] = sapien.render.RenderSystem(device)


def _rows(tree: Any, rows: torch.Tensor) -> Any:
    if isinstance(tree, dict):
        return {k: _rows(v, rows) for k, v in tree.items()}
    return tree[rows].clone()


def _stack(trees: list[Any]) -> Any:
    if isinstance(trees[0], dict):
        return {k: _stack([t[k] for t in trees]) for k in trees[0]}
    return torch.cat(trees, dim=0)


class SimBatch:
    """One ManiSkill gym env with ``n`` sub-envs ("rows") of one task.

    Args:
        task: ManiSkill env id.
        n: sub-envs in this gym env.
        gpu: use ManiSkill's GPU physics and renderer (else CPU physics, CPU/lavapipe renderer).
        image_size: ``(height, width)`` of the camera images.
        camera: name of the ManiSkill sensor camera used as the main image.
        show_goal: keep goal markers that ManiSkill hides from cameras (e.g. PickCube's sphere).
        reward_mode: ManiSkill reward mode (``sparse`` or ``normalized_dense``), or ``grasp``:
            RLinf's shaped reward ``0.1·grasped + 0.1·consecutive_grasp + 1·(success ∧ grasped)``
            from the task's info (RL4VLA's ``is_src_obj_grasped`` / ``consecutive_grasp``;
            ManiSkill's ``is_grasped`` where the former is absent).
        sim_config: ManiSkill ``sim_config`` overrides (``sim_freq``, ``control_freq``, ...).
        make_kwargs: extra keyword arguments of ``gym.make``.
        control_mode: ManiSkill control mode (None: the task's default).
        render_gpu: render on the GPU (default: with GPU physics); CPU physics can render on a GPU.
        shader_pack: SAPIEN shader pack of the sensor cameras (RLinf sets ``default``; ManiSkill's own
            default is ``minimal``).
        obs_mode: ManiSkill observation mode; must contain ``rgb``. The images are the ``rgb`` of the
            task's sensor data for ``camera``.
    """

    def __init__(
        self,
        task: str,
        n: int,
        gpu: bool,
        image_size: tuple[int, int],
        camera: str,
        show_goal: bool,
        reward_mode: str,
        sim_config: dict | None,
        make_kwargs: dict | None,
        control_mode: str | None = "pd_ee_delta_pose",
        render_gpu: bool | None = None,
        shader_pack: str = "default",
        obs_mode: str = "rgb+segmentation",
    ) -> None:
        kwargs: dict[str, Any] = dict(
            num_envs=n,
            obs_mode=obs_mode,
            reward_mode="sparse" if reward_mode == "grasp" else reward_mode,
            sim_backend="physx_cuda" if gpu else "physx_cpu",
            render_backend="gpu" if (gpu if render_gpu is None else render_gpu) else "cpu",
            sensor_configs=dict(height=image_size[0], width=image_size[1], shader_pack=shader_pack),
        )
        if control_mode:
            kwargs["control_mode"] = control_mode
        if sim_config:
            kwargs["sim_config"] = dict(sim_config)
        keep_render_context("cuda" if (gpu if render_gpu is None else render_gpu) else "cpu")
        kwargs.update(make_kwargs or {})
        with _no_download_prompt(task):
            try:
                self.env = gym.make(task, **kwargs)
            except AssetError as exc:  # the PutOnPlateInScene25 tasks check their asset folders
                raise MissingAssetError(f"ManiSkill task {task!r}: {exc}") from None
        self.u = self.env.unwrapped
        self.task, self.n, self.show_goal = task, n, show_goal
        self.grasp_reward = reward_mode == "grasp"
        if camera not in self.u.scene.sensors:
            cameras = list(self.u.scene.sensors)
            raise ValueError(f"ManiSkill task {task!r} has no camera {camera!r}; its cameras: {cameras}")
        self.camera_name = camera  # looked up per render: a reconfiguring reset rebuilds the sensors
        cfg = self.u.scene.sensors[camera].config
        try:
            check_camera_size(task, camera, getattr(cfg, "intrinsic", None), image_size)
        except ValueError:
            self.close()
            raise
        shape = tuple(self.u.single_action_space.shape)
        if shape != (7,):
            self.close()
            raise ValueError(
                f"ManiSkill task {task!r} takes {control_mode or 'its default control mode'} actions of shape "
                f"{shape}, not the 7-D end-effector delta + gripper this env provides; tasks that fit: "
                f"{', '.join(OFFLINE_TASKS)}"
            )
        arm = getattr(self.u.agent.controller, "controllers", {}).get("arm")
        cfg = getattr(arm, "config", None)
        self.pos_range = (float(getattr(cfg, "pos_lower", -0.1)), float(getattr(cfg, "pos_upper", 0.1)))
        self.rot_scale = float(getattr(cfg, "rot_lower", -0.1))
        self.arm_normalized = bool(getattr(cfg, "normalize_action", True))
        self._frozen: dict[int, Any] = {}
        self.obs_mode = self.u.obs_mode
        self.u._obs_mode = "none"  # no observation inside step/reset; render() asks the task for its sensor data

    @contextlib.contextmanager
    def _goal_markers_shown(self) -> Iterator[None]:
        """Let the task's sensor data show the objects ManiSkill hides from cameras (``show_goal``)."""
        if not self.show_goal:
            yield
            return
        saved, shown = self.u._hidden_objects, []
        self.u._hidden_objects = shown
        try:
            yield
        finally:
            if self.u._hidden_objects is shown:  # a reconfiguring reset builds its own list: keep that
                self.u._hidden_objects = saved

    @property
    def device(self) -> torch.device:
        return self.u.device

    @property
    def total_num_trials(self) -> int | None:
        """Episode ids the task decodes into scenes (RL4VLA's ``total_num_trials``); None if it has none."""
        value = getattr(self.u, "total_num_trials", None)
        return None if value is None else int(value)

    def reset_rows(self, rows: list[int], seeds: list[int], episode_ids: list[int] | None = None) -> None:
        """Start new episodes in ``rows``, each from ManiSkill episode seed ``seeds[i]`` (and, when given,
        ``options["episode_id"] = episode_ids[i]``, which RL4VLA's tasks decode into object, plate, table
        overlay, position and rotation).

        Rows are reset one at a time: ManiSkill seeds its torch generator with the first seed of a
        call, so a batched reset would give rows sharing a seed different initial states.
        """
        for i, (row, seed) in enumerate(zip(rows, seeds)):
            options: dict[str, Any] = {}
            if episode_ids is not None:
                options["episode_id"] = torch.tensor([int(episode_ids[i])], device=self.device)
            if self.n == 1:
                self.u.reset(seed=[int(seed)], options=options)
            else:
                idx = torch.tensor([row], device=self.device)
                self.u.reset(seed=[int(seed)] * self.n, options=dict(env_idx=idx, **options))
            self._frozen.pop(row, None)

    def step(self, actions: np.ndarray, live: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Step the live rows with normalized actions ``[n, 7]``; returns reward, success, fail ``[n]``.

        Rows that are not live keep their state (their episode is over): a single-env batch is
        simply not stepped; in a GPU batch they are stepped with the others and then restored.
        """
        zeros = np.zeros(self.n, np.float32)
        if not live.any():
            return zeros, zeros.astype(bool), zeros.astype(bool)
        dead = [int(r) for r in np.nonzero(~live)[0]]
        new_dead = [r for r in dead if r not in self._frozen]
        if new_dead:
            idx = torch.tensor(new_dead, device=self.device)
            state = self.u.get_state_dict()
            for i, r in enumerate(new_dead):
                self._frozen[r] = _rows(state, idx[i : i + 1])
        act = torch.as_tensor(np.asarray(actions, np.float32), device=self.device)
        _, reward, _, _, info = self.u.step(act)
        if dead:
            frozen = _stack([self._frozen[r] for r in dead])
            self.u.set_state_dict(frozen, torch.tensor(dead, device=self.device))
        n = self.n
        reward = reward.float().reshape(n).cpu().numpy() if torch.is_tensor(reward) else np.full(n, reward, np.float32)
        success = self._flag(info, "success")
        fail = self._flag(info, "fail")
        if self.grasp_reward:
            reward = grasp_shaped_reward(info, success, n)
        return reward.astype(np.float32), success, fail

    def _flag(self, info: dict, key: str) -> np.ndarray:
        return _info_flag(info, key, self.n)

    def render(self, rows: list[int]) -> np.ndarray:
        """``uint8 [len(rows), H, W, 3]``: the main camera's rgb in the task's own sensor data
        (``_get_obs_sensor_data``, so a task's edits of its pixels are seen)."""
        with self._goal_markers_shown():
            data = self.u._get_obs_sensor_data()
        camera = data.get(self.camera_name, {})
        if "rgb" not in camera:
            raise ValueError(
                f"ManiSkill task {self.task!r} gave no rgb for camera {self.camera_name!r} in obs_mode "
                f"{self.obs_mode!r}: use an obs_mode with rgb (e.g. rgb+segmentation)"
            )
        rgb = camera["rgb"][..., :3]
        return rgb[torch.as_tensor(rows, device=rgb.device)].cpu().numpy().astype(np.uint8)

    def language(self, rows: list[int]) -> list[str]:
        """The task's own per-episode instructions (tasks with ``get_language_instruction``)."""
        texts = self.u.get_language_instruction()
        texts = [texts] * self.n if isinstance(texts, str) else list(texts)
        return [str(texts[r]) for r in rows]

    def proprio(self, rows: list[int]) -> np.ndarray:
        """``float32 [len(rows), S]``: robot joint positions, then TCP pose (xyz + wxyz quaternion)."""
        parts = [self.u.agent.robot.get_qpos()]
        tcp = getattr(self.u.agent, "tcp", None)
        if tcp is not None:
            parts.append(tcp.pose.raw_pose)
        state = torch.cat([p.reshape(self.n, -1).float() for p in parts], dim=1)
        return state[torch.as_tensor(rows, device=state.device)].cpu().numpy()

    def to_sim_actions(self, actions: np.ndarray, action_format: str) -> np.ndarray:
        """``[m, 7]`` env actions → what ``step`` takes.

        ``normalized``: ManiSkill's [-1, 1] scale, clipped. ``bridge``: metres, radians and a gripper
        in [0, 1] (0 closed, 1 open), as OpenVLA un-normalizes Bridge actions; converted to the
        controller's scale (ManiSkill maps normalized rotations through ``rot_lower``); the gripper is
        sent as RLinf sends it, ``2·(g > 0.5) − 1`` (fully open or fully closed).
        """
        actions = np.asarray(actions, np.float32)
        if action_format == "normalized":
            return np.clip(actions, -1.0, 1.0)
        out = actions.copy()
        if self.arm_normalized:
            lo, hi = self.pos_range
            out[:, :3] = np.clip(2.0 * (actions[:, :3] - lo) / (hi - lo) - 1.0, -1.0, 1.0)
            out[:, 3:6] = np.clip(actions[:, 3:6] / self.rot_scale, -1.0, 1.0)
        # binarized at 0.5 as RLinf sends it (RLinf v0.3 rlinf/envs/action_utils.py:50, widowx_bridge)
        out[:, 6] = np.where(actions[:, 6] > 0.5, 1.0, -1.0)
        return out

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.env.close()


def _info_flag(info: dict, key: str, n: int) -> np.ndarray:
    value = info.get(key)
    if value is None:
        return np.zeros(n, bool)
    return torch.as_tensor(value).reshape(n).cpu().numpy().astype(bool)


def grasp_shaped_reward(info: dict, success: np.ndarray, n: int) -> np.ndarray:
    """RLinf's default ManiSkill reward ``[n]``.

    ``0.1·grasped + 0.1·consecutive_grasp + 1·(success ∧ grasped)``; RL4VLA's tasks report both grasp
    flags as "so far in the episode", so the relative reward pays each once.
    """
    key = "is_src_obj_grasped" if "is_src_obj_grasped" in info else "is_grasped"
    grasped = _info_flag(info, key, n)
    consecutive = _info_flag(info, "consecutive_grasp", n)
    return (0.1 * grasped + 0.1 * consecutive + 1.0 * (success & grasped)).astype(np.float32)


def check_camera_size(task: str, camera: str, intrinsic, image_size: tuple[int, int]) -> None:
    """Fail when a camera with a fixed intrinsic matrix is rendered at another size.

    ManiSkill keeps a camera's intrinsic matrix (in pixels) when its width/height are overridden, so
    e.g. the Bridge scenes' ``3rd_view_camera`` (640x480) rendered at 224x224 shows an off-centre
    crop, not the view the policy was trained on. Render at the native size; the policy resizes.
    """
    if intrinsic is None:
        return
    K = np.asarray(intrinsic, dtype=np.float64)
    cx, cy = float(K[0, 2]), float(K[1, 2])
    H, W = image_size
    if abs(2 * cx - W) <= 0.05 * W and abs(2 * cy - H) <= 0.05 * H:
        return
    native = [int(round(2 * cy / 16) * 16), int(round(2 * cx / 16) * 16)]
    raise ValueError(
        f"ManiSkill task {task!r}: camera {camera!r} has a fixed intrinsic matrix for about {native[1]}x{native[0]} "
        f"pixels (principal point {cx:.1f}, {cy:.1f}); rendered at {W}x{H} it shows another view. "
        f"Set image_size: {native} (the policy resizes the images itself)"
    )
