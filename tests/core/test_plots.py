"""Each kind of plot the project writes reads correctly: axes, labels and titles (matplotlib objects, not pixels).

The runs are TensorBoard event files with the tags and step layout the loops log (an ``epoch`` scalar at every
global step), written here: an RL run with a dense training return and a sparse eval return, an SFT run and an
``rlinf validate`` run with its eval JSON.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("matplotlib")
from torch.utils.tensorboard import SummaryWriter  # noqa: E402

from rlinf_core.run.learning_curves import learning_curve_figure, plot_learning_curve, read_scalars, run_kind  # noqa: E402


def _write(run_dir, rows):
    """``rows``: (global_step, epoch, {tag: value})."""
    with SummaryWriter(str(run_dir)) as w:
        for step, epoch, values in rows:
            w.add_scalar("epoch", epoch, step)
            for tag, v in values.items():
                w.add_scalar(tag, v, step)
    return run_dir


@pytest.fixture
def rl_run(tmp_path):
    rows = [(4 * e + 3, e, {"env/success_once": 0.1 + 0.01 * e, "env/return": 20.0 + e,
                            "train/actor/policy_loss": 0.1, "train/actor/approx_kl": 0.01,
                            "train/actor/clip_fraction": 0.1}) for e in range(30)]  # fmt: skip
    rows += [(4 * 29 + 3, 29, {"eval/success_once": 0.6, "eval/return": 0.6})]
    return _write(tmp_path / "rl" / "version_0", rows)


@pytest.fixture
def sft_run(tmp_path):
    rows = [(10 * e + 9, e, {"train/loss_epoch": 5.0 - 0.1 * e, "train/loss_step": 5.0}) for e in range(20)]
    return _write(tmp_path / "sft" / "version_0", rows)


@pytest.fixture
def validate_run(tmp_path):
    run = _write(tmp_path / "sft_eval" / "version_0", [(0, 0, {"eval/success_once": 0.175, "eval/return": 0.175})])
    (run / "eval").mkdir()
    (run / "eval" / "eval_epoch0.json").write_text(
        json.dumps(
            {
                "epoch": 0,
                "metrics": {"eval/success_once": 0.175, "eval/num_trajectories": 40.0},
                "per_task": {"button-press": {"success_once": 0.35}, "drawer-close": {"success_once": 0.0}},
            }
        )
    )
    return run


def test_rl_run(rl_run):
    assert run_kind(read_scalars(rl_run)) == "rl"
    fig = learning_curve_figure(rl_run, baseline={"eval/success_once": 0.4, "eval/return": 0.4})
    main = [ax for ax in fig.axes if ax.get_ylabel() and not ax.get_ylabel().startswith("eval ")]
    assert main[-1].get_xlabel() == "RL step"
    assert fig._suptitle.get_text() == "rl/version_0"  # never the absolute path
    assert main[0].get_ylabel() == "success rate (%)" and main[0].get_ylim() == (-2, 102)
    # the sparse eval return (0.4 -> 0.6) gets its own right axis instead of lying flat at 0 next to ~20..49
    [right] = [ax for ax in fig.axes if ax.get_ylabel() == "eval episode return"]
    lo, hi = right.get_ylim()
    assert lo < 0.4 and hi < 1.0
    assert "training episode return" in [ax.get_ylabel() for ax in fig.axes]
    fig.canvas.draw()  # labels are inside the figure: nothing clipped
    width, height = fig.canvas.get_width_height()
    for ax in fig.axes:
        box = ax.yaxis.label.get_window_extent()
        assert 0 <= box.x0 and box.x1 <= width and 0 <= box.y0 and box.y1 <= height, ax.get_ylabel()


def test_rl_run_with_one_scale_shares_the_axis(tmp_path):
    rows = [(e, e, {"env/return": 0.1 + 0.01 * e, "env/success_once": 0.1}) for e in range(30)]
    rows += [(29, 29, {"eval/return": 0.7})]
    fig = learning_curve_figure(_write(tmp_path / "r" / "version_0", rows))
    assert "episode return" in [ax.get_ylabel() for ax in fig.axes]
    assert not any(ax.get_ylabel().startswith("eval ") for ax in fig.axes)


def test_sft_run(sft_run):
    assert run_kind(read_scalars(sft_run)) == "supervised"
    fig = learning_curve_figure(sft_run)
    [ax] = fig.axes
    assert ax.get_xlabel() == "epoch" and ax.get_ylabel() == "loss"
    assert fig._suptitle.get_text() == "sft/version_0"
    [line] = ax.get_lines()  # 20 epochs: the raw values, no lagging 5-step mean
    assert list(line.get_xdata()) == list(range(1, 21))


def test_validate_run(validate_run, tmp_path):
    assert run_kind(read_scalars(validate_run)) == "eval"
    fig = learning_curve_figure(validate_run)
    [ax] = fig.axes
    assert ax.get_xlabel() == "eval success rate (%)" and ax.get_xlim() == (0, 100)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["button-press", "drawer-close", "all"]
    assert [round(p.get_width(), 1) for p in ax.patches] == [35.0, 0.0, 17.5]
    assert "one eval (40 episodes)" in fig._suptitle.get_text()
    assert plot_learning_curve(validate_run, tmp_path / "v.png").stat().st_size > 0
