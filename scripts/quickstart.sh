#!/usr/bin/env bash
# CPU quickstart: install rlinf, then train a policy with RL and show that it improved.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/install.sh rlinf-env-metaworld rlinf-policy-openvla
VENV="${RLINF_VENV:-$ROOT/.venv}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" HF_HUB_OFFLINE=1
OUT="${RLINF_QUICKSTART_DIR:-$ROOT/outputs/quickstart}"
mkdir -p "$OUT"
"$VENV/bin/rlinf" fit --config configs/toy/reach_ppo.yaml --trainer.logger.init_args.save_dir="$OUT" \
  --model.init_args.env.init_args.video_cfg.save_video=true
echo "Results: $OUT (TensorBoard: $VENV/bin/tensorboard --logdir $OUT)"
