"""Initial-pose tables of the PutOnPlateInScene25 tasks (pure numpy), after RLinf v0.3
``rlinf/envs/maniskill/tasks/put_on_in_scene_multi.py:100`` (``_generate_init_pose``) and its variants."""

from __future__ import annotations

from itertools import product

import numpy as np
from transforms3d.euler import euler2quat

XY_CENTER = np.array([-0.16, 0.00])
HALF_EDGE = np.array([0.075, 0.075])
MIN_PAIR_DISTANCE = 0.070
#: Grid steps of the training area: a 6 x 6 grid over the 15 cm square (row-major, as upstream lists it).
INNER_STEPS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
#: Position-OOD ring (``put_on_plate_25_position.py:155``): the 28 cells one step outside the training grid.
OUTER_STEPS = (-0.2, 0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2)


def grid(steps: tuple[float, ...], ring_only: bool = False) -> np.ndarray:
    cells = [(a, b) for a in steps for b in steps if not ring_only or {a, b} & {steps[0], steps[-1]}]
    return (np.array(cells) * 2 - 1) * HALF_EDGE + XY_CENTER


def pair_configs(cells: np.ndarray, obj_z: float, plate_z: float) -> np.ndarray:
    """``[N, 2, 3]``: (object, plate) positions for every ordered pair of cells more than 7 cm apart."""
    pairs = [
        [np.append(a, obj_z), np.append(b, plate_z)]
        for i, a in enumerate(cells)
        for j, b in enumerate(cells)
        if i != j and np.linalg.norm(b - a) > MIN_PAIR_DISTANCE
    ]
    return np.asarray(pairs)


def yaw_configs(yaws: tuple[float, ...]) -> np.ndarray:
    """``[K, 2, 4]``: (object, plate) wxyz quaternions; the object turned by each yaw, the plate upright."""
    return np.asarray([[euler2quat(0, 0, y), [1, 0, 0, 0]] for y in yaws])


TRAIN_YAWS = (0.0, np.pi / 4, np.pi / 2, np.pi * 3 / 4)
OOD_YAWS = (-np.pi / 8, -np.pi * 3 / 8, -np.pi * 5 / 8, -np.pi * 7 / 8)


def change_to_configs() -> np.ndarray:
    """``[N, 3, 3]``: object, plate, and where the object jumps to (``put_on_plate_25_position_change.py``)."""
    cells = grid(INNER_STEPS)
    out = [
        [np.append(a, 0.95), np.append(b, 0.92), np.append(c, 1.0)]
        for a, b, c in product(cells, cells, cells)
        if np.linalg.norm(a - b) > MIN_PAIR_DISTANCE
        and np.linalg.norm(c - b) > MIN_PAIR_DISTANCE
        and np.linalg.norm(a - c) > 0.15
    ]
    return np.asarray(out)


def ee_pose_offsets() -> np.ndarray:
    """``[M, 8]`` joint offsets from the initial WidowX pose (``put_on_plate_25_ee_pose.py``): row 0 is zero
    (the training pose), then every 5-step combination of the six arm joints with ``|shoulder + elbow| <= 0.25``."""
    arm = (-0.15, -0.08, 0.0, 0.08, 0.15)
    rows = [np.zeros(8)]
    for p in product(arm, arm, arm, arm, arm, (-0.6, -0.3, 0.0, 0.3, 0.6)):
        if abs(p[1] + p[2]) <= 0.25:
            rows.append(np.array([*p, 0.0, 0.0]))
    return np.stack(rows)
