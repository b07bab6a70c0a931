"""The eval success table on the console after every validation (compact for many tasks)."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from rlinf_core.callbacks.progress import console_lines
from rlinf_core.contracts.rl_loop import RLLoop


def _short(name: str, max_len: int) -> str:
    return name if len(name) <= max_len else name[: max_len - 1] + "…"


def eval_table(last_eval: dict[str, Any], max_tasks: int = 12, worst: int = 8, max_name: int = 60) -> list[str]:
    """Console lines of an eval's per-task success (``RLModule.last_eval``).

    Up to ``max_tasks`` tasks every task is listed; beyond that (LIBERO-130) the per-suite rows and
    the ``worst`` lowest-success tasks. The last row is the mean over all episodes. Names longer
    than ``max_name`` (LIBERO instructions) are cut; ``eval/eval_epoch<N>.md`` has them in full.
    """
    per_task: dict[str, dict] = last_eval.get("per_task", {})
    per_suite: dict[str, dict] = last_eval.get("per_suite", {})
    metrics = last_eval.get("metrics", {})
    rows: list[tuple[str, dict]] = []
    if len(per_task) <= max_tasks:
        rows += list(per_task.items())
        rows += [(f"[{suite}]", row) for suite, row in per_suite.items()]
    else:
        rows += [(f"[{suite}]", row) for suite, row in per_suite.items()]
        ranked = sorted(per_task.items(), key=lambda kv: (kv[1]["success_once"], kv[0]))[:worst]
        rows.append((f"worst {len(ranked)} of {len(per_task)} tasks:", {}))
        rows += ranked
    total = {
        "success_once": metrics.get("eval/success_once", float("nan")),
        "num_trajectories": int(metrics.get("eval/num_trajectories", 0)),
    }
    rows.append(("all", total))
    rows = [(_short(name, max_name) if row else name, row) for name, row in rows]
    width = max(24, *(len(name) for name, row in rows if row))
    lines = [f"  {'task':<{width}}  {'success':>8}  {'episodes':>8}"]
    for name, row in rows:
        if not row:
            lines.append(f"  {name}")
            continue
        lines.append(f"  {name:<{width}}  {100 * row['success_once']:>7.1f}%  {row['num_trajectories']:>8d}")
    return lines


def eval_headline(last_eval: dict[str, Any], step: int | None) -> str:
    """``"eval after step 80: success_once 95.0% over 60 episodes (1.2 s)"``."""
    m = last_eval.get("metrics", {})
    where = f"eval after step {step}" if step is not None else "eval"
    text = f"{where}: success_once {100 * m.get('eval/success_once', float('nan')):.1f}%"
    text += f" over {int(m.get('eval/num_trajectories', 0))} episodes"
    if "eval/return" in m:
        text += f", return {m['eval/return']:.4g}"
    if "time/eval" in m:
        text += f" ({m['time/eval']:.1f} s)"
    return text


def suite_columns(per_suite: dict[str, dict[str, float]]) -> list[str]:
    """With two or more suites, RLinf's published one-row layout: a column per suite, then their unweighted Average
    (e.g. ``| Vision | Semantic | Position | Average |`` or LIBERO's ``| Spatial | ... | Average |``)."""
    if len(per_suite) < 2:
        return []
    values = [100 * row["success_once"] for row in per_suite.values()]
    return [
        "| " + " | ".join([*per_suite, "Average"]) + " |",
        "|" + "---|" * (len(values) + 1),
        "| " + " | ".join(f"{v:.1f}%" for v in [*values, sum(values) / len(values)]) + " |",
    ]


class EvalReport(Callback):
    """Prints the eval table on rank 0 after each validation of an ``RLModule`` (``rlinf validate``:
    at the end, after Lightning's own output) and keeps the history for the run summary.

    Args:
        max_tasks: list every task up to this many; beyond, per-suite rows and the worst tasks.
        worst: how many of the lowest-success tasks to list beyond ``max_tasks``.
    """

    def __init__(self, max_tasks: int = 12, worst: int = 8) -> None:
        self.max_tasks = max_tasks
        self.worst = worst
        self.history: list[tuple[int | None, dict[str, float]]] = []  # (RL step, eval metrics)
        self._pending: list[str] = []

    def report(self, last_eval: dict[str, Any], step: int | None) -> list[str]:
        columns = [f"  {line}" for line in suite_columns(last_eval.get("per_suite", {}))]
        return [eval_headline(last_eval, step), *eval_table(last_eval, self.max_tasks, self.worst), *columns]

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        last_eval = pl_module.last_eval if isinstance(pl_module, RLLoop) else None
        if not trainer.is_global_zero or not last_eval or trainer.sanity_checking:
            return
        fitting = trainer.state.fn == "fit"
        step = trainer.current_epoch + 1 if fitting else None
        self.history.append((step, dict(last_eval.get("metrics", {}))))
        lines = self.report(last_eval, step)
        if fitting:
            console_lines(trainer, lines, stamp_first=True)
        else:
            self._pending = lines

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "validate":
            return
        log_dir = trainer.log_dir  # a broadcast under DDP: every rank calls it
        if self._pending:
            lines, self._pending = self._pending, []
            if log_dir:
                lines.append(f"  (per-task table: {log_dir}/eval/eval_epoch{trainer.current_epoch}.md)")
            console_lines(trainer, lines, stamp_first=True)
