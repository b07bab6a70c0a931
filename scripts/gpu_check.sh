#!/usr/bin/env bash
# Real-scale numbers from a few minutes on a lent GPU (benchmarks/gpu_check.py; docs/performance.md, "GPU check").
#
#   bash scripts/gpu_check.sh --dry-run [--out DIR] [--parts ...]  # here, on the CPU: the same code at tiny size (suite)
#   bash scripts/gpu_check.sh --prepare               # here, once: wheels the GPU image lacks, into .whl/ (.gitignore)
#   bash scripts/gpu_check.sh --prepare-imagination [OPTIONS]      # here: --prepare, then the imagination part's
#                                                      # episodes, SFT export and wheels into .whl/imagination
#   bash scripts/gpu_check.sh [--out DIR] [--parts memory throughput precisions openpi opensora imagination]
#                                                      # on the GPU machine: installs the carried wheels, measures
#
# The GPU machine has no package index: its image holds torch, Lightning, peft, transformers 5.17, ... but not rlinf,
# jsonargparse, diffusers, MetaWorld, the transformers version the OpenVLA plugin needs (5.24: the autoregressive
# OpenVLA's KV-cache call; OFT's parallel decoding runs on 5.17), or the EGL libraries MuJoCo renders with. --prepare
# downloads those (Python 3.12, manylinux x86-64, Debian amd64 .debs) into .whl/, in groups, because one call carries
# at most 64 MiB with the working tree (16 MiB): core (1 MiB, every call), hf (transformers, 13 MiB), wm (diffusers,
# 6 MiB), sim (MuJoCo, MetaWorld, Gymnasium, PyOpenGL, glfw: 45 MiB) and gl (libEGL and friends, 0.3 MiB).
#
# --prepare-imagination (about 40 min on the 2 shared cores, nice'd, at a load of 15; ignored files do not survive a
# session, so a later session reruns it; its options: python benchmarks/gpu_check_imagination.py --help, e.g.
# --sft-config, --temperatures, --sft-policy to reuse an image-only SFT export) trains the quickstart's SFT policy
# image-only, records its MetaWorld episodes at several sampling temperatures and on the held-out scenes, and packs
# them with the SFT export, the configs and the simulator wheels (MetaWorld cut to the two tasks' assets: the 45 MiB
# of sim become 14) into .whl/imagination (about 28 MiB), then prints what the imagination call carries.
#
# The calls (device tool: run(command, carry, timeout_s)); memory, precisions, openpi and opensora are measured
# (docs/performance.md), and took one call of about 4.5 min:
#   carry [.whl/core, .whl/hf, .whl/wm]:  bash scripts/gpu_check.sh --out $OUT --parts memory precisions openpi opensora
# Throughput, then imagination, both in one 15-minute lease (a start of up to 4 min): the second while the machine is
# warm (it goes back after 30 s idle: make the second call at once). Throughput's box is 240 s, its install about
# 30 s (timeout_s 330):
#   carry [.whl/core, .whl/sim, .whl/gl]: bash scripts/gpu_check.sh --out $OUT --parts throughput
# then, with B = status's budget_left_s minus 100 (the install, the part's one-minute box margin, the transfers),
# at most 510 (one command's 10 minutes), and timeout_s = B + 90:
#   carry [.whl/core, .whl/wm, .whl/gl, .whl/imagination]:
#       bash scripts/gpu_check.sh --out $OUT --parts imagination --imagination-budget-s B
# B is the imagination part's whole time: its VAE and DiT train for what the other stages leave (B - 150 s; about
# 3 min when B is 330, 5 min at 450). It writes gpu_check.json, gpu_check.md and imagination.log under $OUT as it goes.
# The install takes one wheel per distribution, the largest (a warm machine keeps the earlier call's .whl groups).
# LIBERO (robosuite + the benchmark's assets, about 1.2 GB) is too large to carry: the throughput part then uses
# MetaWorld's CPU simulators (--env auto) and says so in its result.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# huggingface_hub is not carried: 2.x needs httpx2, absent there, and the image's 1.33 satisfies transformers 5.24
declare -A WHEELS=(
  [core]="jsonargparse==4.53.0 docstring_parser==0.18.0 typeshed_client==2.15.0 importlib_resources==7.1.0"
  [hf]="transformers==5.24.0"
  [wm]="diffusers==0.42.1"
  [sim]="mujoco==3.3.0 metaworld==3.1.1 gymnasium==1.4.0 farama-notifications==0.0.6 PyOpenGL==3.1.10 glfw==2.9.0"
)
GL_DEBS="libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2"
PROJECT=(./core ./plugins/rlinf-policy-openvla ./plugins/rlinf-policy-openpi ./plugins/rlinf-wm-opensora
         ./plugins/rlinf-env-metaworld ./plugins/rlinf-env-libero)

