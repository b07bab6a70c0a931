"""One run that turns a few minutes on a lent GPU into the numbers docs/performance.md asks for.

Parts (each time-boxed; one that errors or runs out of time is recorded and the rest still run):

* ``memory``: ``rlinf memory``'s estimate (:func:`rlinf_core.cli.memory.estimate_policy` on the meta-built
  policy) against ``torch.cuda.max_memory_allocated`` for one whole RL step of a released-size OpenVLA-OFT (random
  weights, policy ``precision: bf16``: fp32 trainable weights, bf16-mixed autocast, gradient checkpointing):
  the rollout (``act`` per chunk) and the update (micro-batch ``evaluate`` + backward, clip, AdamW step), LoRA and
  full fine-tuning (full is run only where the estimate fits the card; else the estimate is recorded);
* ``throughput``: whole RL steps through :class:`rlinf_core.RLModule` and a Lightning ``Trainer`` (GRPO with the
  log-prob recompute) at ``pipeline_stage_num`` 1 and 2, env workers on the CPU cores: env steps/s, GPU
  utilisation (NVML) and the split rollout / log-prob recompute / update, and the projection of RLinf's published
  ManiSkill headline run (OpenVLA-OFT PPO, 128 envs x 160 steps per GPU per RL step, 8 GPUs, 24 h);
* ``precisions``: the toy GRPO (ReachEnv, TinyVLAPolicy) under bf16-mixed, 16-mixed and 32-true: returns first vs
  last RL step and the largest rollout-vs-recompute log-prob gap;
* ``openpi``: π0 and π0.5 at released size: one flow-SDE RL step (act, evaluate + backward, AdamW) with its peak
  memory, and ``act`` latency per batch size;
* ``opensora``: the OpenSora world model at released size: peak memory and imagined frames/s per env count;
* ``imagination`` (only when named, it needs a prepared carry): the world model of examples/metaworld_imagination
  trained for as long as ``--imagination-budget-s`` allows, gated with ``rlinf wm-score actions``, GRPO inside it,
  the real MetaWorld success before and after (benchmarks/gpu_check_imagination.py).

Writes ``gpu_check.json`` and ``gpu_check.md`` (a Markdown table per part) under ``--out`` after every part.
``--dry-run`` runs the same code at tiny size on the CPU (tests/test_gpu_check.py)::

    scripts/gpu_check.sh [--dry-run] [--out DIR] [--parts memory throughput ...] [--env auto|libero|metaworld|reach]
        [--imagination-carry DIR] [--imagination-budget-s 330] [--imagination-train-s S]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))

from gpu_check_parts import FUNCTIONS, ROOT, Check  # noqa: E402

PARTS = ("memory", "throughput", "precisions", "openpi", "opensora", "imagination")
DEFAULT_PARTS = PARTS[:5]  # imagination runs when named: it needs its carry
# seconds per part on a GPU. On an H100 (9b10e1a) memory took 30 s, precisions 40, openpi 35, opensora 33 and
# throughput ran past 150 s, so the first call (every part but throughput) needs about 4.5 minutes, the second 4.
# imagination keeps its own time (--imagination-budget-s); its box is that plus a minute.
BUDGET_S = {"memory": 90, "throughput": 240, "precisions": 60, "openpi": 60, "opensora": 60, "imagination": 60}


class PartTimeout(Exception):
    """A part ran past its time box."""


@contextmanager
def time_box(seconds: float):
    """Raise :class:`PartTimeout` in the main thread after ``seconds`` (SIGALRM; CUDA calls return first)."""

    def expire(signum, frame):
        raise PartTimeout(f"ran past its {seconds:.0f} s time box")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run_part(check: Check, name: str, fn: Callable[[Check], dict], budget_s: float) -> None:
    t0 = time.perf_counter()
    check.partial = {}

    def report_running() -> None:  # a run killed from outside still leaves the rows measured so far
        check.results[name] = {
            "status": "running",
            "error": "still running, or cut short from outside",
            "seconds": round(time.perf_counter() - t0, 1),
            "rows": dict(check.partial),
        }
        write_reports(check)

    check.report = report_running
    try:
        with time_box(budget_s):
            result = {"status": "ok", **fn(check)}
    except Exception as exc:  # fail soft: the error is the result, the other parts still run
        line = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        result = {"status": "error", "error": line, "traceback": traceback.format_exc()[-2000:]}
        if check.partial:  # what the part measured before it stopped
            result["rows"] = dict(check.partial)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    check.results[name] = result
    print(
        f"gpu_check: {name}: {result['status']} in {result['seconds']} s"
        + (f" ({result['error']})" if result["status"] == "error" else ""),
        flush=True,
    )
    if check.cuda:
        torch.cuda.empty_cache()
    write_reports(check)


# ------------------------------------------------------------------ reports
def _commit() -> str:
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or "unknown"
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return "" if value is None else str(value)


def markdown(check: Check) -> str:
    head = check.results.get("_meta", {})
    lines = [
        f"gpu_check on {head.get('device')} | torch {head.get('torch')} | commit {head.get('commit')}"
        + (" | DRY RUN (tiny models on CPU: not a measurement)" if check.dry_run else ""),
        "",
    ]
    for name in PARTS:
        result = check.results.get(name)
        if result is None:
            continue
        lines.append(f"### {name} ({result['status']}, {result['seconds']} s)")
        if result["status"] != "ok":
            lines += ["", f"error: `{result['error']}`", ""]
            if not result.get("rows"):
                continue
            lines.append("measured before it stopped:")
        rows = result.get("rows", {})
        columns = sorted({k for row in rows.values() for k, v in row.items() if not isinstance(v, (dict, list))})
        if len(columns) > 12:  # rows of different stages (imagination): one line per row
            lines += [""] + [
                f"- **{key}**: "
                + ", ".join(f"{k} {_fmt(v)}" for k, v in row.items() if not isinstance(v, (dict, list)))
                for key, row in rows.items()
            ]
        else:
            lines += ["", "| | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
            lines += [f"| {key} | " + " | ".join(_fmt(row.get(c)) for c in columns) + " |" for key, row in rows.items()]
        extra = {k: v for k, v in result.items() if k not in ("rows", "status", "seconds")}
        lines += ["", *(f"- {k}: {json.dumps(v) if isinstance(v, dict) else _fmt(v)}" for k, v in extra.items()), ""]
    return "\n".join(lines) + "\n"


def write_reports(check: Check) -> None:
    check.out.mkdir(parents=True, exist_ok=True)
    (check.out / "gpu_check.json").write_text(json.dumps(check.results, indent=2, default=str) + "\n")
    (check.out / "gpu_check.md").write_text(markdown(check))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny models on the CPU (the suite's smoke run)")
    parser.add_argument("--out", default="gpu_check_out", help="folder for gpu_check.json and gpu_check.md")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(DEFAULT_PARTS))
    parser.add_argument(
        "--env",
        choices=["auto", "libero", "metaworld", "reach"],
        default="auto",
        help="the throughput part's simulator (auto: LIBERO where installed, else MetaWorld)",
    )
    parser.add_argument(
        "--card-gib",
        type=float,
        default=None,
        help="memory part: the card's GiB the estimate must fit (default: the device's)",
    )
    parser.add_argument("--budget-scale", type=float, default=1.0, help="multiply every part's time box")
    parser.add_argument(
        "--imagination-carry",
        default=None,
        help="imagination: the prepared carry (default .whl/imagination; a dry run prepares a tiny one)",
    )
    parser.add_argument(
        "--imagination-budget-s",
        type=float,
        default=330.0,
        help="imagination: seconds for the whole part; the VAE and DiT train for what the other stages leave",
    )
    parser.add_argument(
        "--imagination-train-s", type=float, default=None, help="imagination: VAE + DiT seconds (overrides the plan)"
    )
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available() and not args.dry_run
    if not cuda and not args.dry_run:
        print("gpu_check: error: no CUDA GPU here: run it on a GPU, or with --dry-run", file=sys.stderr)
        return 2
    check = Check(
        dry_run=args.dry_run,
        device=torch.device("cuda" if cuda else "cpu"),
        out=Path(args.out),
        env=args.env,
        card_gib=args.card_gib,
        imagination_carry=Path(args.imagination_carry) if args.imagination_carry else None,
        imagination_budget_s=args.imagination_budget_s,
        imagination_train_s=args.imagination_train_s,
    )
    check.results["_meta"] = {
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__,
        "commit": _commit(),
        "dry_run": args.dry_run,
        "cpu_cores": os.cpu_count(),
    }
    for name in args.parts:
        budget = BUDGET_S[name] + (args.imagination_budget_s if name == "imagination" else 0)
        run_part(check, name, FUNCTIONS[name], budget * args.budget_scale)
    failed = [n for n in args.parts if check.results[n]["status"] != "ok"]
    print(f"gpu_check: wrote {check.out / 'gpu_check.json'} and gpu_check.md; failed parts: {failed or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
