"""Learning curves of a run from its own TensorBoard events (``rlinf plot RUN_DIR``).

The x-axis is the RL step (Lightning epoch + 1): metrics are logged once per RL step at the
optimizer-step count, and the ``epoch`` scalar logged alongside maps one onto the other.
"""

from __future__ import annotations

import math
from pathlib import Path

# (panel title, [(tag, label)], scale): the first panels with data are drawn
PANELS = [
    ("success rate (%)", [("env/success_once", "training rollouts"), ("eval/success_once", "eval")], 100.0),
    ("episode return", [("env/return", "training rollouts"), ("eval/return", "eval")], 1.0),
    ("loss", [("train/actor/policy_loss", "policy loss"), ("train/critic/value_loss", "value loss"),
              ("train/loss_epoch", "train loss"), ("val/loss", "val loss")], 1.0),
    ("approx KL / clip fraction", [("train/actor/approx_kl", "approx_kl"),
                                   ("train/actor/clip_fraction", "clip_fraction")], 1.0),
]  # fmt: skip


class PlotError(RuntimeError):
    """A run directory that cannot be plotted (no events, no matplotlib)."""


def read_scalars(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the run's TensorBoard events: ``{tag: [(global_step, value), ...]}``."""
    from tensorboard.backend.event_processing import event_accumulator

    run_dir = Path(run_dir)
    if not run_dir.is_dir() or not any(run_dir.glob("events.out.tfevents.*")):
        raise PlotError(f"no TensorBoard events in {run_dir} (expected a run's log_dir, e.g. runs/<name>/version_0)")
    acc = event_accumulator.EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def by_rl_step(scalars: dict[str, list[tuple[int, float]]], tag: str) -> list[tuple[int, float]]:
    """``tag``'s values against the RL step (epoch + 1); the global step where no ``epoch`` scalar exists."""
    epoch_at = {step: int(v) for step, v in scalars.get("epoch", [])}
    points = {}
    for step, value in scalars.get(tag, []):
        if math.isfinite(value):
            points[epoch_at[step] + 1 if step in epoch_at else step] = value
    return sorted(points.items())


def _smooth(values: list[float], window: int = 5) -> list[float]:
    return [sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
            for i in range(len(values))]  # fmt: skip


def plot_learning_curve(
    run_dir: str | Path,
    path: str | Path | None = None,
    title: str | None = None,
    baseline: dict[str, float] | None = None,
    baseline_label: str = "before training",
) -> Path:
    """Write the run's learning-curve PNG (default ``<run_dir>/learning_curve.png``) and return its path.

    Args:
        run_dir: the run's log_dir (holds ``events.out.tfevents.*``).
        path: where to write the PNG.
        title: figure title; default the run directory.
        baseline: eval values at step 0 (e.g. ``{"eval/success_once": 0.3}`` of the starting policy).
        baseline_label: legend text of the baseline points.
    """
    scalars = read_scalars(run_dir)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotError("matplotlib is not installed: pip install 'rlinf-core[plots]'") from None
    baseline = baseline or {}
    panels = []
    for name, series, scale in PANELS:
        data = [(tag, label, by_rl_step(scalars, tag)) for tag, label in series]
        data = [(tag, label, pts) for tag, label, pts in data if pts or tag in baseline]
        if data:
            panels.append((name, data, scale))
    if not panels:
        raise PlotError(f"{run_dir}: none of the plotted metrics were logged ({', '.join(sorted(scalars)[:8])} ...)")
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 2.6 * len(panels)), sharex=True, squeeze=False)
    for ax, (name, data, scale) in zip(axes[:, 0], panels):
        for i, (tag, label, pts) in enumerate(data):
            color = f"C{i}"
            xs, ys = [x for x, _ in pts], [scale * y for _, y in pts]
            if tag.startswith("eval/") or len(pts) <= 2:
                if tag in baseline:
                    xs, ys = [0, *xs], [scale * baseline[tag], *ys]
                ax.plot(xs, ys, "o-", color=color, label=label)
            else:
                ax.plot(xs, ys, color=color, alpha=0.3)
                ax.plot(xs, _smooth(ys), color=color, label=f"{label} (5-step mean)")
        if name.startswith("success"):
            ax.set_ylim(-2, 102)
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    from matplotlib.ticker import MaxNLocator

    axes[-1, 0].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[-1, 0].set_xlabel("RL step")
    if any(tag in baseline for _, data, _ in panels for tag, _, _ in data):
        axes[0, 0].annotate(f"step 0: {baseline_label}", (0.01, 0.02), xycoords="axes fraction", fontsize=7)
    fig.suptitle(title or str(run_dir), fontsize=9)
    fig.tight_layout()
    out = Path(path) if path is not None else Path(run_dir) / "learning_curve.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
