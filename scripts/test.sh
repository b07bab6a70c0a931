#!/usr/bin/env bash
# Install everything (system packages, venv, core + all plugins), lint (ruff: the rules and formatting configured in
# pyproject.toml; run `ruff check --fix . && ruff format .` before committing) and run the whole test suite: two
# pytest-xdist workers (RLINF_TEST_WORKERS: a number or "auto") that steal queued tests from each other when one runs
# out (conftest.py starts the longest files first), the 25 slowest tests listed at the end. Extra
# arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow"` for the quick tier.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/install.sh all
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1
"${RLINF_VENV:-$ROOT/.venv}/bin/python" -m ruff check .
"${RLINF_VENV:-$ROOT/.venv}/bin/python" -m ruff format --check .
"${RLINF_VENV:-$ROOT/.venv}/bin/python" -m pytest -q -n "${RLINF_TEST_WORKERS:-2}" --dist worksteal --durations=25 "$@"
# The numeric tests again under the other CPU kernel sets (torch / oneDNN / MKL levels below this CPU's own, which
# the suite above ran): tolerances must hold on any CPU. 2.5 CPU-minutes (231 tests x 2 settings; 21 min wall at
# nice 15 on the shared machine at load 12). `RLINF_CPU_KERNELS= bash scripts/test.sh` leaves it out.
bash "$ROOT/scripts/test_cpu_kernels.sh" --after-suite
