"""The GPU check's imagination part (benchmarks/gpu_check_imagination.py): its dry run, every stage through to the
report at tiny size on the CPU, and the pieces of its carry (episodes packed losslessly, MetaWorld cut to the
tasks' assets, the time plan)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("data", "vae", "dit", "reward_model", "grpo", "real_before", "real_after", "gate", "reward_on_imagined")


@pytest.fixture(scope="module")
def imagination():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_check_imagination

        yield gpu_check_imagination
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


@pytest.mark.slow
def test_the_dry_run_runs_every_stage_and_writes_its_rows(tmp_path):
    pytest.importorskip("rlinf_env_metaworld")
    pytest.importorskip("rlinf_wm_opensora")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHON": sys.executable, "TMPDIR": str(tmp_path)}
    out = tmp_path / "out"
    proc = subprocess.run(
        # a box of 3 x (330 + 60) s: the run takes about 200 s on a loaded 2-core machine, once over 6 minutes
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run", "--parts", "imagination", "--out", str(out),
         "--budget-scale", "3"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "gpu_check.json").read_text())["imagination"]
    assert result["status"] == "ok", (result.get("error"), proc.stdout[-4000:])
    rows = result["rows"]
    assert set(rows) == {"plan", "carry", *STAGES, "summary"}
    assert not [name for name, row in rows.items() if "error" in row]
    # the tiny carry: one episode per task on the training scenes, one held out
    assert rows["data"]["train_episodes"] == 2 and rows["data"]["heldout_episodes"] == 2
    assert rows["vae"]["steps"] == 3 and rows["dit"]["steps"] == 2 and rows["reward_model"]["steps"] == 2
    assert rows["gate"]["verdict"] in ("responds", "blind") and rows["gate"]["windows"] == 2
    assert rows["grpo"]["steps"] == 1 and rows["grpo"]["envs"] == 4
    assert rows["real_before"]["episodes"] == 2 and rows["real_after"]["episodes"] == 2
    summary = rows["summary"]
    assert summary["real_before"] == rows["real_before"]["success_once"]
    assert summary["imagined_before"] == rows["grpo"]["imagined_success_first"]
    assert summary["gate"] == rows["gate"]["verdict"]
    assert rows["plan"]["vae_steps"] == 3 and rows["carry"]["real_episodes_cpu"] == 2
    table = (out / "gpu_check.md").read_text()
    assert "DRY RUN" in table and "### imagination (ok" in table and "- **gate**: verdict" in table
    log = (out / "imagination.log").read_text()
    assert all(f"===== {name} =====" in log for name in ("vae", "dit", "grpo", "gate", "real_after"))
    assert "[cpu seconds:" in log  # each command reports its CPU time
    assert not list(ROOT.glob("gpu_check_out*")), "the dry run writes only under --out"


def test_episodes_are_packed_losslessly_and_without_pickle(tmp_path, imagination):
    from rlinf_core.world_models.datasets import find_trajectories, load_episode
    from rlinf_core.world_models.init_data import save_init_trajectory

    rng = np.random.default_rng(0)
    files, sources = [], []
    for i, (length, source) in enumerate([(5, "t0.7"), (1, "t0.7"), (9, "t1.5")]):
        background = rng.integers(0, 256, (1, 16, 16, 3), dtype=np.uint8)
        frames = np.repeat(background, length, axis=0)
        frames[:, 4:8, 4:8] = rng.integers(0, 256, (length, 4, 4, 3), dtype=np.uint8)  # a moving patch
        success = np.arange(length) >= length - 2
        path = tmp_path / "in" / f"traj{i}.npy"
        save_init_trajectory(path, frames, f"task {i}", rng.normal(size=(length, 4)).astype(np.float32), success)
        files.append(path)
        sources.append(source)
    packed = imagination.pack_episodes(files, sources, tmp_path / "episodes.npz")
    assert packed == {"episodes": 3, "frames": 15, "successful_episodes": 3, "mib": pytest.approx(packed["mib"])}
    with zipfile.ZipFile(tmp_path / "episodes.npz") as z:
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_LZMA}
    with np.load(tmp_path / "episodes.npz", allow_pickle=False) as z:  # plain arrays: nothing to unpickle
        assert z["frame_deltas"].dtype == np.uint8 and z["instructions"].dtype.kind == "U"
    unpacked = imagination.unpack_episodes(tmp_path / "episodes.npz", tmp_path / "out")
    assert unpacked["per_source"] == {"t0.7": 2, "t1.5": 1} and unpacked["frames"] == 15
    restored = find_trajectories(tmp_path / "out")
    assert [p.parent.name for p in restored] == sources
    for original, copy in zip(files, restored):
        a, b = load_episode(original), load_episode(copy)
        np.testing.assert_array_equal(a.frames, b.frames)
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.success, b.success)
        assert a.instruction == b.instruction and b.has_success


def _fake_wheel(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("metaworld-3.1.1.dist-info/RECORD", "stale\n")
    return path


def test_metaworld_is_cut_to_the_files_its_task_models_name(tmp_path, imagination):
    main = b'<mujoco><include file="../scene/basic.xml"/><include file="../objects/box_dep.xml"/></mujoco>'
    files = {
        "metaworld/__init__.py": b"",
        "metaworld/assets/sawyer_xyz/box.xml": main,
        "metaworld/assets/sawyer_xyz/other.xml": b'<mujoco><include file="../objects/other_dep.xml"/></mujoco>',
        # MetaWorld names every path relative to the main model file, also in included files
        "metaworld/assets/scene/basic.xml": b'<mujocoinclude><texture file="../textures/wood.png"/></mujocoinclude>',
        "metaworld/assets/objects/box_dep.xml": b'<mujocoinclude><mesh file="../objects/meshes/box.stl"/>'
        b"</mujocoinclude>",
        "metaworld/assets/objects/other_dep.xml": b'<mujocoinclude><mesh file="../objects/meshes/other.stl"/>'
        b"</mujocoinclude>",
        "metaworld/assets/textures/wood.png": b"wood",
        "metaworld/assets/textures/unused.png": b"x" * 1000,
        "metaworld/assets/objects/meshes/box.stl": b"box",
        "metaworld/assets/objects/meshes/other.stl": b"other",
        "metaworld-3.1.1.dist-info/METADATA": b"Name: metaworld\nVersion: 3.1.1\n",
    }
    tree = tmp_path / "tree"
    for name, data in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_bytes(data)
    package = tree / "metaworld"
    needed = imagination.referenced_assets(package / "assets/sawyer_xyz/box.xml", package)
    keep = {f"metaworld/{p.relative_to(package.resolve()).as_posix()}" for p in needed}
    assert {k for k in keep if not k.endswith(".xml")} == {
        "metaworld/assets/textures/wood.png",
        "metaworld/assets/objects/meshes/box.stl",
    }
    cut = imagination.cut_wheel(_fake_wheel(tmp_path / "metaworld-3.1.1-py3-none-any.whl", files), tmp_path / "cut",
                                keep)  # fmt: skip
    assert cut.name == "metaworld-3.1.1-py3-none-any.whl"
    with zipfile.ZipFile(cut) as z:
        names = set(z.namelist())
        assert "metaworld/assets/textures/unused.png" not in names
        assert "metaworld/assets/objects/meshes/other.stl" not in names
        assert names >= {"metaworld/__init__.py", "metaworld/assets/sawyer_xyz/other.xml", *keep}
        record = z.read("metaworld-3.1.1.dist-info/RECORD").decode().splitlines()
        for line in record:  # RECORD lists every file with its hash, as pip checks
            name, digest, size = line.rsplit(",", 2)
            if name.endswith("RECORD"):
                assert digest == size == ""
                continue
            data = z.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={expected}" and int(size) == len(data)
        assert {line.split(",")[0] for line in record} == names
    (package / "assets/sawyer_xyz/bad.xml").write_bytes(b'<mujoco><mesh file="../../../../etc/hostname"/></mujoco>')
    with pytest.raises(FileNotFoundError, match="not a file of the metaworld package"):
        imagination.referenced_assets(package / "assets/sawyer_xyz/bad.xml", package)


def test_the_quickstart_tasks_need_a_tenth_of_metaworlds_assets(imagination):
    metaworld = pytest.importorskip("metaworld")
    package = Path(metaworld.__file__).parent.resolve()
    settings = imagination.QuickstartSettings.read(
        ROOT / "configs/metaworld/quickstart_sft.yaml", ROOT / "configs/metaworld/quickstart_grpo.yaml"
    )
    needed = set()
    for xml in imagination.task_model_files(settings.tasks):
        needed |= {p.relative_to(package).as_posix() for p in imagination.referenced_assets(xml, package)}
    assert {"assets/textures/wood2.png", "assets/objects/meshes/drawer/drawer.stl"} <= needed
    assert "assets/scene/textures/wood.png" not in needed  # 14 MB of scene textures no quickstart task names
    size = sum((package / n).stat().st_size for n in needed)
    total = sum(p.stat().st_size for p in (package / "assets").rglob("*") if p.is_file())
    assert size < total / 5


def test_the_plan_gives_the_training_what_the_budget_leaves(imagination):
    gpu = SimpleNamespace(dry_run=False)
    plan = imagination.plan_for(gpu, budget_s=330, train_s=None, eval_trials=40, cores=16)
    assert plan.train_s == 330 - imagination.RESERVE_S
    assert plan.vae_s + plan.dit_s == pytest.approx(plan.train_s) and plan.dit_s == pytest.approx(2 * plan.vae_s)
    assert (80 % plan.eval_workers, plan.eval_workers) == (0, 10)  # every held-out episode at once, 12 cores
    assert imagination.plan_for(gpu, 460, None, 40, 16).train_s == 460 - imagination.RESERVE_S
    assert imagination.plan_for(gpu, 330, 300, 40, 16).train_s == 300
    assert imagination.plan_for(gpu, 100, None, 40, 16).train_s == 60  # never less than a minute
    assert imagination.max_time(185.4) == "00:00:03:05"
