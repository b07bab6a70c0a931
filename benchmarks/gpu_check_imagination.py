"""Learning in imagination at GPU scale: the ``imagination`` part of benchmarks/gpu_check.py, and the CPU step that
prepares what it carries to the GPU machine (docs/imagination.md, "On a GPU").

**prepare** (here, on the CPU; ``scripts/gpu_check.sh --prepare-imagination`` runs it after fetching the wheels)::

    python benchmarks/gpu_check_imagination.py --out .whl/imagination [--work runs/imagination_carry]
        [--sft-config configs/metaworld/quickstart_sft.yaml] [--grpo-config configs/metaworld/quickstart_grpo.yaml]
        [--sft-epochs N] [--sft-policy DIR] [--temperatures 0.7 1.0 1.5] [--episodes-per-task 48]

1. the quickstart's SFT, image only (the world model has no proprioception): ``make_tiny``, the scripted demos,
   ``rlinf fit --config SFT_CONFIG`` (skipped with ``--sft-policy``: an image-only export to reuse);
2. the SFT policy on the quickstart's held-out scenes (``rlinf validate`` of GRPO_CONFIG's ``eval_env``, recorded
   by ``RolloutRecorder``, run to the horizon): its real success, and the held-out episodes the gate scores;
3. its episodes on the training scenes (trial seed 0) at each sampling temperature, for variety;
4. the carry: the episodes (lossless: frames delta-coded in time, LZMA), the SFT export, the two configs, a
   ``manifest.json``, and the wheels the part needs beyond ``.whl/core``, ``.whl/wm`` and ``.whl/gl``: MuJoCo,
   Gymnasium, PyOpenGL, glfw and a MetaWorld wheel cut to the assets of the configs' tasks (checked to render the
   same frames as the full wheel).

**part** (on the GPU, ``gpu_check.sh --parts imagination``): within ``--imagination-budget-s``, on the carry:
the VAE (``prepare_world_model.py --vae-seconds``) and the DiT (``rlinf fit`` of ``world_model_fit.yaml`` with
``trainer.max_time``) of ``examples/metaworld_imagination`` for as long as the budget allows; the gate
(``rlinf wm-score actions`` on the held-out episodes: shuffled- and zero-action gaps >= 5 %) and the classifier on
imagined frames (``rlinf wm-score reward``); the success classifier (``reward_model_fit.yaml``); GRPO inside the world
model (``grpo_in_world_model.yaml``); and the SFT and GRPO policies on the quickstart's held-out scenes in the real
MetaWorld (``rlinf validate``, env workers on the CPU cores). The classifier and the SFT policy's real eval run
beside the VAE / DiT training (GPU work of tiny models and CPU simulators overlap), the two scores beside GRPO.
Every stage writes its row as it ends, so a run cut short keeps what it measured. ``--dry-run`` does it all at tiny
size on the CPU, on a tiny carry it prepares itself (tests/test_gpu_check_imagination.py).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "metaworld_imagination"
MiB = 2**20
STAMPED = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ")  # rlinf's progress lines
ECHO = re.compile(r"rlinf: error|Error|Traceback|^vae: |verdict|^gap |success rate")
# wheels of .whl/sim the part needs (MetaWorld itself is cut to the tasks' assets)
SIM_WHEELS = ("mujoco", "gymnasium", "farama_notifications", "pyopengl", "glfw")


# ------------------------------------------------------------------ commands
# imported once by the fork server the commands are forked from: each `rlinf` command then starts in about a second
# instead of the five or more its imports take
PRELOAD = ["torch", "lightning.pytorch", "jsonargparse", "diffusers", "rlinf_core.cli.main", "rlinf_core.rl.module",
           "rlinf_core.supervised.world_model_trainers", "rlinf_core.callbacks.recorder", "rlinf_env_metaworld.env",
           "rlinf_policy_openvla", "rlinf_wm_opensora.world_model"]  # fmt: skip
_CONTEXT = None


def _context():
    """multiprocessing's fork server, with :data:`PRELOAD`: a fresh process (not a fork of this one, which may have
    initialised CUDA) that only imports; none of those imports queries CUDA, and where one would, torch's check goes
    through NVML (``PYTORCH_NVML_BASED_CUDA_CHECK``), which leaves the CUDA driver uninitialised for the forks."""
    global _CONTEXT
    if _CONTEXT is None:
        import multiprocessing

        os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(PRELOAD)
    return _CONTEXT


def _command(argv: list[str], log: str, env: dict[str, str]) -> None:
    """A forked child: ``argv`` as ``rlinf ...`` (the ``rlinf`` command's own entry point) or ``SCRIPT.py ...``, in
    its own process group, stdout and stderr to ``log``."""
    os.setpgid(0, 0)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    os.environ.update(env)
    os.chdir(ROOT)
    sys.argv = list(argv)
    try:
        if argv[0] == "rlinf":
            from rlinf_core.cli.main import main

            sys.exit(main(argv[1:]) or 0)
        import runpy

        if argv[0] == "-m":  # python -m MODULE ...
            sys.argv = list(argv[1:])
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(argv[0], run_name="__main__")
    finally:
        t = os.times()
        print(f"[cpu seconds: {t.user + t.system:.1f} in the command, {t.children_user + t.children_system:.1f} in "
              "its finished child processes]", flush=True)  # fmt: skip


class Job:
    """One command (``rlinf ...`` or ``SCRIPT.py ...``) forked from the fork server into its own process group, its
    output in ``log``; rlinf's stamped progress lines, errors and the scores' verdict lines are echoed with the
    job's name (at most one progress line per ``every`` seconds)."""

    def __init__(self, name: str, argv: list[str], log: Path, every: float = 15.0) -> None:
        self.name, self.log, self.every = name, log, every
        self.t0 = time.perf_counter()
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"$ {' '.join(argv)}\n")
        env = {"PYTHONUNBUFFERED": "1", "PYTHONWARNINGS": "ignore", **{k: v for k, v in os.environ.items()}}
        self.proc = _context().Process(target=_command, args=(argv, str(log), env), name=name, daemon=False)
        self.proc.start()
        self.ended: float | None = None
        self._thread = threading.Thread(target=self._echo, daemon=True)
        self._thread.start()

    def _echo(self) -> None:
        last = 0.0
        with open(self.log, errors="replace") as f:
            while True:
                line = f.readline()
                if not line:
                    if not self.proc.is_alive():
                        self.ended = self.ended or time.perf_counter()
                        line = f.readline()
                        if not line:
                            return
                    else:
                        time.sleep(0.3)
                        continue
                now = time.perf_counter()
                stamped = STAMPED.match(line) is not None
                if ECHO.search(line) or (stamped and now - last >= self.every):
                    last = now if stamped else last
                    print(f"    [{self.name} {now - self.t0:5.0f} s] {line.rstrip()[:200]}", flush=True)

    def done(self) -> bool:
        return not self.proc.is_alive()

    @property
    def seconds(self) -> float:
        """From its start to its end (its echo thread sees the end within 0.3 s), or until now."""
        return (self.ended or time.perf_counter()) - self.t0

    def wait(self, timeout: float) -> float:
        """Wait for the job (killing it after ``timeout`` seconds: ``TimeoutError``); its seconds. A failed job
        raises ``RuntimeError`` with its last log lines."""
        self.proc.join(max(timeout, 0.1))
        if self.proc.is_alive():
            self.kill()
            raise TimeoutError(f"{self.name} ran past {timeout:.0f} s (killed)")
        self._thread.join(timeout=10)
        if self.proc.exitcode != 0:
            tail = self.log.read_text(errors="replace").splitlines()[-20:]
            raise RuntimeError(f"{self.name} failed (exit {self.proc.exitcode}); log {self.log}:\n" + "\n".join(tail))
        return self.seconds

    def kill(self) -> None:
        if self.proc.is_alive():
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the job and the env workers it started
            except ProcessLookupError:
                self.proc.kill()
            self.proc.join()


