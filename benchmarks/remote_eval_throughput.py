"""Env steps per second of a remote eval against the same policy run locally, at 1, 4 and 16 envs.

The eval loop is ``rlinf validate``'s (:func:`rlinf_core.rl.evaluation.eval_passes`) on MetaWorld (2 tasks x 8
placements, 64px fast renders, 32 steps: 16 episodes per pass) with a tiny OpenVLA-OFT (chunks of 8 actions),
greedy. Local: the policy in this process. Remote: ``rlinf serve`` of the same checkpoint in another process on this
machine (openpi protocol, ``--max-batch 16``), driven by RemotePolicy two ways: one batched request per chunk (what
it sends to a server offering batched requests) and one request per env over concurrent connections (what it sends
to openpi's server or any that takes one observation per request; the server's runner still batches the requests
that wait together). Each row: the median of ``--repeats`` passes after a warm-up pass::

    OMP_NUM_THREADS=1 python benchmarks/remote_eval_throughput.py [--repeats 3] [--envs 1 4 16]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TASKS = ["button-press-topdown-v3", "drawer-close-v3"]


def _env(num_envs: int):
    from rlinf_env_metaworld.env import MetaWorldEnv
    from rlinf_env_metaworld.settings import MetaWorldRenderConfig

    render = MetaWorldRenderConfig(image_size=64, camera_name="corner", fast_render=True)
    return MetaWorldEnv(
        tasks=TASKS, trials_per_task=8, num_envs=num_envs, is_eval=True, auto_reset=True, max_episode_steps=32,
        ignore_terminations=True, render=render,
    )  # fmt: skip


def steps_per_s(policy, num_envs: int, repeats: int) -> float:
    from rlinf_core.rl.evaluation import eval_passes

    env = _env(num_envs)
    try:
        eval_passes(env, policy, "cpu", passes=1, do_sample=False, temperature=1.0)  # warm-up: simulators, caches
        rates = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            records = eval_passes(env, policy, "cpu", passes=1, do_sample=False, temperature=1.0)
            rates.append(sum(r["episode_len"] for r in records) / (time.perf_counter() - t0))
        return statistics.median(rates)
    finally:
        env.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(checkpoint: Path, port: int) -> subprocess.Popen:
    rlinf = Path(sys.executable).with_name("rlinf")
    cmd = [str(rlinf), "serve", "--policy", str(checkpoint), "--mapping", "openvla-oft", "--max-batch", "16"]
    process = subprocess.Popen([*cmd, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"rlinf serve exited: {process.stderr.read().decode()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return process
        time.sleep(0.2)
    process.kill()
    sys.exit("rlinf serve did not start within 300 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 4, 16])
    opts = parser.parse_args()
    import tempfile

    from rlinf_core.remote.policy import RemotePolicy
    from rlinf_policy_openvla.make_tiny import make_tiny
    from rlinf_policy_openvla.oft_policy import OpenVLAOFTPolicy

    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = make_tiny(Path(tmp) / "oft", kind="oft", norm_keys=("metaworld",), action_dim=4)
        local = OpenVLAOFTPolicy.from_pretrained(checkpoint).eval()
        port = _free_port()
        server = start_server(checkpoint, port)
        print(
            f"MetaWorld, tiny OpenVLA-OFT (chunks of 8), 16 episodes of 32 steps per pass, median of {opts.repeats}; "
            f"server: rlinf serve --max-batch 16 in another process on this machine; {os.cpu_count()} CPUs, torch "
            f"threads {torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f}\n"
        )
        columns = ["local steps/s", "remote, batched: steps/s (remote / local)"]
        columns.append("remote, a request per env: steps/s (remote / local)")
        print("| envs | " + " | ".join(columns) + " |")
        print("|---|---|---|---|")
        try:
            for n in opts.envs:
                row = [steps_per_s(local, n, opts.repeats)]
                for batched in (True, False):
                    remote = RemotePolicy(
                        f"ws://127.0.0.1:{port}", action_dim=4, num_action_chunks=8, mapping="openvla-oft",
                        batch_requests=batched, connections=16,
                    )  # fmt: skip
                    try:
                        row.append(steps_per_s(remote, n, opts.repeats))
                    finally:
                        remote.close()
                cells = [f"{row[0]:.0f}"] + [f"{r:.0f} ({r / row[0]:.2f})" for r in row[1:]]
                print(f"| {n} | " + " | ".join(cells) + " |", flush=True)
        finally:
            server.terminate()
            server.wait(timeout=60)


if __name__ == "__main__":
    main()
