"""The CPU quickstart: SFT a tiny OpenVLA-OFT on a few MetaWorld demos, then improve it with GRPO.

    python scripts/quickstart.py [--out outputs/quickstart] [--rl-steps 64] [--demos-per-task 3]

Installs nothing (``bash scripts/quickstart.sh`` installs, then runs this). Stages, each a
subprocess with its log under ``OUT/logs`` (rlinf's per-step and eval lines are echoed to the console):

1. ``make_tiny``: a tiny random OpenVLA-OFT checkpoint in the real layout (4-D actions).
2. ``collect``: MetaWorld's scripted experts record a few demos per task (trial seed 0).
3. ``SFT``: ``rlinf fit --config configs/metaworld/quickstart_sft.yaml`` (behaviour cloning).
4. ``eval SFT``: ``rlinf validate`` of the SFT policy on held-out scenes (trial seed 1).
5. ``RL``: ``rlinf fit --config configs/metaworld/quickstart_grpo.yaml`` from the SFT policy,
   evaluating on the same held-out scenes.
6. A per-task success table (SFT vs RL), a learning-curve PNG, eval videos and TensorBoard logs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rlinf_core.run.learning_curves import by_rl_step, read_scalars

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs" / "metaworld"
TASKS = ["button-press-topdown-v3", "drawer-close-v3"]
STAMPED = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ")  # rlinf's plain progress lines in a log


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--out",
        default=str(ROOT / "outputs" / "quickstart"),
        help="results directory (a previous quickstart's results there are replaced)",
    )
    p.add_argument("--tasks", nargs="+", default=TASKS, help="MetaWorld tasks")
    p.add_argument("--demos-per-task", type=int, default=3, help="scripted-expert demos per task for SFT")
    p.add_argument("--sft-epochs", type=int, default=40)
    p.add_argument("--rl-steps", type=int, default=64, help="GRPO steps (one rollout + update each)")
    p.add_argument("--eval-trials", type=int, default=40, help="held-out scenes per task")
    p.add_argument("--seed", type=int, default=0, help="seed_everything of SFT and RL")
    p.add_argument(
        "--report-only",
        action="store_true",
        help="run nothing: rewrite results.md (and its README row) from the finished run in --out",
    )
    p.add_argument(
        "--rl-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra rlinf option for the RL stage (repeatable), e.g. --rl-arg=--model.init_args.optim.lr=1e-4",
    )
    return p.parse_args(argv)


class Runner:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.logs = out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.times: dict[str, float] = {}
        self.t0 = time.perf_counter()
        self.env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
                    "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"), "HF_HUB_OFFLINE": "1",
                    "PYTHONWARNINGS": "ignore"}  # fmt: skip
        self.bin = Path(sys.executable).parent

    def __call__(self, name: str, cmd: list[str]) -> None:
        log = self.logs / f"{len(self.times) + 1}_{name.replace(' ', '_')}.log"
        print(f"[{self.elapsed()}] {name} ... (log: {log.relative_to(self.out)})", flush=True)
        t = time.perf_counter()
        with open(log, "w") as f:
            f.write("$ " + " ".join(cmd) + "\n")
            f.flush()
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=self.env, cwd=self.out,
                                    text=True, bufsize=1)  # fmt: skip
            echo = False
            for line in proc.stdout:
                f.write(line)
                f.flush()
                # rlinf's timestamped step / eval lines (and an eval's table rows) also go to the console
                if STAMPED.match(line):
                    echo = " eval" in line[:30]
                    print(f"    {line[11:]}", end="", flush=True)
                elif echo and line.startswith("  "):
                    print(f"    {line}", end="", flush=True)
                else:
                    echo = False
            proc.wait()
        self.times[name] = time.perf_counter() - t
        (self.out / "times.json").write_text(json.dumps(self.times, indent=1))
        if proc.returncode != 0:
            tail = log.read_text().splitlines()[-25:]
            print("\n".join(tail), file=sys.stderr)
            raise SystemExit(f"quickstart: stage '{name}' failed (exit {proc.returncode}); full log: {log}")

    def elapsed(self) -> str:
        s = int(time.perf_counter() - self.t0)
        return f"{s // 60:02d}:{s % 60:02d}"


def eval_results(run_dir: Path) -> list[dict]:
    """The run's eval results (``eval/eval_epoch<N>.json``), oldest first."""
    files = sorted((run_dir / "eval").glob("eval_epoch*.json"), key=lambda p: int(p.stem.split("epoch")[1]))
    if not files:
        raise SystemExit(f"quickstart: no eval results under {run_dir / 'eval'}")
    return [json.loads(p.read_text()) for p in files]


