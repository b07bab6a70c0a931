"""Learning curves of a run from its own TensorBoard events (``rlinf plot RUN_DIR``).

Three kinds of run, each drawn against its own x-axis: an RL run (``env/`` / ``train/actor/`` metrics) against
the RL step (Lightning epoch + 1: metrics are logged once per RL step at the optimizer-step count, and the
``epoch`` scalar logged alongside maps one onto the other); a supervised run (SFT, world / reward model: losses
only) against the epoch; an eval-only run (``rlinf validate``: one eval, no steps) as per-task success bars.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

# (panel title, [(tag, label)], scale): the first panels with data are drawn
PANELS = [
    ("success rate (%)", [("env/success_once", "training rollouts"), ("eval/success_once", "eval")], 100.0),
    ("episode return", [("env/return", "training rollouts"), ("eval/return", "eval")], 1.0),
    (
        "loss",
        [
            ("train/actor/policy_loss", "policy loss"),
            ("train/critic/value_loss", "value loss"),
            ("train/loss_epoch", "train loss"),
            ("val/loss", "val loss"),
        ],
        1.0,
    ),
    (
        "approx KL / clip fraction",
        [("train/actor/approx_kl", "approx_kl"), ("train/actor/clip_fraction", "clip_fraction")],
        1.0,
    ),
]
SMOOTH_FROM = 20  # series with more points get a 5-step mean over faint raw values; shorter ones are drawn raw


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


def run_kind(scalars: dict[str, list[tuple[int, float]]]) -> str:
    """``rl``, ``supervised`` or ``eval`` (only ``eval/`` metrics: an ``rlinf validate`` run)."""
    tags = set(scalars)
    if any(t.startswith(("env/", "train/actor/", "train/critic/")) for t in tags):
        return "rl"
    if any(t.startswith(("train/", "val/")) for t in tags):
        return "supervised"
    return "eval"


def default_title(run_dir: str | Path) -> str:
    """``<name>/<version>`` of a run directory (never an absolute path)."""
    p = Path(run_dir).resolve()
    return f"{p.parent.name}/{p.name}"


def _smooth(values: list[float], window: int = 5) -> list[float]:
    return [
        sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
        for i in range(len(values))
    ]


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotError("matplotlib is not installed: pip install 'rlinf-core[plots]'") from None
    return plt


def learning_curve_figure(
    run_dir: str | Path,
    title: str | None = None,
    baseline: dict[str, float] | None = None,
    baseline_label: str = "before training",
):
    """The matplotlib figure :func:`plot_learning_curve` writes (arguments as there)."""
    scalars = read_scalars(run_dir)
    plt = _pyplot()
    title = title or default_title(run_dir)
    kind = run_kind(scalars)
    if kind == "eval":
        return _eval_figure(plt, Path(run_dir), scalars, title)
    baseline = baseline or {}
    panels = []
    for name, series, scale in PANELS:
        data = [(tag, label, by_rl_step(scalars, tag)) for tag, label in series]
        data = [(tag, label, pts) for tag, label, pts in data if pts or tag in baseline]
        if data:
            panels.append((name, data, scale))
    if not panels:
        raise PlotError(f"{run_dir}: none of the plotted metrics were logged ({', '.join(sorted(scalars)[:8])} ...)")
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(7, 1.0 + 2.4 * len(panels)), sharex=True, squeeze=False, layout="constrained"
    )  # constrained: labels and the title are never clipped
    for ax, (name, data, scale) in zip(axes[:, 0], panels):
        _draw_panel(ax, name, data, scale, baseline)
    from matplotlib.ticker import MaxNLocator

    axes[-1, 0].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[-1, 0].set_xlabel("RL step" if kind == "rl" else "epoch")
    if any(tag in baseline for _, data, _ in panels for tag, _, _ in data):
        axes[0, 0].annotate(f"step 0: {baseline_label}", (0.01, 0.02), xycoords="axes fraction", fontsize=7)
    fig.suptitle(title, fontsize=9)
    return fig


def _draw_panel(ax, name: str, data: list, scale: float, baseline: dict[str, float]) -> None:
    """One panel; an eval series on another scale than the training series (a sparse eval return beside a dense
    training return) gets its own y-axis on the right instead of flattening one of them."""
    train = [abs(scale * y) for tag, _, pts in data if not tag.startswith("eval/") for _, y in pts]
    evals = [abs(scale * y) for tag, _, pts in data if tag.startswith("eval/") for _, y in pts]
    evals += [
        abs(scale * v) for tag, _, _ in data if tag.startswith("eval/") and tag in baseline for v in [baseline[tag]]
    ]
    own_axis = (
        bool(train and evals)
        and not name.startswith("success")
        and (max(max(train), max(evals)) > 3 * max(min(max(train), max(evals)), 1e-9))
    )
    handles = []
    for i, (tag, label, pts) in enumerate(data):
        target = ax
        if own_axis and tag.startswith("eval/"):
            target = ax.twinx()
            target.set_ylabel(f"eval {name}", color=f"C{i}")
            target.tick_params(axis="y", colors=f"C{i}")
            label = f"{label} (right axis)"
        color = f"C{i}"
        xs, ys = [x for x, _ in pts], [scale * y for _, y in pts]
        if tag.startswith("eval/") or len(pts) <= SMOOTH_FROM:
            if tag in baseline:
                xs, ys = [0, *xs], [scale * baseline[tag], *ys]
            handles += target.plot(xs, ys, "o-", color=color, label=label, markersize=4)
            if target is not ax and min(ys) >= 0:
                target.set_ylim(bottom=0)  # a right axis from 0: a small eval change does not look steep
        else:
            target.plot(xs, ys, color=color, alpha=0.3)
            handles += target.plot(xs, _smooth(ys), color=color, label=f"{label} (5-step mean)")
    if name.startswith("success"):
        ax.set_ylim(-2, 102)
    ax.set_ylabel(f"training {name}" if own_axis else name)
    ax.grid(alpha=0.3)
    ax.legend(handles=handles, fontsize=7, loc="best")


def _eval_figure(plt, run_dir: Path, scalars: dict, title: str):
    """An ``rlinf validate`` run: one eval, drawn as success per task (from ``eval/eval_epoch*.json``)."""
    files = sorted(run_dir.glob("eval/eval_epoch*.json"), key=lambda p: int(p.stem.split("epoch")[1] or 0))
    result = json.loads(files[-1].read_text()) if files else {"metrics": {}, "per_task": {}}
    per_task = {t: v["success_once"] for t, v in result.get("per_task", {}).items() if "success_once" in v}
    overall = result["metrics"].get("eval/success_once")
    if overall is None and scalars.get("eval/success_once"):
        overall = scalars["eval/success_once"][-1][1]
    if overall is None:
        raise PlotError(f"{run_dir}: an eval-only run without eval/success_once")
    names, values = [*per_task, "all"], [*per_task.values(), overall]
    fig, ax = plt.subplots(figsize=(7, 1.3 + 0.32 * len(names)), layout="constrained")
    ax.barh(range(len(names)), [100 * v for v in values], color=["C0"] * len(per_task) + ["C1"])
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("eval success rate (%)")
    for i, v in enumerate(values):
        ax.text(100 * v + 1, i, f"{100 * v:.1f}%", va="center", fontsize=8)
    n = int(result["metrics"].get("eval/num_trajectories", 0))
    fig.suptitle(f"{title}: one eval ({n} episodes), no training steps" if n else f"{title}: one eval", fontsize=9)
    return fig


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
        title: figure title; default ``<name>/<version>`` of the run directory.
        baseline: eval values at step 0 (e.g. ``{"eval/success_once": 0.3}`` of the starting policy).
        baseline_label: legend text of the baseline points.
    """
    fig = learning_curve_figure(run_dir, title, baseline, baseline_label)
    out = Path(path) if path is not None else Path(run_dir) / "learning_curve.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    _pyplot().close(fig)
    return out
