#!/usr/bin/env bash
# Real-scale numbers from a few minutes on a lent GPU (benchmarks/gpu_check.py; docs/performance.md, "GPU check").
#
#   bash scripts/gpu_check.sh --dry-run [--out DIR]   # here, on the CPU: the same code at tiny size (in the suite)
#   bash scripts/gpu_check.sh --prepare               # here, once: wheels the GPU image lacks, into .whl/ (ignored)
#   bash scripts/gpu_check.sh [--out DIR] [--parts memory throughput precisions openpi opensora] [--env auto]
#                                                      # on the GPU machine (carry .whl): installs, then measures
#
# The GPU machine has no package index: its image holds torch, Lightning, peft, timm, ... but not rlinf, jsonargparse,
# diffusers, MetaWorld, or the transformers version the OpenVLA plugin needs; --prepare downloads those (Python 3.12,
# manylinux x86-64, about 50 MiB). LIBERO (robosuite + the benchmark's assets, about 1.2 GB) is too large to carry:
# the throughput part then uses MetaWorld's CPU simulators (--env auto) and says so in its result.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
WHEELS=(transformers==5.24.0 huggingface_hub==2.4.0 jsonargparse==4.53.0 docstring_parser==0.18.0
        typeshed_client==2.15.0 importlib_resources==7.1.0 diffusers==0.42.1 mujoco==3.3.0 glfw==2.11.0
        metaworld==3.1.1 gymnasium==1.4.0 farama-notifications==0.0.6)
PROJECT=(./core ./plugins/rlinf-policy-openvla ./plugins/rlinf-policy-openpi ./plugins/rlinf-wm-opensora
         ./plugins/rlinf-env-metaworld ./plugins/rlinf-env-libero)

if [[ "${1:-}" == "--prepare" ]]; then
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> "$(git rev-parse --git-path info/exclude)"
  mkdir -p .whl
  for w in "${WHEELS[@]}"; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "$w"
  done
  du -sh .whl
  echo "gpu_check.sh: on the GPU machine run: bash scripts/gpu_check.sh --out \$OUT (carry: .whl)"
  exit 0
fi

for arg in "$@"; do
  if [[ "$arg" == "--dry-run" ]]; then
    exec "${PYTHON:-${RLINF_VENV:-$ROOT/.venv}/bin/python}" benchmarks/gpu_check.py "$@"
  fi
done

# on the GPU machine: the carried wheels and the project into /tmp/site (no index, no build isolation)
SITE=/tmp/rlinf-site
if [[ -d .whl ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target "$SITE" --upgrade \
  "${PROJECT[@]}"
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 MUJOCO_GL=egl \
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
exec python3 benchmarks/gpu_check.py "$@"
