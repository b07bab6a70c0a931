"""``WorldModelEnv``: any :class:`WorldModel` + :class:`RewardModel` as an :class:`rlinf.Env`.

Initial states come from a directory of ``traj*.npy`` files (RLinf's world-model init format):
each file is a 1-D object array of per-frame dicts with ``"image"`` (uint8 ``[H, W, 3]``),
``"delta_action"`` (float ``[D]``) and ``"instruction"`` (or ``"task"``). Reset state id *i* is the
*i*-th file in sorted order; frame 0 (plus the following frames when the model needs more
condition frames, e.g. keyframe init) starts the episode.

Unlike RLinf (defect D10) only the finished sub-envs are reset, each env keeps its own step
count, and success needs ``success_frames`` consecutive frames above the threshold, so a single
hallucinated frame does not end an episode with full reward (D11).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from rlinf.envs.base import Env
from rlinf.envs.observation import Observation
from rlinf.world_models.base import RewardModel, WorldModel


def load_init_trajectory(path: Path) -> list[dict]:
    frames = np.load(path, allow_pickle=True)
    if frames.ndim != 1 or not len(frames) or not isinstance(frames[0], dict) or "image" not in frames[0]:
        raise ValueError(f"{path}: expected a 1-D object array of frame dicts with an 'image' key")
    return list(frames)


class WorldModelEnv(Env):
    """A frozen world model as the simulator, a reward model as the success detector.

    Args:
        world_model: the action-conditioned video model.
        reward_model: scores predicted frames (success probability per frame).
        init_data_path: directory with ``traj*.npy`` initial-state files.
        success_threshold: success probability above which a frame counts as success.
        success_frames: consecutive successful frames needed to declare success.
        reward_coef: reward for reaching success.
        use_rel_reward: reward the change of the success indicator per frame (sums to
            ``reward_coef`` at the first success) instead of the indicator itself.
        enable_kir: use the ``*_kir.npy`` keyframe-init files too.
        sampler_seed: seed of the world model's sampler noise (advanced every chunk, not fixed).
        **kwargs: :class:`rlinf.Env` arguments.
    """

    def __init__(
        self,
        world_model: WorldModel,
        reward_model: RewardModel,
        init_data_path: str,
        success_threshold: float = 0.5,
        success_frames: int = 1,
        reward_coef: float = 1.0,
        use_rel_reward: bool = True,
        enable_kir: bool = False,
        sampler_seed: int = 0,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.world_model = world_model.eval().requires_grad_(False)
        self.reward_model = reward_model.eval().requires_grad_(False)
        self.init_data_path = init_data_path
        self.success_threshold = success_threshold
        self.success_frames = success_frames
        self.reward_coef = reward_coef
        self.use_rel_reward = use_rel_reward
        self.enable_kir = enable_kir
        self.sampler_seed = sampler_seed
        self.action_dim = world_model.action_dim
        self._files: list[Path] | None = None

    @property
    def files(self) -> list[Path]:
        if self._files is None:
            root = Path(self.init_data_path)
            if not root.is_dir():
                raise FileNotFoundError(f"init_data_path {root} is not a directory of traj*.npy files")
            files = sorted(p for p in root.glob("*.npy") if self.enable_kir or not p.stem.endswith("_kir"))
            if not files:
                raise FileNotFoundError(f"no traj*.npy initial-state files in {root}")
            self._files = files
        return self._files

    @property
    def num_reset_states(self) -> int:
        return len(self.files)

    def _build(self) -> None:
        B = self.num_envs
        self._state = None
        self._last = None
        self._instructions = [""] * B
        self._streak = np.zeros(B, np.int64)
        self._prev_success = np.zeros(B, np.float32)
        self._non_finite_episodes = 0
        self._gen = torch.Generator().manual_seed(self.sampler_seed + 7919 * self.seed)

    def _reset_envs(self, env_ids: np.ndarray, reset_state_ids: np.ndarray) -> None:
        T = self.world_model.num_condition_frames
        frames, actions = [], []
        for e, rid in zip(env_ids, reset_state_ids):
            traj = load_init_trajectory(self.files[int(rid)])
            chosen = (traj + [traj[0]] * T)[:T] if len(traj) >= T else [traj[0]] * T
            frames.append(np.stack([f["image"] for f in chosen]))
            actions.append(np.stack([np.asarray(f.get("delta_action", np.zeros(self.action_dim)), np.float32) for f in chosen]))
            text = traj[0].get("instruction", traj[0].get("task", ""))
            self._instructions[e] = text.decode() if isinstance(text, bytes) else str(text)
        frames_t = torch.from_numpy(np.stack(frames))
        new = self.world_model.init_state(frames_t, torch.from_numpy(np.stack(actions)))
        ids = torch.as_tensor(env_ids, dtype=torch.long)
        if self._state is None:
            B = self.num_envs
            full = frames_t[:1].expand(B, *frames_t.shape[1:]).clone()
            self._state = self.world_model.init_state(full, None)
            self._last = full[:, -1].clone()
        self._state = self.world_model.assign(self._state, ids, new)
        self._last[ids] = frames_t[:, -1]
        self._streak[env_ids] = 0
        self._prev_success[env_ids] = 0.0

    def _chunk(self, actions: np.ndarray, live: np.ndarray):
        with torch.no_grad():
            frames, self._state = self.world_model.predict(self._state, torch.from_numpy(actions), generator=self._gen)
            B, C = frames.shape[:2]
            # a diverged world model (NaN / inf frames): end that episode without reward, keep its last good frame
            bad = ~torch.isfinite(frames.reshape(B, -1).float()).all(1) if frames.is_floating_point() else None
            if bad is not None and bad.any():
                frames = frames.clone()
                frames[bad] = self._last[bad].unsqueeze(1).expand(-1, C, *frames.shape[2:]).to(frames.dtype)
                self._non_finite_episodes += int(bad.sum())
            if frames.is_floating_point():  # observations are uint8 images
                frames = frames.clamp(0, 255).round().to(torch.uint8)
            probs = self.reward_model.success_prob(frames.reshape(B * C, *frames.shape[2:]), None)
        probs = probs.reshape(B, C).float().numpy()
        self._last = frames[:, -1].clone()
        success = np.zeros((B, C), bool)
        rewards = np.zeros((B, C), np.float32)
        for c in range(C):
            hit = probs[:, c] >= self.success_threshold
            self._streak = np.where(hit, self._streak + 1, 0)
            success[:, c] = self._streak >= self.success_frames
            indicator = success[:, c].astype(np.float32)
            rewards[:, c] = self.reward_coef * (indicator - self._prev_success if self.use_rel_reward else indicator)
            self._prev_success = np.maximum(self._prev_success, indicator) if self.use_rel_reward else indicator
        terminated = success.copy()
        if bad is not None and bad.any():
            ids = bad.numpy()
            rewards[ids], success[ids], terminated[ids] = 0.0, False, False
            terminated[ids, 0] = True
            self._streak[ids], self._prev_success[ids] = 0, 0.0
        video = []
        if self.capture_frames:
            ids = self._video_env_ids()
            video = [frames[ids, c].numpy() for c in range(C)]
        return rewards, terminated, success, video

    def pop_metrics(self) -> dict[str, float]:
        """``env/non_finite_episodes``: episodes ended because the world model produced NaN / inf frames."""
        if self.num_workers:
            return super().pop_metrics()
        out = {"env/non_finite_episodes": float(getattr(self, "_non_finite_episodes", 0))}
        self._non_finite_episodes = 0
        return out

    def _observe(self, env_ids: np.ndarray) -> Observation:
        ids = torch.as_tensor(env_ids, dtype=torch.long)
        return Observation(
            main_images=self._last[ids].contiguous(),
            task_descriptions=[self._instructions[e] for e in env_ids],
        )
