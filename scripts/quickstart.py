"""The CPU quickstart: SFT a tiny OpenVLA-OFT on a few MetaWorld demos, then improve it with GRPO.

    python scripts/quickstart.py [--out outputs/quickstart] [--rl-steps 64] [--demos-per-task 3] [--greedy-eval]

Installs nothing (``bash scripts/quickstart.sh`` installs, then runs this). Stages, each a
subprocess with its log under ``OUT/logs`` (rlinf's per-step and eval lines are echoed to the console):

1. ``make_tiny``: a tiny random OpenVLA-OFT checkpoint in the real layout (4-D actions).
2. ``collect``: MetaWorld's scripted experts record a few demos per task (trial seed 0).
3. ``SFT``: ``rlinf fit --config configs/metaworld/quickstart_sft.yaml`` (behaviour cloning).
4. ``eval SFT``: ``rlinf validate`` of the SFT policy on held-out scenes (trial seed 1).
5. ``RL``: ``rlinf fit --config configs/metaworld/quickstart_grpo.yaml`` from the SFT policy,
   evaluating on the same held-out scenes.
6. A per-task success table (SFT vs RL), a learning-curve PNG, eval videos and TensorBoard logs, and the same
   numbers in ``results.json``.

``--sft-dir DIR`` puts stages 1-4 in ``DIR`` and reuses them when ``DIR`` already holds them from the same settings
(seed, demos, SFT options, eval size, CPU kernels), so that runs differing only in their RL stage share one SFT
(``scripts/quickstart_spread.py`` does this).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import math
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
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
        "--greedy-eval",
        action="store_true",
        help="also evaluate both policies with greedy actions (one more held-out eval each), beside the sampled eval",
    )
    p.add_argument(
        "--sft-only",
        action="store_true",
        help="stop after the SFT policy's held-out eval (stages 1-4); results.json then holds the SFT eval only",
    )
    p.add_argument(
        "--sft-dir",
        default=None,
        help="where the tiny model, demos, SFT policy and its eval go (default: --out); reused if made before with "
        "the same settings",
    )
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
    p.add_argument(
        "--sft-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra rlinf option for the SFT stage (repeatable), e.g. --sft-arg=--model.init_args.optim.lr=5e-4",
    )
    return p.parse_args(argv)


def children_cpu_seconds() -> float:
    """User + system CPU seconds of this process's finished child processes (and theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Runner:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.logs = out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.times: dict[str, float] = {}
        # CPU seconds of each stage's processes (user + system, workers included): its cost on an idle machine,
        # whatever else the machine was running
        self.cpu: dict[str, float] = {}
        self.t0 = time.perf_counter()
        self.env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
                    "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"), "HF_HUB_OFFLINE": "1",
                    "PYTHONWARNINGS": "ignore"}  # fmt: skip
        self.bin = Path(sys.executable).parent

    def __call__(self, name: str, cmd: list[str], logs: Path | None = None) -> None:
        logs = logs or self.logs
        logs.mkdir(parents=True, exist_ok=True)
        log = logs / f"{len(self.times) + 1}_{name.replace(' ', '_')}.log"
        shown = log.relative_to(self.out) if log.is_relative_to(self.out) else log
        print(f"[{self.elapsed()}] {name} ... (log: {shown})", flush=True)
        t, cpu = time.perf_counter(), children_cpu_seconds()
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
        self.cpu[name] = children_cpu_seconds() - cpu
        (self.out / "times.json").write_text(json.dumps(self.times, indent=1))
        (self.out / "cpu_seconds.json").write_text(json.dumps(self.cpu, indent=1))
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


def cpu_kernels() -> str:
    """The CPU kernels torch uses in this process: ATen's capability, plus oneDNN's ISA cap when one is set."""
    import torch

    isa = os.environ.get("ONEDNN_MAX_CPU_ISA")
    return torch.backends.cpu.get_cpu_capability() + (f" (ONEDNN_MAX_CPU_ISA={isa})" if isa else "")


