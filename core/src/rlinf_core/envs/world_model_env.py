"""``WorldModelEnv``: any :class:`WorldModel` + :class:`RewardModel` as an :class:`rlinf_core.Env`.

Initial states come from a directory of ``traj*.npy`` files in RLinf's released format (see
:mod:`rlinf_core.world_models.init_data`; :func:`~rlinf_core.world_models.init_data.save_init_trajectory` writes
them). Reset state id *i* is the *i*-th file in sorted order; the world model's ``condition`` says
which frames and actions of it start the episode. A relative ``init_data_path`` is read from the working directory,
then beside each ``--config`` file of the run (:mod:`rlinf_core.foundation.config_paths`), so a plugin ships its
initial states as package data next to its config.

Tasks are the distinct instructions of the files: task *k* is the *k*-th distinct instruction in file order
(``task_names`` are the instructions), so per-task eval tables, ``task_id_filter`` and GRPO's
``scale_rewards: task`` see one task per instruction.

Actions reach :meth:`WorldModel.predict` as the policy gives them (env scale, ``float32`` on the env's device),
never clipped or rescaled: a world model trained on a range clips or normalises inside itself. The model's state is
whatever its ``init_state`` returns (a tensor, or tuples / lists / dicts of tensors, moved by :meth:`set_device`);
the env only hands it back to ``predict`` / ``assign``.

The env runs in the training process on the training device (``device``, set from the Lightning
module's device by :class:`rlinf_core.RLModule`): frames and the model state stay there, so it never runs in
worker processes (``in_process_only``; ``rollout.env_workers`` must be 0).

Unlike RLinf (defect D10) only the finished sub-envs are reset, each env keeps its own step
count, and success needs ``success_frames`` consecutive frames above the threshold, so a single
hallucinated frame does not end an episode with full reward (D11).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from rlinf_core.contracts.env import Env
from rlinf_core.contracts.observation import Observation
from rlinf_core.contracts.world_model import RewardModel, WorldModel
from rlinf_core.foundation.config_paths import candidate_paths, resolve_data_dir
from rlinf_core.world_models.init_data import condition_inputs, instruction_of, load_init_trajectory

__all__ = ["WorldModelEnv", "load_init_trajectory"]


class WorldModelEnv(Env):
    """A frozen world model as the simulator, a reward model as the success detector.

    Args:
        world_model: the action-conditioned video model.
        reward_model: scores predicted frames (success probability per frame, given the instruction).
        init_data_path: directory with ``traj*.npy`` initial-state files (relative: from the working directory,
            else beside a ``--config`` file of the run).
        success_threshold: success probability above which a frame counts as success.
        success_frames: consecutive successful frames needed to declare success.
        reward_coef: reward for reaching success.
        use_rel_reward: reward the change of the success indicator per frame (sums to
            ``reward_coef`` at the first success) instead of the indicator itself.
        enable_kir: use the ``*_kir.npy`` keyframe-init files too.
        sampler_seed: seed of the world model's sampler noise (advanced every chunk, not fixed).
        device: where the models run and frames live (``cpu``, ``cuda``, ``cuda:1``); the RL module
            sets it to its own device before rollouts and evals.
        **kwargs: :class:`rlinf_core.Env` arguments.
    """

    in_process_only = True  # models and frames live on the training device

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
        device: str = "cpu",
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.world_model = world_model.eval().requires_grad_(False)
        self.reward_model = reward_model.eval().requires_grad_(False)
        found = next((p for p in candidate_paths(init_data_path) if p.is_dir()), None)
        self.init_data_path = str(found.absolute()) if found is not None else str(init_data_path)
        self.success_threshold = success_threshold
        self.success_frames = success_frames
        self.reward_coef = reward_coef
        self.use_rel_reward = use_rel_reward
        self.enable_kir = enable_kir
        self.sampler_seed = sampler_seed
        self.action_dim = world_model.action_dim
        self.device = torch.device("cpu")
        self._files: list[Path] | None = None
        self._tasks: tuple[np.ndarray, list[str]] | None = None
        self.set_device(device)

    def check_inputs(self) -> None:
        """Raise the one-line error of a missing or empty ``init_data_path`` now (``rlinf fit`` calls this before
        training starts; otherwise the first reset would)."""
        self.files  # noqa: B018

    def set_device(self, device: str | torch.device) -> None:
        """Move the models (and, once built, the frames and model state) to ``device``."""
        device = torch.device(device)
        if device == self.device and self._models_on(device):
            return
        self.world_model.to(device)
        self.reward_model.to(device)
        self.device = device
        if self._built and self._last is not None:
            self._last = self._last.to(device)
            self._state = _to(self._state, device)
            self._gen = torch.Generator(device=device).manual_seed(self.sampler_seed + 7919 * self.seed)

    def _models_on(self, device: torch.device) -> bool:
        return all(p.device == device for m in (self.world_model, self.reward_model) for p in m.parameters())

    @property
    def files(self) -> list[Path]:
        if self._files is None:
            root = resolve_data_dir(self.init_data_path, "WorldModelEnv init_data_path", _INIT_HINT)
            files = sorted(p for p in root.glob("*.npy") if self.enable_kir or not p.stem.endswith("_kir"))
            if not files:
                raise FileNotFoundError(f"WorldModelEnv init_data_path {root} holds no traj*.npy files{_INIT_HINT}")
            self._files = files
        return self._files

    @property
    def num_reset_states(self) -> int:
        return len(self.files)

    def _task_table(self) -> tuple[np.ndarray, list[str]]:
        """``(task id per file, instruction per task id)``: tasks numbered by first appearance in file order."""
        if self._tasks is None:
            names: dict[str, int] = {}
            ids = [names.setdefault(_file_instruction(f), len(names)) for f in self.files]
            self._tasks = (np.asarray(ids, np.int64), list(names))
        return self._tasks

    def task_ids(self, reset_state_ids: np.ndarray) -> np.ndarray:
        """The task of each reset state: the index of its file's instruction among the distinct instructions."""
        return self._task_table()[0][np.asarray(reset_state_ids, np.int64)]

    @property
    def task_names(self) -> list[str]:
        """The distinct instructions of the init files, in file order."""
        return list(self._task_table()[1])

    def _build(self) -> None:
        B = self.num_envs
        self._state = None
        self._last = None
        self._instructions = [""] * B
        self._streak = np.zeros(B, np.int64)
        self._prev_success = np.zeros(B, np.float32)
        self._non_finite_episodes = 0
        self._gen = torch.Generator(device=self.device).manual_seed(self.sampler_seed + 7919 * self.seed)

    def _reset_envs(self, env_ids: np.ndarray, reset_state_ids: np.ndarray) -> None:
        frames, actions = [], []
        for e, rid in zip(env_ids, reset_state_ids):
            traj = load_init_trajectory(self.files[int(rid)])
            f, a = condition_inputs(traj, self.world_model.condition, self.action_dim)
            frames.append(f)
            actions.append(a)
            self._instructions[e] = instruction_of(traj)
        frames_t = torch.from_numpy(np.stack(frames)).to(self.device)
        actions_t = torch.from_numpy(np.stack(actions)).to(self.device)
        with torch.no_grad():
            new = self.world_model.init_state(frames_t, actions_t)
            ids = torch.as_tensor(env_ids, dtype=torch.long, device=self.device)
            if self._state is None:  # first reset: every row starts as a copy, then the reset rows are set
                B = self.num_envs
                full = frames_t[:1].expand(B, *frames_t.shape[1:]).clone()
                self._state = self.world_model.init_state(full, actions_t[:1].expand(B, *actions_t.shape[1:]).clone())
                self._last = full[:, -1].clone()
            self._state = self.world_model.assign(self._state, ids, new)
        self._last[ids] = frames_t[:, -1]  # the newest condition frame is the episode's first observation
        self._streak[env_ids] = 0
        self._prev_success[env_ids] = 0.0

    def _chunk(self, actions: np.ndarray, live: np.ndarray):
        with torch.no_grad():
            acts = torch.from_numpy(actions).to(self.device)
            frames, scored, self._state = self.world_model.predict_with_reward_frames(
                self._state, acts, generator=self._gen
            )
            B, C = frames.shape[:2]
            scores_observations = scored is frames  # the default: the reward model sees the uint8 observations
            # a diverged world model (NaN / inf frames): end that episode without reward, keep its last good frame
            floats = [x for x in (frames, scored) if x.is_floating_point()]
            bad = None
            if floats:
                bad = torch.stack([~torch.isfinite(x.reshape(B, -1).float()).all(1) for x in floats]).any(0)
            if bad is not None and bad.any():
                last = self._last[bad].unsqueeze(1).expand(-1, C, *frames.shape[2:])
                frames, scored = frames.clone(), scored.clone()
                frames[bad], scored[bad] = last.to(frames.dtype), last.to(scored.dtype)
                self._non_finite_episodes += int(bad.sum())
            if frames.is_floating_point():  # observations are uint8 images
                frames = frames.clamp(0, 255).round().to(torch.uint8)
            if scores_observations:
                scored = frames
            texts = [t for t in self._instructions for _ in range(C)]  # frame-major: env b's C frames together
            probs = self.reward_model.success_prob(scored.reshape(B * C, *scored.shape[2:]), texts)
        probs = probs.reshape(B, C).float().cpu().numpy()
        self._last = frames[:, -1].clone()
        success = np.zeros((B, C), bool)
        rewards = np.zeros((B, C), np.float32)
        for c in range(C):
            hit = probs[:, c] >= self.success_threshold
            self._streak = np.where(hit, self._streak + 1, 0)
            success[:, c] = self._streak >= self.success_frames
            indicator = success[:, c].astype(np.float32)
            if self.use_rel_reward:  # the running success indicator's increase: pays reward_coef once, never < 0
                running = np.maximum(self._prev_success, indicator)
                rewards[:, c] = self.reward_coef * (running - self._prev_success)
                self._prev_success = running
            else:
                rewards[:, c] = self.reward_coef * indicator
        terminated = success.copy()
        if bad is not None and bad.any():
            ids = bad.cpu().numpy()
            rewards[ids], success[ids], terminated[ids] = 0.0, False, False
            terminated[ids, 0] = True
            self._streak[ids], self._prev_success[ids] = 0, 0.0
        video = []
        if self.capturing:
            ids = torch.as_tensor(self._video_env_ids(), device=frames.device)
            video = [frames[ids, c].cpu().numpy() for c in range(C)]
        return rewards, terminated, success, video

    def pop_metrics(self) -> dict[str, float]:
        """``env/non_finite_episodes``: episodes ended because the world model produced NaN / inf frames."""
        out = {"env/non_finite_episodes": float(getattr(self, "_non_finite_episodes", 0))}
        self._non_finite_episodes = 0
        return out

    def _observe(self, env_ids: np.ndarray) -> Observation:
        ids = torch.as_tensor(env_ids, dtype=torch.long, device=self.device)
        return Observation(
            main_images=self._last[ids].contiguous(),
            task_descriptions=[self._instructions[e] for e in env_ids],
        )


_INIT_HINT = (
    "; it should hold traj*.npy initial-state files (rlinf_core.world_models.save_init_trajectory writes them, "
    "RolloutRecorder records them)"
)
_INSTRUCTIONS: dict[tuple[str, int, int], str] = {}  # (file, size, mtime) -> instruction, shared by env copies


def _file_instruction(path: Path) -> str:
    """The instruction of one init file (whitespace stripped), read once per file version."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _INSTRUCTIONS:
        _INSTRUCTIONS[key] = instruction_of(load_init_trajectory(path)).strip()
    return _INSTRUCTIONS[key]


def _to(state, device: torch.device):
    """A world-model state (tensor, or tuples / lists / dicts of them) on ``device``."""
    if torch.is_tensor(state):
        return state.to(device)
    if isinstance(state, dict):
        return {k: _to(v, device) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_to(v, device) for v in state)
    return state
