"""Scores of a learned world model as a simulator, for any :class:`~rlinf_core.contracts.world_model.WorldModel`
plugin (``rlinf wm-score``, docs/imagination.md "Measuring a world model"):

1. :func:`action_response`: does the model respond to actions? k-step open-loop error against recorded real frames
   with the recorded, shuffled and zero actions; a model that ignores actions scores the same in all three.
2. :func:`reward_on_imagined`: is the reward model right on imagined frames? Precision / recall of the success
   classifier on world-model continuations of real episodes (and on the real frames), and the imagined success rate
   against the real one for the same start states and actions.
3. :func:`spearman`: does the world model rank policies as the simulator does? Rank correlation of imagined and
   real success rates.

Windows are cut from recorded episodes (``RolloutRecorder`` files): start frame ``s`` (the condition, as a one-frame
init file gives it), then frames ``s + 1 .. s + K`` and the actions that produced them (frame ``k``'s
``delta_action``). The world model is stepped open loop in chunks, as
:class:`~rlinf_core.envs.world_model_env.WorldModelEnv` steps it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from rlinf_core.contracts.world_model import RewardModel, WorldModel
from rlinf_core.world_models.datasets import Episode
from rlinf_core.world_models.init_data import condition_inputs

__all__ = [
    "ActionResponse",
    "RewardOnImagined",
    "Windows",
    "action_response",
    "cut_windows",
    "precision_recall",
    "reward_on_imagined",
    "spearman",
    "success_of",
    "verdict",
]

VARIANTS = ("recorded", "shuffled", "zero")


@dataclass
class Windows:
    """``N`` open-loop test windows: ``start uint8 [N, H, W, 3]`` (frame ``s``), ``actions float32 [N, K, D]``,
    ``targets uint8 [N, K, H, W, 3]`` (frames ``s + 1 .. s + K``), ``labels bool [N, K]`` (success: at and after
    the episode's first success, the classifier's training labels),
    ``instructions`` and ``where`` (episode index, ``s``) of each."""

    start: np.ndarray
    actions: np.ndarray
    targets: np.ndarray
    labels: np.ndarray
    instructions: list[str]
    where: list[tuple[int, int]]

    def __len__(self) -> int:
        return len(self.start)


def cut_windows(episodes: Sequence[Episode], starts: Sequence[int], horizon: int) -> Windows:
    """Every window of ``horizon`` frames after step ``s`` in ``starts`` that fits in an episode."""
    picked = [(i, s) for i, e in enumerate(episodes) for s in starts if 0 <= s and s + horizon < len(e.frames)]
    if not picked:
        lengths = sorted({len(e.frames) for e in episodes})
        raise ValueError(
            f"no window of {horizon} frames after steps {list(starts)} fits in the episodes "
            f"(lengths {lengths[:5]}); use smaller --start / --horizon"
        )
    ep = [episodes[i] for i, _ in picked]
    return Windows(
        start=np.stack([e.frames[s] for e, (_, s) in zip(ep, picked)]),
        actions=np.stack([e.actions[s + 1 : s + 1 + horizon] for e, (_, s) in zip(ep, picked)]).astype(np.float32),
        targets=np.stack([e.frames[s + 1 : s + 1 + horizon] for e, (_, s) in zip(ep, picked)]),
        labels=np.stack([np.maximum.accumulate(e.success)[s + 1 : s + 1 + horizon] for e, (_, s) in zip(ep, picked)]),
        instructions=[e.instruction for e in ep],
        where=picked,
    )


@torch.no_grad()
def imagine(
    world_model: WorldModel,
    start: np.ndarray,
    actions: np.ndarray,
    instructions: list[str],
    chunk: int,
    seed: int = 0,
    batch: int = 16,
) -> tuple[np.ndarray, np.ndarray]:
    """Open-loop continuation of ``start`` under ``actions``: ``(frames uint8 [N, K, H, W, 3], reward frames)``.

    Each batch starts from a fresh generator seeded ``seed``, so action variants draw the same noise: a model that
    ignores actions returns the same frames for all of them."""
    device = next((p.device for p in world_model.parameters()), torch.device("cpu"))
    spec, D = world_model.condition, world_model.action_dim
    if actions.shape[-1] != D:
        raise ValueError(f"the episodes' actions have {actions.shape[-1]} entries, the world model takes {D}")
    frames_out, scored_out = [], []
    for b0 in range(0, len(start), batch):
        cond = [
            condition_inputs([{"image": img, "instruction": text}], spec, D)
            for img, text in zip(start[b0 : b0 + batch], instructions[b0 : b0 + batch])
        ]
        frames = torch.from_numpy(np.stack([c[0] for c in cond])).to(device)
        cond_actions = torch.from_numpy(np.stack([c[1] for c in cond])).to(device)
        state = world_model.init_state(frames, cond_actions)
        gen = torch.Generator(device=device).manual_seed(seed)
        acts = torch.from_numpy(actions[b0 : b0 + batch]).to(device)
        got, scored = [], []
        for c0 in range(0, acts.shape[1], chunk):
            f, r, state = world_model.predict_with_reward_frames(state, acts[:, c0 : c0 + chunk], generator=gen)
            got.append(f.cpu())
            scored.append(r.cpu())
        frames_out.append(torch.cat(got, 1)[:, : acts.shape[1]].numpy())
        scored_out.append(torch.cat(scored, 1)[:, : acts.shape[1]].numpy())
    return np.concatenate(frames_out), np.concatenate(scored_out)


def action_variants(actions: np.ndarray, seed: int = 0) -> dict[str, np.ndarray]:
    """``recorded``; ``shuffled``: the same actions permuted across all windows and steps (same marginal
    distribution, no relation to the frames); ``zero``: all zeros."""
    flat = actions.reshape(-1, actions.shape[-1])
    perm = np.random.default_rng(seed).permutation(len(flat))
    return {"recorded": actions, "shuffled": flat[perm].reshape(actions.shape), "zero": np.zeros_like(actions)}


@dataclass
class ActionResponse:
    """Per-step open-loop error of each action variant (``mse`` in [0, 1] pixel units, ``psnr`` in dB, index
    ``k - 1``; ``copy_start``: the start frame repeated, the error of a model that predicts no motion), the relative
    ``gap`` of each variant's mean MSE over the recorded one (with its standard error over windows, ``gap_se``),
    and the :func:`verdict`."""

    windows: int
    mse: dict[str, list[float]]
    psnr: dict[str, list[float]]
    gap: dict[str, float]
    gap_se: dict[str, float]
    min_gap: float
    verdict: str
    features: dict[str, list[float]] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def psnr(mse: np.ndarray) -> np.ndarray:
    return 10.0 * np.log10(1.0 / np.maximum(mse, 1e-12))


def verdict(gap: dict[str, float], min_gap: float) -> str:
    """``responds`` when the recorded actions predict the real frames better than both the shuffled and the zero
    actions by at least ``min_gap`` of the recorded error (mean over k = 1..K); else ``blind``."""
    return "responds" if min(gap["shuffled"], gap["zero"]) >= min_gap else "blind"


def action_response(
    world_model: WorldModel,
    windows: Windows,
    chunk: int,
    seed: int = 0,
    min_gap: float = 0.05,
    batch: int = 16,
    features=None,
) -> ActionResponse:
    """Score how much the model's predictions depend on the actions (see :func:`verdict`).

    Args:
        world_model: the model (eval mode, frozen).
        windows: real windows (:func:`cut_windows`).
        chunk: frames predicted per call (the env's action chunk).
        seed: seed of the shuffling and of the model's noise (the same for every variant).
        min_gap: relative MSE gap that counts as responding.
        batch: windows per call.
        features: optional ``uint8 [N, H, W, 3] -> float [N, F]`` (e.g. a policy's vision encoder); the per-step
            MSE in that space is reported as ``features``.
    """
    target = windows.targets.astype(np.float32) / 255.0
    per_window, mse, feats = {}, {}, {}
    for name, acts in action_variants(windows.actions, seed).items():
        pred, _ = imagine(world_model, windows.start, acts, windows.instructions, chunk, seed, batch)
        err = ((pred.astype(np.float32) / 255.0 - target) ** 2).mean(axis=(2, 3, 4))  # [N, K]
        per_window[name], mse[name] = err.mean(1), err.mean(0)
        if features is not None:
            N, K = pred.shape[:2]
            fp = np.asarray(features(pred.reshape(N * K, *pred.shape[2:])), np.float32).reshape(N, K, -1)
            ft = np.asarray(features(windows.targets.reshape(N * K, *pred.shape[2:])), np.float32).reshape(N, K, -1)
            feats[name] = ((fp - ft) ** 2).mean(axis=(0, 2)).tolist()
    still = ((windows.start[:, None].astype(np.float32) / 255.0 - target) ** 2).mean(axis=(2, 3, 4))
    mse["copy_start"] = still.mean(0)  # reference: "nothing moves" (the start frame repeated)
    base = per_window["recorded"].mean()
    gap, gap_se = {}, {}
    for name in ("shuffled", "zero"):
        diff = (per_window[name] - per_window["recorded"]) / max(base, 1e-12)
        gap[name] = float(diff.mean())
        gap_se[name] = float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else float("nan")
    return ActionResponse(
        windows=len(windows),
        mse={k: v.tolist() for k, v in mse.items()},
        psnr={k: psnr(v).tolist() for k, v in mse.items()},
        gap=gap,
        gap_se=gap_se,
        min_gap=min_gap,
        verdict=verdict(gap, min_gap),
        features=feats,
    )


def precision_recall(pred: np.ndarray, label: np.ndarray) -> tuple[float, float]:
    """Precision and recall of boolean predictions (``nan`` when nothing is predicted / nothing is positive)."""
    pred, label = np.asarray(pred, bool).ravel(), np.asarray(label, bool).ravel()
    tp = float((pred & label).sum())
    precision = tp / pred.sum() if pred.sum() else float("nan")
    recall = tp / label.sum() if label.sum() else float("nan")
    return precision, recall


def success_of(probs: np.ndarray, threshold: float, frames: int) -> np.ndarray:
    """Episode success under :class:`~rlinf_core.envs.world_model_env.WorldModelEnv`'s rule: ``frames`` consecutive
    frames with probability ``>= threshold``, for ``probs [N, K]``."""
    hit = np.asarray(probs) >= threshold
    streak = np.zeros(hit.shape[0], int)
    done = np.zeros(hit.shape[0], bool)
    for k in range(hit.shape[1]):
        streak = np.where(hit[:, k], streak + 1, 0)
        done |= streak >= frames
    return done


@dataclass
class RewardOnImagined:
    """Frame-level precision / recall of the classifier on the real frames and on the imagined continuations (both
    against the real frames' success flags), and episode-level success (the env's rule) on both: rates, and the
    precision / recall of success on the real frames (``episode_real``) and on the imagined ones
    (``episode_imagined``) against the real success of the same window."""

    windows: int
    frame_real: dict[str, float]
    frame_imagined: dict[str, float]
    real_success_rate: float
    classifier_on_real_success_rate: float
    imagined_success_rate: float
    episode_real: dict[str, float]
    episode_imagined: dict[str, float]

    def as_dict(self) -> dict:
        return asdict(self)


@torch.no_grad()
def _probs(reward_model: RewardModel, frames: np.ndarray, instructions: list[str], batch: int = 256) -> np.ndarray:
    N, K = frames.shape[:2]
    flat = frames.reshape(N * K, *frames.shape[2:])
    texts = [t for t in instructions for _ in range(K)]
    device = next((p.device for p in reward_model.parameters()), torch.device("cpu"))
    out = [
        reward_model.success_prob(
            torch.from_numpy(np.ascontiguousarray(flat[i : i + batch])).to(device), texts[i : i + batch]
        )
        .float()
        .cpu()
        .numpy()
        for i in range(0, len(flat), batch)
    ]
    return np.concatenate(out).reshape(N, K)


def reward_on_imagined(
    world_model: WorldModel,
    reward_model: RewardModel,
    windows: Windows,
    chunk: int,
    threshold: float = 0.5,
    success_frames: int = 1,
    seed: int = 0,
    batch: int = 16,
) -> RewardOnImagined:
    """Score the reward model on real frames and on the world model's continuations under the recorded actions."""
    _, scored = imagine(world_model, windows.start, windows.actions, windows.instructions, chunk, seed, batch)
    if scored.dtype != np.uint8:  # float reward frames (OpenSora): the classifier clamps, the test needs uint8
        scored = np.clip(np.round(scored), 0, 255).astype(np.uint8)
    p_real = _probs(reward_model, windows.targets, windows.instructions)
    p_imag = _probs(reward_model, scored, windows.instructions)
    real = windows.labels.any(1)
    on_real = success_of(p_real, threshold, success_frames)
    imagined = success_of(p_imag, threshold, success_frames)

    def pr(pred, label):
        p, r = precision_recall(pred, label)
        return {"precision": p, "recall": r, "positive_rate": float(np.mean(pred))}

    return RewardOnImagined(
        windows=len(windows),
        frame_real=pr(p_real >= threshold, windows.labels),
        frame_imagined=pr(p_imag >= threshold, windows.labels),
        real_success_rate=float(real.mean()),
        classifier_on_real_success_rate=float(on_real.mean()),
        imagined_success_rate=float(imagined.mean()),
        episode_real=pr(on_real, real),
        episode_imagined=pr(imagined, real),
    )


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties sharing their average rank."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), float)
    ranks[order] = np.arange(1, len(x) + 1)
    for value in np.unique(x):
        tied = x == value
        ranks[tied] = ranks[tied].mean()
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman rank correlation (Pearson correlation of average ranks; ``nan`` when either side is constant)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.shape != b.shape or a.ndim != 1 or len(a) < 2:
        raise ValueError(f"spearman needs two equally long lists of >= 2 values, got {len(a)} and {len(b)}")
    ra, rb = _ranks(a) - (len(a) + 1) / 2, _ranks(b) - (len(b) + 1) / 2
    denom = np.sqrt((ra**2).sum() * (rb**2).sum())
    return float((ra * rb).sum() / denom) if denom > 0 else float("nan")
