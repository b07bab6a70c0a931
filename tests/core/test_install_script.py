"""scripts/install.sh against a stand-in virtual environment whose ``python`` answers like pip (``-q``: silent, as
pip is): the pip steps show a line per package and how long they take, and a failed pip step stops the install."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FAKE_PYTHON = r"""#!/usr/bin/env bash
# stands in for the venv's python: `-c "import torch"` succeeds, `-m pip install` prints pip's lines
if [ "$1" = "-c" ]; then exit 0; fi
if [ "$1 $2 $3" = "-m pip check" ]; then echo "No broken requirements found."; exit 0; fi
quiet=0; for a in "$@"; do [ "$a" = "-q" ] && quiet=1; done
if [ $quiet = 0 ]; then
  echo "WARNING: Location 'file:///opt/x/simple/foo/' is ignored: it is neither a file nor a directory."
  echo "Collecting lightning>=2.4"
  echo "  Downloading lightning-2.5.0-py3-none-any.whl (800 kB)"
  echo "Collecting transformers"
  echo "Requirement already satisfied: numpy in ./lib/python3.12/site-packages"
  echo "Installing collected packages: lightning, transformers"
  echo "Successfully installed lightning-2.5.0 transformers-4.57.0"
fi
if [ -n "${FAIL_PIP:-}" ]; then echo "ERROR: No matching distribution found for lightning" >&2; exit 1; fi
exit 0
"""


def run_install(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    (venv / "bin" / "python").write_text(FAKE_PYTHON)
    (venv / "bin" / "rlinf").write_text("#!/usr/bin/env bash\necho 'core  (rlinf-core, built in)'\n")
    for exe in ("python", "rlinf"):
        (venv / "bin" / exe).chmod(0o755)
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "install.sh"), "rlinf-env-metaworld"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "RLINF_SKIP_APT": "1", "RLINF_VENV": str(venv), **env},
    )


def test_pip_steps_show_progress_and_their_expected_time(tmp_path):
    done = run_install(tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "  1 lightning>=2.4" in out and "  2 transformers" in out, out  # a line per package collected
    assert "installing 2 packages" in out and "installed 2 packages" in out
    assert "is ignored" not in out and "Requirement already satisfied" not in out
    step = next(ln for ln in out.splitlines() if "rlinf-core and plugins" in ln)
    assert "about " in step and " min" in step, step  # how long the silent part takes


def test_a_failed_pip_step_stops_the_install(tmp_path):
    done = run_install(tmp_path, FAIL_PIP="1")
    assert done.returncode != 0
    assert "No matching distribution found for lightning" in done.stdout + done.stderr
    assert "installed plugins" not in done.stdout
