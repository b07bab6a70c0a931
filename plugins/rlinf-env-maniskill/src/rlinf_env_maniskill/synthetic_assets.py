"""Small stand-ins for the PutOnPlateInScene25 assets, in upstream's layout, so the real task code runs in CI.

``write_synthetic_assets(root)`` writes ``root/maniskill_assets/carrot/...`` (25 box/cylinder "carrots", 17 flat
cylinder plates, 21 overlay photos with textures: the :mod:`rlinf_env_maniskill.assets` layout) and
``root/ms_data/`` (a box table stage at the Bridge stage path, and a primitive-geometry WidowX URDF with the real
robot's joint and link names, standing in for ManiSkill's ``widowx250s`` download). CLI:
``rlinf maniskill-assets synthesize DIR``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rlinf_env_maniskill.assets import ROBOT_URDF, STAGE, AssetPaths

N_CARROTS, N_PLATES, N_TABLES = 25, 17, 21
#: Table top height of the real Bridge stage (the plates rest at 0.8695 m upstream).
TABLE_TOP = 0.87
STAGE_OFFSET = np.array([2.0634, 2.8313, 0.0])  # the task places the stage at -(-2.0634, -2.8313, 0)


def _write_model(folder: Path, mesh, rgb: tuple[int, int, int]) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    import trimesh

    mesh.export(folder / "collision.obj")
    material = trimesh.visual.material.PBRMaterial(baseColorFactor=[*rgb, 255], metallicFactor=0.0, roughnessFactor=0.8)
    mesh.visual = trimesh.visual.TextureVisuals(material=material)
    mesh.export(folder / "textured.glb")
    lo, hi = mesh.bounds
    return {"bbox": {"min": lo.tolist(), "max": hi.tolist()}, "scale": [1.0], "density": 1000}


def _stage_mesh():
    """A 0.9 x 1.0 m table, 0.87 m high, in the stage file's y-up frame (the task turns it +90 deg about x)."""
    import trimesh

    table = trimesh.creation.box(extents=[0.9, 1.0, TABLE_TOP])
    table.apply_translation([-0.15, 0.0, TABLE_TOP / 2])  # world frame, x from -0.6 to 0.3
    # the inverse of the task's +90 deg turn about x
    to_file = np.array([[1, 0, 0, 0], [0, 0, 1, 0], [0, -1, 0, 0], [0, 0, 0, 1]], dtype=float)
    table.apply_translation(-STAGE_OFFSET)
    table.apply_transform(to_file)
    table.visual.face_colors = [150, 110, 70, 255]
    return table


