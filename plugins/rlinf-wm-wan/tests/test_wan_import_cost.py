"""Importing ``WanWorldModel`` does not import diffusers: ``rlinf fit`` imports every registered class to resolve a
config's short names, so a top-level diffusers import here made every run's start seconds slower, Wan or not."""

import subprocess
import sys


def test_importing_the_world_model_class_leaves_diffusers_unimported():
    code = (
        "import sys; from rlinf_wm_wan.world_model import WanWorldModel; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'diffusers'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout[-500:]
