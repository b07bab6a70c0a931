#!/usr/bin/env bash
# Install rlinf into a virtual environment on a fresh Debian/Ubuntu machine (CPU or GPU).
#
#   scripts/install.sh [PLUGIN ...]      # PLUGIN: a folder name under plugins/, or "all" (default)
#
# Environment: RLINF_VENV (default: .venv in the repo), RLINF_SKIP_APT=1 to skip system packages.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${RLINF_VENV:-$ROOT/.venv}"
cd "$ROOT"

plugins=("$@")
if [ ${#plugins[@]} -eq 0 ] || [ "${plugins[0]}" = "all" ]; then
  plugins=()
  for d in plugins/*/; do plugins+=("$(basename "$d")"); done
fi
for p in "${plugins[@]}"; do
  [ -f "plugins/$p/pyproject.toml" ] || { echo "install.sh: no plugin '$p' (have: $(ls plugins | tr '\n' ' '))" >&2; exit 2; }
done

# System libraries for headless MuJoCo rendering (EGL / OSMesa); ManiSkill's Vulkan comes below.
if [ "${RLINF_SKIP_APT:-0}" != "1" ] && command -v apt-get >/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends \
    libegl1 libegl-mesa0 libgl1 libgl1-mesa-dri libgles2 libosmesa6 libglvnd0 libvulkan1 >/dev/null
fi

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check -q)
# The CPU build of torch first, pinned: anything unpinned later would pull the CUDA build.
CONSTRAINTS="$(mktemp)"; echo "torch==2.13.0" > "$CONSTRAINTS"
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  "${PIP[@]}" "torch==2.13.0"
fi
args=(-c "$CONSTRAINTS" -e "core[plots,deepspeed,test]")
for p in "${plugins[@]}"; do args+=(-e "plugins/$p"); done
"${PIP[@]}" "${args[@]}" 2>&1 | grep -v "is ignored" || true
"$VENV/bin/python" -m pip check >/dev/null || { "$VENV/bin/python" -m pip check; exit 1; }
# Test-only references whose own pins would downgrade the environment (e.g. openpi-client: numpy<2), without their
# dependencies and after `pip check` (which would report those pins).
for p in "${plugins[@]}"; do
  if [ -f "plugins/$p/requirements-nodeps.txt" ]; then
    "${PIP[@]}" --no-deps -r "plugins/$p/requirements-nodeps.txt" 2>&1 | grep -v "is ignored" || true
  fi
done

for p in "${plugins[@]}"; do
  if [ -x "plugins/$p/scripts/install_system_deps.sh" ]; then
    bash "plugins/$p/scripts/install_system_deps.sh"
  fi
done
"$VENV/bin/rlinf" plugins
