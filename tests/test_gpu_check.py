"""``scripts/gpu_check.sh --dry-run``: the GPU check's code at tiny size on the CPU, every part through to its report.

The GPU run (released sizes) needs a lent GPU; this keeps the script from rotting between loans: each part must
finish ``ok`` here, and the JSON and Markdown reports must hold every part's rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("memory", "throughput", "precisions", "openpi", "opensora")


def test_gpu_check_dry_run_runs_every_part_and_writes_the_reports(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHON": sys.executable}
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run", "--out", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "gpu_check.json").read_text())
    assert results["_meta"]["dry_run"] is True
    for part in PARTS:
        assert results[part]["status"] == "ok", (part, results[part].get("traceback"))
    memory = results["memory"]["rows"]
    assert set(memory) == {"lora", "full"}
    assert memory["lora"]["trainable"] < memory["full"]["trainable"]  # LoRA trains adapters, full the whole model
    assert all(row["estimate_train_gib"] > 0 and row["update_s"] > 0 for row in memory.values())
    throughput = results["throughput"]
    assert set(throughput["rows"]) == {"stages=1", "stages=2"}
    assert all(row["env_steps_per_s"] > 0 and row["recompute_s"] > 0 for row in throughput["rows"].values())
    assert throughput["projection"]["rl_steps_in_24h"] > 0
    precisions = results["precisions"]["rows"]
    assert set(precisions) == {"bf16-mixed", "16-mixed", "32-true"}
    # rollout and update run in the same precision context: the recomputed log-probs equal the rollout's
    assert all(row["max_logprob_mismatch"] < 1e-3 for row in precisions.values()), precisions
    assert set(results["openpi"]["rows"]) == {"pi0", "pi05"}
    assert all(row["frames_per_s"] > 0 for row in results["opensora"]["rows"].values())
    table = (tmp_path / "gpu_check.md").read_text()
    assert "DRY RUN" in table and all(f"### {part} (ok" in table for part in PARTS)
    assert not list(ROOT.glob("gpu_check_out*")), "the dry run writes only under --out"


def test_a_part_cut_short_keeps_what_it_measured(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import torch

        from gpu_check import markdown, run_part
        from gpu_check_parts import Check
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))

    def slow_part(check):
        check.partial["stages=1, RL step 1"] = {"time/rollout": 1.5}
        time.sleep(5)  # the time box (0.2 s) ends it here
        return {"rows": {}}

    check = Check(dry_run=True, device=torch.device("cpu"), out=tmp_path)
    check.results["_meta"] = {}
    run_part(check, "throughput", slow_part, budget_s=0.2)
    result = json.loads((tmp_path / "gpu_check.json").read_text())["throughput"]
    assert result["status"] == "error" and "time box" in result["error"]
    assert result["rows"] == {"stages=1, RL step 1": {"time/rollout": 1.5}}
    assert "measured before it stopped" in markdown(check) and "| stages=1, RL step 1 | 1.5 |" in markdown(check)
