"""What a user sees while a run goes: the live bar in a terminal, plain lines in a log file, the eval
table, the run summary, the learning-curve PNG (``rlinf plot``) and no Lightning adverts."""

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import time
import warnings
from pathlib import Path

import pytest

from rlinf_core.callbacks.eval_report import eval_table
from rlinf_core.cli.main import _pop_verbose, main
from rlinf_core.cli.quiet import install_quiet_filters

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RLINF = [sys.executable, "-c", "import sys; from rlinf_core.cli.main import main; sys.exit(main())"]
NOISE = ["Tip:", "litlogger", "v_num", "/--", "LeafSpec", "LightningCLI's args parameter", "Trainer.fit` stopped"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def toy_args(save_dir: Path, config: str = "reach_grpo.yaml") -> list[str]:
    return ["fit", "--config", str(ROOT / "configs" / "toy" / config), "--trainer.max_epochs=2",
            "--trainer.check_val_every_n_epoch=2", f"--trainer.logger.init_args.save_dir={save_dir}",
            "--model.init_args.env.init_args.num_envs=16", "--model.init_args.global_batch_size=32",
            "--model.init_args.micro_batch_size=16",
            "--model.init_args.rollout.max_steps_per_rollout_epoch=8"]  # fmt: skip


def run_in_pty(args: list[str], cwd: Path, timeout: float = 600) -> str:
    """Run the rlinf command with stdout and stderr on a 200-column pseudo-terminal; all it wrote."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen([*RLINF, *args], stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env, close_fds=True)
    os.close(slave)
    chunks, t0 = [], time.time()
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
        assert time.time() - t0 < timeout, "rlinf fit under a pty timed out"
    os.close(master)
    assert proc.wait(timeout=120) == 0, b"".join(chunks).decode(errors="replace")[-3000:]
    return b"".join(chunks).decode(errors="replace")


@pytest.fixture(scope="module")
def file_run(tmp_path_factory):
    """One toy GRPO fit with stdout to a file (as in CI); its stdout, stderr and log dir."""
    tmp = tmp_path_factory.mktemp("file_run")
    with open(tmp / "stdout.txt", "w") as out, open(tmp / "stderr.txt", "w") as err:
        proc = subprocess.run([*RLINF, *toy_args(tmp / "runs")], stdout=out, stderr=err, cwd=tmp, timeout=600)
    stdout, stderr = (tmp / "stdout.txt").read_text(), (tmp / "stderr.txt").read_text()
    assert proc.returncode == 0, stdout[-2000:] + stderr[-3000:]
    return stdout, stderr, tmp / "runs" / "reach_grpo" / "version_0"


def test_terminal_shows_live_bar_with_step_numbers_and_eval_table(tmp_path):
    # the bar as configured by a user, redrawn on every update (the default redraws at most twice a second)
    bar = ["--trainer.callbacks+=rlinf_core.callbacks.progress.RLProgressBar", "--trainer.callbacks.refresh_s=0"]
    raw = run_in_pty([*toy_args(tmp_path / "runs", "reach_ppo.yaml"), *bar], tmp_path)
    text = ANSI.sub("", raw)
    # the bar: RL step of the known total, the update phase with its known micro-batch total, timing
    assert re.search(r"step 2/2 ━+", text), text[-3000:]
    assert re.search(r"rollout 4/4 chunk steps, \d+ episodes done, [\d,]+ env steps/s", text), text[-3000:]
    assert re.search(r"update 16/16 micro-batches", text), text[-3000:]  # 64 samples / 16 per micro-batch x 4 epochs
    assert re.search(r"eval 60/60 episodes", text), text[-3000:]
    assert "s/step" in text and "ETA" in text
    # the last step's key numbers in the bar (PPO: with the value loss)
    last = re.findall(r"last: step \d/2 \| success_once [\d.]+% \| return \S+ \| approx_kl \S+ \| "
                      r"clip_fraction \S+ \| value_loss \S+", text)  # fmt: skip
    assert last, text[-3000:]
    # the eval table after validation, every task listed
    assert re.search(r"eval after step 2: success_once [\d.]+% over \d+ episodes", text)
    for task in ("reach_red", "reach_green", "reach_blue"):
        assert re.search(rf"\n  {task} +[\d.]+% +\d+", text), task
    assert "\r\x1b[2K" in raw  # redrawn in place, not one line per update
    for noise in NOISE:
        assert noise not in text, noise


def test_log_file_gets_one_timestamped_line_per_step_and_eval(file_run):
    stdout, stderr, run_dir = file_run
    assert "\r" not in stdout and "\x1b" not in stdout
    steps = re.findall(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d step (\d)/2 \| success_once [\d.]+% \| return \S+ \| "
                       r"approx_kl \S+ \| clip_fraction \S+ \| [\d.]+ s/step$", stdout, re.M)  # fmt: skip
    assert steps == ["1", "2"], stdout
    assert len(re.findall(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d eval after step 2: success_once", stdout, re.M)) == 1
    assert re.search(r"^  all +[\d.]+% +\d+$", stdout, re.M)
    # the end-of-run summary
    assert "rlinf: fit finished: 2 RL steps" in stdout
    assert re.search(r"eval success_once: best [\d.]+% \(step 2\), last [\d.]+% \(step 2\)", stdout)
    for what in ("checkpoints:", "exported policy:", "learning curve:", "TensorBoard:", "resume:"):
        assert what in stdout, what
    assert re.search(r"resume: +rlinf fit --config \S+config.yaml --ckpt_path \S+last.ckpt", stdout)
    assert (run_dir / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for noise in NOISE:
        assert noise not in stdout + stderr, noise
    assert "Name" not in stdout  # no model table: a one-line header instead
    assert re.search(r"fit RLModule \(TinyVLAPolicy, [\d.]+ K trainable parameters\): 2 RL steps", stdout)


def test_plot_command_writes_png_from_finished_run(file_run, tmp_path, capsys):
    _, _, run_dir = file_run
    out = tmp_path / "curve.png"
    assert main(["plot", str(run_dir), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    assert capsys.readouterr().out.strip() == str(out)


def test_plot_command_on_a_dir_without_events_is_one_line(tmp_path, capsys):
    assert main(["plot", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no TensorBoard events" in err


def test_eval_table_is_compact_for_130_tasks():
    per_task = {f"suite{s}/task{t}": {"success_once": ((s * 26 + t) % 97) / 100, "num_trajectories": 10}
                for s in range(5) for t in range(26)}  # fmt: skip
    per_suite = {f"suite{s}": {"success_once": 0.5, "num_trajectories": 260} for s in range(5)}
    last_eval = {"per_task": per_task, "per_suite": per_suite,
                 "metrics": {"eval/success_once": 0.5, "eval/num_trajectories": 1300}}  # fmt: skip
    lines = eval_table(last_eval, max_tasks=12, worst=8)
    assert len(lines) == 1 + 5 + 1 + 8 + 1  # header, suites, "worst" title, worst tasks, all
    listed = [line.split()[0] for line in lines[7:15]]
    worst = sorted(per_task, key=lambda k: (per_task[k]["success_once"], k))[:8]
    assert listed == worst
    assert lines[-1].split()[:2] == ["all", "50.0%"]
    small = eval_table({**last_eval, "per_task": dict(list(per_task.items())[:3]), "per_suite": {}})
    assert len(small) == 1 + 3 + 1


def test_quiet_filters_drop_library_deprecations_but_not_the_users_warnings():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        install_quiet_filters()
        warnings.warn_explicit("old api", DeprecationWarning, "x.py", 1, module="lightning.pytorch.utilities")
        warnings.warn_explicit("old api", FutureWarning, "x.py", 1, module="torch.utils._pytree")
        warnings.warn_explicit("my deprecation", DeprecationWarning, "mine.py", 1, module="my_project.envs")
        warnings.warn_explicit("check your config", UserWarning, "x.py", 1, module="lightning.pytorch.trainer")
    assert sorted(str(w.message) for w in caught) == ["check your config", "my deprecation"]


def test_verbose_flag_is_rlinf_s_unless_it_has_a_value():
    assert _pop_verbose(["fit", "--verbose", "--config", "a.yaml"]) == (["fit", "--config", "a.yaml"], True)
    assert _pop_verbose(["validate", "--verbose", "false"]) == (["validate", "--verbose", "false"], False)
    assert _pop_verbose(["validate", "--verbose=true"]) == (["validate", "--verbose=true"], False)


def test_every_run_names_its_directory_first_and_a_finished_run_is_not_rerun(tmp_path):
    """stdout and stderr together, as in ``rlinf fit ... > log 2>&1``: fit's and validate's first line is the run
    header with its directory (Lightning's ``Seed set to`` after it); resuming a finished run says so, names the key
    that continues it and writes no new version directory."""

    def rlinf(*args: str) -> list[str]:
        done = subprocess.run(
            [*RLINF, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path, timeout=600
        )
        assert done.returncode == 0, done.stdout[-3000:]
        # rlinf's warnings about the config come before the run starts; the run's own output after them
        return [ln for ln in done.stdout.splitlines() if ln.strip() and not ln.startswith("rlinf: warning:")]

    one_step = [*toy_args(tmp_path / "runs"), "--trainer.max_epochs=1", "--trainer.check_val_every_n_epoch=1"]
    runs = tmp_path / "runs" / "reach_grpo"
    fit = rlinf(*one_step)
    assert re.fullmatch(rf"\S+ \S+ fit RLModule .*; logs: {runs}/version_0", fit[0]), fit[:3]
    assert "Seed set to 0" in "\n".join(fit[1:])
    validate = rlinf("validate", *one_step[1:], "--ckpt_path", str(runs / "version_0"))
    assert re.fullmatch(
        rf"\S+ \S+ validate RLModule \(TinyVLAPolicy, [\d.]+ K parameters\) on 1 device\(s\); "
        rf"logs: {runs}/version_1",
        validate[0],
    ), validate[:3]
    again = "\n".join(rlinf(*one_step, "--ckpt_path", str(runs / "version_0")))
    assert "has already finished: 1 RL step, and the config stops at trainer.max_epochs = 1" in again, again
    assert "--trainer.max_epochs=2" in again and "fit finished" not in again
    assert sorted(p.name for p in runs.iterdir()) == ["version_0", "version_1"]
