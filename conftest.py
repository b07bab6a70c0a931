"""Test-wide settings: one thread per process, no hub access, headless rendering; no test leaves
files in the checkout."""

import gc
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402

torch.set_num_threads(1)


def _load_memory_watch():
    """tests/memory_watch.py, by path: the repository root is not on sys.path under --import-mode=importlib."""
    spec = importlib.util.spec_from_file_location("memory_watch", Path(__file__).parent / "tests" / "memory_watch.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


memory_watch = _load_memory_watch()


def pytest_addoption(parser):
    memory_watch.pytest_addoption(parser)


def pytest_configure(config):
    memory_watch.pytest_configure(config)  # each test's peak memory, the 10 largest listed, the limits enforced


# The files holding the longest tests run first, roughly longest first (their tests' durations in this round's
# .ci/run logs), each file's tests kept together and in order. With scripts/test.sh's `--dist worksteal` a worker
# that runs out of tests steals the tail of the other's queue, so the run ends on short tests on both workers
# instead of on one worker alone in a 100 s test that happened to be collected late.
LONGEST_FIRST = [
    "plugins/rlinf-policy-openpi/tests/test_openpi_learning.py",  # four RL runs and a 600-step SFT
    "tests/core/test_kill_resume.py",  # about 20 `rlinf fit` processes
    "tests/core/test_bad_input_fuzz.py",  # about 240 in-process starts
    "tests/core/test_rl_loop.py",
    "tests/core/test_coevolve.py",
    "tests/scale/test_strategies_multiprocess.py",  # two-rank DDP / FSDP2 / DeepSpeed runs
    "plugins/rlinf-policy-openpi/tests/test_openpi_strategies.py",
    "plugins/rlinf-wm-opensora/tests/test_opensora_fit.py",
    "tests/core/test_readme_commands.py",
    "plugins/rlinf-env-maniskill/tests/test_maniskill_env.py",
    "plugins/rlinf-env-maniskill/tests/test_rl4vla_tasks.py",
    "tests/test_quickstart.py",
    "tests/core/test_rlinf_new.py",
    "tests/serve/test_serve_loading.py",
    "tests/serve/test_remote_parity.py",  # two LIBERO and two MetaWorld `rlinf validate` runs
    "tests/serve/test_remote_openpi_server.py",
    "tests/core/test_wm_training.py",
    "tests/core/test_console_output.py",
    "tests/test_gpu_configs.py",
    "plugins/rlinf-env-libero/tests/test_libero_env.py",
    "plugins/rlinf-env-libero/tests/test_libero_workers.py",
    "tests/test_gpu_check.py",
    "tests/test_gpu_check_imagination.py",  # the dry run: about 12 forked `rlinf` commands
]


def pytest_collection_modifyitems(config, items):
    root = config.rootpath
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    ranks = {}
    for item in items:
        try:
            rel = item.path.relative_to(root).as_posix()
        except ValueError:
            rel = ""
        ranks[item.nodeid] = rank.get(rel, len(LONGEST_FIRST))
    items.sort(key=lambda item: ranks[item.nodeid])  # stable: the other files keep their order


@pytest.fixture(autouse=True)
def _collect_only_what_the_test_made():
    """Garbage collections during a test walk only the objects made since it started.

    A worker holds millions of objects by its later tests (every library imported, module-scoped fixtures), and
    ManiSkill calls ``gc.collect()`` on each scene rebuild: in the full suite these full collections cost about
    260 s of worker time, mostly in the ManiSkill and LIBERO tests. ``gc.freeze()`` parks the existing objects
    for the test and ``gc.unfreeze()`` hands them back after it (both O(1)); garbage made before the test is
    collected after it, so it does not pile up: the two ManiSkill test files in one process end at the same RSS
    with and without it (2.62 / 2.66 GiB) while their collections take 1.9 s instead of 27.5 s of CPU
    (docs/performance.md, "Test-suite memory")."""
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture(autouse=True, scope="module")
def _release_native_memory():
    """At the end of each test file: LIBERO's idle simulators and compiled scenes are closed (LIBERO keeps them in a
    process-wide cache for reuse: up to 4 simulators of about 0.75 GB and 4 scenes of 0.25 GB), SAPIEN drops the
    meshes and textures it caches for later scenes (ManiSkill), and glibc hands the freed heap back to the system
    (``malloc_trim``: simulators free their memory to malloc, which keeps it, so a worker would otherwise stay at
    the high-water mark of every file it ran: +1.5 GB after the RL4VLA ManiSkill file).

    Envs a test dropped without closing them hold their simulators until a full collection, so one runs first, but
    only after a file that grew the process by more than ``COLLECT_AFTER_GROWTH`` (where simulators were built): a
    full collection walks every object of the worker (2.5 M in one by its later files, 1.3 s each), and after every
    file it cost that worker 88 s of CPU in a full run."""
    rss_before = _rss_bytes()
    yield
    rss_after = _rss_bytes()
    if rss_before is None or rss_after is None or rss_after - rss_before > COLLECT_AFTER_GROWTH:
        gc.collect()
    libero = sys.modules.get("rlinf_env_libero")
    if libero is not None:
        libero.clear_sim_cache()
    sapien_render = sys.modules.get("sapien.render")
    if sapien_render is not None:
        sapien_render.clear_cache()
    _malloc_trim()


COLLECT_AFTER_GROWTH = 256 * 2**20


def _rss_bytes() -> int | None:
    return memory_watch._proc_status("self").get("VmRSS")  # None where there is no /proc


def _malloc_trim() -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _checkout_changes(root) -> set[str] | None:
    try:
        out = subprocess.run(
            ["git", "ls-files", "--others", "--exclude-standard"], cwd=root, capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return set(out.stdout.splitlines()) if out.returncode == 0 else None


_CHANGES_BEFORE: dict[str, set[str] | None] = {}


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):  # the controller (or a run without xdist)
        _CHANGES_BEFORE["root"] = _checkout_changes(session.config.rootpath)


def pytest_sessionfinish(session, exitstatus):
    """Fail the run when a test left a new file in the checkout: every test writes under its tmp_path."""
    before = _CHANGES_BEFORE.get("root")
    after = _checkout_changes(session.config.rootpath) if before is not None else None
    if before is None or after is None or after <= before:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    new = sorted(after - before)
    if reporter is not None:
        reporter.write_line(
            f"tests left new files in the checkout (write under tmp_path instead): {', '.join(new[:10])}", red=True
        )
    session.exitstatus = 1
