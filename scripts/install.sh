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
START=$SECONDS
say() { printf 'install.sh [%d:%02d] %s\n' $(((SECONDS - START) / 60)) $(((SECONDS - START) % 60)) "$*"; }

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
  say "system packages for headless rendering (apt-get)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends \
    libegl1 libegl-mesa0 libgl1 libgl1-mesa-dri libgles2 libosmesa6 libglvnd0 libvulkan1 >/dev/null
fi

[ -x "$VENV/bin/python" ] || { say "virtual environment $VENV"; python3 -m venv "$VENV"; }
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off)
# pip's progress, one line per package it collects (not its download bars, nor "Requirement already satisfied");
# errors in full. Returns pip's status.
pip_install() {
  "${PIP[@]}" "$@" 2>&1 | awk '
    /is ignored/ {next}
    /^Collecting / {n++; printf "    %3d %s\n", n, $2; fflush(); next}
    /^Installing collected packages/ {
      k = split($0, a, ","); printf "    installing %d packages (silent while they unpack)\n", k; fflush(); next}
    /^Successfully installed/ {printf "    installed %d packages\n", NF - 2; fflush(); next}
    /^WARNING/ {print; fflush(); next}
    /^(ERROR|error|  ×)/ || failed {failed = 1; print; fflush()}'
  return "${PIPESTATUS[0]}"
}
# Every version comes from constraints.txt, the lock (refreshed by scripts/lock.sh; the pyproject ranges are for
# installs into your own environment). torch first: anything unpinned later would pull the CUDA build.
LOCK="$ROOT/constraints.txt"
TORCH="$(grep -E '^torch==' "$LOCK")"
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  say "$TORCH (the CPU build; the largest download: about 1 min, longer on a slow link)"
  pip_install -c "$LOCK" "$TORCH"
fi
args=(-c "$LOCK" -e "core[plots,deepspeed,serve,test,lerobot]")
for p in "${plugins[@]}"; do args+=(-e "plugins/$p"); done
say "rlinf-core and plugins: ${plugins[*]} (with their dependencies at the versions in constraints.txt: Lightning," \
  "transformers, simulators...; about 1 min 30 s for the quickstart's two plugins and 2 min 30 s for all of them with" \
  "pip's cache warm, 4+ min cold)"
pip_install "${args[@]}"
# openpi-client, the real reference of the `rlinf serve` tests (WebsocketClientPolicy) and of the openpi plugin's
# resize parity test (image_tools): it pins numpy<2 (and dm-tree) for openpi's JAX stack, but what we use of it
# (msgpack + websockets, numpy + pillow) runs on numpy 2, so it comes without its pins and pip check passes over its lines
# openpi-server: openpi's own WebsocketPolicyServer module as a package (the file is byte-identical to openpi's
# src/openpi/serving/websocket_policy_server.py; tests/serve/test_remote_openpi_server.py checks its hash), the
# server the remote-eval tests and benchmarks/serve_overhead.py run next to rlinf serve; its two requirements
# (openpi-client, websockets) are installed already. Both at the lock's versions.
say "openpi-client (the serve tests' websocket client, the openpi resize reference), openpi-server and pip check"
pip_install --no-deps -c "$LOCK" openpi-client openpi-server
pip_problems="$("$VENV/bin/python" -m pip check 2>&1 | grep -v '^openpi-client ' | grep -v '^No broken requirements' || true)"
[ -z "$pip_problems" ] || { echo "$pip_problems"; exit 1; }

for p in "${plugins[@]}"; do
  if [ -x "plugins/$p/scripts/install_system_deps.sh" ]; then
    say "system dependencies of $p"
    bash "plugins/$p/scripts/install_system_deps.sh"
  fi
done
say "done; installed plugins:"
"$VENV/bin/rlinf" plugins
