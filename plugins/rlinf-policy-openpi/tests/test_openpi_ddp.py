"""Two CPU ranks of DistributedDataParallel train the tiny π0 identically: LoRA on PaliGemma + the expert in full,
flow-noise head, expert critic (no parameter is left without a gradient, which DDP would reject)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent


def test_two_rank_ddp_update(tiny, tmp_path):
    path = tiny(pi05=False, layout="rlinf", max_token_len=24)
    settings = {"lora": {"rank": 4}, "noise": {"method": "flow_noise"}}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(HERE / "ddp_probe.py"),
        str(path),
        str(tmp_path),
        json.dumps(settings),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["start"] == ranks[1]["start"]
    assert ranks[0]["end"] == ranks[1]["end"], "ranks updated differently"
    assert ranks[0]["end"] != ranks[0]["start"], "the update changed nothing"