def rlinf(*args: str) -> list[str]:
    return ["rlinf", *args]


def run(name: str, argv: list[str], log: Path, timeout: float = 3600) -> float:
    print(f"imagination prepare: {time.strftime('%H:%M:%S')} {name} ...", flush=True)
    seconds = Job(name, argv, log).wait(timeout)
    print(f"imagination prepare: {name} done in {seconds:.0f} s", flush=True)
    return seconds


def logger_args(save_dir: Path, name: str) -> list[str]:
    return [
        f"--trainer.logger.init_args.save_dir={save_dir}",
        f"--trainer.logger.init_args.name={name}",
        "--trainer.logger.init_args.version=0",
        "--trainer.enable_progress_bar=false",
    ]


def eval_result(run_dir: Path) -> dict:
    """The last ``eval/eval_epoch<N>.json`` of a run: success_once overall and per task, episodes."""
    files = sorted((run_dir / "eval").glob("eval_epoch*.json"), key=lambda p: int(p.stem.split("epoch")[1] or 0))
    if not files:
        raise RuntimeError(f"no eval result under {run_dir / 'eval'}")
    result = json.loads(files[-1].read_text())
    metrics = result.get("metrics", {})
    return {
        "success_once": metrics.get("eval/success_once"),
        "episodes": int(metrics.get("eval/num_trajectories", 0)),
        **{
            f"success_{task.removesuffix('-v3')}": row.get("success_once")
            for task, row in sorted(result.get("per_task", {}).items())
        },
    }


# ------------------------------------------------------------------ configs
def load_yaml(path: str | Path) -> dict:
    import yaml

    return yaml.safe_load(Path(path).read_text())


@dataclass
class QuickstartSettings:
    """What the part and the collection take from the quickstart's two configs (as they ship)."""

    tasks: list[str]
    image_size: int
    camera_name: str
    num_action_chunks: int
    unnorm_key: str
    max_episode_steps: int
    eval_trial_seed: int
    temperature_eval: float

    @classmethod
    def read(cls, sft_config: str | Path, grpo_config: str | Path) -> QuickstartSettings:
        sft = load_yaml(sft_config)["model"]["init_args"]["policy"]["init_args"]
        grpo = load_yaml(grpo_config)["model"]["init_args"]
        ev = grpo["eval_env"]["init_args"]
        return cls(
            tasks=list(ev["tasks"]),
            image_size=int(ev["render"]["image_size"]),
            camera_name=str(ev["render"]["camera_name"]),
            num_action_chunks=int(sft["actions"]["num_action_chunks"]),
            unnorm_key=str(sft["actions"]["unnorm_key"]),
            max_episode_steps=int(ev["max_episode_steps"]),
            eval_trial_seed=int(ev.get("trial_seed", 1)),
            temperature_eval=float(grpo["rollout"].get("temperature_eval", 1.0)),
        )


def image_only(policy: str | Path) -> list[str]:
    """``rlinf`` overrides of the quickstart's GRPO config for an image-only policy (the world model has no
    proprioception), as the imagination loop's ``baseline`` stage."""
    return [
        f"--model.init_args.policy.init_args.model_path={policy}",
        "--model.init_args.policy.init_args.inputs.use_proprio=false",
        "--model.init_args.env.init_args.state_type=none",
        "--model.init_args.eval_env.init_args.state_type=none",
        "--model.init_args.eval_env.init_args.video_cfg.save_video=false",
    ]


def eval_scenes(trial_seed: int, trials: int, num_envs: int, workers: int, max_steps: int | None) -> list[str]:
    """Overrides of the GRPO config's ``eval_env``: which scenes, how many sub-envs and worker processes."""
    args = [
        f"--model.init_args.eval_env.init_args.trial_seed={trial_seed}",
        f"--model.init_args.eval_env.init_args.trials_per_task={trials}",
        f"--model.init_args.eval_env.init_args.num_envs={num_envs}",
        f"--model.init_args.rollout.eval_env_workers={workers}",
    ]
    if max_steps is not None:
        args.append(f"--model.init_args.eval_env.init_args.max_episode_steps={max_steps}")
    return args


