"""The PutOnPlateInScene25 asset folders: the check command and the one-line error for a missing file."""

from __future__ import annotations

import json

import pytest

from rlinf_env_maniskill import assets, assets_cli
from rlinf_env_maniskill.synthetic_assets import N_CARROTS, N_PLATES, N_TABLES, write_synthetic_assets


@pytest.fixture()
def synthetic(tmp_path):
    return write_synthetic_assets(tmp_path)


def test_synthetic_assets_are_complete_in_upstream_layout(synthetic, capsys):
    root = synthetic.carrot_dir
    for folder, count in (("more_carrot", N_CARROTS), ("more_plate", N_PLATES), ("more_table", N_TABLES)):
        db = json.loads((root / folder / "model_db.json").read_text())
        assert len(db) == count
    entry = next(iter(json.loads((root / "more_carrot" / "model_db.json").read_text()).values()))
    assert {"bbox", "scale", "density", "name"} <= set(entry)
    assets.require(synthetic, plates=17)
    rc = assets_cli.main(["check", str(synthetic.asset_dir), "--bridge-dir", str(synthetic.bridge_dir)])
    assert rc == 0 and capsys.readouterr().out.strip().endswith("0 missing")


def test_a_missing_file_is_one_line_naming_it_and_where_to_get_it(synthetic, capsys):
    photo = next((synthetic.carrot_dir / "more_table" / "imgs").iterdir())
    photo.unlink()
    with pytest.raises(assets.AssetError) as info:
        assets.require(synthetic)
    message = str(info.value)
    assert str(photo) in message and "RLinf/maniskill_assets" in message and "\n" not in message
    synthetic.stage.unlink()
    with pytest.raises(assets.AssetError, match="bridge_table_1_v1.glb.*and 1 more.*download_asset bridge_v2_real2sim"):
        assets.require(synthetic)
    rc = assets_cli.main(["check", str(synthetic.asset_dir), "--bridge-dir", str(synthetic.bridge_dir)])
    out = capsys.readouterr().out
    assert rc == 1 and f"MISSING  {photo}" in out and "2 missing" in out


def test_too_few_plates_for_the_plate_variants(synthetic):
    db = synthetic.carrot_dir / "more_plate" / "model_db.json"
    plates = json.loads(db.read_text())
    db.write_text(json.dumps(dict(list(plates.items())[:1])))
    assets.require(synthetic, plates=1)
    with pytest.raises(assets.AssetError, match=r"17 entries, has 1"):
        assets.require(synthetic, plates=17)


def test_no_asset_dir_names_the_variable_and_the_download(monkeypatch):
    monkeypatch.delenv("MANISKILL_ASSET_DIR", raising=False)
    with pytest.raises(assets.AssetError, match="MANISKILL_ASSET_DIR.*hf download --repo-type dataset"):
        assets.resolve(None, "/nonexistent")


def test_every_env_id_of_the_seeds_table_is_registered():
    from mani_skill.utils.registration import REGISTERED_ENVS

    import rlinf_env_maniskill.rl4vla  # noqa: F401
    from rlinf_env_maniskill.tasks import RL4VLA_OOD_SPLITS, RL4VLA_TRAIN_TASK

    ids = [RL4VLA_TRAIN_TASK, *(t for split in RL4VLA_OOD_SPLITS.values() for t in split)]
    assert len(ids) == 14 and all(i in REGISTERED_ENVS for i in ids)
    assert all(REGISTERED_ENVS[i].max_episode_steps == 80 for i in ids)
