#!/usr/bin/env bash
# Called by the repo's scripts/install.sh after pip: ManiSkill's renderer (SAPIEN) needs a Vulkan
# driver. With an NVIDIA GPU the driver's own is used; otherwise install Mesa >= 24.3 lavapipe
# privately (no system change, ~6 s, ~75 MB in ~/.cache/rlinf/lavapipe). Safe to re-run.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1 && [ "${RLINF_FORCE_LAVAPIPE:-0}" != "1" ]; then
  echo "[rlinf-env-maniskill] NVIDIA GPU found: SAPIEN uses its Vulkan driver, lavapipe not needed"
  exit 0
fi
exec bash "$HERE/install_lavapipe.sh" "$@"
