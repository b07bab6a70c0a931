#!/usr/bin/env bash
# CPU quickstart: install rlinf (+ MetaWorld and OpenVLA plugins), then SFT a tiny OpenVLA-OFT on a few
# scripted MetaWorld demos, fine-tune it with GRPO and compare both on held-out scenes.
# Arguments go to scripts/quickstart.py (e.g. --seed 1, --rl-steps 64, --out DIR).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
echo "quickstart: installing rlinf-core + the MetaWorld and OpenVLA plugins (scripts/install.sh) ..."
START=$SECONDS
bash scripts/install.sh rlinf-env-metaworld rlinf-policy-openvla
echo "quickstart: install took $(((SECONDS - START) / 60)) min $(((SECONDS - START) % 60)) s; now the quickstart itself"
VENV="${RLINF_VENV:-$ROOT/.venv}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" HF_HUB_OFFLINE=1 MUJOCO_GL="${MUJOCO_GL:-egl}"
"$VENV/bin/python" scripts/quickstart.py "$@"
