"""Every shipped config parses through the real CLI (no simulator or model is built)."""

from pathlib import Path

import pytest
import yaml

from rlinf_core.cli.main import main

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
ALL = sorted(p for p in (ROOT / "configs").rglob("*.yaml") if not p.name.startswith("_"))
LOOPS = [p for p in ALL if "stages" in (yaml.safe_load(p.read_text()) or {})]  # rlinf coevolve loop files
CONFIGS = [p for p in ALL if p not in LOOPS]


@pytest.mark.parametrize("config", CONFIGS, ids=[str(p.relative_to(ROOT / "configs")) for p in CONFIGS])
def test_config_parses(config, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", str(config), "--print_config"])
    assert exc.value.code in (0, None), capsys.readouterr().err[-2000:]
    printed = capsys.readouterr().out
    assert "class_path" in printed and "init_args" in printed


def test_fit_through_the_console_script(tmp_path):
    import subprocess
    import sys

    rlinf = str(Path(sys.executable).parent / "rlinf")  # the installed console script
    cmd = [
        rlinf,
        "fit",
        "--config",
        str(ROOT / "configs/toy/reach_ppo.yaml"),
        "--trainer.max_epochs=2",
        "--trainer.check_val_every_n_epoch=2",
        f"--trainer.logger.init_args.save_dir={tmp_path}",
        "--model.init_args.rollout.show_progress=false",
    ]
    subprocess.run(cmd, check=True, capture_output=True, cwd=tmp_path, timeout=900)
    run = next(tmp_path.glob("reach_ppo/version_*"))
    assert (run / "config.yaml").exists()
    assert (run / "policy" / "model.safetensors").exists()
    assert list(run.glob("eval/*.md"))
    assert (run / "checkpoints" / "last.ckpt").exists()


@pytest.mark.parametrize("loop", LOOPS, ids=[str(p.relative_to(ROOT / "configs")) for p in LOOPS])
def test_coevolve_loop_loads_and_names_existing_stage_configs(loop):
    from rlinf_core.cli.coevolve import load_loop
    from rlinf_core.cli.configs import resolve_config_args

    spec = load_loop(loop)
    for stage in spec.prelude + spec.stages:
        for name in stage.config:
            assert Path(resolve_config_args(["--config", name])[1]).is_file(), f"{loop.name}: {stage.name}: {name}"
