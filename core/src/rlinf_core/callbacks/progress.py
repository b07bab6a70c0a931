"""Live progress of a run on rank 0: a redrawn two-line bar in a terminal, timestamped lines otherwise.

In a terminal the first line shows the RL step, the phase (rollout: chunk steps, episodes finished,
env steps/s; update: micro-batches of the step's known total; eval: episodes) and the timing; the
second line the key numbers of the last finished step. When stdout is a file or a pipe (CI, log
files), every RL step prints one timestamped line instead, so the log shows how the run goes.
"""

from __future__ import annotations

import math
import shutil
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TextIO

import lightning.pytorch as pl
from lightning.pytorch.callbacks.progress.progress_bar import ProgressBar
from lightning.pytorch.utilities.model_summary import get_human_readable_count

from rlinf_core.callbacks.startup import release_startup_lines
from rlinf_core.contracts.rl_loop import RLLoop
from rlinf_core.foundation.trainer import attached_trainer

# (logged metric, label, format): the step's key numbers, in the bar and the plain lines
KEY_METRICS = [
    ("env/success_once", "success_once", "pct"),
    ("env/return", "return", "num"),
    ("train/actor/approx_kl", "approx_kl", "num"),
    ("train/actor/clip_fraction", "clip_fraction", "num"),
    ("train/critic/value_loss", "value_loss", "num"),
]
HIDDEN = {"v_num"}
CLEAR_LINE = "\r\x1b[2K"
CURSOR_UP = "\x1b[1A"


def fmt_number(value: float) -> str:
    """Four significant digits; scientific for tiny or huge magnitudes (``1.23e-05``)."""
    if not math.isfinite(value):
        return str(value)
    if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5):
        return f"{value:.2e}"
    return f"{value:.4g}"


def fmt_duration(seconds: float) -> str:
    """``"0:54"``, ``"1:02:03"``, ``"2d 3:04:05"``."""
    s = max(0, int(round(seconds)))
    days, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    text = f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"
    return f"{days}d {text}" if days else text


def key_numbers(metrics: dict[str, float]) -> str:
    """``"success_once 42.2% | return 1.23 | approx_kl 1.2e-04"`` for the key metrics present."""
    parts = []
    for key, label, kind in KEY_METRICS:
        value = metrics.get(key)
        if value is None:
            continue
        parts.append(f"{label} {100 * value:.1f}%" if kind == "pct" else f"{label} {fmt_number(value)}")
    return " | ".join(parts)


def other_numbers(metrics: dict[str, Any]) -> str:
    """Progress-bar metrics of modules other than RLModule (``train/loss_step 0.12 | val/loss 0.3``)."""
    parts = []
    for key, value in metrics.items():
        if key in HIDDEN:
            continue
        try:
            parts.append(f"{key} {fmt_number(float(value))}")
        except (TypeError, ValueError):
            continue
    return " | ".join(parts)


