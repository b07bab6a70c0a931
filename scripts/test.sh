#!/usr/bin/env bash
# Install everything (system packages, venv, core + all plugins) and run the whole test suite.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/install.sh all
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1
"${RLINF_VENV:-$ROOT/.venv}/bin/python" -m pytest -q "$@"
