#!/usr/bin/env bash
# Run the tests whose results depend on the CPU's floating-point kernels (pytest marker `numeric`) under each kernel
# set this CPU can run, so that a tolerance tuned to one CPU fails here rather than on someone else's machine.
#
# Another CPU rounds differently because torch, oneDNN and MKL pick their kernels by instruction set (and MKL also by
# CPU vendor). Each setting below caps all three at one level:
#   default  ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=SSE41       MKL_CBWR=COMPATIBLE
#   avx2     ATEN_CPU_CAPABILITY=avx2    ONEDNN_MAX_CPU_ISA=AVX2        MKL_CBWR=AVX2
#   avx512   ATEN_CPU_CAPABILITY=avx512  ONEDNN_MAX_CPU_ISA=AVX512_CORE MKL_CBWR=AVX512
# (MKL_CBWR's AVX2 / AVX512 branches apply on Intel CPUs only; elsewhere MKL runs its automatic branch, and
# COMPATIBLE, its generic one, differs from it on any CPU.) Settings above this CPU's own level are skipped.
#
# Prints one verdict line per setting and exits non-zero if any failed. Extra arguments go to pytest; by default it
# runs `-m "numeric and not slow"` with RLINF_TEST_WORKERS (2) xdist workers, e.g.
#   bash scripts/test_cpu_kernels.sh                      # the quick numeric tests, every setting
#   bash scripts/test_cpu_kernels.sh -m numeric           # with the slow ones (multi-rank strategy runs)
#   RLINF_CPU_KERNELS="default avx2" bash scripts/test_cpu_kernels.sh   # some settings only (set but empty: none)
#   bash scripts/test_cpu_kernels.sh --after-suite        # what scripts/test.sh runs: not this CPU's own setting,
#                                                         # which the suite has just run
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${RLINF_VENV:-$ROOT/.venv}/bin/python"
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1
after_suite=0
if [ "${1:-}" = "--after-suite" ]; then
    after_suite=1
    shift
fi
if [ $# -eq 0 ]; then set -- -m "numeric and not slow"; fi

declare -A ONEDNN=([default]=SSE41 [avx2]=AVX2 [avx512]=AVX512_CORE)
declare -A MKL=([default]=COMPATIBLE [avx2]=AVX2 [avx512]=AVX512)
declare -A LEVEL=([default]=0 [avx2]=1 [avx512]=2 [DEFAULT]=0 [AVX2]=1 [AVX512]=2)
native="$("$PY" -c 'import torch; print(torch.backends.cpu.get_cpu_capability())')"
failed=0
verdicts=()
for cap in ${RLINF_CPU_KERNELS-default avx2 avx512}; do
    setting="ATEN_CPU_CAPABILITY=$cap ONEDNN_MAX_CPU_ISA=${ONEDNN[$cap]} MKL_CBWR=${MKL[$cap]}"
    if [ "${LEVEL[$cap]}" -gt "${LEVEL[$native]:-2}" ]; then
        verdicts+=("$setting: skipped (this CPU's level is $native)")
        continue
    fi
    if [ $after_suite -eq 1 ] && [ "${LEVEL[$cap]}" -eq "${LEVEL[$native]:-2}" ]; then
        verdicts+=("$setting: this CPU's own kernels, run by the suite")
        continue
    fi
    log="$(mktemp)"
    start=$(date +%s)
    env ATEN_CPU_CAPABILITY="$cap" ONEDNN_MAX_CPU_ISA="${ONEDNN[$cap]}" MKL_CBWR="${MKL[$cap]}" \
        "$PY" -m pytest -q -n "${RLINF_TEST_WORKERS:-2}" "$@" >"$log" 2>&1
    rc=$?
    summary="$(grep -E '^[=]* ?[0-9]+ (passed|failed|error)|no tests ran' "$log" | tail -1 | tr -d '=' | xargs)"
    if [ $rc -eq 0 ]; then
        verdicts+=("$setting: PASS ($summary) in $(($(date +%s) - start)) s")
    else
        failed=1
        verdicts+=("$setting: FAIL ($summary) in $(($(date +%s) - start)) s")
        grep -E '^(FAILED|ERROR) ' "$log" | sed "s/^/  [$cap] /"
        echo "  [$cap] the whole pytest output: $log"
    fi
    if [ $rc -eq 0 ]; then rm -f "$log"; fi
done
if [ ${#verdicts[@]} -gt 0 ]; then printf '%s\n' "${verdicts[@]}"; fi
exit $failed
