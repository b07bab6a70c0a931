"""Which ManiSkill tasks the plugin knows: instructions, episode limits, missing-asset hints.

Pure data, no simulator import: config validation and ``--print_config`` stay cheap.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TaskInfo:
    instruction: str
    max_episode_steps: int


#: Tasks of mani-skill 3.0.1 that need no asset download and accept 7-D ``pd_ee_delta_pose``
#: actions with the Panda arm (checked on mani-skill 3.0.1).
OFFLINE_TASKS: dict[str, TaskInfo] = {
    "PickCube-v1": TaskInfo("pick up the red cube and move it to the green sphere", 50),
    "PushCube-v1": TaskInfo("push the blue cube onto the red and white target", 50),
    "PullCube-v1": TaskInfo("pull the blue cube back onto the red and white target", 50),
    "StackCube-v1": TaskInfo("stack the red cube on top of the green cube", 50),
    "StackPyramid-v1": TaskInfo(
        "place the red cube next to the green cube and stack the blue cube on top of both", 250
    ),
    "PegInsertionSide-v1": TaskInfo("insert the orange end of the peg into the hole in the box", 100),
    "PokeCube-v1": TaskInfo("use the blue peg to poke the red cube onto the target", 50),
    "LiftPegUpright-v1": TaskInfo("lift the peg and stand it upright on the table", 50),
    "PlaceSphere-v1": TaskInfo("place the blue sphere into the bin", 50),
    "PlugCharger-v1": TaskInfo("plug the charger into the receptacle", 200),
    "RollBall-v1": TaskInfo("push the blue ball so that it rolls onto the red and white target", 80),
    "PullCubeTool-v1": TaskInfo("use the red L-shaped tool to pull the blue cube closer", 100),
}

#: RLinf's RL4VLA tasks: not part of mani-skill 3.0.1; ours are in ``rlinf_env_maniskill.rl4vla`` (after
#: RLinf v0.3's task code), built on the Bridge real2sim assets. The OOD splits of RLinf's evaluation.
RL4VLA_TRAIN_TASK = "PutOnPlateInScene25Main-v3"
RL4VLA_OOD_SPLITS: dict[str, list[str]] = {
    "vision": [
        "PutOnPlateInScene25VisionImage-v1",
        "PutOnPlateInScene25VisionTexture03-v1",
        "PutOnPlateInScene25VisionTexture05-v1",
        "PutOnPlateInScene25VisionWhole03-v1",
        "PutOnPlateInScene25VisionWhole05-v1",
    ],
    "semantic": [
        "PutOnPlateInScene25Carrot-v1",
        "PutOnPlateInScene25Plate-v1",
        "PutOnPlateInScene25Instruct-v1",
        "PutOnPlateInScene25MultiCarrot-v1",
        "PutOnPlateInScene25MultiPlate-v1",
    ],
    "position": [
        "PutOnPlateInScene25Position-v1",
        "PutOnPlateInScene25EEPose-v1",
        "PutOnPlateInScene25PositionChangeTo-v1",
    ],
}
RL4VLA_MAX_EPISODE_STEPS = 80
BRIDGE_ASSETS = ("bridge_v2_real2sim", "widowx250s")


def default_max_episode_steps(tasks: list[str]) -> int:
    """The longest registered episode limit of ``tasks`` (PickCube 50, PutOnPlate 80, else 100)."""
    steps = []
    for task in tasks:
        if task in OFFLINE_TASKS:
            steps.append(OFFLINE_TASKS[task].max_episode_steps)
        elif task.startswith("PutOnPlateInScene25"):
            steps.append(RL4VLA_MAX_EPISODE_STEPS)
        else:
            steps.append(100)
    return max(steps)


def rl4vla_hint(task: str, ms_asset_dir: str) -> str:
    """One line for a PutOnPlateInScene25 id that ``rlinf_env_maniskill.rl4vla`` does not register."""
    ours = [RL4VLA_TRAIN_TASK, *(t for split in RL4VLA_OOD_SPLITS.values() for t in split)]
    return (
        f"ManiSkill task {task!r} is not one of the PutOnPlateInScene25 tasks of rlinf_env_maniskill.rl4vla "
        f"({', '.join(ours)}); another implementation can be registered through task_modules"
    )
