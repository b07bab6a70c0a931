"""End-of-run summary on rank 0: best and last eval, where everything is, the resume command, and the
learning-curve PNG (drawn from the run's own TensorBoard events)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from rlinf_core.callbacks.eval_report import EvalReport
from rlinf_core.callbacks.progress import console_lines, fmt_duration
from rlinf_core.contracts.rl_loop import RLLoop
from rlinf_core.run.learning_curves import PlotError, plot_learning_curve


def _rel(path: str | Path) -> str:
    """``path`` relative to the working directory when it is below it (shorter to read and paste)."""
    p = Path(os.path.abspath(path))  # not resolve(): keep links such as last.ckpt
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(p)


def best_and_last(history: list[tuple[int | None, dict[str, float]]], key: str = "eval/success_once") -> list[str]:
    """``["eval success_once: best 98.3% (step 60), last 95.0% (step 80)"]`` from ``EvalReport.history``."""
    points = [(step, m[key]) for step, m in history if key in m]
    if not points:
        return []
    best = max(points, key=lambda p: p[1])
    last = points[-1]
    return [
        f"eval {key.split('/')[-1]}: best {100 * best[1]:.1f}% (step {best[0]}), "
        f"last {100 * last[1]:.1f}% (step {last[0]})"
    ]


class RunSummary(Callback):
    """At the end of ``fit`` (or on Ctrl-C) prints what the run produced and writes
    ``<log_dir>/learning_curve.png``.

    Args:
        plot: write the learning-curve PNG (needs matplotlib).
    """

    def __init__(self, plot: bool = True) -> None:
        self.plot = plot
        self._t0 = time.perf_counter()

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._t0 = time.perf_counter()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            log_dir = trainer.log_dir  # a broadcast under DDP: every rank calls it
            self._summarise(trainer, pl_module, log_dir, interrupted=False)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, KeyboardInterrupt) and trainer.state.fn == "fit":
            # no broadcast here: the other ranks may already be gone
            log_dir = getattr(trainer.logger, "log_dir", None) or trainer.default_root_dir
            self._summarise(trainer, pl_module, log_dir, interrupted=True)

    def _summarise(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, log_dir: str | None, interrupted: bool
    ) -> None:
        if not trainer.is_global_zero:
            return
        steps = trainer.current_epoch  # RL steps (epochs) completed, counting a resumed run's earlier ones
        unit = "RL step" if isinstance(pl_module, RLLoop) else "epoch"
        took = fmt_duration(time.perf_counter() - self._t0)
        if interrupted:  # the step in flight may or may not have been checkpointed: the resume line says where
            lines = ["", f"rlinf: fit interrupted in {unit} {steps + 1} after {took}"]
        else:
            lines = ["", f"rlinf: fit finished: {steps} {unit}{'s' if steps != 1 else ''} in {took}"]
        report = next((cb for cb in trainer.callbacks if isinstance(cb, EvalReport)), None)
        lines += [f"  {line}" for line in best_and_last(report.history if report else [])]
        step_metrics = pl_module.step_metrics if isinstance(pl_module, RLLoop) else {}
        if "env/success_once" in step_metrics:
            lines.append(f"  training success_once (last step): {100 * step_metrics['env/success_once']:.1f}%")
        rows = self._locations(trainer, log_dir)
        width = max((len(k) for k, _ in rows), default=0) + 1
        lines += [f"  {k + ':':<{width}} {v}" for k, v in rows]
        console_lines(trainer, lines)

    def _locations(self, trainer: pl.Trainer, log_dir: str | None) -> list[tuple[str, str]]:
        rows: list[tuple[str, str]] = []
        ckpt = trainer.checkpoint_callback
        resume_from = None
        if ckpt is not None and ckpt.dirpath and Path(ckpt.dirpath).is_dir():
            last = Path(ckpt.dirpath) / "last.ckpt"  # a link to the newest checkpoint with RLCheckpoint
            resume_from = str(last) if last.exists() else ckpt.last_model_path or ckpt.best_model_path or None
            rows.append(("checkpoints", _rel(ckpt.dirpath)))
        if log_dir:
            run = Path(log_dir)
            if (run / "policy").is_dir():  # RLModule's export_policy
                rows.append(("exported policy", _rel(run / "policy")))
            if (run / "eval").is_dir():
                rows.append(("eval tables", _rel(run / "eval")))
        videos = sorted({str(Path(p).parent) for cb in trainer.callbacks for p in getattr(cb, "written", [])})
        if videos:
            rows.append(("videos", ", ".join(_rel(v) for v in videos)))
        if log_dir:
            self._flush(trainer)
            if self.plot:
                rows.append(("learning curve", self._plot(log_dir)))
            rows.append(("TensorBoard", f"tensorboard --logdir {_rel(Path(log_dir).parent)}"))
            config = Path(log_dir) / "config.yaml"
            if resume_from and config.exists():
                rows.append(("resume", f"rlinf fit --config {_rel(config)} --ckpt_path {_rel(resume_from)}"))
        return rows

    @staticmethod
    def _flush(trainer: pl.Trainer) -> None:
        for logger in trainer.loggers:
            flush = getattr(getattr(logger, "experiment", None), "flush", None)
            if callable(flush):
                flush()

    @staticmethod
    def _plot(log_dir: str) -> str:

        try:
            return _rel(plot_learning_curve(log_dir))
        except PlotError as exc:
            return f"not drawn ({exc})"
