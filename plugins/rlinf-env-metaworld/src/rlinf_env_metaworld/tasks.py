"""MetaWorld task sets, instructions and difficulty groups (pure data: no simulator import).

The sets mirror metaworld 3.x (``metaworld.env_dict``): MT10, MT50 and ML45's 45 train and 5
held-out test tasks; a test checks that they stay in sync with the installed metaworld.
"""

from __future__ import annotations

#: One natural-language instruction per task (what the policy is told to do).
INSTRUCTIONS: dict[str, str] = {
    "assembly-v3": "pick up the nut and put it onto the peg",
    "basketball-v3": "pick up the basketball and dunk it into the hoop",
    "bin-picking-v3": "pick the puck out of the red bin and place it into the blue bin",
    "box-close-v3": "grasp the lid and put it on the box to close it",
    "button-press-topdown-v3": "press the button down from above",
    "button-press-topdown-wall-v3": "reach past the wall and press the button down from above",
    "button-press-v3": "push the button in from the front",
    "button-press-wall-v3": "reach around the wall and push the button in",
    "coffee-button-v3": "push the button on the coffee machine",
    "coffee-pull-v3": "pull the mug out from under the coffee machine",
    "coffee-push-v3": "push the mug under the coffee machine",
    "dial-turn-v3": "turn the dial half a turn",
    "disassemble-v3": "grasp the nut and lift it off the peg",
    "door-close-v3": "swing the door closed",
    "door-lock-v3": "turn the lock on the door to lock it",
    "door-open-v3": "pull the door open by its handle",
    "door-unlock-v3": "turn the lock on the door to unlock it",
    "hand-insert-v3": "move the gripper down into the hole",
    "drawer-close-v3": "push the drawer shut",
    "drawer-open-v3": "pull the drawer open",
    "faucet-open-v3": "rotate the faucet handle counter-clockwise to open it",
    "faucet-close-v3": "rotate the faucet handle clockwise to close it",
    "hammer-v3": "pick up the hammer and drive the nail into the wall",
    "handle-press-side-v3": "press the side handle down",
    "handle-press-v3": "press the handle down",
    "handle-pull-side-v3": "pull the side handle up",
    "handle-pull-v3": "pull the handle up",
    "lever-pull-v3": "pull the lever down by a quarter turn",
    "pick-place-wall-v3": "pick up the puck, carry it over the wall and place it at the goal",
    "pick-out-of-hole-v3": "pick the puck up out of the hole",
    "pick-place-v3": "pick up the puck and place it at the goal",
    "plate-slide-v3": "slide the plate into the goal slot",
    "plate-slide-side-v3": "slide the plate sideways into the goal slot",
    "plate-slide-back-v3": "slide the plate back out of the goal slot",
    "plate-slide-back-side-v3": "slide the plate sideways back out of the goal slot",
    "peg-insert-side-v3": "pick up the peg and insert it sideways into the hole",
    "peg-unplug-side-v3": "pull the peg sideways out of the socket",
    "soccer-v3": "push the soccer ball into the goal",
    "stick-push-v3": "grasp the stick and use it to push the thermos to the goal",
    "stick-pull-v3": "grasp the stick and use it to pull the thermos to the goal",
    "push-v3": "push the puck to the goal",
    "push-wall-v3": "push the puck around the wall to the goal",
    "push-back-v3": "pull the puck back to the goal",
    "reach-v3": "move the gripper to the goal position",
    "reach-wall-v3": "reach over the wall to the goal position",
    "shelf-place-v3": "pick up the puck and place it on the shelf",
    "sweep-into-v3": "sweep the puck into the hole",
    "sweep-v3": "sweep the puck off the edge of the table",
    "window-open-v3": "slide the window open",
    "window-close-v3": "slide the window closed",
}

#: All 50 tasks in metaworld's MT50 order.
MT50: list[str] = list(INSTRUCTIONS)

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
    "assembly-v3", "basketball-v3", "button-press-topdown-v3", "button-press-topdown-wall-v3",
    "button-press-v3", "button-press-wall-v3", "coffee-button-v3", "coffee-pull-v3", "coffee-push-v3",
    "dial-turn-v3", "disassemble-v3", "door-close-v3", "door-open-v3", "drawer-close-v3",
    "drawer-open-v3", "faucet-open-v3", "faucet-close-v3", "hammer-v3", "handle-press-side-v3",
    "handle-press-v3", "handle-pull-side-v3", "handle-pull-v3", "lever-pull-v3", "pick-place-wall-v3",
    "pick-out-of-hole-v3", "push-back-v3", "pick-place-v3", "plate-slide-v3", "plate-slide-side-v3",
    "plate-slide-back-v3", "plate-slide-back-side-v3", "peg-insert-side-v3", "peg-unplug-side-v3",
    "soccer-v3", "stick-push-v3", "stick-pull-v3", "push-wall-v3", "push-v3", "reach-wall-v3",
    "reach-v3", "shelf-place-v3", "sweep-into-v3", "sweep-v3", "window-open-v3", "window-close-v3",
]  # fmt: skip

#: The difficulty groups used by the MetaWorld VLA results (Seo et al. 2022; SmolVLA; the seeds' table).
DIFFICULTY: dict[str, list[str]] = {
    "medium": [
        "basketball-v3", "bin-picking-v3", "box-close-v3", "coffee-pull-v3", "coffee-push-v3",
        "hammer-v3", "peg-insert-side-v3", "push-wall-v3", "soccer-v3", "sweep-v3", "sweep-into-v3",
    ],
    "hard": ["assembly-v3", "hand-insert-v3", "pick-out-of-hole-v3", "pick-place-v3", "push-v3", "push-back-v3"],
    "very_hard": ["shelf-place-v3", "disassemble-v3", "stick-pull-v3", "stick-push-v3", "pick-place-wall-v3"],
}  # fmt: skip
DIFFICULTY = {"easy": [t for t in MT50 if not any(t in g for g in DIFFICULTY.values())], **DIFFICULTY}

TASK_SETS = ("MT1", "MT10", "MT50", "ML45")


def difficulty_of(task: str) -> str:
    """``easy`` / ``medium`` / ``hard`` / ``very_hard``."""
    for group, tasks in DIFFICULTY.items():
        if task in tasks:
            return group
    raise KeyError(task)


def resolve_tasks(task_set: str, task_name: str | None = None, split: str = "train", tasks: list[str] | None = None) -> list[str]:
    """The ordered task list of a task set (task id = position in this list).

    Raises:
        ValueError: with the valid choices, for an unknown set, split or task name.
    """
    if tasks:
        unknown = [t for t in tasks if t not in INSTRUCTIONS]
        if unknown:
            raise ValueError(f"unknown MetaWorld task(s) {unknown}; valid: {', '.join(MT50)}")
        return list(tasks)
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if task_set == "MT1":
        if task_name not in INSTRUCTIONS:
            raise ValueError(f"task_set MT1 needs task_name, one of: {', '.join(MT50)} (got {task_name!r})")
        return [task_name]
    if task_set in ("MT10", "MT50"):
        if split == "test":
            raise ValueError(f"{task_set} has no test split (only ML45 does); use split: train")
        return list(MT10 if task_set == "MT10" else MT50)
    if task_set == "ML45":
        return list(ML45_TRAIN if split == "train" else ML45_TEST)
    raise ValueError(f"unknown task_set {task_set!r}; valid: {', '.join(TASK_SETS)} (or pass tasks: [...])")