class RLProgressBar(ProgressBar):
    """rlinf's progress display (replaces Lightning's bar; ``rlinf fit`` adds it by default).

    Args:
        refresh_s: seconds between redraws of the live bar (terminal only).
        plain: ``null``: timestamped lines when stdout is not a terminal, else the live bar;
            ``true``: always timestamped lines; ``false``: always the live bar.
        history_s: in a terminal, also keep a finished RL step's line in the scrollback, at most
            once every ``history_s`` seconds (the last step always); ``0``: every step. In a log file, an
            epoch of another module (SFT, world / reward model) prints a line after its first batch and then
            every ``history_s`` seconds.
    """

    def __init__(self, refresh_s: float = 0.5, plain: bool | None = None, history_s: float = 30.0) -> None:
        super().__init__()
        self.refresh_s = refresh_s
        self.plain = plain
        self.history_s = history_s
        self._enabled = True
        self._stream: TextIO = sys.stdout
        self._drawn = 0  # lines of the live bar currently on screen
        self._last_draw = 0.0
        self._last_history = -math.inf
        self._phase = ""
        self._last_line = ""
        self._fit_t0 = self._step_t0 = self._last_step_end = time.perf_counter()
        self._steps_done = 0
        self._live = False  # between on_train_start and on_train_end, or during validate
        self._unit = "step"  # "step": an RLModule's RL step; "epoch": any other module's epoch
        self._header_done = False  # validate / test / predict: the header was printed

    # ------------------------------------------------------------------ Lightning's ProgressBar API
    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    @property
    def is_enabled(self) -> bool:
        trainer = attached_trainer(self)
        return self._enabled and trainer is not None and trainer.is_global_zero

    @property
    def timestamped(self) -> bool:
        """Plain lines (stdout is a file or a pipe, or ``plain: true``)."""
        if self.plain is not None:
            return self.plain
        return not (hasattr(self._stream, "isatty") and self._stream.isatty())

    def print(self, *args: Any, sep: str = " ", **kwargs: Any) -> None:
        self.print_lines([sep.join(map(str, args))])

    def print_lines(self, lines: list[str], stamp_first: bool = False) -> None:
        """Print above the live bar (rank 0); in plain mode the first line gets a timestamp if asked."""
        if not self.is_enabled:
            return
        if stamp_first and self.timestamped and lines:
            lines = [f"{_now()} {lines[0]}", *lines[1:]]
        self._clear()
        self._stream.write("\n".join(lines) + "\n")
        self._stream.flush()  # before anything the run writes to stderr next (`> log 2>&1` keeps the order)
        self._draw(force=True)

    # ------------------------------------------------------------------ phases
    def set_phase(self, text: str, force: bool = False) -> None:
        self._phase = text
        self._draw(force=force)

    def reporter(self, label: str, env_steps_per_chunk: int = 0) -> Callable[..., None]:
        """``fn(done, total, episodes=None)`` updating the phase (rollouts: chunk steps; eval: episodes)."""
        t0 = time.perf_counter()

        def report(done: int, total: int, episodes: int | None = None) -> None:
            of = f"/{total}" if total > 0 else ""
            if env_steps_per_chunk:
                rate = done * env_steps_per_chunk / max(time.perf_counter() - t0, 1e-9)
                extra = f", {episodes} episodes done" if episodes is not None else ""
                self.set_phase(f"{label} {done}{of} chunk steps{extra}, {rate:,.0f} env steps/s")
            else:
                self.set_phase(f"{label} {done}{of} episodes", force=total > 0 and done >= total)

        return report

    # ------------------------------------------------------------------ hooks
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._fit_t0 = time.perf_counter()
        log_dir = trainer.log_dir  # a broadcast under DDP: every rank calls it
        self.print_lines([run_header(trainer, pl_module, log_dir)], stamp_first=True)
        release_startup_lines()
        self._live = True
        self._steps_done = 0
        self._unit = "step" if isinstance(pl_module, RLLoop) else "epoch"

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._header_outside_fit(trainer, pl_module)

    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._header_outside_fit(trainer, pl_module)

    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._header_outside_fit(trainer, pl_module)

    def _header_outside_fit(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """``rlinf validate`` / ``test`` / ``predict``: the same first line as fit's, once per run."""
        if trainer.state.fn == "fit" or self._header_done:
            return
        self._header_done = True
        log_dir = trainer.log_dir  # a broadcast under DDP: every rank calls it
        self.print_lines([run_header(trainer, pl_module, log_dir)], stamp_first=True)
        release_startup_lines()

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._step_t0 = time.perf_counter()
        self.set_phase("rollout" if self._unit == "step" else "training", force=True)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if isinstance(pl_module, RLLoop):  # the step's micro-batch count is known once the rollout is in
            self.set_phase(f"update {batch_idx + 1}/{pl_module.steps_per_epoch} micro-batches")
            return
        total = self.total_train_batches
        of = f"/{int(total)}" if math.isfinite(total) else ""
        self.set_phase(f"training {batch_idx + 1}{of} batches")
        now = time.perf_counter()
        if (
            self.timestamped
            and self.is_enabled
            and (self._steps_done == 0 and batch_idx == 0 or now - self._last_history >= self.history_s)
        ):
            # a log file hears from a long epoch: after its first batch (the cost of one), then every history_s
            self._last_history = now
            per_batch = (now - self._step_t0) / (batch_idx + 1)
            of_epochs = f"/{trainer.max_epochs}" if (trainer.max_epochs or 0) > 0 else ""
            step = f"epoch {trainer.current_epoch + 1}{of_epochs}"
            self.print_lines(
                [f"{step} | training {batch_idx + 1}{of} batches | {per_batch:.2f} s/batch"], stamp_first=True
            )

    def on_validation_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if self._unit == "epoch":
            self.set_phase(f"validation {batch_idx + 1} batches")

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.is_enabled:
            return
        now = time.perf_counter()
        self._steps_done += 1
        self._last_step_end = now
        if isinstance(pl_module, RLLoop):
            numbers = key_numbers(pl_module.step_metrics)
        else:
            numbers = other_numbers(trainer.progress_bar_metrics)
        step = trainer.current_epoch + 1
        total = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else None
        head = f"{self._unit} {step}/{total}" if total else f"{self._unit} {step}"
        timing = f"{now - self._step_t0:.2f} s/{self._unit}"
        self._last_line = " | ".join(p for p in (head, numbers, timing) if p)
        last = total is not None and step >= total
        if self.timestamped:
            self.print_lines([self._last_line], stamp_first=True)
        elif last or now - self._last_history >= self.history_s:
            self._last_history = now
            self.print_lines([self._last_line])
        self._phase = ""

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._clear()
        self._phase = ""
        self._live = False  # nothing is redrawn after the run

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.state.fn != "fit":
            self._phase = ""
            self._clear()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._live = False
        self._phase = ""
        self._clear()

    # ------------------------------------------------------------------ drawing
    def _lines(self) -> list[str]:
        trainer = self.trainer
        step = trainer.current_epoch + 1
        total = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else None
        if trainer.state.fn != "fit":
            return [self._phase] if self._phase else []
        head = f"{self._unit} {step}/{total}" if total else f"{self._unit} {step}"
        if total:
            width = 20
            filled = int(width * min(1.0, self._steps_done / total))
            head += " " + "━" * filled + "─" * (width - filled)
        timing = f"{fmt_duration(time.perf_counter() - self._fit_t0)} elapsed"
        if total and self._steps_done:
            per_step = (self._last_step_end - self._fit_t0) / self._steps_done  # mean over finished steps
            timing += f", {per_step:.2f} s/{self._unit}, ETA {fmt_duration(per_step * (total - self._steps_done))}"
        first = " │ ".join(p for p in (head, self._phase, timing) if p)
        return [first, f"  last: {self._last_line}"] if self._last_line else [first]

    def _draw(self, force: bool = False) -> None:
        if not self.is_enabled or self.timestamped or not (self._live or self.trainer.state.fn != "fit"):
            return
        now = time.perf_counter()
        if not force and now - self._last_draw < self.refresh_s:
            return
        self._last_draw = now
        cols = shutil.get_terminal_size((120, 24)).columns - 1
        lines = [line[:cols] for line in self._lines()]
        self._clear()
        if lines:
            self._stream.write("\n".join(lines))
            self._drawn = len(lines)
        self._stream.flush()

    def _clear(self) -> None:
        if self._drawn:
            self._stream.write(CLEAR_LINE + (CURSOR_UP + CLEAR_LINE) * (self._drawn - 1))
            self._drawn = 0
            self._stream.flush()


def _what(pl_module: pl.LightningModule, trainable_only: bool) -> str:
    """``"RLModule (TinyVLAPolicy, 17.3 K trainable parameters)"``: the module and the model it trains."""

    inner = pl_module.policy if isinstance(pl_module, RLLoop) else None
    if inner is None and callable(getattr(pl_module, "trained_module", None)):  # SFT, world / reward model trainers
        inner = pl_module.trained_module()
    count = sum(p.numel() for p in pl_module.parameters() if p.requires_grad or not trainable_only)
    numbers = f"{get_human_readable_count(count).strip()} {'trainable ' if trainable_only else ''}parameters"
    return f"{type(pl_module).__name__} ({type(inner).__name__ + ', ' if inner is not None else ''}{numbers})"


def run_header(trainer: pl.Trainer, pl_module: pl.LightningModule, log_dir: str | None) -> str:
    """``"fit RLModule (TinyVLAPolicy, 17.3 K trainable parameters): 80 RL steps on 1 device(s); logs: runs/x"``;
    ``"validate RLModule (TinyVLAPolicy, 17.3 K parameters) on 1 device(s); logs: runs/x"`` for the other
    commands."""
    fn = trainer.state.fn.value if trainer.state.fn is not None else "fit"
    if fn != "fit":
        return f"{fn} {_what(pl_module, False)} on {trainer.world_size} device(s); logs: {log_dir}"
    unit = "RL steps" if isinstance(pl_module, RLLoop) else "epochs"
    unit = unit[:-1] if trainer.max_epochs == 1 else unit
    steps = f"{trainer.max_epochs} {unit}" if trainer.max_epochs and trainer.max_epochs > 0 else f"unbounded {unit}"
    return f"fit {_what(pl_module, True)}: {steps} on {trainer.world_size} device(s); logs: {log_dir}"


def _now() -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M:%S")


def console_lines(trainer: pl.Trainer, lines: list[str], stamp_first: bool = False) -> None:
    """Print on rank 0, above rlinf's live bar when there is one (timestamped first line in log files)."""
    if not trainer.is_global_zero or not lines:
        return
    bar = trainer.progress_bar_callback
    if isinstance(bar, RLProgressBar) and bar._enabled:
        bar.print_lines(lines, stamp_first=stamp_first)
        return
    if stamp_first and not sys.stdout.isatty():
        lines = [f"{_now()} {lines[0]}", *lines[1:]]
    print("\n".join(lines), flush=True)


def phase_reporter(trainer: pl.Trainer, label: str, env_steps_per_chunk: int = 0) -> Callable[..., None] | None:
    """The live-progress callback of a rollout or eval phase on rank 0 (``None`` without rlinf's bar)."""
    bar = trainer.progress_bar_callback
    if not isinstance(bar, RLProgressBar) or not bar.is_enabled:
        return None
    return bar.reporter(label, env_steps_per_chunk)