def cpu_name() -> str:
    """The CPU model, as the kernel reports it."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def sft_settings(args: argparse.Namespace) -> dict:
    """Everything stages 1-4 depend on: a ``--sft-dir`` made with other settings is not reused."""
    import torch
    import yaml

    grpo = yaml.safe_load((CONFIGS / "quickstart_grpo.yaml").read_text())["model"]["init_args"]
    eval_side = {k: grpo[k] for k in ("eval_env", "policy")}
    eval_side["rollout"] = {k: v for k, v in grpo["rollout"].items() if "eval" in k}
    digest = hashlib.sha256((CONFIGS / "quickstart_sft.yaml").read_bytes())
    digest.update(json.dumps(eval_side, sort_keys=True).encode())
    return {
        "seed": args.seed,
        "tasks": args.tasks,
        "demos_per_task": args.demos_per_task,
        "sft_epochs": args.sft_epochs,
        "sft_arg": args.sft_arg,
        "eval_trials": args.eval_trials,
        "kernels": cpu_kernels(),
        "torch": torch.__version__,
        "configs_sha256": digest.hexdigest()[:16],
    }


@contextmanager
def locked(directory: Path):
    """Hold an exclusive lock on ``directory`` (two runs sharing one ``--sft-dir`` make it once)."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.parent / f".{directory.name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def finished_sft(sft_dir: Path, settings: dict) -> dict | None:
    """The stage times of the SFT stages in ``sft_dir`` if they finished with ``settings``, else ``None``."""
    record = sft_dir / "sft.json"
    if not record.is_file():
        return None
    made = json.loads(record.read_text())
    if made["settings"] != settings:
        differ = sorted(k for k in {**settings, **made["settings"]} if made["settings"].get(k) != settings.get(k))
        raise SystemExit(f"quickstart: error: {sft_dir} holds an SFT made with other settings ({', '.join(differ)}); "
                         "choose another --sft-dir")  # fmt: skip
    return made["times"]


def eval_overrides(args: argparse.Namespace, base: Path) -> list[str]:
    tasks_yaml = "[" + ",".join(args.tasks) + "]"
    return [
        f"--model.init_args.env.init_args.tasks={tasks_yaml}",
        f"--model.init_args.eval_env.init_args.tasks={tasks_yaml}",
        f"--model.init_args.eval_env.init_args.trials_per_task={args.eval_trials}",
        f"--trainer.logger.init_args.save_dir={base / 'tensorboard'}",
        "--trainer.logger.init_args.version=0",
        f"--seed_everything={args.seed}",
    ]


GREEDY = ["--model.init_args.rollout.do_sample_eval=false",
          "--model.init_args.eval_env.init_args.video_cfg.save_video=false"]  # fmt: skip


def greedy_sft_eval(args: argparse.Namespace, run: Runner, base: Path) -> None:
    """The SFT policy in ``base`` on the held-out scenes, with greedy actions."""
    run("eval SFT greedily", [str(run.bin / "rlinf"), "validate", "--config", str(CONFIGS / "quickstart_grpo.yaml"),
                              *eval_overrides(args, base),
                              f"--model.init_args.policy.init_args.model_path={base / 'sft_policy'}", *GREEDY,
                              "--trainer.logger.init_args.name=sft_eval_greedy"], base / "logs")  # fmt: skip


def run_sft_stages(args: argparse.Namespace, run: Runner, base: Path) -> None:
    """Stages 1-4 (and the SFT policy's greedy eval with ``--greedy-eval``), everything under ``base``."""
    py, rlinf, logs = sys.executable, str(run.bin / "rlinf"), base / "logs"
    run("make tiny OpenVLA-OFT", [py, "-m", "rlinf_policy_openvla.make_tiny", str(base / "tiny_oft"), "--kind", "oft",
                                  "--norm-key", "metaworld", "--action-dim", "4", "--proprio-dim", "4",
                                  "--num-action-chunks", "8"], logs)  # fmt: skip
    run("collect demos", [py, "-m", "rlinf_env_metaworld.collect", "--tasks", *args.tasks, "--episodes-per-task",
                          str(args.demos_per_task), "--trial-seed", "0", "--out", str(base / "demos"),
                          "--image-size", "64", "--camera-name", "corner", "--num-action-chunks", "8",
                          "--quiet"], logs)  # fmt: skip
    run("SFT", [rlinf, "fit", "--config", str(CONFIGS / "quickstart_sft.yaml"),
                f"--model.init_args.policy.init_args.model_path={base / 'tiny_oft'}",
                f"--model.init_args.data_path={base / 'demos'}", f"--model.init_args.export_dir={base / 'sft_policy'}",
                f"--trainer.max_epochs={args.sft_epochs}",
                f"--trainer.logger.init_args.save_dir={base / 'tensorboard'}",
                "--trainer.logger.init_args.name=sft", "--trainer.logger.init_args.version=0",
                f"--seed_everything={args.seed}", *args.sft_arg], logs)  # fmt: skip
    grpo = str(CONFIGS / "quickstart_grpo.yaml")
    policy = f"--model.init_args.policy.init_args.model_path={base / 'sft_policy'}"
    run("eval SFT on held-out scenes", [rlinf, "validate", "--config", grpo, *eval_overrides(args, base), policy,
                                        "--model.init_args.eval_env.init_args.video_cfg.video_base_dir="
                                        f"{base / 'videos' / 'sft'}",
                                        "--trainer.logger.init_args.name=sft_eval"], logs)  # fmt: skip
    if args.greedy_eval:
        greedy_sft_eval(args, run, base)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report_only:
        out = Path(args.out).resolve()
        return report(args, out, json.loads((out / "times.json").read_text()), None)
    out = Path(args.out).resolve()
    sft_dir = Path(args.sft_dir).resolve() if args.sft_dir else out
    if sft_dir != out and sft_dir.is_relative_to(out):
        raise SystemExit("quickstart: error: --sft-dir must not lie inside --out (a new run empties --out)")
    out = fresh_results_dir(out)
    run = Runner(out)
    print(f"rlinf quickstart: tasks {', '.join(args.tasks)}; results in {out}", flush=True)
    if sft_dir == out:
        run_sft_stages(args, run, out)
    else:
        settings = sft_settings(args)
        with locked(sft_dir):
            times = finished_sft(sft_dir, settings)
            if times is None:
                run_sft_stages(args, run, fresh_results_dir(sft_dir))
                record = {"settings": settings, "times": run.times, "cpu_seconds": run.cpu}
                (sft_dir / "sft.json").write_text(json.dumps(record, indent=1))
            else:
                print(f"[{run.elapsed()}] SFT stages: reusing {sft_dir} (same settings; their times count below)")
                run.times.update(times)
                run.cpu.update(json.loads((sft_dir / "sft.json").read_text()).get("cpu_seconds", {}))
                if args.greedy_eval and "eval SFT greedily" not in times:  # made without it: add it
                    greedy_sft_eval(args, run, sft_dir)
                    record = json.loads((sft_dir / "sft.json").read_text())
                    record["times"]["eval SFT greedily"] = run.times["eval SFT greedily"]
                    record.setdefault("cpu_seconds", {})["eval SFT greedily"] = run.cpu["eval SFT greedily"]
                    (sft_dir / "sft.json").write_text(json.dumps(record, indent=1))
    (out / "run.json").write_text(json.dumps({"sft_dir": str(sft_dir)}))
    if args.sft_only:
        return sft_report(args, out, sft_dir, run.times)
    rlinf, grpo = str(run.bin / "rlinf"), str(CONFIGS / "quickstart_grpo.yaml")
    rl_steps = args.rl_steps
    run("RL (GRPO)", [rlinf, "fit", "--config", grpo, *eval_overrides(args, out),
                      f"--model.init_args.policy.init_args.model_path={sft_dir / 'sft_policy'}",
                      f"--trainer.max_epochs={rl_steps}", f"--trainer.check_val_every_n_epoch={rl_steps}",
                      f"--model.init_args.eval_env.init_args.video_cfg.video_base_dir={out / 'videos' / 'rl'}",
                      "--trainer.logger.init_args.name=rl", *args.rl_arg])  # fmt: skip
    if args.greedy_eval:
        rl_policy = out / "tensorboard" / "rl" / "version_0" / "policy"
        run("eval SFT + GRPO greedily", [rlinf, "validate", "--config", grpo, *eval_overrides(args, out),
                                         f"--model.init_args.policy.init_args.model_path={rl_policy}", *GREEDY,
                                         "--trainer.logger.init_args.name=rl_eval_greedy"])  # fmt: skip
    return report(args, out, run.times, run)


def fmt_duration(seconds: float) -> str:
    return f"{int(seconds) // 60} min {int(seconds) % 60} s"


def rate(result: dict, task: str | None = None) -> float:
    """Held-out success of one eval result: of ``task``, or of all episodes."""
    if task is None:
        return result["metrics"]["eval/success_once"]
    return result["per_task"].get(task, {}).get("success_once", float("nan"))


def standard_error(p: float, n: int) -> float:
    """The binomial standard error of a success rate ``p`` measured on ``n`` episodes."""
    return math.sqrt(max(p * (1 - p), 0.0) / n) if n else float("nan")


def readme_row(seed: int, tasks: list[str], sft: dict, rl: dict, seconds: float, cpu: str) -> tuple[str, str]:
    """The README's quickstart table header and this run's row (one source for the numbers)."""
    cells = [f"{100 * rate(sft, t):.0f}% → {100 * rate(rl, t):.0f}%" for t in tasks]
    a, b = rate(sft), rate(rl)
    names = [t.removesuffix("-v3") for t in tasks]
    header = (
        "| seed | "
        + " | ".join(f"{n}: SFT → SFT+GRPO" for n in names)
        + " | **all: SFT → SFT+GRPO** | change | time (after install) | CPU, torch kernels |\n|"
        + "---|" * (len(tasks) + 5)
    )
    row = (
        f"| {seed} | " + " | ".join(cells) + f" | **{100 * a:.1f}% → {100 * b:.1f}%** | **{100 * (b - a):+.1f}** | "
        f"{fmt_duration(seconds)} | {cpu} |"
    )
    return header, row


def success_table(tasks: list[str], sft: dict, rl: dict) -> str:
    """Per-task held-out success of both policies, with the standard error of one rate (at their mean rate)."""
    lines = ["| task | SFT | SFT + GRPO | change | s.e. |", "|---|---|---|---|---|"]
    for task in [*tasks, None]:
        a, b = rate(sft, task), rate(rl, task)
        n = rl["per_task"].get(task, {}).get("num_trajectories", 0) if task else rl["metrics"]["eval/num_trajectories"]
        se = 100 * standard_error((a + b) / 2, int(n))
        cells = f"{100 * a:.1f}% | {100 * b:.1f}% | {100 * (b - a):+.1f} | {se:.1f}"
        lines.append(
            f"| {task} | {cells} |"
            if task
            else "| **all** | " + " | ".join(f"**{c}**" for c in cells.split(" | ")) + " |"
        )
    return "\n".join(lines)


def summary(tasks: list[str], sft: dict, rl: dict) -> dict:
    """``{"sft": {task: rate, "all": rate}, "rl": {...}, "episodes": {task: n, "all": n}}`` of one eval mode."""
    return {
        "sft": {**{t: rate(sft, t) for t in tasks}, "all": rate(sft)},
        "rl": {**{t: rate(rl, t) for t in tasks}, "all": rate(rl)},
        "episodes": {**{t: rl["per_task"].get(t, {}).get("num_trajectories", 0) for t in tasks},
                     "all": int(rl["metrics"].get("eval/num_trajectories", 0))},
    }  # fmt: skip


def report(args: argparse.Namespace, out: Path, times: dict[str, float], run: Runner | None) -> int:
    """Write ``results.md`` (per-task table, README row, stage times) and ``results.json`` from a finished run in
    ``out``."""
    rl_steps = args.rl_steps
    record = out / "run.json"
    sft_base = Path(json.loads(record.read_text())["sft_dir"]) if record.is_file() else out
    tb = out / "tensorboard"
    sft_dir, rl_dir = sft_base / "tensorboard" / "sft_eval" / "version_0", tb / "rl" / "version_0"
    sft, rl = eval_results(sft_dir)[-1], eval_results(rl_dir)[-1]
    greedy = None
    if (tb / "rl_eval_greedy").is_dir():
        greedy = (eval_results(sft_base / "tensorboard" / "sft_eval_greedy" / "version_0")[-1],
                  eval_results(tb / "rl_eval_greedy" / "version_0")[-1])  # fmt: skip
    train = [v for _, v in by_rl_step(read_scalars(rl_dir), "env/success_once")]
    table = success_table(args.tasks, sft, rl)
    n = int(rl["metrics"].get("eval/num_trajectories", 0))
    k = min(5, len(train))
    train_line = (f"Training rollouts (success_once): {100 * sum(train[:k]) / k:.0f}% over the first {k} GRPO steps -> "
                  f"{100 * sum(train[-k:]) / k:.0f}% over the last {k}." if k else "")  # fmt: skip
    curve = learning_curve(rl_dir, sft, out / "learning_curve.png")
    videos = sorted((out / "videos").rglob("*.mp4")) + sorted((sft_base / "videos").rglob("*.mp4"))
    total = sum(times.values())
    cpu = read_cpu_seconds(out)
    timing = "\n".join(f"- {k}: {v:.0f} s" + (f" (CPU {cpu[k]:.0f} s)" if k in cpu else "") for k, v in times.items())
    timing += f"\n- total: {total:.0f} s" + (f" (CPU {sum(cpu.values()):.0f} s)" if cpu else "")
    if sft_base != out:
        timing += f"\n\n(The SFT stages ran once in {sft_base}, for every run with the same settings.)"
    kernels = cpu_kernels()
    header, row = readme_row(args.seed, args.tasks, sft, rl, total, f"{cpu_name()}, {kernels}")
    greedy_text = ""
    if greedy:
        greedy_text = "\n\nThe same policies with greedy actions (the most likely action token):\n\n"
        greedy_text += success_table(args.tasks, *greedy)
    text = (
        f"# rlinf CPU quickstart\n\nTasks: {', '.join(args.tasks)}; {args.demos_per_task} scripted demos per task "
        f"(trial seed 0); {rl_steps} GRPO steps; seed {args.seed}; evaluated on {args.eval_trials} held-out scenes "
        "per task "
        f"(trial seed 1, {n} episodes, {eval_sampling(rl_dir)}). CPU: {cpu_name()}; torch {torch_version()} with "
        f"{kernels} kernels.\n\n## Held-out success\n\n{table}{greedy_text}\n\n"
        "s.e.: the standard error of one success rate at the two policies' mean rate.\n\n"
        f"{train_line}\n\n## Time\n\n{timing}\n\n## README row\n\n{header}\n{row}\n"
    )
    (out / "results.md").write_text(text)
    results = {
        "seed": args.seed,
        "tasks": args.tasks,
        "commit": git_commit(),
        "cpu": cpu_name(),
        "kernels": kernels,
        "torch": torch_version(),
        "rl_steps": rl_steps,
        "rl_arg": args.rl_arg,
        "sft_dir": str(sft_base),
        "sampled": summary(args.tasks, sft, rl),
        "train_success": train,
        "times": times,
        "cpu_seconds": cpu,
    }
    if greedy:
        results["greedy"] = summary(args.tasks, *greedy)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(f"\n[{run.elapsed() if run else fmt_duration(total)}] done.\n\n{table}{greedy_text}\n\n{train_line}\n")
    print(f"README row (seed {args.seed}):\n{header}\n{row}\n")
    print(f"success table:   {out / 'results.md'}")
    if curve:
        print(f"learning curve:  {curve}")
    print(
        f"eval videos:     {sft_base / 'videos' / 'sft'} (the SFT policy), {out / 'videos' / 'rl'} (after GRPO; "
        f"{len(videos)} mp4 in all)"
    )
    print(f"TensorBoard:     tensorboard --logdir {out / 'tensorboard'}")
    print(f"policies:        {sft_base / 'sft_policy'} (SFT), {rl_dir / 'policy'} (SFT + GRPO)")
    return 0


def read_cpu_seconds(out: Path) -> dict[str, float]:
    """The stages' CPU seconds that ``Runner`` recorded in ``out`` (none for runs made before it recorded them)."""
    path = out / "cpu_seconds.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def sft_report(args: argparse.Namespace, out: Path, sft_base: Path, times: dict[str, float]) -> int:
    """``results.json`` (and the printed table) of a ``--sft-only`` run: the SFT policy's held-out evals."""
    tb = sft_base / "tensorboard"
    results = {"seed": args.seed, "tasks": args.tasks, "commit": git_commit(), "cpu": cpu_name(),
               "kernels": cpu_kernels(), "torch": torch_version(), "sft_dir": str(sft_base), "times": times,
               "cpu_seconds": read_cpu_seconds(out)}  # fmt: skip
    for mode, name in (("sampled", "sft_eval"), ("greedy", "sft_eval_greedy")):
        if (tb / name).is_dir():
            sft = eval_results(tb / name / "version_0")[-1]
            results[mode] = {k: v for k, v in summary(args.tasks, sft, sft).items() if k != "rl"}
            cells = ", ".join(f"{t}: {100 * rate(sft, t):.1f}%" for t in args.tasks)
            print(f"SFT policy, held-out success ({mode}): {cells}; all: {100 * rate(sft):.1f}%")
    (out / "results.json").write_text(json.dumps(results, indent=1))
    return 0


def git_commit() -> str:
    """The checkout's commit (``+changes`` when it has uncommitted changes), or ``unknown`` outside git."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return rev + ("+changes" if dirty else "")


def torch_version() -> str:
    import torch

    return torch.__version__.split("+")[0]


if __name__ == "__main__":
    sys.exit(main())
