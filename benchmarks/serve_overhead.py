"""What a policy server adds to each request beyond the policy's compute: ``rlinf serve`` against openpi's own
``WebsocketPolicyServer``, side by side in one script.

Each server runs in its own process. openpi-client's ``WebsocketClientPolicy`` sends what openpi's LIBERO client sends
(two 224x224 uint8 images, an 8-D state, a prompt) to both in turns, request by request (A, B, B, A, ...: the load of
a shared machine falls on both alike), ``--rounds`` rounds of ``--requests`` requests each after a warm-up. Two
policies:

- **the same policy behind both**: the built-in TinyVLAPolicy (8x7 chunks), served by ``rlinf serve`` (libero
  mapping) and by openpi's server through the adapter one writes to put an rlinf policy there (``infer``: the request
  mapped to an ``Observation`` by the same libero mapping, ``policy.act``, the actions as numpy). Overhead = the
  client's round trip less the time inside ``policy.act`` (timed alike in both).
- **a policy that computes nothing** (a constant chunk): openpi's server hands the dict to ``policy.infer`` untouched,
  ``rlinf serve`` still checks and maps it to an ``Observation`` (dtypes, shapes, the state's NaN / inf, torch
  tensors over the request's image buffers), which counts as its overhead here: that work sits in an openpi
  policy's input transforms.

Per server: the overhead's p50 / p90 over all requests, the median over rounds of each round's p50 (wall clock), and
the CPU time the server process used per request (the sum over its threads of the kernel's nanosecond run-time
counters, ``/proc/PID/task/*/schedstat``, median over rounds); then the rlinf / openpi ratio of each. On a busy
machine the wall times are mostly waits for a core and swing from run to run; the CPU time is stretched far less.

``--instructions N`` also counts the instructions each server executes for N requests under valgrind's callgrind
(started with instrumentation off, switched on after the warm-up; callgrind_control zeroes and dumps the counts):
independent of the machine's load and repeatable to a fraction of a percent. glibc's ``rep movsb`` copy is turned
off there (``GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold``), since valgrind counts each byte it moves as an
instruction and the servers copy ~1 MB of request per round trip; the vector copy loop glibc uses instead is
counted at about one instruction per 16 bytes, close to what the copies cost. Under valgrind a server starts in
minutes.

openpi's server is the module of the PyPI package ``openpi-server`` (byte-identical to openpi's
``src/openpi/serving/websocket_policy_server.py``; ``scripts/install.sh`` installs it), or, with ``--openpi-src DIR``,
the one in a checkout of openpi (``DIR/src/openpi/serving/websocket_policy_server.py``)::

    OMP_NUM_THREADS=1 python benchmarks/serve_overhead.py [--rounds 5] [--requests 200] [--instructions 100]
        [--openpi-src ~/openpi]
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import importlib.util
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CHUNK = np.zeros((8, 7), np.float32)


def _requests(n: int = 8, size: int = 224) -> list[dict]:
    rng = np.random.default_rng(0)
    return [
        {
            "observation/image": rng.integers(0, 256, (size, size, 3), dtype=np.uint8),
            "observation/wrist_image": rng.integers(0, 256, (size, size, 3), dtype=np.uint8),
            "observation/state": rng.standard_normal(8).astype(np.float32),
            "prompt": "put the black bowl on the plate",
        }
        for _ in range(n)
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def openpi_server_module(src: str | None):
    """openpi's ``websocket_policy_server`` module: from a checkout (``src``) or the ``openpi-server`` package."""
    if src is not None:
        path = Path(src).expanduser() / "src" / "openpi" / "serving" / "websocket_policy_server.py"
        if not path.is_file():
            sys.exit(f"serve_overhead: no {path} (give the root of a checkout of Physical-Intelligence/openpi)")
        spec = importlib.util.spec_from_file_location("openpi_websocket_policy_server", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    try:
        from openpi_server import websocket_policy_server
    except ImportError:
        sys.exit(
            "serve_overhead: openpi's server is not installed: `pip install --no-deps openpi-server==0.1.0` "
            "(scripts/install.sh does), or pass --openpi-src with a checkout of Physical-Intelligence/openpi"
        )
    return websocket_policy_server


def wait_listening(port: int, timeout_s: float = 60.0, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server process exited with {process.returncode}: {' '.join(process.args)}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {timeout_s:g} s")


def constant_policy():
    from rlinf_core.contracts.policy import ActOutput, Policy

    out = ActOutput(actions=torch.from_numpy(CHUNK)[None], logprobs=torch.zeros(1, 8, 7))

    class ConstantPolicy(Policy):
        action_dim, num_action_chunks = 7, 8

        def act(self, obs, *, do_sample=True, temperature=1.0):
            return out

    return ConstantPolicy()


class ConstantBasePolicy:
    """openpi_client.base_policy.BasePolicy's interface: ``infer(obs) -> dict``; returns the same chunk."""

    def infer(self, obs: dict) -> dict:
        return {"actions": CHUNK}

    def reset(self) -> None:
        pass


class RlinfPolicyForOpenPI:
    """An rlinf policy behind openpi's server: the request mapped as ``rlinf serve`` maps it, greedy ``act``; the
    reply carries ``act_ms``, the time inside ``policy.act``."""

    def __init__(self, policy) -> None:
        from rlinf_core.serve.mapping import PRESETS

        self.policy, self.mapping = policy, PRESETS["libero"]

    def infer(self, obs: dict) -> dict:
        from rlinf_core.serve.mapping import to_observation

        with torch.no_grad():
            observation = to_observation(obs, self.mapping)
            t0 = time.perf_counter()
            out = self.policy.act(observation, do_sample=False)
            act_ms = (time.perf_counter() - t0) * 1000
        return {"actions": out.actions[0].numpy(), "act_ms": act_ms}

    def reset(self) -> None:
        pass


def serve(server: str, policy_dir: str | None, port: int, openpi_src: str | None) -> None:
    """A server process: ``rlinf serve`` or openpi's server of the toy export (or the constant policy) on ``port``."""
    from rlinf_core.builtin.toy_policy import TinyVLAPolicy

    policy = TinyVLAPolicy.from_pretrained(policy_dir).eval() if policy_dir else None
    if server == "rlinf":
        from rlinf_core.serve.loading import LoadedPolicy
        from rlinf_core.serve.mapping import PRESETS
        from rlinf_core.serve.runner import InferenceSettings, PolicyRunner
        from rlinf_core.serve.websocket_server import OpenPIWebsocketServer

        loaded = LoadedPolicy(policy or constant_policy(), "export", "-")
        runner = PolicyRunner(loaded, PRESETS["libero"], InferenceSettings())
        asyncio.run(OpenPIWebsocketServer(runner, "127.0.0.1", port).serve_forever())
    else:
        module = openpi_server_module(openpi_src)
        served = RlinfPolicyForOpenPI(policy) if policy else ConstantBasePolicy()
        module.WebsocketPolicyServer(served, host="127.0.0.1", port=port).serve_forever()


# valgrind counts every byte a `rep movsb` copies as one instruction; this makes glibc's memcpy use its vector loop
NO_REP_MOVSB = "glibc.cpu.x86_rep_movsb_threshold=1099511627776"


class ServerProcess:
    """One server in a process of its own (no GIL shared with the client or the other server); ``callgrind``: under
    valgrind's callgrind, instrumentation off until :meth:`count_instructions`."""

    def __init__(
        self, server: str, policy_dir: str | None, openpi_src: str | None, callgrind_dir: str | None = None
    ) -> None:
        self.port = _free_port()
        cmd = [sys.executable, __file__, "--serve", server, "--port", str(self.port)]
        cmd += ["--policy-dir", policy_dir] if policy_dir else []
        cmd += ["--openpi-src", openpi_src] if openpi_src else []
        env = None
        self.callgrind_out = None
        if callgrind_dir is not None:
            self.callgrind_out = str(Path(callgrind_dir) / f"callgrind.{server}.out")
            cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={self.callgrind_out}"]
            cmd += [sys.executable, __file__, "--serve", server, "--port", str(self.port)]
            cmd += ["--policy-dir", policy_dir] if policy_dir else []
            cmd += ["--openpi-src", openpi_src] if openpi_src else []
            tunables = os.environ.get("GLIBC_TUNABLES")
            env = {**os.environ, "GLIBC_TUNABLES": f"{tunables}:{NO_REP_MOVSB}" if tunables else NO_REP_MOVSB}
        self.process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        wait_listening(self.port, timeout_s=300.0 if callgrind_dir is None else 1800.0, process=self.process)

    def cpu_s(self) -> float:
        """CPU seconds the process's threads have run so far (the kernel's per-thread nanosecond counters)."""
        total = 0
        for stat in Path(f"/proc/{self.process.pid}/task").glob("*/schedstat"):
            try:
                total += int(stat.read_text().split()[0])
            except (OSError, ValueError, IndexError):  # a thread that ended between the listing and the read
                pass
        return total / 1e9

    def callgrind(self, *command: str) -> None:
        done = subprocess.run(["callgrind_control", *command, str(self.process.pid)], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"callgrind_control {' '.join(command)} failed: {done.stdout}{done.stderr}")

    def instructions(self, client, requests: list[dict], n: int, warmup: int = 10) -> float:
        """Instructions the process executed per request over ``n`` requests (callgrind's total, all threads)."""
        self.callgrind("--instr=on")
        for i in range(warmup):
            client.infer(requests[i % len(requests)])
        self.callgrind("--zero")
        for i in range(n):
            client.infer(requests[i % len(requests)])
        before = set(glob.glob(self.callgrind_out + ".*"))
        self.callgrind("--dump")
        (dump,) = set(glob.glob(self.callgrind_out + ".*")) - before
        for line in Path(dump).read_text().splitlines():
            if line.startswith("totals:"):
                return int(line.split()[1]) / n
        raise RuntimeError(f"no totals line in {dump}")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


def interleaved(servers: dict, requests: list[dict], n: int, warmup: int = 10) -> tuple[dict, dict, dict]:
    """Round trip ms of ``n`` requests to each server, sent in turns (A, B, B, A, A, B, ...: each server goes first
    half of the time), the time inside ``policy.act`` of each (ms), and the CPU ms each server used per request."""
    from openpi_client.websocket_client_policy import WebsocketClientPolicy

    clients = {name: WebsocketClientPolicy("127.0.0.1", server.port) for name, server in servers.items()}
    names = list(clients)
    walls: dict[str, list[float]] = {name: [] for name in names}
    acts: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, float] = {}
    for i in range(n + warmup):
        if i == warmup:
            cpu = {name: servers[name].cpu_s() for name in names}
        for name in names if i % 2 == 0 else reversed(names):
            t0 = time.perf_counter()
            reply = clients[name].infer(requests[i % len(requests)])
            if i >= warmup:
                walls[name].append((time.perf_counter() - t0) * 1000)
                acts[name].append(reply.get("act_ms", reply["server_timing"].get("model_ms", 0.0)))
    cpu = {name: (servers[name].cpu_s() - cpu[name]) * 1000 / n for name in names}
    for client in clients.values():
        client._ws.close()
    return walls, acts, cpu


def compare(title: str, servers: dict, opts) -> dict[str, dict[str, float]]:
    """Prints the table of one policy; returns each server's columns."""
    requests = _requests()
    overhead: dict[str, list[float]] = {k: [] for k in servers}
    round_p50: dict[str, list[float]] = {k: [] for k in servers}
    cpu: dict[str, list[float]] = {k: [] for k in servers}
    for _ in range(opts.rounds):
        walls, acts, used = interleaved(servers, requests, opts.requests)
        for name, w in walls.items():
            o = [a - b for a, b in zip(w, acts[name])]
            overhead[name] += o
            round_p50[name].append(statistics.median(o))
            cpu[name].append(used[name])
    columns = {
        name: {
            "p50": float(np.percentile(overhead[name], 50)),
            "p90": float(np.percentile(overhead[name], 90)),
            "round p50": statistics.median(round_p50[name]),
            "cpu": statistics.median(cpu[name]),
            "cpu rounds": cpu[name],
        }
        for name in servers
    }
    print(f"\n{title}\n")
    print(
        "| server | overhead p50 (ms) | p90 (ms) | median of round p50s (ms) | "
        "server CPU per request (ms, median of rounds) |"
    )
    print("|---|---|---|---|---|")
    for name, c in columns.items():
        print(f"| {name} | {c['p50']:.3f} | {c['p90']:.3f} | {c['round p50']:.3f} | {c['cpu']:.3f} |")
    rlinf, openpi = columns.values()
    ratios = " | ".join(f"{rlinf[k] / openpi[k]:.2f}" for k in ("p50", "p90", "round p50", "cpu"))
    print(f"| rlinf serve / openpi | {ratios} |")
    rounds = ", ".join(f"{a / b:.2f}" for a, b in zip(rlinf["cpu rounds"], openpi["cpu rounds"]))
    print(f"\nCPU ratio round by round: {rounds}", flush=True)
    return columns


def count_instructions(runs: list[tuple[str, str | None]], opts) -> None:
    """Instructions per request of each server under callgrind, one server at a time (the count ignores the load)."""
    from openpi_client.websocket_client_policy import WebsocketClientPolicy

    requests = _requests()
    print(
        f"\nInstructions per request (valgrind callgrind, {opts.instructions} requests after a warm-up; "
        "all threads of the server process):\n"
    )
    print("| policy | rlinf serve | openpi WebsocketPolicyServer | rlinf serve / openpi |")
    print("|---|---|---|---|")
    for title, policy_dir in runs:
        counts = {}
        for server in ("rlinf", "openpi"):
            with tempfile.TemporaryDirectory() as out:
                process = ServerProcess(server, policy_dir, opts.openpi_src, callgrind_dir=out)
                try:
                    client = WebsocketClientPolicy("127.0.0.1", process.port)
                    counts[server] = process.instructions(client, requests, opts.instructions)
                    client._ws.close()
                finally:
                    process.stop()
        name = title.split(" (")[0]
        ratio = counts["rlinf"] / counts["openpi"]
        print(f"| {name} | {counts['rlinf']:,.0f} | {counts['openpi']:,.0f} | {ratio:.2f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument(
        "--instructions", type=int, default=0, metavar="N", help="also count instructions for N requests (valgrind)"
    )
    parser.add_argument("--openpi-src", default=None, help="a checkout of openpi (default: the openpi-server package)")
    parser.add_argument("--serve", choices=["rlinf", "openpi"], help=argparse.SUPPRESS)  # a server process
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--policy-dir", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.serve:
        serve(opts.serve, opts.policy_dir, opts.port, opts.openpi_src)
        return
    openpi_server_module(opts.openpi_src)  # a missing server is reported before anything starts
    if opts.instructions and not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        sys.exit("serve_overhead: --instructions needs valgrind (apt-get install valgrind)")
    from rlinf_core.builtin.toy_policy import TinyVLAPolicy

    print(
        f"openpi-client on localhost, LIBERO-shaped requests (two 224x224 images, 8-D state, prompt), "
        f"{opts.rounds} rounds of {opts.requests} requests to each server in turns, each server in its own "
        f"process; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        TinyVLAPolicy(action_dim=7, num_action_chunks=8, state_dim=8).save_pretrained(Path(tmp) / "toy")
        runs = [
            ("The same policy behind both (TinyVLAPolicy; overhead = round trip - time in policy.act):", tmp + "/toy"),
            ("A policy that computes nothing (overhead = round trip):", None),
        ]
        for title, policy_dir in runs:
            servers = {
                "rlinf serve": ServerProcess("rlinf", policy_dir, None),
                "openpi WebsocketPolicyServer": ServerProcess("openpi", policy_dir, opts.openpi_src),
            }
            try:
                compare(title, servers, opts)
            finally:
                for server in servers.values():
                    server.stop()
        if opts.instructions:
            count_instructions(runs, opts)
        print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