def learning_curve(rl_dir: Path, sft: dict, path: Path) -> Path | None:
    """The RL run's learning curve (rlinf_core.run.learning_curves), with the SFT policy's held-out eval at step 0."""
    from rlinf_core.run.learning_curves import PlotError, plot_learning_curve

    baseline = {k: v for k, v in sft["metrics"].items() if k in ("eval/success_once", "eval/return")}
    try:
        return plot_learning_curve(rl_dir, path, title="Tiny OpenVLA-OFT in MetaWorld: SFT, then GRPO",
                                   baseline=baseline, baseline_label="the SFT policy (held-out eval)")  # fmt: skip
    except PlotError as exc:
        print(f"quickstart: no learning-curve PNG: {exc}", file=sys.stderr)
        return None


def fresh_results_dir(out: Path) -> Path:
    """Empty ``out`` for a new run; only a previous quickstart's results are ever deleted."""
    if out.exists() and any(out.iterdir()):
        if not (out / "logs").is_dir():
            raise SystemExit(f"quickstart: {out} exists and is not a quickstart results directory; "
                             "choose another --out")  # fmt: skip
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    return out


def eval_sampling(run_dir: Path) -> str:
    """How the eval chose actions, from the resolved config Lightning saved for the run."""
    import yaml

    rollout = yaml.safe_load((run_dir / "config.yaml").read_text())["model"]["init_args"]["rollout"]
    if rollout.get("do_sample_eval"):
        return f"sampling at temperature {rollout.get('temperature_eval', 1.0)}"
    return "greedy actions"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report_only:
        out = Path(args.out).resolve()
        return report(args, out, json.loads((out / "times.json").read_text()), None)
    out = fresh_results_dir(Path(args.out).resolve())
    run = Runner(out)
    py, rlinf = sys.executable, str(run.bin / "rlinf")
    tasks_yaml = "[" + ",".join(args.tasks) + "]"
    eval_overrides = [
        f"--model.init_args.env.init_args.tasks={tasks_yaml}",
        f"--model.init_args.eval_env.init_args.tasks={tasks_yaml}",
        f"--model.init_args.eval_env.init_args.trials_per_task={args.eval_trials}",
        f"--trainer.logger.init_args.save_dir={out / 'tensorboard'}",
        "--trainer.logger.init_args.version=0",
        f"--seed_everything={args.seed}",
    ]
    print(f"rlinf quickstart: tasks {', '.join(args.tasks)}; results in {out}", flush=True)

    run("make tiny OpenVLA-OFT", [py, "-m", "rlinf_policy_openvla.make_tiny", str(out / "tiny_oft"), "--kind", "oft",
                                  "--norm-key", "metaworld", "--action-dim", "4", "--proprio-dim", "4",
                                  "--num-action-chunks", "8"])  # fmt: skip
    run("collect demos", [py, "-m", "rlinf_env_metaworld.collect", "--tasks", *args.tasks, "--episodes-per-task",
                          str(args.demos_per_task), "--trial-seed", "0", "--out", str(out / "demos"),
                          "--image-size", "64", "--camera-name", "corner", "--num-action-chunks", "8",
                          "--quiet"])  # fmt: skip
    run("SFT", [rlinf, "fit", "--config", str(CONFIGS / "quickstart_sft.yaml"),
                f"--model.init_args.policy.init_args.model_path={out / 'tiny_oft'}",
                f"--model.init_args.data_path={out / 'demos'}", f"--model.init_args.export_dir={out / 'sft_policy'}",
                f"--trainer.max_epochs={args.sft_epochs}", f"--trainer.logger.init_args.save_dir={out / 'tensorboard'}",
                "--trainer.logger.init_args.name=sft", "--trainer.logger.init_args.version=0",
                f"--seed_everything={args.seed}"])  # fmt: skip
    grpo = str(CONFIGS / "quickstart_grpo.yaml")
    run("eval SFT on held-out scenes", [rlinf, "validate", "--config", grpo, *eval_overrides,
                                        f"--model.init_args.policy.init_args.model_path={out / 'sft_policy'}",
                                        "--model.init_args.eval_env.init_args.video_cfg.video_base_dir="
                                        f"{out / 'videos' / 'sft'}",
                                        "--trainer.logger.init_args.name=sft_eval"])  # fmt: skip
    rl_steps = args.rl_steps
    run("RL (GRPO)", [rlinf, "fit", "--config", grpo, *eval_overrides,
                      f"--model.init_args.policy.init_args.model_path={out / 'sft_policy'}",
                      f"--trainer.max_epochs={rl_steps}", f"--trainer.check_val_every_n_epoch={rl_steps}",
                      f"--model.init_args.eval_env.init_args.video_cfg.video_base_dir={out / 'videos' / 'rl'}",
                      "--trainer.logger.init_args.name=rl", *args.rl_arg])  # fmt: skip
    return report(args, out, run.times, run)