download() {
  for group in "${!WHEELS[@]}"; do
    mkdir -p ".whl/$group"
    for w in ${WHEELS[$group]}; do
      python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d ".whl/$group" "$w"
    done
  done
  mkdir -p .whl/gl /tmp/rlinf-apt-amd64/partial
  apt_opts=(-qq -oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/rlinf-apt-amd64)
  apt-get "${apt_opts[@]}" update
  (cd .whl/gl && apt-get "${apt_opts[@]}" download $GL_DEBS)
}

if [[ "${1:-}" == "--prepare" ]]; then
  download
  du -sh .whl/*
  echo "gpu_check.sh: now the GPU calls in this script's header"
  exit 0
fi

if [[ "${1:-}" == "--prepare-imagination" ]]; then
  download
  PY="${PYTHON:-${RLINF_VENV:-$ROOT/.venv}/bin/python}"
  OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" MUJOCO_GL="${MUJOCO_GL:-egl}" "$PY" benchmarks/gpu_check_imagination.py \
    --out .whl/imagination "${@:2}"
  tree=$("$PY" -c 'import sys; sys.path.insert(0, "benchmarks"); import gpu_check_imagination as g; print(f"{g.tree_mib():.1f}")')
  du -sm .whl/core .whl/wm .whl/gl .whl/imagination
  echo "gpu_check.sh: the imagination call carries $(du -sm --total .whl/core .whl/wm .whl/gl .whl/imagination \
| tail -1 | cut -f1) MiB beside the working tree's $tree MiB (64 MiB in all)"
  exit 0
fi

for arg in "$@"; do
  if [[ "$arg" == "--dry-run" ]]; then
    exec "${PYTHON:-${RLINF_VENV:-$ROOT/.venv}/bin/python}" benchmarks/gpu_check.py "$@"
  fi
done

# on the GPU machine: the carried wheels and the project into /tmp/site (no index, no build isolation)
SITE=/tmp/rlinf-site
rm -rf "$SITE"  # a warm machine keeps the last call's packages: install only what this call carried
shopt -s nullglob
DEBS=(.whl/gl/*.deb)
if (( ${#DEBS[@]} )) && [[ $(id -u) == 0 ]]; then  # the lent machine (root, bare image): EGL for MuJoCo
  for deb in "${DEBS[@]}"; do dpkg -x "$deb" /; done
  ldconfig
  vendor=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
  [[ -f $vendor ]] && export __EGL_VENDOR_LIBRARY_FILENAMES="${__EGL_VENDOR_LIBRARY_FILENAMES:-$vendor}"
fi
# one wheel per distribution, the largest: a warm machine keeps an earlier call's .whl groups, and MetaWorld's full
# wheel (.whl/sim) serves where the one cut to the imagination part's tasks (.whl/imagination) does
CARRIED=()
declare -A SEEN=()
while IFS= read -r wheel; do
  dist=$(basename "$wheel" | cut -d- -f1 | tr 'A-Z-' 'a-z_')
  [[ -n "${SEEN[$dist]:-}" ]] && continue
  SEEN[$dist]=1
  CARRIED+=("$wheel")
done < <(ls -S .whl/*/*.whl 2>/dev/null || true)
if (( ${#CARRIED[@]} )); then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "${CARRIED[@]}"
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target "$SITE" --upgrade \
  "${PROJECT[@]}"
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 MUJOCO_GL=egl \
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
exec python3 benchmarks/gpu_check.py "$@"
