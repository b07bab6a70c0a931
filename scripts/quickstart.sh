#!/usr/bin/env bash
# CPU quickstart: install rlinf, then train a policy with RL and show that it improved.
# (Today: PPO on the built-in ReachEnv. The MetaWorld SFT -> RL quickstart of issue 4 replaces it.)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/install.sh rlinf-env-metaworld rlinf-policy-openvla
VENV="${RLINF_VENV:-$ROOT/.venv}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" HF_HUB_OFFLINE=1
OUT="${RLINF_QUICKSTART_DIR:-$ROOT/outputs/quickstart}"
rm -rf "$OUT" && mkdir -p "$OUT"
"$VENV/bin/rlinf" fit --config configs/toy/reach_ppo.yaml --trainer.logger.init_args.save_dir="$OUT" \
  --trainer.logger.init_args.version=0 --model.init_args.env.init_args.video_cfg.save_video=true \
  --model.init_args.env.init_args.video_cfg.every_n_epochs=49
"$VENV/bin/python" - "$OUT/reach_ppo/version_0" <<'PY'
import sys
from pathlib import Path
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
run = Path(sys.argv[1])
ea = EventAccumulator(str(run)); ea.Reload()
s = [e.value for e in ea.Scalars("env/success_once")]
print(f"\ntraining success_once: first 5 RL steps {sum(s[:5]) / 5:.0%} -> last 5 RL steps {sum(s[-5:]) / 5:.0%}")
for table in sorted(run.glob("eval/*.md")):
    print(f"eval after training ({table}):\n{table.read_text()}")
print(f"videos: {run / 'video'}\npolicy (HF layout): {run / 'policy'}\nTensorBoard: tensorboard --logdir {run.parent}")
PY