def fmt_duration(seconds: float) -> str:
    return f"{int(seconds) // 60} min {int(seconds) % 60} s"


def readme_row(seed: int, tasks: list[str], sft: dict, rl: dict, seconds: float) -> tuple[str, str]:
    """The README's quickstart table header and this run's row (one source for the numbers)."""
    cells = []
    for task in tasks:
        a = sft["per_task"].get(task, {}).get("success_once", float("nan"))
        b = rl["per_task"].get(task, {}).get("success_once", float("nan"))
        cells.append(f"{100 * a:.0f}% → {100 * b:.0f}%")
    a, b = sft["metrics"]["eval/success_once"], rl["metrics"]["eval/success_once"]
    names = [t.removesuffix("-v3") for t in tasks]
    header = (
        "| seed | "
        + " | ".join(f"{n}: SFT → SFT+GRPO" for n in names)
        + " | **all: SFT → SFT+GRPO** | change | time (after install) |\n|"
        + "---|" * (len(tasks) + 4)
    )
    row = (
        f"| {seed} | " + " | ".join(cells) + f" | **{100 * a:.1f}% → {100 * b:.1f}%** | **{100 * (b - a):+.1f}** | "
        f"{fmt_duration(seconds)} |"
    )
    return header, row


def report(args: argparse.Namespace, out: Path, times: dict[str, float], run: Runner | None) -> int:
    """Write ``results.md`` (per-task table, README row, stage times) from a finished run in ``out``."""
    rl_steps = args.rl_steps
    sft_dir, rl_dir = out / "tensorboard" / "sft_eval" / "version_0", out / "tensorboard" / "rl" / "version_0"
    sft, rl = eval_results(sft_dir)[-1], eval_results(rl_dir)[-1]
    train = [v for _, v in by_rl_step(read_scalars(rl_dir), "env/success_once")]
    lines = ["| task | SFT | SFT + GRPO | change |", "|---|---|---|---|"]
    for task in args.tasks:
        a = sft["per_task"].get(task, {}).get("success_once", float("nan"))
        b = rl["per_task"].get(task, {}).get("success_once", float("nan"))
        lines.append(f"| {task} | {100 * a:.1f}% | {100 * b:.1f}% | {100 * (b - a):+.1f} |")
    a, b = sft["metrics"]["eval/success_once"], rl["metrics"]["eval/success_once"]
    lines.append(f"| **all** | **{100 * a:.1f}%** | **{100 * b:.1f}%** | **{100 * (b - a):+.1f}** |")
    table = "\n".join(lines)
    n = int(rl["metrics"].get("eval/num_trajectories", 0))
    k = min(5, len(train))
    train_line = (f"Training rollouts (success_once): {100 * sum(train[:k]) / k:.0f}% over the first {k} GRPO steps -> "
                  f"{100 * sum(train[-k:]) / k:.0f}% over the last {k}." if k else "")  # fmt: skip
    curve = learning_curve(rl_dir, sft, out / "learning_curve.png")
    videos = sorted((out / "videos").rglob("*.mp4"))
    total = sum(times.values())
    timing = "\n".join(f"- {k}: {v:.0f} s" for k, v in times.items()) + f"\n- total: {total:.0f} s"
    header, row = readme_row(args.seed, args.tasks, sft, rl, total)
    text = (
        f"# rlinf CPU quickstart\n\nTasks: {', '.join(args.tasks)}; {args.demos_per_task} scripted demos per task "
        f"(trial seed 0); {rl_steps} GRPO steps; seed {args.seed}; evaluated on {args.eval_trials} held-out scenes "
        "per task "
        f"(trial seed 1, {n} episodes, {eval_sampling(rl_dir)}).\n\n## Held-out success\n\n{table}\n\n{train_line}\n\n"
        f"## Time\n\n{timing}\n\n## README row\n\n{header}\n{row}\n"
    )
    (out / "results.md").write_text(text)
    print(f"\n[{run.elapsed() if run else fmt_duration(total)}] done.\n\n{table}\n\n{train_line}\n")
    print(f"README row (seed {args.seed}):\n{header}\n{row}\n")
    print(f"success table:   {out / 'results.md'}")
    if curve:
        print(f"learning curve:  {curve}")
    print(
        f"eval videos:     {out / 'videos'} ({len(videos)} mp4: videos/sft = the SFT policy, "
        "videos/rl = after GRPO steps)"
    )
    print(f"TensorBoard:     tensorboard --logdir {out / 'tensorboard'}")
    print(f"policies:        {out / 'sft_policy'} (SFT), {rl_dir / 'policy'} (SFT + GRPO)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