def recorder(out_dir: Path) -> list[str]:
    """The whole episodes of the eval env, recorded (run to the horizon: a success does not end them)."""
    cb = [{"class_path": "rlinf_core.callbacks.recorder.RolloutRecorder", "init_args": {"out_dir": str(out_dir),
                                                                                         "train": False}}]  # fmt: skip
    return [
        "--model.init_args.eval_env.init_args.ignore_terminations=true",
        f"--trainer.callbacks={json.dumps(cb)}",
    ]


# ------------------------------------------------------------------ episodes, packed
def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """An ``.npz`` whose members are LZMA-compressed (``np.load`` reads it; no object arrays, no pickle)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_LZMA) as z:
        for key, value in arrays.items():
            with z.open(f"{key}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asarray(value), allow_pickle=False)
    os.replace(tmp, path)


def pack_episodes(files: list[Path], sources: list[str], path: Path) -> dict:
    """Recorded ``traj*.npy`` episodes into one file: frames delta-coded in time within each episode (consecutive
    MetaWorld frames differ in a few pixels, so the differences compress tens of times better), actions, success
    flags, instructions and where each episode came from (``sources``). Lossless: :func:`unpack_episodes`."""
    from rlinf_core.world_models.datasets import load_episode

    episodes = [load_episode(f) for f in files]
    if not episodes:
        raise ValueError(f"no episodes to pack into {path}")
    deltas = []
    for e in episodes:
        d = e.frames.copy()
        d[1:] = e.frames[1:] - e.frames[:-1]  # uint8: modulo 256, undone by a uint8 cumulative sum
        deltas.append(d)
    write_npz(
        path,
        {
            "frame_deltas": np.concatenate(deltas),
            "actions": np.concatenate([e.actions for e in episodes]).astype(np.float32),
            "success": np.concatenate([e.success for e in episodes]),
            "lengths": np.array([len(e.frames) for e in episodes], np.int64),
            "instructions": np.array([e.instruction for e in episodes], dtype=str),
            "sources": np.array(sources, dtype=str),
        },
    )
    return {
        "episodes": len(episodes),
        "frames": int(sum(len(e.frames) for e in episodes)),
        "successful_episodes": int(sum(bool(e.success.any()) for e in episodes)),
        "mib": path.stat().st_size / MiB,
    }


def unpack_episodes(path: Path, out: Path) -> dict:
    """:func:`pack_episodes`' file back into ``traj*.npy`` episode files under ``out/<source>/``."""
    from rlinf_core.world_models.init_data import save_init_trajectory

    with np.load(path, allow_pickle=False) as z:
        deltas, actions, success = z["frame_deltas"], z["actions"], z["success"]
        lengths, instructions, sources = z["lengths"], z["instructions"], z["sources"]
    starts = np.concatenate([[0], np.cumsum(lengths)])
    counts: dict[str, int] = {}
    for i, (a, b) in enumerate(zip(starts[:-1], starts[1:])):
        frames = np.cumsum(deltas[a:b], axis=0, dtype=np.uint8)
        source = str(sources[i])
        save_init_trajectory(
            out / source / f"traj{i:05d}.npy", frames, str(instructions[i]), actions[a:b], success[a:b]
        )
        counts[source] = counts.get(source, 0) + 1
    return {"episodes": int(len(lengths)), "frames": int(lengths.sum()),
            "successful_episodes": int(sum(success[a:b].any() for a, b in zip(starts[:-1], starts[1:]))),
            "per_source": counts}  # fmt: skip


# ------------------------------------------------------------------ MetaWorld cut to the tasks' assets
def referenced_assets(xml: Path, package: Path) -> set[Path]:
    """Every file a MetaWorld model file needs: its ``<include>`` files (recursively) and every ``file=`` they name
    (meshes, textures). MetaWorld writes every path relative to the main model file's directory."""
    import xml.etree.ElementTree as ET

    base, seen, todo = xml.parent, set(), [xml]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for node in ET.parse(current).iter():
            name = node.get("file")
            if name is None:
                continue
            path = (base / name).resolve()
            if not path.is_file():
                path = (current.parent / name).resolve()
            if not path.is_file() or package.resolve() not in path.parents:
                raise FileNotFoundError(f"{current}: {name} is not a file of the metaworld package")
            if node.tag == "include":
                todo.append(path)
            else:
                seen.add(path)
    return seen


def task_model_files(tasks: list[str]) -> list[Path]:
    """The MuJoCo model file of each MetaWorld task (the installed metaworld's)."""
    from metaworld import env_dict

    return [Path(env_dict.ALL_V3_ENVIRONMENTS[t]().model_name) for t in tasks]


def cut_wheel(wheel: Path, out_dir: Path, keep_assets: set[str]) -> Path:
    """A copy of MetaWorld's wheel (same name) without the files under ``metaworld/assets/`` that are neither model
    files (``.xml``) nor in ``keep_assets`` (paths inside the wheel); ``RECORD`` rewritten to match."""
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / wheel.name
    records = []
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        for info in src.infolist():
            name = info.filename
            if name == record_name:
                continue
            if name.startswith("metaworld/assets/") and not name.endswith(".xml") and name not in keep_assets:
                continue
            data = src.read(name)
            dst.writestr(info, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            records.append(f"{name},sha256={digest},{len(data)}")
        records.append(f"{record_name},,")
        dst.writestr(record_name, "\n".join(records) + "\n")
    return out


RENDER_CHECK = """
import hashlib, numpy as np
from rlinf_env_metaworld.env import MetaWorldEnv
from rlinf_env_metaworld.settings import MetaWorldRenderConfig
env = MetaWorldEnv(tasks={tasks!r}, trials_per_task=2, trial_seed=1, num_envs={n}, state_type="none", is_eval=True,
                   render=MetaWorldRenderConfig(image_size={size}, camera_name={camera!r}, fast_render=True),
                   max_episode_steps=8, auto_reset=False)
obs = env.reset(np.arange({n}))
h = hashlib.sha256(np.ascontiguousarray(obs.main_images.numpy()).tobytes())
for _ in range(2):
    obs = env.chunk_step(np.full(({n}, 2, env.action_dim), 0.5, np.float32)).obs
    h.update(np.ascontiguousarray(obs.main_images.numpy()).tobytes())
print("frames", h.hexdigest())
"""


def check_cut_wheel(cut: Path, settings: QuickstartSettings, scratch: Path) -> str:
    """Render the same scenes with the installed metaworld and with ``cut`` (installed into ``scratch``); raise
    unless the frames are identical. Returns the frames' digest."""
    target = scratch / "metaworld-cut"
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-compile",
                    "--target", str(target), str(cut)], check=True)  # fmt: skip
    script = RENDER_CHECK.format(tasks=settings.tasks, n=2 * len(settings.tasks), size=settings.image_size,
                                 camera=settings.camera_name)  # fmt: skip
    digests = []
    for pythonpath in (None, str(target)):
        env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
        if pythonpath:
            env["PYTHONPATH"] = pythonpath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0 or "frames" not in proc.stdout:
            raise RuntimeError(
                f"the render check failed ({'cut' if pythonpath else 'full'} wheel):\n{proc.stderr[-2000:]}"
            )
        digests.append(proc.stdout.split("frames")[-1].strip())
    if digests[0] != digests[1]:
        raise RuntimeError(f"the cut MetaWorld wheel renders other frames than the full one ({digests})")
    return digests[0]