def _overlay(index: int, hw: tuple[int, int]) -> np.ndarray:
    """A distinct, high-contrast photo stand-in: stripes of an index-dependent colour and period (BGR)."""
    h, w = hw
    rng = np.random.default_rng(index)
    base = rng.integers(30, 226, size=3)
    yy, xx = np.mgrid[0:h, 0:w]
    stripes = ((xx + yy) // (8 + index) % 2)[..., None]
    return np.clip(base + stripes * 60 - 30, 0, 255).astype(np.uint8)


def _link(name: str, size: tuple[float, float, float], origin: tuple[float, float, float], mass: float = 0.1) -> str:
    geometry = f'<geometry><box size="{size[0]} {size[1]} {size[2]}"/></geometry>'
    at = f'<origin xyz="{origin[0]} {origin[1]} {origin[2]}" rpy="0 0 0"/>'
    inertia = 'ixx="1e-4" ixy="0" ixz="0" iyy="1e-4" iyz="0" izz="1e-4"'
    return (
        f'<link name="{name}"><inertial>{at}<mass value="{mass}"/><inertia {inertia}/></inertial>'
        f'<visual>{at}{geometry}<material name="grey"><color rgba="0.2 0.2 0.2 1"/></material></visual>'
        f"<collision>{at}{geometry}</collision></link>"
    )


def _joint(name: str, kind: str, parent: str, child: str, xyz, axis=(0, 1, 0), limits=(-3.1, 3.1)) -> str:
    limit = f'<limit lower="{limits[0]}" upper="{limits[1]}" effort="100" velocity="3"/>' if kind != "fixed" else ""
    ax = f'<axis xyz="{axis[0]} {axis[1]} {axis[2]}"/>' if kind != "fixed" else ""
    return (
        f'<joint name="{name}" type="{kind}"><parent link="{parent}"/><child link="{child}"/>'
        f'<origin xyz="{xyz[0]} {xyz[1]} {xyz[2]}" rpy="0 0 0"/>{ax}{limit}</joint>'
    )


def widowx_urdf() -> str:
    """A WidowX 250 S stand-in: the real robot's joints (waist ... wrist_rotate, left/right_finger) and links
    (base_link ... ee_gripper_link) at Interbotix's wx250s offsets, with boxes as geometry."""
    parts = [
        _link("base_link", (0.1, 0.1, 0.07), (0, 0, 0.035), 1.0),
        _link("shoulder_link", (0.05, 0.05, 0.04), (0, 0, 0.02)),
        _link("upper_arm_link", (0.04, 0.04, 0.25), (0.025, 0, 0.125)),
        _link("upper_forearm_link", (0.175, 0.035, 0.035), (0.0875, 0, 0)),
        _link("lower_forearm_link", (0.075, 0.03, 0.03), (0.0375, 0, 0)),
        _link("wrist_link", (0.065, 0.03, 0.03), (0.0325, 0, 0)),
        _link("gripper_link", (0.04, 0.05, 0.02), (0.02, 0, 0)),
        _link("ee_arm_link", (0.01, 0.01, 0.01), (0, 0, 0), 0.01),
        _link("fingers_link", (0.01, 0.01, 0.01), (0, 0, 0), 0.01),
        _link("left_finger_link", (0.04, 0.01, 0.02), (0.02, 0.005, 0), 0.02),
        _link("right_finger_link", (0.04, 0.01, 0.02), (0.02, -0.005, 0), 0.02),
        _link("ee_gripper_link", (0.005, 0.005, 0.005), (0, 0, 0), 0.001),
        _joint("waist", "revolute", "base_link", "shoulder_link", (0, 0, 0.072), (0, 0, 1)),
        _joint("shoulder", "revolute", "shoulder_link", "upper_arm_link", (0, 0, 0.03865), (0, 1, 0), (-1.88, 1.99)),
        _joint(
            "elbow", "revolute", "upper_arm_link", "upper_forearm_link", (0.04975, 0, 0.25), (0, 1, 0), (-2.15, 1.6)
        ),
        _joint("forearm_roll", "revolute", "upper_forearm_link", "lower_forearm_link", (0.175, 0, 0), (1, 0, 0)),
        _joint("wrist_angle", "revolute", "lower_forearm_link", "wrist_link", (0.075, 0, 0), (0, 1, 0), (-1.75, 2.15)),
        _joint("wrist_rotate", "revolute", "wrist_link", "gripper_link", (0.065, 0, 0), (1, 0, 0)),
        _joint("ee_arm", "fixed", "gripper_link", "ee_arm_link", (0.043, 0, 0)),
        _joint("fingers", "fixed", "ee_arm_link", "fingers_link", (0.023, 0, 0)),
        _joint("left_finger", "prismatic", "fingers_link", "left_finger_link", (0, 0, 0), (0, 1, 0), (0.015, 0.037)),
        _joint("right_finger", "prismatic", "fingers_link", "right_finger_link", (0, 0, 0), (0, -1, 0), (0.015, 0.037)),
        _joint("ee_gripper", "fixed", "fingers_link", "ee_gripper_link", (0.0275, 0, 0)),
    ]
    return '<?xml version="1.0"?>\n<robot name="wx250s">' + "".join(parts) + "</robot>\n"


def write_synthetic_assets(root: Path) -> AssetPaths:
    """Write the stand-ins under ``root``; returns the two folders (``asset_dir``, ``bridge_dir``)."""
    import cv2
    import trimesh

    paths = AssetPaths(Path(root) / "maniskill_assets", Path(root) / "ms_data")
    carrot_db, plate_db, table_db = {}, {}, {}
    for i in range(N_CARROTS):
        length, radius = 0.06 + 0.002 * i, 0.012 + 0.0005 * (i % 5)
        mesh = (
            trimesh.creation.cylinder(radius=radius, height=length, sections=12)
            if i % 2
            else trimesh.creation.box(extents=[length, 2 * radius, 2 * radius])
        )
        if i % 2:
            mesh.apply_transform(trimesh.transformations.rotation_matrix(np.pi / 2, [0, 1, 0]))
        name = f"carrot_{i:02d}"
        carrot_db[name] = {
            **_write_model(paths.carrot_dir / "more_carrot" / name, mesh, (230, 110 + 4 * i, 20)),
            "name": f"orange object {i}",
        }
    for i in range(N_PLATES):
        mesh = trimesh.creation.cylinder(radius=0.08 + 0.002 * i, height=0.015, sections=24)
        name = f"plate_{i:02d}"
        plate_db[name] = {
            **_write_model(paths.carrot_dir / "more_plate" / name, mesh, (240, 240, 255 - 5 * i)),
            "name": f"plate {i}",
        }
    table_dir = paths.carrot_dir / "more_table"
    (table_dir / "imgs").mkdir(parents=True, exist_ok=True)
    (table_dir / "textures").mkdir(parents=True, exist_ok=True)
    for i in range(N_TABLES):
        key, texture = f"table_{i:02d}.png", f"texture_{i:02d}.png"
        cv2.imwrite(str(table_dir / "imgs" / key), _overlay(i, (240, 320)))  # the task resizes to 640x480
        cv2.imwrite(str(table_dir / "textures" / texture), _overlay(100 + i, (64, 64)))
        table_db[key] = {"texture": texture, "mix": 0.3 + 0.01 * i}
    for folder, db in (("more_carrot", carrot_db), ("more_plate", plate_db), ("more_table", table_db)):
        (paths.carrot_dir / folder / "model_db.json").write_text(json.dumps(db, indent=1))
    paths.stage.parent.mkdir(parents=True, exist_ok=True)
    _stage_mesh().export(paths.stage)
    paths.robot_urdf.parent.mkdir(parents=True, exist_ok=True)
    paths.robot_urdf.write_text(widowx_urdf())
    assert paths.stage == paths.bridge_dir / STAGE and paths.robot_urdf == paths.bridge_dir / ROBOT_URDF
    return paths
