"""Peak memory of every test, and the suite's memory limits (a pytest plugin; the root conftest.py registers it).

In the process that runs a test (an xdist worker, or pytest itself without xdist), per test:

- the process's own peak resident set (the kernel's ``VmHWM``, reset to the current RSS before the test by
  writing 5 to ``/proc/self/clear_refs``): exact, nothing is missed between samples;
- its child processes (every descendant, from ``/proc``), sampled every 0.25 s: the peak of their summed RSS and
  the largest single child's own ``VmHWM``.

The process that started pytest (the xdist controller, or pytest itself) samples the whole tree every 0.5 s:
itself, the workers and all their children, summing their proportional set sizes (PSS: a page shared by n
processes counts 1/n in each, so shared libraries count once).

At the end the run lists the 10 largest tests, and fails with one line per cause when a test's process or one of
its children passed ``--memory-limit-process`` GiB of RSS (default 6), or the processes together passed
``--memory-limit-total`` GiB (default 12). ``--memory-log=FILE`` writes every test's figures as tab-separated rows
(the worker's RSS after each test shows how it grows through the run; give the file with ``=``: pytest takes a
separate argument naming an existing file for a test path before it knows this option). Linux only; elsewhere it
records nothing.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

GiB = 1 << 30
TOP = 10


def _proc_status(pid: int | str) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` of a process in bytes ({} when it is gone; 0 for a zombie)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    out = {"VmRSS": 0, "VmHWM": 0}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in out:
            out[key] = int(value.split()[0]) * 1024
    return out


def _children(pid: int) -> list[int]:
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for task in tasks:
        try:
            out += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except OSError:
            pass
    return out


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children, ...)."""
    found, todo = [], _children(pid)
    while todo:
        child = todo.pop()
        found.append(child)
        todo += _children(child)
    return found


def _pss(pid: int) -> int:
    """Proportional set size in bytes (the RSS where the kernel has no ``smaps_rollup``; 0 when gone)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return _proc_status(pid).get("VmRSS", 0)


def supported() -> bool:
    return os.path.exists("/proc/self/clear_refs") and os.path.exists(f"/proc/{os.getpid()}/task")


@dataclass
class TestMemory:
    """One test's figures, in bytes (``worker``: the xdist worker id, or "main")."""

    worker: str
    start: float  # time.time() at the start of its setup
    end: float  # ... and at the end of its teardown
    rss_start: int  # the test process's RSS at the start of the setup
    rss_end: int  # ... and after the teardown
    peak: int  # the test process's peak RSS between the two
    children_peak: int  # the peak of its children's summed RSS (sampled)
    largest_child: int  # the largest child's own peak RSS
    gc_seconds: float  # CPU time in garbage collections of the test process so far (all generations)
    gc_full: int  # full (generation 2) collections of the test process so far

    @property
    def largest_process(self) -> int:
        return max(self.peak, self.largest_child)


class _ChildSampler(threading.Thread):
    """Samples the test process's descendants while a test runs."""

    def __init__(self, period: float):
        super().__init__(name="memory-watch-children", daemon=True)
        self.period = period
        self.lock = threading.Lock()
        self.active = False
        self.sum_peak = self.largest = 0

    def begin(self) -> None:
        with self.lock:
            self.active, self.sum_peak, self.largest = True, 0, 0
        self.sample()

    def end(self) -> tuple[int, int]:
        self.sample()
        with self.lock:
            self.active = False
            return self.sum_peak, self.largest

    def sample(self) -> None:
        stats = [_proc_status(pid) for pid in descendants(os.getpid())]
        total = sum(s.get("VmRSS", 0) for s in stats)
        largest = max((s.get("VmHWM", 0) for s in stats), default=0)
        with self.lock:
            if self.active:
                self.sum_peak, self.largest = max(self.sum_peak, total), max(self.largest, largest)

    def run(self) -> None:
        while True:
            time.sleep(self.period)
            if self.active:
                self.sample()