def carry_wheels(sim: Path, out: Path, settings: QuickstartSettings, scratch: Path) -> dict:
    """The wheels of ``sim`` the part needs, into ``out``: MuJoCo, Gymnasium, PyOpenGL, glfw as they are and
    MetaWorld cut to the tasks' assets (checked by rendering)."""
    import metaworld

    wheels = sorted(sim.glob("*.whl"))
    full = next((w for w in wheels if w.name.lower().startswith("metaworld-")), None)
    if full is None:
        raise FileNotFoundError(f"no metaworld wheel in {sim}: run `bash scripts/gpu_check.sh --prepare` first")
    package = Path(metaworld.__file__).parent
    keep: set[str] = set()
    for xml in task_model_files(settings.tasks):
        keep |= {f"metaworld/{p.relative_to(package.resolve()).as_posix()}" for p in referenced_assets(xml, package)}
    for w in wheels:
        if w.name.lower().split("-")[0] in SIM_WHEELS:
            shutil.copy2(w, out / w.name)
    cut = cut_wheel(full, out, keep)
    digest = check_cut_wheel(cut, settings, scratch)
    return {"metaworld_full_mib": full.stat().st_size / MiB, "metaworld_cut_mib": cut.stat().st_size / MiB,
            "metaworld_assets_kept": len(keep), "render_check": digest}  # fmt: skip


