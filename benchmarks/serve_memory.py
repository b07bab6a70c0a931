"""Worst-case memory of ``rlinf serve``: how much one client can make the server hold.

Serves the toy policy in a subprocess (``rlinf serve``'s own ``make_server``), its ``act`` slowed to ``--model-s``
seconds (a large model on CPU; a client that sends faster than the model answers), and measures the server's peak
resident memory (``VmHWM``) while clients send large requests without waiting for replies. A request is what
openpi's LIBERO client sends (64x64 images, an 8-D state, a prompt) plus an unmapped ``--mb`` MiB field,
packed by openpi-client's packer:

- ``ws burst``: one websocket client sends N such frames without reading a reply (the issue-34 case: six 60 MiB
  frames);
- ``ws clients``: K websocket clients do the same at once (K x N frames);
- ``rest clients``: K REST clients each POST one ``--mb`` MiB body at once.

Prints the peak growth over the idle server, per client and per MiB of request; each case gets a fresh server.
``--src DIR`` serves another checkout's ``core/src`` (e.g. ``git archive main`` unpacked) to compare::

    OMP_NUM_THREADS=1 python benchmarks/serve_memory.py [--mb 60] [--frames 6] [--clients 4] [--src DIR]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _rss_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(field)


def _reset_peak(pid: int) -> None:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
    except OSError:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SERVER = """
import asyncio, sys, time
from rlinf_core.serve.command import build_parser, make_server
delay, opts = float(sys.argv[1]), build_parser().parse_args(sys.argv[2:])
server = make_server(opts)
act = server.runner.policy.act
server.runner.policy.act = lambda *a, **kw: (time.sleep(delay), act(*a, **kw))[1]
asyncio.run(server.serve_forever()) if opts.protocol == "openpi" else server.serve_forever()
"""


def _start(policy: Path, protocol: str, src: str | None, model_s: float, mb: int) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if src:
        env["PYTHONPATH"] = os.pathsep.join([str(Path(src) / "core" / "src"), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            SERVER,
            str(model_s),
            "--policy",
            str(policy),
            "--protocol",
            protocol,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--max-message-mb",
            str(mb + 1),
        ],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                return proc, port
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("rlinf serve did not come up") from None
            time.sleep(0.3)


def _request(mb: int) -> dict:
    import numpy as np

    rng = np.random.default_rng(0)
    return {
        "observation/image": rng.integers(0, 256, (64, 64, 3), dtype=np.uint8),
        "observation/wrist_image": rng.integers(0, 256, (64, 64, 3), dtype=np.uint8),
        "observation/state": np.zeros(8, np.float32),
        "prompt": "put the bowl on the plate",
        "pad": np.zeros(mb * 2**20 - 2**16, np.uint8),
    }


def _frame(mb: int) -> bytes:
    from openpi_client import msgpack_numpy

    return msgpack_numpy.Packer().pack(_request(mb))


def _rest_body(mb: int) -> bytes:
    import json_numpy

    request = _request(mb)
    return json_numpy.dumps(
        {
            "image": request["observation/image"],
            "instruction": request["prompt"],
            "pad": request["pad"][: mb * 2**20 * 3 // 4 - 2**16],
        }
    ).encode()  # base64: 4/3


def _ws_burst(port: int, frame: bytes, frames: int, settle_s: float) -> None:
    from websockets.sync.client import connect

    with connect(f"ws://127.0.0.1:{port}", max_size=None, compression=None, open_timeout=30) as ws:
        ws.recv()  # metadata
        for _ in range(frames):
            ws.send(frame)  # no reply read: the server's buffers and queue take it
        time.sleep(settle_s)


def _rest_post(port: int, body: bytes) -> None:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", "/act", body=body, headers={"Content-Type": "application/json"})
    conn.getresponse().read()
    conn.close()


def _measure(pid: int, clients: int, target, *args) -> float:
    _reset_peak(pid)
    base = _rss_kib(pid, "VmRSS")
    threads = [threading.Thread(target=target, args=args) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return (_rss_kib(pid, "VmHWM") - base) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=60)
    parser.add_argument("--frames", type=int, default=6)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--model-s", type=float, default=2.0, help="seconds each policy.act takes")
    parser.add_argument("--src", default=None, help="serve this checkout's core/src instead")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "core" / "src"))
    import torch

    from rlinf_core.builtin.toy_policy import TinyVLAPolicy

    with tempfile.TemporaryDirectory() as tmp:
        policy = Path(tmp) / "policy"
        torch.manual_seed(0)
        TinyVLAPolicy(action_dim=3, num_action_chunks=4, state_dim=8).save_pretrained(policy)
        frame = _frame(args.mb)
        settle = args.frames * args.model_s + 2
        cases = [
            (f"ws burst: 1 client x {args.frames} frames", "openpi", 1, _ws_burst, (frame, args.frames, settle)),
            (
                f"ws clients: {args.clients} x {args.frames} frames",
                "openpi",
                args.clients,
                _ws_burst,
                (frame, args.frames, settle),
            ),
            (f"rest clients: {args.clients} x 1 body", "openvla", args.clients, _rest_post, (_rest_body(args.mb),)),
        ]
        rows = []
        for name, protocol, clients, target, extra in cases:  # a fresh server each: freed memory stays resident
            proc, port = _start(policy, protocol, args.src, args.model_s, args.mb)
            try:
                rows.append((name, clients, _measure(proc.pid, clients, target, port, *extra)))
            finally:
                proc.terminate()
                proc.wait(timeout=60)
    print(
        f"request size {args.mb} MiB, model {args.model_s} s; server: "
        f"{'--src ' + args.src if args.src else 'this checkout'}"
    )
    print(f"{'case':<34} {'peak growth MiB':>16} {'per client MiB':>15} {'per client / request size':>26}")
    for name, clients, mib in rows:
        print(f"{name:<34} {mib:>16.0f} {mib / clients:>15.0f} {mib / clients / args.mb:>26.2f}")


if __name__ == "__main__":
    main()
