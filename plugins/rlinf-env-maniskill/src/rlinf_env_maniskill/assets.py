"""Where the PutOnPlateInScene25 tasks find their assets, and a check of a directory.

Two folders, in upstream's layouts:

- ``asset_dir`` (``MANISKILL_ASSET_DIR``, as RLinf v0.3 ``rlinf/envs/maniskill/tasks/put_on_in_scene_multi.py:37``
  reads it): the model databases of RL4VLA / RLinf (``hf download --repo-type dataset RLinf/maniskill_assets``):
  ``carrot/more_carrot``, ``carrot/more_plate`` (``model_db.json`` + ``<model>/collision.obj`` +
  ``<model>/textured.{obj,dae,glb}``) and ``carrot/more_table`` (``model_db.json``, ``imgs/<key>``,
  ``textures/<texture>``: the overlay photos of the green screen).
- ``bridge_dir``: ManiSkill's data folder (``$MS_ASSET_DIR/data``) with its ``bridge_v2_real2sim`` (table stage)
  and ``widowx250s`` (robot) downloads.

Check a setup with ``rlinf maniskill-assets check [ASSET_DIR] [--bridge-dir DIR]``
(:mod:`rlinf_env_maniskill.assets_cli`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

MODEL_DB_HINT = "hf download --repo-type dataset RLinf/maniskill_assets --local-dir DIR (then MANISKILL_ASSET_DIR=DIR)"
BRIDGE_HINT = (
    "python -m mani_skill.utils.download_asset bridge_v2_real2sim -y; "
    "python -m mani_skill.utils.download_asset widowx250s -y (into $MS_ASSET_DIR)"
)
STAGE = Path("tasks/bridge_v2_real2sim_dataset/stages/bridge_table_1_v1.glb")
ROBOT_URDF = Path("robots/widowx/wx250s.urdf")
#: Upstream's asserted database sizes: 25 carrots, 21 table overlays, 17 plates (the Plate variants).
MIN_MODELS = {"more_carrot": 25, "more_plate": 1, "more_table": 21}


class AssetError(RuntimeError):
    """An asset of the PutOnPlateInScene25 tasks is missing (one line: the file and where to get it)."""


@dataclass(frozen=True)
class AssetPaths:
    """Resolved asset folders of one task instance."""

    asset_dir: Path
    bridge_dir: Path

    @property
    def carrot_dir(self) -> Path:
        return self.asset_dir / "carrot"

    @property
    def stage(self) -> Path:
        return self.bridge_dir / STAGE

    @property
    def robot_urdf(self) -> Path:
        return self.bridge_dir / ROBOT_URDF


def resolve(asset_dir: str | os.PathLike | None = None, bridge_dir: str | os.PathLike | None = None) -> AssetPaths:
    """``asset_dir`` (default ``$MANISKILL_ASSET_DIR``) and ``bridge_dir`` (default ManiSkill's ``ASSET_DIR``)."""
    chosen = asset_dir or os.environ.get("MANISKILL_ASSET_DIR")
    if not chosen:
        raise AssetError(
            "the PutOnPlateInScene25 tasks need their model databases: set MANISKILL_ASSET_DIR or the task's "
            f"asset_dir (make_kwargs: {{asset_dir: DIR}}); get them with: {MODEL_DB_HINT}"
        )
    if bridge_dir is None:
        import mani_skill

        bridge_dir = mani_skill.ASSET_DIR
    return AssetPaths(Path(chosen).expanduser(), Path(bridge_dir).expanduser())


def _model_files(folder: Path, name: str) -> list[Path]:
    visual = [folder / name / f"textured.{ext}" for ext in ("obj", "dae", "glb")]
    found = next((v for v in visual if v.is_file()), visual[0])
    return [folder / name / "collision.obj", found]


def listing(paths: AssetPaths, plates: int = 1) -> list[tuple[Path, bool, str]]:
    """Every file the tasks read: ``(path, present, where to get it)``; a missing database hides its entries."""
    out: list[tuple[Path, bool, str]] = [
        (paths.stage, paths.stage.is_file(), BRIDGE_HINT),
        (paths.robot_urdf, paths.robot_urdf.is_file(), BRIDGE_HINT),
    ]
    need = {**MIN_MODELS, "more_plate": plates}
    for db_name, minimum in need.items():
        db = paths.carrot_dir / db_name / "model_db.json"
        out.append((db, db.is_file(), MODEL_DB_HINT))
        if not db.is_file():
            continue
        entries = json.loads(db.read_text())
        if len(entries) < minimum:
            out.append((db.with_name(f"model_db.json[{minimum} entries, has {len(entries)}]"), False, MODEL_DB_HINT))
        for name, info in entries.items():
            if db_name == "more_table":
                files = [db.parent / "imgs" / name, db.parent / "textures" / info["texture"]]
            else:
                files = _model_files(db.parent, name)
            out.extend((f, f.is_file(), MODEL_DB_HINT) for f in files)
    return out


def require(paths: AssetPaths, plates: int = 1) -> None:
    """Raise :class:`AssetError` naming the first missing file (and how many are missing) with its source."""
    missing = [(p, hint) for p, ok, hint in listing(paths, plates) if not ok]
    if missing:
        first, hint = missing[0]
        more = f" (and {len(missing) - 1} more: rlinf maniskill-assets check)" if len(missing) > 1 else ""
        raise AssetError(f"PutOnPlateInScene25 asset missing: {first}{more}; get it with: {hint}")
