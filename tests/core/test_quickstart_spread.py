"""scripts/quickstart_spread.py's summary of finished runs: each run's row, mean and spread, the target's verdict."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TASKS = ["button-press-topdown-v3", "drawer-close-v3"]


def _spread():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        spec = importlib.util.spec_from_file_location("quickstart_spread", ROOT / "scripts" / "quickstart_spread.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "scripts"))


def _write_run(variant: Path, kernels: str, seed: int, sft: tuple[float, float], rl: tuple[float, float], n=160):
    def rates(pair):
        return {**dict(zip(TASKS, pair, strict=True)), "all": sum(pair) / 2}

    run = variant / f"{kernels}-seed{seed}"
    run.mkdir(parents=True)
    result = {"seed": seed, "tasks": TASKS, "cpu": "a CPU", "kernels": kernels.upper(), "torch": "2.13.0",
              "sampled": {"sft": rates(sft), "rl": rates(rl), "episodes": {**dict.fromkeys(TASKS, n), "all": 2 * n}},
              "train_success": [0.5] * 10, "times": {"SFT": 60.0, "RL (GRPO)": 400.0}}  # fmt: skip
    (run / "results.json").write_text(json.dumps(result))


def test_mean_spread_and_a_task_that_fell_beyond_one_standard_error(tmp_path):
    spread = _spread()
    variant = tmp_path / "v"
    _write_run(variant, "default", 0, (0.40, 0.80), (0.60, 0.90))  # +15
    _write_run(variant, "avx2", 0, (0.50, 0.70), (0.60, 0.95))  # +17.5
    # drawer-close 0.75 -> 0.70: -5 points; s.e. at 0.725 on 160 episodes = 3.5 points: a fall
    _write_run(variant, "default", 1, (0.40, 0.75), (0.70, 0.70))  # +12.5
    result = json.loads((variant / "avx2-seed0" / "results.json").read_text())
    result["train_success"] = [0.2] * 5 + [0.8] * 5
    result["cpu_seconds"] = {"SFT": 50.0, "RL (GRPO)": 290.0}
    (variant / "avx2-seed0" / "results.json").write_text(json.dumps(result))
    del result["train_success"], result["cpu_seconds"]["SFT"]
    result["seed"] = 1
    (variant / "avx2-seed1").mkdir()
    (variant / "avx2-seed1" / "results.json").write_text(json.dumps(result))  # +17.5 again
    args, rest = spread.parse_args(["--out", str(tmp_path), "--name", "v"])
    text = spread.summarise(args, rest)
    assert (variant / "spread.md").read_text() == text
    assert "| default-seed1 | 40.0 → 70.0 (+30.0, 3.9) | 75.0 → 70.0 (-5.0, 3.5) **↓** |" in text
    changes = [17.5, 17.5, 15, 12.5]
    mean = sum(changes) / 4
    std = math.sqrt(sum((c - mean) ** 2 for c in changes) / 3)
    assert f"change, all: +{mean:.1f} ± {std:.1f} (+12.5 … +17.5)" in text
    # each run's own training curve, also when another run has none; CPU seconds per stage over the runs with them
    assert "first → last 5 GRPO steps (%): avx2-seed0 20 → 80; default-seed0 50 → 50; default-seed1 50 → 50." in text
    assert "SFT 50 … 50 s (1 run); RL (GRPO) 290 … 290 s (2 runs)." in text
    assert "NOT met: a task fell by more than one s.e. in default-seed1 drawer-close-v3: -5.0 (s.e. 3.5)" in text


def test_the_target_is_met_only_without_falls_and_with_a_mean_gain_of_ten(tmp_path):
    spread = _spread()
    for name, runs in {
        "good": [(0, (0.4, 0.8), (0.6, 0.84)), (1, (0.5, 0.8), (0.6, 0.8))],  # +12, +5: mean +8.5
        "better": [(0, (0.4, 0.8), (0.6, 0.85)), (1, (0.5, 0.8), (0.7, 0.8))],  # +12.5, +10
        "fell": [(0, (0.4, 0.8), (0.9, 0.9)), (1, (0.5, 0.8), (0.5, 0.75))],  # +30, -2.5
    }.items():
        for seed, sft, rl in runs:
            _write_run(tmp_path / name, "default", seed, sft, rl)
    verdict = {}
    for name in ("good", "better", "fell"):
        args, rest = spread.parse_args(["--out", str(tmp_path), "--name", name])
        verdict[name] = spread.summarise(args, rest).split("s.e. in any run): ")[1].splitlines()[0]
    assert verdict["better"] == "**met**"
    assert verdict["good"].startswith("**NOT met: mean gain +8.5 < +10")
    assert "total fell in default-seed1: -2.5" in verdict["fell"]


def test_the_sft_key_ignores_rl_options_and_the_greedy_eval():
    spread = _spread()
    base = spread.sft_key([], 160)
    assert spread.sft_key(["--rl-arg=--model.init_args.optim.lr=1e-4", "--greedy-eval", "--rl-steps", "8"], 160) == base
    assert spread.sft_key(["--sft-epochs", "80"], 160) != base
    assert spread.sft_key([], 40) != base


def test_the_summary_names_the_options_its_runs_were_made_with(tmp_path):
    """A summary made later (``--report-only``, no options given) still reports the options the runs ran with."""
    spread = _spread()
    variant = tmp_path / "v"
    _write_run(variant, "default", 0, (0.40, 0.80), (0.60, 0.90))
    _write_run(variant, "avx2", 0, (0.50, 0.70), (0.60, 0.95))
    kl = ["--rl-arg=--model.init_args.algorithm.init_args.kl_beta=0.05"]
    for run in ("default-seed0", "avx2-seed0"):
        (variant / f"{run}.options.json").write_text(json.dumps(kl))
    args, rest = spread.parse_args(["--out", str(tmp_path), "--name", "v", "--report-only"])
    assert f"Quickstart options: `{kl[0]}`;" in spread.summarise(args, rest)
    (variant / "avx2-seed0.options.json").write_text("[]")  # runs made with different options: both sets shown
    assert f"Quickstart options: `(none)`; `{kl[0]}`;" in spread.summarise(args, rest)
