#!/usr/bin/env bash
# The test suite with the CPU shared: two busy processes (a spinning loop each) run beside the suite's two
# pytest-xdist workers from start to end, as when a build or an indexer runs beside it, then one line gives the
# verdict. Run scripts/install.sh (or scripts/test.sh) first; arguments go to pytest, e.g.
#
#   bash scripts/test_under_load.sh                    # the whole suite (on 2 cores: about twice its usual time)
#   bash scripts/test_under_load.sh tests/serve        # some files
#
# Environment: RLINF_VENV (default .venv), RLINF_TEST_WORKERS (default 2), RLINF_LOAD_PROCESSES (default 2).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${RLINF_VENV:-$ROOT/.venv}/bin/python"
[ -x "$PY" ] || { echo "test_under_load.sh: no $PY; run scripts/install.sh first" >&2; exit 2; }
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1

spinners=()
stop_spinners() { for pid in "${spinners[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap stop_spinners EXIT
for _ in $(seq "${RLINF_LOAD_PROCESSES:-2}"); do
  "$PY" -c "while True: pass" &
  spinners+=($!)
done
cpu_s() { awk '{printf "%d", ($14 + $15) / '"$(getconf CLK_TCK)"'}' "/proc/$1/stat" 2>/dev/null || echo "?"; }

START=$SECONDS
status=0
"$PY" -m pytest -q -n "${RLINF_TEST_WORKERS:-2}" --dist worksteal --durations=25 "$@" || status=$?
took="$(((SECONDS - START) / 60)) min $(((SECONDS - START) % 60)) s"
busy=""
for pid in "${spinners[@]}"; do busy+=" $(cpu_s "$pid") s"; done
verdict="PASSED"; [ "$status" -eq 0 ] || verdict="FAILED (pytest exit status $status)"
echo "test_under_load.sh: $verdict in $took beside ${#spinners[@]} busy processes (CPU time each:$busy)"
exit "$status"