# ------------------------------------------------------------------ sizes
def tree_mib(root: Path = ROOT) -> float:
    """The working tree a GPU call sends (tracked and untracked, not ignored files), in MiB."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                           capture_output=True, check=True).stdout.split(b"\0")  # fmt: skip
    return sum((root / n.decode()).stat().st_size for n in names if n and (root / n.decode()).is_file()) / MiB


def dir_mib(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / MiB if path.is_dir() else 0.0


# ------------------------------------------------------------------ prepare
def prepare(
    out: Path,
    work: Path,
    sft_config: str = "configs/metaworld/quickstart_sft.yaml",
    grpo_config: str = "configs/metaworld/quickstart_grpo.yaml",
    sft_epochs: int | None = None,
    sft_policy: str | None = None,
    demos_per_task: int = 3,
    temperatures: tuple[float, ...] = (0.7, 1.0, 1.5),
    episodes_per_task: int = 48,
    heldout_per_task: int = 8,
    eval_trials: int = 40,
    sim_wheels: Path | None = ROOT / ".whl" / "sim",
    tiny: bool = False,
) -> dict:
    """Everything the imagination part reads, into the carry directory ``out`` (replaced); intermediate runs in
    ``work``. ``tiny``: the dry run's carry (an untrained tiny policy, episodes of 24 steps, one scene per task)."""
    t_start, commit = time.perf_counter(), git_commit()  # the code that made the carry
    settings = QuickstartSettings.read(ROOT / sft_config, ROOT / grpo_config)
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    out.mkdir(parents=True)
    logs, tb = work / "logs", work / "tb"
    seconds: dict[str, float] = {}
    max_steps = 24 if tiny else None
    n_tasks = len(settings.tasks)
    source = "reused"
    if tiny or sft_policy is None:
        policy = work / "tiny_oft"
        seconds["make_tiny"] = run("make tiny OpenVLA-OFT (image only)", [
            "-m", "rlinf_policy_openvla.make_tiny", str(policy), "--kind", "oft", "--norm-key",
            settings.unnorm_key, "--action-dim", "4", "--proprio-dim", "0", "--num-action-chunks",
            str(settings.num_action_chunks)], logs / "make_tiny.log")  # fmt: skip
        source = "make_tiny (untrained)"
        if not tiny:
            demos, sft = work / "demos", work / "sft_policy"
            seconds["demos"] = run("scripted demos", [
                "-m", "rlinf_env_metaworld.collect", "--tasks", *settings.tasks,
                "--episodes-per-task", str(demos_per_task), "--trial-seed", "0", "--out", str(demos), "--image-size",
                str(settings.image_size), "--camera-name", settings.camera_name, "--num-action-chunks",
                str(settings.num_action_chunks), "--state-type", "none", "--quiet"], logs / "demos.log")  # fmt: skip
            seconds["sft"] = run("SFT (image only)", rlinf(
                "fit", "--config", str(ROOT / sft_config), f"--model.init_args.policy.init_args.model_path={policy}",
                "--model.init_args.policy.init_args.inputs.use_proprio=false", f"--model.init_args.data_path={demos}",
                f"--model.init_args.export_dir={sft}", *logger_args(tb, "sft"),
                *([f"--trainer.max_epochs={sft_epochs}"] if sft_epochs else [])), logs / "sft.log")  # fmt: skip
            policy, source = sft, f"trained here ({demos_per_task} scripted demos per task)"
    else:
        policy = Path(sft_policy)

    grpo = str(ROOT / grpo_config)
    trials = 1 if tiny else eval_trials
    heldout_dir = work / "rollouts" / "heldout"
    seconds["baseline"] = run(
        f"the SFT policy on the held-out scenes ({trials} per task, recorded)",
        rlinf("validate", "--config", grpo, *image_only(policy),
              *eval_scenes(settings.eval_trial_seed, trials, min(trials * n_tasks, 20), 0, max_steps),
              *recorder(heldout_dir), *logger_args(tb, "baseline")),
        logs / "baseline.log",
    )  # fmt: skip
    baseline = eval_result(tb / "baseline" / "version_0")
    collections = []
    per_task = 1 if tiny else episodes_per_task
    for temperature in temperatures[:1] if tiny else temperatures:
        name = f"t{temperature:g}"
        seconds[f"collect_{name}"] = run(
            f"the SFT policy's episodes at temperature {temperature:g} ({per_task} per task, training scenes)",
            rlinf("validate", "--config", grpo, *image_only(policy),
                  *eval_scenes(0, per_task, min(per_task * n_tasks, 24), 0, max_steps),
                  f"--model.init_args.rollout.temperature_eval={temperature}", *recorder(work / "rollouts" / name),
                  *logger_args(tb, f"collect_{name}")),
            logs / f"collect_{name}.log",
        )  # fmt: skip
        collections.append({"temperature": temperature, **eval_result(tb / f"collect_{name}" / "version_0")})

    t = time.perf_counter()
    from rlinf_core.world_models.datasets import find_trajectories

    train_files, sources = [], []
    for c in collections:
        name = f"t{c['temperature']:g}"
        files = find_trajectories(work / "rollouts" / name / "eval")
        train_files += files
        sources += [name] * len(files)
    held = find_trajectories(heldout_dir / "eval")
    held = pick_per_task(held, 1 if tiny else heldout_per_task)
    train = pack_episodes(train_files, sources, out / "episodes_train.npz")
    heldout = pack_episodes(held, ["heldout"] * len(held), out / "episodes_heldout.npz")
    shutil.copytree(policy, out / "sft_policy")
    (out / "configs").mkdir()
    for config in (sft_config, grpo_config):
        shutil.copy2(ROOT / config, out / "configs" / Path(config).name)
    seconds["pack"] = time.perf_counter() - t
    wheels = {}
    if not tiny and sim_wheels is not None:
        t = time.perf_counter()
        wheels = carry_wheels(sim_wheels, out, settings, work)
        seconds["wheels"] = time.perf_counter() - t
    manifest = {
        "made": time.strftime("%Y-%m-%d %H:%M"),
        "commit": commit,
        "tiny": tiny,
        "sft_config": sft_config,
        "grpo_config": grpo_config,
        "sft_epochs": sft_epochs or load_yaml(ROOT / sft_config)["trainer"].get("max_epochs"),
        "sft_policy": source if source != "reused" else f"reused: {policy}",
        "settings": settings.__dict__,
        "eval_trials": trials,
        "max_episode_steps": max_steps or settings.max_episode_steps,
        "baseline_real_cpu": {"temperature": settings.temperature_eval, **baseline},
        "collections": collections,
        "train": train,
        "heldout": heldout,
        "wheels": wheels,
        "seconds": {k: round(v, 1) for k, v in seconds.items()},
    }
    manifest["seconds"]["total"] = round(time.perf_counter() - t_start, 1)
    manifest["carry_mib"] = dir_mib(out)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def pick_per_task(files: list[Path], per_task: int) -> list[Path]:
    """At most ``per_task`` episode files per instruction, in file order."""
    from rlinf_core.world_models.init_data import instruction_of, load_init_trajectory

    chosen, count = [], {}
    for f in files:
        task = instruction_of(load_init_trajectory(f))
        if count.get(task, 0) < per_task:
            chosen.append(f)
            count[task] = count.get(task, 0) + 1
    return chosen


def git_commit() -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return proc.stdout.strip() or "unknown"


# ------------------------------------------------------------------ the part
@dataclass
class Plan:
    """Sizes and seconds of the part's stages (the GPU's, or the dry run's)."""

    train_s: float | None  # VAE + DiT; None: step counts (dry run)
    vae_steps: int
    vae_batch: int
    dit_steps: int
    dit_batch: int
    rm_seconds: float | None
    rm_steps: int
    grpo_steps: int
    grpo_envs: int
    grpo_group: int
    eval_trials: int | None  # None: the carry's
    eval_max_steps: int | None
    eval_workers: int
    init_steps: tuple[int, ...]
    gate_starts: tuple[int, ...]
    gate_horizon: int
    reward_horizon: int
    device: str
    accelerator: str
    action_tokens: bool = True
    slack: float = 1.0  # multiplies every command's time limit (a dry run on a loaded CPU: 3)

    @property
    def vae_s(self) -> float | None:
        return None if self.train_s is None else self.train_s / 3

    @property
    def dit_s(self) -> float | None:
        return None if self.train_s is None else self.train_s - self.train_s / 3


# seconds the GPU part spends outside the VAE / DiT training: process starts (about 8 s each), the VAE floor, the
# DiT's data cache and export, GRPO and the real eval after it, and a margin
RESERVE_S = 150.0


def plan_for(check, budget_s: float, train_s: float | None, eval_trials: int, cores: int) -> Plan:
    if check.dry_run:
        return Plan(train_s=None, vae_steps=3, vae_batch=4, dit_steps=2, dit_batch=2, rm_seconds=None, rm_steps=2,
                    grpo_steps=1, grpo_envs=4, grpo_group=2, eval_trials=1, eval_max_steps=16, eval_workers=1,
                    init_steps=(4, 8), gate_starts=(4,), gate_horizon=8, reward_horizon=8, device="cpu",
                    accelerator="cpu", slack=3.0)  # fmt: skip
    # the real eval: every held-out episode at once, one worker per core but four (the trainers' processes)
    envs = eval_trials * 2
    workers = max(w for w in range(1, envs + 1) if envs % w == 0 and w <= max(1, cores - 4))
    return Plan(train_s=train_s if train_s is not None else max(60.0, budget_s - RESERVE_S), vae_steps=0,
                vae_batch=64, dit_steps=-1, dit_batch=32, rm_seconds=45.0, rm_steps=4000, grpo_steps=16,
                grpo_envs=64, grpo_group=4, eval_trials=None, eval_max_steps=None, eval_workers=workers,
                init_steps=(32, 48, 64), gate_starts=(32, 48), gate_horizon=16, reward_horizon=48, device="cuda",
                accelerator="gpu")  # fmt: skip


def scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from rlinf_core.run.learning_curves import read_scalars

    return read_scalars(run_dir)


def last(values: dict, tag: str) -> float | None:
    series = values.get(tag) or []
    return series[-1][1] if series else None


def max_time(seconds: float) -> str:
    s = max(1, int(seconds))
    return f"00:{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def part_imagination(check) -> dict:
    """See the module docstring. ``check``: benchmarks/gpu_check_parts.Check."""
    t_part = time.perf_counter()
    scratch = check.scratch / "imagination"
    logs, tb = scratch / "logs", scratch / "tb"
    carry = check.imagination_carry
    if carry is None and check.dry_run:
        check.progress("imagination: preparing a tiny carry (dry run)")
        carry = scratch / "carry"
        prepare(carry, scratch / "carry_work", tiny=True, sim_wheels=None)
    carry = Path(carry if carry is not None else ROOT / ".whl" / "imagination")
    if not (carry / "manifest.json").is_file():
        raise FileNotFoundError(f"no imagination carry at {carry}: prepare it with gpu_check.sh --prepare-imagination "
                                "and carry .whl/imagination")  # fmt: skip
    manifest = json.loads((carry / "manifest.json").read_text())
    settings = QuickstartSettings(**manifest["settings"])
    plan = plan_for(check, check.imagination_budget_s, check.imagination_train_s, manifest["eval_trials"],
                    os.cpu_count() or 2)  # fmt: skip
    eval_trials = plan.eval_trials or manifest["eval_trials"]
    rows: dict[str, dict] = check.partial  # kept in the result if the part errors or runs out of time
    rows["plan"] = {k: ",".join(map(str, v)) if isinstance(v, tuple) else v for k, v in plan.__dict__.items()}
    rows["plan"].update(vae_s=plan.vae_s, dit_s=plan.dit_s, budget_s=check.imagination_budget_s)
    base = manifest["baseline_real_cpu"]
    rows["carry"] = {"made": manifest["made"], "commit": manifest["commit"], "sft_config": manifest["sft_config"],
                     "sft_epochs": manifest["sft_epochs"], "real_success_cpu": base.get("success_once"),
                     "real_episodes_cpu": base.get("episodes"),
                     **{f"collected_t{c['temperature']:g}_success": c.get("success_once")
                        for c in manifest["collections"]}}  # fmt: skip
    check.progress(f"imagination: plan {json.dumps(rows['plan'])}")
    check.report()
    jobs: dict[str, Job] = {}
    log_out = check.out / "imagination.log"

    def finish(name: str, row: dict, t0: float) -> dict:
        # a command's own time (the ones beside the training ran before their stage came up), else the stage's
        row["seconds"] = round(jobs[name].seconds if name in jobs else time.perf_counter() - t0, 1)
        rows[name] = row
        summary = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items())
        check.progress(f"imagination: {name}: {summary}")
        check.report()
        return row

    def save_log(job: Job) -> None:
        with open(log_out, "a") as f:
            text = job.log.read_text(errors="replace")
            f.write(f"\n===== {job.name} =====\n{text[-200_000:]}")

    def start(name: str, argv: list[str]) -> Job:
        check.progress(f"imagination: {name} starts")
        jobs[name] = Job(name, argv, logs / f"{name}.log")
        return jobs[name]

    def wait(name: str, timeout: float) -> float:
        job = jobs[name]
        try:
            return job.wait(timeout * plan.slack)
        finally:
            save_log(job)

    def stage(name: str, fn, *args) -> dict | None:
        """Run one stage; an error is its row (the later stages that need it fail on their own)."""
        t0 = time.perf_counter()
        try:
            return finish(name, fn(*args), t0)
        except (RuntimeError, TimeoutError, FileNotFoundError, ValueError, KeyError) as exc:
            finish(name, {"error": str(exc).splitlines()[0][:300]}, t0)
            print(str(exc)[-3000:], flush=True)
            return None

    # ---- data
    train_dir, held_dir = scratch / "episodes" / "train", scratch / "episodes" / "heldout"
    t0 = time.perf_counter()
    shutil.rmtree(scratch / "episodes", ignore_errors=True)
    train = unpack_episodes(carry / "episodes_train.npz", train_dir)
    held = unpack_episodes(carry / "episodes_heldout.npz", held_dir)
    finish("data", {"train_episodes": train["episodes"], "train_frames": train["frames"],
                    "train_successful_episodes": train["successful_episodes"], "heldout_episodes": held["episodes"],
                    "heldout_successful_episodes": held["successful_episodes"],
                    "sources": json.dumps(train["per_source"])}, t0)  # fmt: skip
    policy = carry / "sft_policy"
    grpo_config = str(carry / "configs" / Path(manifest["grpo_config"]).name)
    wm0, wm, rm_dir = scratch / "world_model_init", scratch / "world_model", scratch / "reward_model"
    num_envs = eval_trials * len(settings.tasks) if not check.dry_run else len(settings.tasks)

    def real_eval(name: str, policy_dir: Path) -> list[str]:
        return rlinf("validate", "--config", grpo_config, *image_only(policy_dir),
                     *eval_scenes(settings.eval_trial_seed, eval_trials, num_envs, plan.eval_workers,
                                  plan.eval_max_steps),
                     f"--trainer.accelerator={plan.accelerator}", "--trainer.devices=1",
                     *logger_args(tb, name))  # fmt: skip

    try:
        # ---- beside the VAE / DiT: the classifier (GPU, small) and the SFT policy's real eval (CPU simulators)
        start("reward_model", rlinf(
            "fit", "--config", str(EXAMPLE / "reward_model_fit.yaml"),
            f"--model.init_args.data_path={train_dir}", f"--model.init_args.export_dir={rm_dir}",
            f"--model.init_args.cache_dir={scratch / 'frame_cache'}",
            f"--trainer.accelerator={plan.accelerator}", "--trainer.devices=1",
            f"--trainer.max_steps={plan.rm_steps}", "--trainer.max_epochs=100000",
            f"--trainer.max_time={max_time(plan.rm_seconds or 600)}",  # the dry run: its steps end it first
            *(["--trainer.limit_val_batches=1"] if check.dry_run else []),
            *logger_args(tb, "reward_model")))  # fmt: skip
        start("real_before", real_eval("real_before", policy))

        # ---- VAE (in prepare_world_model.py, which writes the released layout around it) and DiT
        def vae() -> dict:
            budget = ["--vae-seconds", f"{plan.vae_s:.0f}"] if plan.vae_s else ["--vae-steps", str(plan.vae_steps)]
            start("vae", [str(EXAMPLE / "prepare_world_model.py"), "--rollouts", str(train_dir),
                          "--out", str(wm0), "--heldout", str(held_dir), "--init-steps", *map(str, plan.init_steps),
                          "--vae-batch", str(plan.vae_batch), "--device", plan.device, *budget,
                          *(["--action-tokens"] if plan.action_tokens else [])])  # fmt: skip
            wait("vae", (plan.vae_s or 60) + 120)
            report = json.loads((wm0 / "prepare.json").read_text())
            floor = report.get("vae_floor_heldout", {})
            return {"steps": report["vae_steps"], "batch": report["vae_batch"],
                    "reconstruction_mse_train": report["vae_reconstruction_mse"],
                    **{f"heldout_{k}": v for k, v in floor.items()}}  # fmt: skip

        def dit() -> dict:
            # the GPU's budget is Lightning's max_time; the dry run's step count ends it first
            limit = [f"--trainer.max_time={max_time(plan.dit_s or 600)}", f"--trainer.max_steps={plan.dit_steps}"]
            limit += ["--trainer.limit_val_batches=1"] if check.dry_run else []
            start("dit", rlinf(
                "fit", "--config", str(EXAMPLE / "world_model_fit.yaml"),
                f"--model.init_args.world_model.init_args.model_path={wm0}", f"--model.init_args.data_path={train_dir}",
                f"--model.init_args.export_dir={wm}", f"--model.init_args.batch_size={plan.dit_batch}",
                f"--model.init_args.cache_dir={scratch / 'clip_cache'}", "--trainer.max_epochs=100000",
                f"--trainer.accelerator={plan.accelerator}", "--trainer.devices=1", *limit,
                *logger_args(tb, "dit")))  # fmt: skip
            wait("dit", (plan.dit_s or 60) + 180)
            values = scalars(tb / "dit" / "version_0")
            steps = values.get("train/loss_step") or []
            return {
                "steps": steps[-1][0] + 1 if steps else None,
                "batch": plan.dit_batch,
                "train_loss_first": steps[0][1] if steps else None,
                "train_loss_last": last(values, "train/loss_step"),
                "val_loss_last": last(values, "val/loss"),
            }

        stage("vae", vae)
        if "error" not in rows["vae"]:
            stage("dit", dit)

        def reward_model() -> dict:
            wait("reward_model", plan.rm_seconds + 120 if plan.rm_seconds else 300)
            values = scalars(tb / "reward_model" / "version_0")
            steps = values.get("train/loss_step") or []
            return {"steps": steps[-1][0] + 1 if steps else None, "train_loss_last": last(values, "train/loss_step"),
                    "val_accuracy": last(values, "val/accuracy"),
                    "val_positive_recall": last(values, "val/positive_recall")}  # fmt: skip

        stage("reward_model", reward_model)
        rm_file = rm_dir / "resnet_rm.pth"

        # ---- beside GRPO: the gate and the classifier on imagined frames (the held-out episodes)
        wm_args = json.dumps({"model_path": str(wm), "num_sampling_steps": 4})
        scoring = ["--world_model", "OpenSoraWorldModel", "--world_model_args", wm_args, "--episodes", str(held_dir),
                   "--chunk", "8", "--device", plan.device]  # fmt: skip
        if wm.is_dir():
            start("gate", rlinf("wm-score", "actions", *scoring, "--start", *map(str, plan.gate_starts), "--horizon",
                                str(plan.gate_horizon), "--out", str(scratch / "gate.json")))  # fmt: skip
            if rm_file.is_file():
                start("reward_on_imagined", rlinf(
                    "wm-score", "reward", *scoring, "--start", str(plan.gate_starts[0]), "--horizon",
                    str(plan.reward_horizon), "--reward_model", "ResnetRewardModel", "--reward_model_args",
                    json.dumps({"checkpoint": str(rm_file)}), "--threshold", "0.5", "--success_frames", "2",
                    "--out", str(scratch / "reward_on_imagined.json")))  # fmt: skip

        def grpo() -> dict:
            n = plan.grpo_envs
            chunks = (plan.eval_max_steps or 48) // settings.num_action_chunks if check.dry_run else 48 // 8
            horizon = chunks * settings.num_action_chunks
            start("grpo", rlinf(
                "fit", "--config", str(EXAMPLE / "grpo_in_world_model.yaml"),
                f"--model.init_args.policy.init_args.model_path={policy}",
                f"--model.init_args.env.init_args.world_model.init_args.model_path={wm}",
                f"--model.init_args.env.init_args.reward_model.init_args.checkpoint={rm_file}",
                f"--model.init_args.env.init_args.init_data_path={wm0 / 'init_states'}",
                f"--model.init_args.env.init_args.num_envs={n}",
                f"--model.init_args.env.init_args.group_size={plan.grpo_group}",
                f"--model.init_args.env.init_args.max_episode_steps={horizon}",
                f"--model.init_args.rollout.max_steps_per_rollout_epoch={horizon}",
                f"--model.init_args.global_batch_size={n * chunks}",
                f"--model.init_args.micro_batch_size={max(1, n * chunks // 4)}",
                f"--trainer.max_epochs={plan.grpo_steps}",
                f"--trainer.check_val_every_n_epoch={plan.grpo_steps + 1}",  # the real evals are their own runs
                f"--trainer.accelerator={plan.accelerator}", "--trainer.devices=1",
                *logger_args(tb, "grpo")))  # fmt: skip
            wait("grpo", 240)
            values = scalars(tb / "grpo" / "version_0")
            from rlinf_core.run.learning_curves import by_rl_step

            success = [v for _, v in by_rl_step(values, "env/success_once")]
            kl = [v for _, v in by_rl_step(values, "train/actor/approx_kl")]
            return {"steps": len(success), "envs": n, "imagined_success_first": success[0] if success else None,
                    "imagined_success_last": success[-1] if success else None,
                    "imagined_success_per_step": " ".join(f"{v:.2f}" for v in success),
                    "approx_kl_max": max(kl) if kl else None}  # fmt: skip

        if rm_file.is_file() and wm.is_dir():
            stage("grpo", grpo)

        def real(name: str) -> dict:
            wait(name, 240)
            return eval_result(tb / name / "version_0")

        stage("real_before", real, "real_before")
        if (tb / "grpo" / "version_0" / "policy").is_dir():
            start("real_after", real_eval("real_after", tb / "grpo" / "version_0" / "policy"))
            stage("real_after", real, "real_after")

        def score(name: str) -> dict:
            wait(name, 120)
            result = json.loads((scratch / f"{name}.json").read_text())
            if name == "gate":
                mse, k = result["mse"], plan.gate_horizon
                at8 = min(8, k) - 1
                return {"verdict": result["verdict"], "windows": result["windows"],
                        "gap_shuffled": result["gap"]["shuffled"], "gap_shuffled_se": result["gap_se"]["shuffled"],
                        "gap_zero": result["gap"]["zero"], "gap_zero_se": result["gap_se"]["zero"],
                        "mse_k1": mse["recorded"][0], f"mse_k{at8 + 1}": mse["recorded"][at8],
                        f"mse_k{k}": mse["recorded"][k - 1], f"copy_start_k{at8 + 1}": mse["copy_start"][at8],
                        "beats_copy_start": mse["recorded"][at8] < mse["copy_start"][at8]}  # fmt: skip
            keys = ("windows", "real_success_rate", "classifier_on_real_success_rate", "imagined_success_rate")
            row = {k: result[k] for k in keys if k in result}
            for part in ("frame_real", "frame_imagined", "episode_imagined"):
                for m in ("precision", "recall"):
                    row[f"{part}_{m}"] = result.get(part, {}).get(m)
            return row

        for name in ("gate", "reward_on_imagined"):
            if name in jobs:
                stage(name, score, name)
    finally:
        for job in jobs.values():
            if not job.done():
                job.kill()
                save_log(job)
        before, after, g = rows.get("real_before", {}), rows.get("real_after", {}), rows.get("grpo", {})
        change = None
        if after.get("success_once") is not None and before.get("success_once") is not None:
            change = after["success_once"] - before["success_once"]
        rows["summary"] = {
            "gate": rows.get("gate", {}).get("verdict"),
            "imagined_before": g.get("imagined_success_first"),
            "imagined_after": g.get("imagined_success_last"),
            "real_before": before.get("success_once"),
            "real_after": after.get("success_once"),
            "real_change": change,
            "seconds": round(time.perf_counter() - t_part, 1),
        }
        check.report()
    failed = [k for k, r in rows.items() if "error" in r]
    if failed:
        raise RuntimeError(f"stages failed: {', '.join(failed)} (their rows say why)")
    return {"rows": dict(rows)}