class _TreeSampler(threading.Thread):
    """Samples the PSS of the whole run (this process and every descendant) until stopped."""

    def __init__(self, period: float, running: dict[str, None]):
        super().__init__(name="memory-watch-tree", daemon=True)
        self.period = period
        self.running = running
        self.stopped = threading.Event()
        self.peak, self.peak_at, self.peak_tests = 0, 0.0, []

    def run(self) -> None:
        while not self.stopped.wait(self.period):
            pids = [os.getpid(), *descendants(os.getpid())]
            total = sum(_pss(pid) for pid in pids)
            if total > self.peak:
                self.peak, self.peak_at, self.peak_tests = total, time.time(), list(self.running)


class _GcClock:
    """CPU time spent in garbage collections of this process (``gc.callbacks``; a collection runs in the thread that
    triggered it, so that thread's CPU time is the collection's, however loaded the machine)."""

    def __init__(self):
        self.seconds, self.full, self._t0 = 0.0, 0, 0.0
        gc.callbacks.append(self)

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.thread_time()
        else:
            self.seconds += time.thread_time() - self._t0
            self.full += info["generation"] == 2


def _gib(n: int) -> str:
    return f"{n / GiB:.2f} GiB"


class MemoryWatch:
    def __init__(self, config: pytest.Config):
        self.config = config
        self.limit_process = config.getoption("memory_limit_process") * GiB
        self.limit_total = config.getoption("memory_limit_total") * GiB
        self.log_path = config.getoption("memory_log")
        workerinput = getattr(config, "workerinput", None)
        self.worker = workerinput["workerid"] if workerinput else "main"
        self.is_worker = workerinput is not None
        self.enabled = supported()
        self.results: list[tuple[str, TestMemory]] = []
        self.running: dict[str, None] = {}  # the tests in progress (the controller's view), in start order
        self.tree: _TreeSampler | None = None
        self.children: _ChildSampler | None = None
        self.gc_clock: _GcClock | None = None
        self.failures: list[str] = []
        self._start: dict[str, tuple[float, int]] = {}

    # -- in the process that runs the tests --------------------------------------------------------------------
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item):
        if self.enabled:
            self._begin(item.nodeid)
        return (yield)

    def _begin(self, nodeid: str) -> None:
        if self.children is None:
            self.children = _ChildSampler(period=0.25)
            self.children.start()
            self.gc_clock = _GcClock()
        try:
            Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        except OSError:
            self.enabled = False
            return
        self._start[nodeid] = (time.time(), _proc_status("self")["VmRSS"])
        self.children.begin()

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item, nextitem):
        try:
            return (yield)
        finally:
            if self.enabled and item.nodeid in self._start:
                start, rss_start = self._start.pop(item.nodeid)
                children_peak, largest_child = self.children.end()
                status = _proc_status("self")
                figures = TestMemory(
                    worker=self.worker,
                    start=start,
                    end=time.time(),
                    rss_start=rss_start,
                    rss_end=status["VmRSS"],
                    peak=status["VmHWM"],
                    children_peak=children_peak,
                    largest_child=largest_child,
                    gc_seconds=round(self.gc_clock.seconds, 4),
                    gc_full=self.gc_clock.full,
                )
                item.user_properties.append(("memory", asdict(figures)))

    # -- in the process that reports (the xdist controller, or pytest itself) ---------------------------------------
    def pytest_sessionstart(self, session):
        if self.log_path and not self.is_worker:
            Path(self.log_path).write_text("\t".join(["nodeid", *TestMemory.__dataclass_fields__]) + "\n")
        if self.enabled and not self.is_worker:
            self.tree = _TreeSampler(period=0.5, running=self.running)
            self.tree.start()

    def pytest_runtest_logstart(self, nodeid, location):
        self.running[nodeid] = None

    def pytest_runtest_logfinish(self, nodeid, location):
        self.running.pop(nodeid, None)

    def pytest_runtest_logreport(self, report):
        if report.when != "teardown" or self.is_worker:
            return
        for name, value in report.user_properties:
            if name == "memory":
                m = TestMemory(**value)
                self.results.append((report.nodeid, m))
                if self.log_path:  # row by row: a run that is killed keeps what it measured
                    with open(self.log_path, "a") as log:
                        fields = [str(getattr(m, f)) for f in TestMemory.__dataclass_fields__]
                        log.write("\t".join([report.nodeid, *fields]) + "\n")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        if self.is_worker or not self.enabled:
            return
        if self.tree is not None:
            self.tree.stopped.set()
        for nodeid, m in self.results:
            if m.peak > self.limit_process:
                self.failures.append(
                    f"{nodeid}: its process ({m.worker}) reached {_gib(m.peak)} of RSS "
                    f"(from {_gib(m.rss_start)} at its start); the limit is {_gib(self.limit_process)} per process"
                )
            if m.largest_child > self.limit_process:
                self.failures.append(
                    f"{nodeid}: a child process of it reached {_gib(m.largest_child)} of RSS; the limit is "
                    f"{_gib(self.limit_process)} per process"
                )
        if self.tree is not None and self.tree.peak > self.limit_total:
            running = ", ".join(self.tree.peak_tests) or "no test"
            self.failures.append(
                f"the run's processes together reached {_gib(self.tree.peak)} (PSS) while running {running}; "
                f"the limit is {_gib(self.limit_total)}"
            )
        if self.failures and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        if self.is_worker or not self.enabled or not self.results:
            return
        tr = terminalreporter
        tr.write_sep("=", f"peak memory: the {min(TOP, len(self.results))} largest tests")
        tr.write_line(f"{'process':>8} {'rise':>8} {'children':>9} {'largest':>8}  test (process: peak RSS; rise: "
                      "above its RSS at the start; children: their summed RSS, and the largest one's)")  # fmt: skip
        for nodeid, m in sorted(self.results, key=lambda r: r[1].largest_process, reverse=True)[:TOP]:
            tr.write_line(
                f"{m.peak / GiB:7.2f}G {(m.peak - m.rss_start) / GiB:7.2f}G {m.children_peak / GiB:8.2f}G "
                f"{m.largest_child / GiB:7.2f}G  {nodeid} [{m.worker}]"
            )
        last = {}
        for _, m in self.results:
            if m.end >= last.get(m.worker, m).end:
                last[m.worker] = m
        for worker, m in sorted(last.items()):
            tr.write_line(
                f"{worker}: {_gib(m.rss_end)} RSS after its last test; garbage collections took "
                f"{m.gc_seconds:.0f} s of CPU ({m.gc_full} full ones)"
            )
        if self.tree is not None:
            tr.write_line(
                f"all the run's processes together: {_gib(self.tree.peak)} at most (PSS, sampled every 0.5 s)"
            )
        for line in self.failures[:TOP]:
            tr.write_line(f"memory limit exceeded: {line}", red=True, bold=True)
        if len(self.failures) > TOP:
            tr.write_line(f"memory limit exceeded: {len(self.failures) - TOP} more as above", red=True, bold=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("memory", "peak memory per test (tests/memory_watch.py)")
    group.addoption(
        "--memory-limit-process",
        type=float,
        default=6.0,
        metavar="GiB",
        help="fail the run when a test's process or one of its children passes this RSS (default 6)",
    )
    group.addoption(
        "--memory-limit-total",
        type=float,
        default=12.0,
        metavar="GiB",
        help="fail the run when all its processes together pass this PSS (default 12)",
    )
    group.addoption(
        "--memory-log", default=None, metavar="FILE", help="write every test's figures to FILE (TSV): --memory-log=FILE"
    )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(MemoryWatch(config), "rlinf-memory-watch")
