"""MetaWorld task sets, instructions and difficulty groups (pure data: no simulator import).

The sets mirror metaworld 3.x (``metaworld.env_dict``): MT10, MT50 and ML45's 45 train and 5
held-out test tasks; a test checks that they stay in sync with the installed metaworld.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from importlib import resources

_DESCRIPTIONS_FILE = json.loads(resources.files(__package__).joinpath("task_descriptions.json").read_text("utf-8"))

#: Where :data:`INSTRUCTIONS` come from (repository, path, commit), as recorded in ``task_descriptions.json``.
INSTRUCTIONS_SOURCE: dict[str, str] = _DESCRIPTIONS_FILE["_source"]

#: One instruction per task, verbatim from LeRobot's ``TASK_DESCRIPTIONS``
#: (huggingface/lerobot:src/lerobot/envs/metaworld_config.json, kept in ``task_descriptions.json``).
#: RLinf's MetaWorld env reads the identical copy (RLinf v0.3 rlinf/envs/metaworld/__init__.py:27-29,
#: ``get_task_description``), the ``lerobot/metaworld_mt50`` dataset (the pi0 / pi0.5 MetaWorld SFT
#: checkpoints) and RLinf's MetaWorld OFT were trained on them: other wordings score lower.
INSTRUCTIONS: dict[str, str] = dict(_DESCRIPTIONS_FILE["TASK_DESCRIPTIONS"])

#: All 50 tasks in metaworld's MT50 order (``metaworld.env_dict.MT50_V3``; a test keeps it in sync).
MT50: list[str] = [
    "assembly-v3",
    "basketball-v3",
    "bin-picking-v3",
    "box-close-v3",
    "button-press-topdown-v3",
    "button-press-topdown-wall-v3",
    "button-press-v3",
    "button-press-wall-v3",
    "coffee-button-v3",
    "coffee-pull-v3",
    "coffee-push-v3",
    "dial-turn-v3",
    "disassemble-v3",
    "door-close-v3",
    "door-lock-v3",
    "door-open-v3",
    "door-unlock-v3",
    "hand-insert-v3",
    "drawer-close-v3",
    "drawer-open-v3",
    "faucet-open-v3",
    "faucet-close-v3",
    "hammer-v3",
    "handle-press-side-v3",
    "handle-press-v3",
    "handle-pull-side-v3",
    "handle-pull-v3",
    "lever-pull-v3",
    "pick-place-wall-v3",
    "pick-out-of-hole-v3",
    "pick-place-v3",
    "plate-slide-v3",
    "plate-slide-side-v3",
    "plate-slide-back-v3",
    "plate-slide-back-side-v3",
    "peg-insert-side-v3",
    "peg-unplug-side-v3",
    "soccer-v3",
    "stick-push-v3",
    "stick-pull-v3",
    "push-v3",
    "push-wall-v3",
    "push-back-v3",
    "reach-v3",
    "reach-wall-v3",
    "shelf-place-v3",
    "sweep-into-v3",
    "sweep-v3",
    "window-open-v3",
    "window-close-v3",
]

MT10: list[str] = [
    "reach-v3",
    "push-v3",
    "pick-place-v3",
    "door-open-v3",
    "drawer-open-v3",
    "drawer-close-v3",
    "button-press-topdown-v3",
    "peg-insert-side-v3",
    "window-open-v3",
    "window-close-v3",
]

#: ML45's 5 held-out test tasks.
ML45_TEST: list[str] = [
    "bin-picking-v3",
    "box-close-v3",
    "hand-insert-v3",
    "door-lock-v3",
    "door-unlock-v3",
]

#: ML45's 45 train tasks (every other task, in metaworld's ML45 order).
ML45_TRAIN: list[str] = [
    "assembly-v3",
    "basketball-v3",
    "button-press-topdown-v3",
    "button-press-topdown-wall-v3",
    "button-press-v3",
    "button-press-wall-v3",
    "coffee-button-v3",
    "coffee-pull-v3",
    "coffee-push-v3",
    "dial-turn-v3",
    "disassemble-v3",
    "door-close-v3",
    "door-open-v3",
    "drawer-close-v3",
    "drawer-open-v3",
    "faucet-open-v3",
    "faucet-close-v3",
    "hammer-v3",
    "handle-press-side-v3",
    "handle-press-v3",
    "handle-pull-side-v3",
    "handle-pull-v3",
    "lever-pull-v3",
    "pick-place-wall-v3",
    "pick-out-of-hole-v3",
    "push-back-v3",
    "pick-place-v3",
    "plate-slide-v3",
    "plate-slide-side-v3",
    "plate-slide-back-v3",
    "plate-slide-back-side-v3",
    "peg-insert-side-v3",
    "peg-unplug-side-v3",
    "soccer-v3",
    "stick-push-v3",
    "stick-pull-v3",
    "push-wall-v3",
    "push-v3",
    "reach-wall-v3",
    "reach-v3",
    "shelf-place-v3",
    "sweep-into-v3",
    "sweep-v3",
    "window-open-v3",
    "window-close-v3",
]

#: The difficulty groups used by the MetaWorld VLA results (Seo et al. 2022; SmolVLA; RLinf's published table).
DIFFICULTY: dict[str, list[str]] = {
    "medium": [
        "basketball-v3",
        "bin-picking-v3",
        "box-close-v3",
        "coffee-pull-v3",
        "coffee-push-v3",
        "hammer-v3",
        "peg-insert-side-v3",
        "push-wall-v3",
        "soccer-v3",
        "sweep-v3",
        "sweep-into-v3",
    ],
    "hard": ["assembly-v3", "hand-insert-v3", "pick-out-of-hole-v3", "pick-place-v3", "push-v3", "push-back-v3"],
    "very_hard": ["shelf-place-v3", "disassemble-v3", "stick-pull-v3", "stick-push-v3", "pick-place-wall-v3"],
}
DIFFICULTY = {"easy": [t for t in MT50 if not any(t in g for g in DIFFICULTY.values())], **DIFFICULTY}

TASK_SETS = ("MT1", "MT10", "MT50", "ML45")


def difficulty_of(task: str) -> str:
    """``easy`` / ``medium`` / ``hard`` / ``very_hard``."""
    for group, tasks in DIFFICULTY.items():
        if task in tasks:
            return group
    raise KeyError(task)


def resolve_tasks(
    task_set: str, task_name: str | None = None, split: str = "train", tasks: list[str] | None = None
) -> list[str]:
    """The ordered task list of a task set (task id = position in this list).

    Raises:
        ValueError: with the valid choices, for an unknown set, split or task name.
    """
    if tasks:
        unknown = [t for t in tasks if t not in INSTRUCTIONS]
        if unknown:
            hint = _did_you_mean(unknown[0])
            raise ValueError(f"unknown MetaWorld task(s) {unknown}{hint}; valid: {', '.join(MT50)}")
        return list(tasks)
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if task_set == "MT1":
        if task_name not in INSTRUCTIONS:
            what = "needs task_name" if task_name is None else f"task_name {task_name!r} unknown"
            raise ValueError(f"task_set MT1: {what}{_did_you_mean(task_name)}; valid: {', '.join(MT50)}")
        return [task_name]
    if task_set in ("MT10", "MT50"):
        if split == "test":
            raise ValueError(f"{task_set} has no test split (only ML45 does); use split: train")
        return list(MT10 if task_set == "MT10" else MT50)
    if task_set == "ML45":
        return list(ML45_TRAIN if split == "train" else ML45_TEST)
    hint = _did_you_mean(task_set, TASK_SETS)
    raise ValueError(f"unknown task_set {task_set!r}{hint}; valid: {', '.join(TASK_SETS)} (or pass tasks: [...])")


def _did_you_mean(name: object, choices: Iterable[str] | None = None) -> str:
    """``; did you mean 'pick-place-v3'?`` for a near miss (a typo, a missing ``-v3``), else ``""``."""

    if not isinstance(name, str):
        return ""
    choices = list(MT50 if choices is None else choices)
    close = [c for c in choices if c == f"{name}-v3" or c.lower() == name.lower()]
    close = close or difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""