# ------------------------------------------------------------------ command line (prepare)
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Prepare the imagination part's carry (see the module docstring).")
    p.add_argument("--out", default=str(ROOT / ".whl" / "imagination"), help="the carry directory (replaced)")
    p.add_argument("--work", default=str(ROOT / "runs" / "imagination_carry"), help="intermediate runs (replaced)")
    p.add_argument("--sft-config", default="configs/metaworld/quickstart_sft.yaml", help="relative to the repo root")
    p.add_argument(
        "--grpo-config",
        default="configs/metaworld/quickstart_grpo.yaml",
        help="its eval_env: the held-out scenes and the collection's env (relative to the repo root)",
    )
    p.add_argument("--sft-epochs", type=int, default=None, help="default: the SFT config's trainer.max_epochs")
    p.add_argument("--sft-policy", default=None, help="an image-only SFT export to reuse instead of training one")
    p.add_argument("--demos-per-task", type=int, default=3)
    p.add_argument("--temperatures", type=float, nargs="+", default=[0.7, 1.0, 1.5])
    p.add_argument("--episodes-per-task", type=int, default=48, help="per temperature, training scenes")
    p.add_argument("--heldout-per-task", type=int, default=8, help="held-out episodes carried for the gate")
    p.add_argument("--eval-trials", type=int, default=40, help="held-out scenes per task (the quickstart's)")
    p.add_argument("--sim-wheels", default=str(ROOT / ".whl" / "sim"), help="gpu_check.sh --prepare's sim wheels")
    p.add_argument("--tiny", action="store_true", help="the dry run's tiny carry")
    a = p.parse_args(argv)
    try:
        manifest = prepare(Path(a.out), Path(a.work), a.sft_config, a.grpo_config, a.sft_epochs, a.sft_policy,
                           a.demos_per_task, tuple(a.temperatures), a.episodes_per_task, a.heldout_per_task,
                           a.eval_trials, Path(a.sim_wheels), a.tiny)  # fmt: skip
    except (RuntimeError, FileNotFoundError, ValueError, TimeoutError) as exc:
        print(f"gpu_check_imagination: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({k: manifest[k] for k in ("baseline_real_cpu", "collections", "train", "heldout", "wheels",
                                               "seconds", "carry_mib")}, indent=1))  # fmt: skip
    print(f"imagination carry: {manifest['carry_mib']:.1f} MiB in {a.out}")
    return 0


if __name__ == "__main__":  # run as the module, so that the fork server's children find its functions
    sys.path.insert(0, str(Path(__file__).parent))
    import gpu_check_imagination

    sys.exit(gpu_check_imagination.main())
