"""The quickstart's result as a distribution: seeds x CPU kernel settings, each run's row, the mean and its spread.

    python scripts/quickstart_spread.py [--out outputs/quickstart_spread] [--name NAME] [--seeds 0 1 2 3]
        [--kernels default avx2] [--jobs 1] [QUICKSTART OPTIONS ...]

A quickstart run is deterministic on one CPU, but the floating-point kernels torch picks for a CPU (AVX2, AVX-512,
AMX, ...) round differently, and at this scale a rounding difference grows into another SFT policy and another RL
run. This script runs ``scripts/quickstart.py`` once per seed and kernel setting. ``ATEN_CPU_CAPABILITY`` and
``ONEDNN_MAX_CPU_ISA`` make torch use another CPU's kernels on this one: ``default`` is what torch picks here,
``avx2`` / ``avx512`` cap it.

Options it does not know (``--rl-arg=...``, ``--sft-arg=...``, ``--greedy-eval``, ``--demos-per-task N``, ...) go to
every ``quickstart.py`` run. The SFT stages depend only on the seed, the kernels and the SFT options, so every
variant with the same SFT options shares them (``OUT/sft/<options>/<kernels>-seed<N>``); a variant's runs are in
``OUT/NAME/<kernels>-seed<N>``. A finished run is not run again (delete its folder to redo it); ``--report-only``
only reads them. The summary (every run's row, per-task changes, mean, spread, the quickstart's target) is printed
and written to ``OUT/NAME/spread.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
ROOT = SCRIPTS.parent
sys.path.insert(0, str(SCRIPTS))
import quickstart  # noqa: E402  (scripts/ is not a package)

KERNEL_ENV = {
    "default": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"},
}
MIN_MEAN_GAIN = 10.0  # the quickstart's target over all runs, in points of held-out success


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(ROOT / "outputs" / "quickstart_spread"), help="results directory")
    p.add_argument("--name", default="shipped", help="the variant's name (its runs go to OUT/NAME)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    p.add_argument("--kernels", nargs="+", default=["default", "avx2"], choices=sorted(KERNEL_ENV))
    p.add_argument("--eval-trials", type=int, default=160, help="held-out scenes per task (s.e. <= 4 points each)")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time")
    p.add_argument("--report-only", action="store_true", help="run nothing: summarise the finished runs")
    args, rest = p.parse_known_args(argv)
    if any(a == "--out" or a.startswith(("--out=", "--sft-dir", "--seed")) for a in rest):
        p.error("--out, --sft-dir and --seed are set per run by this script")
    return args, rest


def sft_key(rest: list[str], eval_trials: int) -> str:
    """A folder name for the SFT options among the quickstart options ``rest`` (RL options do not change it)."""
    q = quickstart.parse_args([*rest, "--eval-trials", str(eval_trials)])
    options = [q.tasks, q.demos_per_task, q.sft_epochs, q.sft_arg, q.eval_trials]
    digest = hashlib.sha256(json.dumps(options).encode()).hexdigest()[:8]
    return f"demos{q.demos_per_task}-epochs{q.sft_epochs}-eval{q.eval_trials}-{digest}"


def run_env(kernels: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")}
    return {**env, **KERNEL_ENV[kernels]}


def run_one(args: argparse.Namespace, rest: list[str], kernels: str, seed: int) -> str:
    name = f"{kernels}-seed{seed}"
    out = Path(args.out).resolve() / args.name / name
    if (out / "results.json").is_file():
        return f"{name}: finished before"
    sft_dir = Path(args.out).resolve() / "sft" / sft_key(rest, args.eval_trials) / name
    cmd = [sys.executable, str(SCRIPTS / "quickstart.py"), "--out", str(out), "--sft-dir", str(sft_dir),
           "--seed", str(seed), "--eval-trials", str(args.eval_trials), *rest]  # fmt: skip
    log = out.parent / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    (out.parent / f"{name}.options.json").write_text(json.dumps(rest))  # what the summary reports
    t0 = time.perf_counter()
    print(f"{time.strftime('%H:%M:%S')} {name}: running (log: {log})", flush=True)
    with open(log, "w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=run_env(kernels), cwd=ROOT)
    took = quickstart.fmt_duration(time.perf_counter() - t0)
    if proc.returncode != 0:
        return f"{name}: FAILED (exit {proc.returncode}, {took}); see {log}"
    return f"{name}: done in {took}"


def load_runs(variant: Path) -> list[dict]:
    runs = []
    for path in sorted(variant.glob("*-seed*/results.json")):
        result = json.loads(path.read_text())
        result["run"] = path.parent.name
        runs.append(result)
    return sorted(runs, key=lambda r: (r["run"].split("-seed")[0], r["seed"]))


def run_options(variant: Path, runs: list[dict], rest: list[str]) -> str:
    """The quickstart options the runs were made with, as each recorded them (``rest``, this command line's, for a
    run that recorded none); several sets are listed when the runs differ."""
    found = set()
    for r in runs:
        path = variant / f"{r['run']}.options.json"
        found.add(" ".join(json.loads(path.read_text()) if path.is_file() else rest))
    return "; ".join(f"`{options or '(none)'}`" for options in sorted(found))


def se_points(p: float, n: int) -> float:
    return 100 * quickstart.standard_error(p, n)


def spread(values: list[float]) -> str:
    """``mean ± std (min … max)`` of values in points."""
    if not values:
        return "–"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):+.1f} ± {std:.1f} ({min(values):+.1f} … {max(values):+.1f})"


def sft_summary(runs: list[dict], mode: str, tasks: list[str]) -> str:
    """The SFT policies' held-out success, run by run, with mean ± std across runs (``--sft-only`` runs)."""
    short = [t.removesuffix("-v3") for t in tasks]
    lines = ["| run | " + " | ".join(short) + " | **all** |", "|" + "---|" * (len(tasks) + 2)]
    values = {t: [] for t in [*tasks, "all"]}
    for r in runs:
        m = r[mode]
        for t in values:
            values[t].append(100 * m["sft"][t])
        lines.append(f"| {r['run']} | " + " | ".join(f"{100 * m['sft'][t]:.1f}" for t in tasks)
                     + f" | **{100 * m['sft']['all']:.1f}** |")  # fmt: skip
    cells = []
    for t in values:
        std = statistics.stdev(values[t]) if len(values[t]) > 1 else 0.0
        cells.append(f"{statistics.fmean(values[t]):.1f} ± {std:.1f}")
    lines.append("| mean ± std | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def mode_summary(runs: list[dict], mode: str, tasks: list[str]) -> tuple[str, list[str]]:
    """The markdown tables of one eval mode (``sampled`` / ``greedy``) and the target checks that failed."""
    short = [t.removesuffix("-v3") for t in tasks]
    head = ("| run | " + " | ".join(f"{s}: SFT → +GRPO (change, s.e.)" for s in short)
            + " | **all: SFT → +GRPO** | **change** (s.e.) |\n|" + "---|" * (len(tasks) + 3))  # fmt: skip
    rows, falls, changes = [], [], {t: [] for t in [*tasks, "all"]}
    sft_all, rl_all = [], []
    for r in runs:
        m = r[mode]
        cells = []
        for t in [*tasks, "all"]:
            a, b, n = m["sft"][t], m["rl"][t], m["episodes"][t]
            se = se_points((a + b) / 2, n)
            change = 100 * (b - a)
            changes[t].append(change)
            if t != "all":
                fell = change < -se
                if fell:
                    falls.append(f"{r['run']} {t}: {change:+.1f} (s.e. {se:.1f})")
                mark = " **↓**" if fell else ""
                cells.append(f"{100 * a:.1f} → {100 * b:.1f} ({change:+.1f}, {se:.1f}){mark}")
            else:
                cells.append(f"**{100 * a:.1f} → {100 * b:.1f}**")
                cells.append(f"**{change:+.1f}** ({se:.1f})")
        sft_all.append(100 * m["sft"]["all"])
        rl_all.append(100 * m["rl"]["all"])
        rows.append(f"| {r['run']} | " + " | ".join(cells) + " |")
    mean_sft = statistics.fmean(sft_all)
    std_sft = statistics.stdev(sft_all) if len(sft_all) > 1 else 0.0
    lines = [
        head,
        *rows,
        "",
        f"Over {len(runs)} runs (mean ± std across runs (min … max), points of held-out success):",
        "",
        f"- SFT: {mean_sft:.1f} % ± {std_sft:.1f}; SFT + GRPO: {statistics.fmean(rl_all):.1f} % ± "
        f"{statistics.stdev(rl_all) if len(rl_all) > 1 else 0.0:.1f}",
        f"- **change, all: {spread(changes['all'])}**; standard error of the mean change "
        f"{(statistics.stdev(changes['all']) / math.sqrt(len(runs))) if len(runs) > 1 else 0.0:.1f}",
        *[f"- change, {s}: {spread(changes[t])}" for s, t in zip(short, tasks, strict=True)],
    ]
    failed = []
    mean_gain = statistics.fmean(changes["all"])
    if mean_gain < MIN_MEAN_GAIN:
        failed.append(f"mean gain {mean_gain:+.1f} < +{MIN_MEAN_GAIN:.0f}")
    fell = [f"{r['run']}: {c:+.1f}" for r, c in zip(runs, changes["all"], strict=True) if c < 0]
    if fell:
        failed.append("total fell in " + ", ".join(fell))
    if falls:
        failed.append("a task fell by more than one s.e. in " + "; ".join(falls))
    verdict = "met" if not failed else "NOT met: " + "; ".join(failed)
    lines += ["", f"Target (mean gain >= +{MIN_MEAN_GAIN:.0f}, no run's total falls, no task falls by more than one "
              f"s.e. in any run): **{verdict}**"]  # fmt: skip
    return "\n".join(lines), failed


def summarise(args: argparse.Namespace, rest: list[str]) -> str:
    variant = Path(args.out).resolve() / args.name
    runs = load_runs(variant)
    if not runs:
        raise SystemExit(f"quickstart_spread: no finished runs in {variant}")
    first = runs[0]
    tasks = first["tasks"]
    cpus = sorted({r["cpu"] for r in runs})
    torch_versions = sorted({r["torch"] for r in runs})
    kernels = sorted({f"{r['run'].split('-seed')[0]}: {r['kernels']}" for r in runs})
    commits = sorted({r.get("commit", "not recorded") for r in runs})
    times = [sum(r["times"].values()) for r in runs]
    stages = list(dict.fromkeys(stage for r in runs for stage in r.get("cpu_seconds", {})))
    cpu = [(stage, [r["cpu_seconds"][stage] for r in runs if stage in r.get("cpu_seconds", {})]) for stage in stages]
    text = [
        f"# Quickstart spread: {args.name}",
        "",
        f"{len(runs)} runs (seeds {', '.join(str(s) for s in sorted({r['seed'] for r in runs}))}) on "
        f"{', '.join(cpus)} with torch {', '.join(torch_versions)}; kernels {'; '.join(kernels)}; commit "
        f"{', '.join(commits)}. "
        f"Quickstart options: {run_options(variant, runs, rest)}; {first['sampled']['episodes'][tasks[0]]} held-out "
        "scenes per task. s.e.: the standard error of one run's success rate (at the mean of its two policies' "
        "rates); **↓** marks a task that fell by more than one s.e.",
        "",
        f"Quickstart time per run (SFT stages included, {len(runs)} runs, machine load not controlled): "
        f"{quickstart.fmt_duration(min(times))} … {quickstart.fmt_duration(max(times))}"
        + (
            "; CPU time of a stage's processes (user + system; what the load does not stretch), min … max over "
            "the runs that recorded it: "
            + "; ".join(
                f"{stage} {min(v):.0f} … {max(v):.0f} s ({len(v)} run{'s' * (len(v) != 1)})" for stage, v in cpu
            )
            + "."
            if cpu
            else "."
        ),
    ]
    for mode, title in (("sampled", "sampled actions (the quickstart's eval)"), ("greedy", "greedy actions")):
        with_mode = [r for r in runs if mode in r]
        if with_mode and all("rl" in r[mode] for r in with_mode):
            body, _ = mode_summary(with_mode, mode, tasks)
            text += ["", f"## Held-out success, {title}", "", body]
        elif with_mode:
            text += ["", f"## The SFT policies' held-out success, {title} (%)", "", sft_summary(with_mode, mode, tasks)]
    trained = [r for r in runs if r.get("train_success")]
    if trained:
        k = 5
        cells = [f"{r['run']} {100 * statistics.fmean(r['train_success'][:k]):.0f} → "
                 f"{100 * statistics.fmean(r['train_success'][-k:]):.0f}" for r in trained]  # fmt: skip
        text += ["", f"Training-rollout success, first → last {k} GRPO steps (%): " + "; ".join(cells) + "."]
    result = "\n".join(text) + "\n"
    (variant / "spread.md").write_text(result)
    return result


def main(argv: list[str] | None = None) -> int:
    args, rest = parse_args(argv)
    if not args.report_only:
        jobs = [(k, s) for s in args.seeds for k in args.kernels]
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            for line in pool.map(lambda ks: run_one(args, rest, *ks), jobs):
                print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)
    print(summarise(args, rest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
