#!/usr/bin/env bash
# Refresh constraints.txt, the versions scripts/install.sh installs (and so the quickstart and the test suite):
# resolve core (with the extras install.sh installs) + every plugin afresh in a temporary venv, newest versions
# within the pyproject ranges, and write what pip installed, pinned. Then run the suite on the new lock and
# commit both together.
#
#   bash scripts/lock.sh          # about 3 min with pip's cache warm
#
# torch, openpi-client and openpi-server stay at the versions pinned in the current lock (change those lines by
# hand to move them): torch because its version decides between CPU and CUDA builds, the two openpi packages
# because install.sh installs them without their dependencies. Local version labels are dropped (torch==2.13.0 also admits the 2.13.0+cpu wheel).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
LOCK="$ROOT/constraints.txt"
PYTHON="${PYTHON:-python3}"
TORCH="$(grep -E '^torch==' "$LOCK")"
mapfile -t OPENPI < <(grep -E '^openpi-(client|server)==' "$LOCK")
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
"$PYTHON" -m venv "$TMP/venv"
# pip, quiet, without the lines about find-links / index locations that do not exist on this machine
pip_install() {
  "$TMP/venv/bin/python" -m pip install --disable-pip-version-check --progress-bar off -q "$@" 2> >(grep -v 'is ignored' >&2)
}
echo "lock.sh: $TORCH, then core + plugins unconstrained (newest within the pyproject ranges) in $TMP/venv"
pip_install "$TORCH"
args=(-e "core[plots,deepspeed,serve,test,lerobot]")
for d in plugins/*/; do args+=(-e "$d"); done
pip_install "${args[@]}"
pip_install --no-deps "${OPENPI[@]}"  # as install.sh does: openpi-client's numpy<2 pin is not ours
{
  echo "# The versions scripts/install.sh installs (pip constraints): what the quickstart and the test suite run on."
  echo "# Written by scripts/lock.sh from a fresh resolution of core[plots,deepspeed,serve,test,lerobot] + every"
  echo "# plugin on $("$TMP/venv/bin/python" -c 'import platform; print(f"CPython {platform.python_version()}, {platform.system()} {platform.machine()}")')."
  echo "# The pyproject ranges stay wide for installs into your own environment; tests/test_lock.py checks this file"
  echo "# against them."
  "$TMP/venv/bin/python" -m pip freeze --all --exclude-editable --disable-pip-version-check |
    grep -v -E '^(pip|rlinf-.*)==' | sed -E 's/\+[A-Za-z0-9.]+$//' | LC_ALL=C sort -f
} > "$TMP/constraints.txt"
mv "$TMP/constraints.txt" "$LOCK"
echo "lock.sh: wrote $LOCK ($(grep -c '==' "$LOCK") packages); git diff shows what moved"
