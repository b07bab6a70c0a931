"""``rlinf plot RUN_DIR``: a run's learning-curve PNG from its TensorBoard events."""

from __future__ import annotations

import argparse
import sys


def plot_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="rlinf plot", description="Write a run's learning-curve PNG from its TensorBoard events."
    )
    parser.add_argument("run_dir", help="the run's log dir (e.g. runs/reach_grpo/version_0)")
    parser.add_argument("--out", default=None, help="PNG path (default RUN_DIR/learning_curve.png)")
    parser.add_argument("--title", default=None, help="figure title (default <name>/<version> of RUN_DIR)")
    opts = parser.parse_args(argv)
    from rlinf_core.run.learning_curves import PlotError, plot_learning_curve

    try:
        path = plot_learning_curve(opts.run_dir, opts.out, title=opts.title)
    except PlotError as exc:
        print(f"rlinf plot: error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0
