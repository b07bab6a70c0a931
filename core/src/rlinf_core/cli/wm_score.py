"""``rlinf wm-score``: the three measurements of a world model as a simulator (docs/imagination.md).

    rlinf wm-score actions --world_model CLASS [--world_model_args JSON] --episodes DIR [--start S ...] [--horizon K]
    rlinf wm-score reward  --world_model CLASS ... --reward_model CLASS [--reward_model_args JSON] [--threshold P]
    rlinf wm-score rank    --real R1 R2 ... --imagined I1 I2 ... [--names N1 N2 ...]

``CLASS`` is a registered short name (``OpenSoraWorldModel``, ``ToyWorldModel``, ``ResnetRewardModel``) or a dotted
path; its ``__init__`` arguments come as a JSON object. ``--episodes`` is a directory of recorded ``traj*.npy``
episodes (``RolloutRecorder``), ideally held out from the world model's training data. Prints a table and, with
``--out``, writes the numbers as JSON. :mod:`rlinf_core.world_models.scoring` has the functions.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["wm_score_command"]


def _build(kind: str, name: str, args_json: str, device: str = "cpu"):
    from rlinf_core.plugins.manager import load_plugins

    try:
        kwargs = json.loads(args_json)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--{kind}_args is not a JSON object: {exc}") from None
    if not isinstance(kwargs, dict):
        raise ValueError(f"--{kind}_args must be a JSON object, got {args_json!r}")
    cls = load_plugins(warn=False).resolve("world_model", name)
    return cls(**kwargs).eval().requires_grad_(False).to(_device(device))


def _device(name: str):
    import torch

    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"--device {name!r} is not a device (cpu, cuda, cuda:1)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {name}: no CUDA GPU here (--device cpu runs on the CPU)")
    return device


def _windows(a, world_model):
    from rlinf_core.world_models.datasets import find_trajectories, load_episode
    from rlinf_core.world_models.scoring import cut_windows

    files = find_trajectories(a.episodes)
    if a.max_episodes:
        files = files[: a.max_episodes]
    size = world_model.image_size
    episodes = [load_episode(f, int(size) if size else None) for f in files]
    if a.horizon is None:  # the longest horizon (up to 24) that half of the episodes hold after the latest start
        lengths = sorted(len(e.frames) for e in episodes)
        a.horizon = max(1, min(24, lengths[len(lengths) // 2] - 1 - max(a.start))) if lengths else 24
        print(
            f"horizon {a.horizon} frames (--horizon; the median episode has {lengths[len(lengths) // 2]} frames)"
            if lengths
            else "horizon 24 frames (--horizon)"
        )
    if a.chunk is None:
        a.chunk = min(8, a.horizon)
    return cut_windows(episodes, a.start, a.horizon)


def _fmt(x: float) -> str:
    return "nan" if x != x else f"{x:.3f}"


def _actions(a) -> dict:
    from rlinf_core.world_models.scoring import action_response

    wm = _build("world_model", a.world_model, a.world_model_args, a.device)
    win = _windows(a, wm)
    res = action_response(wm, win, a.chunk, seed=a.seed, min_gap=a.min_gap, batch=a.batch)
    steps = sorted({0, *range(a.chunk - 1, a.horizon, a.chunk), a.horizon - 1})
    print(f"open-loop error of {res.windows} windows, k = 1..{a.horizon} (MSE in [0, 1] pixels / PSNR dB)")
    columns = ("recorded", "shuffled", "zero", "copy_start")
    print("k        " + "  ".join(f"{v:>18}" for v in columns))
    for k in steps:
        print(f"{k + 1:<8} " + "  ".join(f"{res.mse[v][k]:>9.5f} / {res.psnr[v][k]:5.2f}" for v in columns))
    for v in ("shuffled", "zero"):
        print(f"gap {v}: {100 * res.gap[v]:+.1f} % ± {100 * res.gap_se[v]:.1f} of the recorded MSE")
    print(f"verdict: {res.verdict} (responds: both gaps >= {100 * a.min_gap:.0f} %)")
    return res.as_dict()


def _reward(a) -> dict:
    from rlinf_core.world_models.scoring import reward_on_imagined

    wm = _build("world_model", a.world_model, a.world_model_args, a.device)
    rm = _build("reward_model", a.reward_model, a.reward_model_args, a.device)
    win = _windows(a, wm)
    res = reward_on_imagined(wm, rm, win, a.chunk, a.threshold, a.success_frames, seed=a.seed, batch=a.batch)
    print(
        f"reward model on {res.windows} windows of {a.horizon} frames (p >= {a.threshold}, "
        f"{a.success_frames} frame(s) in a row)"
    )
    for name, d in (
        ("frames, real", res.frame_real),
        ("frames, imagined", res.frame_imagined),
        ("episodes, real frames", res.episode_real),
        ("episodes, imagined vs real", res.episode_imagined),
    ):
        print(
            f"{name:<28} precision {_fmt(d['precision'])}  recall {_fmt(d['recall'])}  "
            f"positive rate {_fmt(d['positive_rate'])}"
        )
    print(
        f"success rate: real {_fmt(res.real_success_rate)}, classifier on real frames "
        f"{_fmt(res.classifier_on_real_success_rate)}, imagined {_fmt(res.imagined_success_rate)}"
    )
    return res.as_dict()


def _rank(a) -> dict:
    from rlinf_core.world_models.scoring import spearman

    if len(a.real) != len(a.imagined):
        raise ValueError(f"--real has {len(a.real)} values, --imagined {len(a.imagined)}: give one pair per policy")
    names = a.names or [f"policy {i}" for i in range(len(a.real))]
    if len(names) != len(a.real):
        raise ValueError(f"--names has {len(names)} names for {len(a.real)} policies")
    rho = spearman(a.imagined, a.real)
    for n, r, i in zip(names, a.real, a.imagined):
        print(f"{n:<24} real {r:.3f}  imagined {i:.3f}")
    print(f"Spearman rank correlation (imagined vs real): {_fmt(rho)}")
    return {"names": names, "real": a.real, "imagined": a.imagined, "spearman": rho}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rlinf wm-score", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    rollout = argparse.ArgumentParser(add_help=False)
    rollout.add_argument("--world_model", required=True, help="world-model class (short name or dotted path)")
    rollout.add_argument("--world_model_args", default="{}", help="its __init__ arguments as a JSON object")
    rollout.add_argument("--episodes", required=True, help="directory of recorded traj*.npy episodes (held out)")
    rollout.add_argument("--start", type=int, nargs="+", default=[0], help="steps the windows start at")
    rollout.add_argument(
        "--horizon",
        type=int,
        default=None,
        help="frames predicted open loop (k = 1..horizon; "
        "default: up to 24, as many as the median episode holds after the latest --start)",
    )
    rollout.add_argument(
        "--chunk",
        type=int,
        default=None,
        help="frames per predict call (the env's action chunk; default: 8, or the horizon when shorter)",
    )
    rollout.add_argument("--max_episodes", type=int, default=0, help="use the first N episode files (0: all)")
    rollout.add_argument("--batch", type=int, default=16, help="windows per predict call")
    rollout.add_argument("--seed", type=int, default=0)
    rollout.add_argument("--device", default="cpu", help="where the models run (cpu, cuda, cuda:1)")
    rollout.add_argument("--out", default=None, help="write the numbers to this JSON file")
    act = sub.add_parser("actions", parents=[rollout], help="does the model respond to actions?")
    act.add_argument("--min_gap", type=float, default=0.05, help="relative MSE gap that counts as responding")
    rew = sub.add_parser("reward", parents=[rollout], help="is the reward model right on imagined frames?")
    rew.add_argument("--reward_model", required=True, help="reward-model class (short name or dotted path)")
    rew.add_argument("--reward_model_args", default="{}", help="its __init__ arguments as a JSON object")
    rew.add_argument("--threshold", type=float, default=0.5, help="WorldModelEnv's success_threshold")
    rew.add_argument("--success_frames", type=int, default=1, help="WorldModelEnv's success_frames")
    rank = sub.add_parser("rank", help="does the world model rank policies as the simulator does?")
    rank.add_argument("--real", type=float, nargs="+", required=True, help="real success rates, one per policy")
    rank.add_argument("--imagined", type=float, nargs="+", required=True, help="imagined ones, same order")
    rank.add_argument("--names", nargs="+", default=None)
    rank.add_argument("--out", default=None, help="write the numbers to this JSON file")
    return p


def wm_score_command(argv: list[str]) -> int:
    from rlinf_core.plugins.manager import PluginError

    a = _parser().parse_args(argv)
    try:
        result = {"actions": _actions, "reward": _reward, "rank": _rank}[a.what](a)
    except (ValueError, TypeError, FileNotFoundError, PluginError, ImportError) as exc:
        print(f"rlinf: error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return 2
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(result, indent=2, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(wm_score_command(sys.argv[1:]))
