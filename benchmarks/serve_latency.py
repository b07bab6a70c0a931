"""Per-request latency of ``rlinf serve`` for tiny models: p50 / p95 split into decode, preprocess, model and encode.

Each model is served in this process over openpi's websocket protocol and driven by openpi-client's
``WebsocketClientPolicy`` on localhost with what openpi's LIBERO client sends (two 224x224 uint8 images, an
8-D state, a prompt). ``decode`` / ``preprocess`` / ``model`` come from each reply's ``server_timing``,
``encode`` from the next reply's ``prev_encode_ms``; ``round trip`` is the client's wall time of ``infer``
(pack, send, server, receive, unpack); ``hand-off`` is the server's time between the mapped observation and
the model's result that is not the model (queueing and the two thread hand-offs). The OFT model is also served
over OpenVLA's REST protocol (``requests`` + ``json_numpy``, times from the ``Server-Timing`` header). Last, K
clients at once against ``--max-batch 1`` and ``--max-batch K`` (3 alternating rounds, medians): requests/s, p50
round trip, and the throughput ratio::

    OMP_NUM_THREADS=1 python benchmarks/serve_latency.py [--requests 30] [--device cpu|cuda] [--clients 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


COLUMNS = ("decode", "preprocess", "hand-off", "model", "encode", "round trip")


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def _request(seed: int, size: int = 224) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "observation/image": rng.integers(0, 256, (size, size, 3), dtype=np.uint8),
        "observation/wrist_image": rng.integers(0, 256, (size, size, 3), dtype=np.uint8),
        "observation/state": rng.standard_normal(8).astype(np.float32),
        "prompt": "put the black bowl on the plate",
    }


def _server(policy: Path, *flags: str):
    from rlinf_core.serve.command import build_parser, make_server

    opts = build_parser().parse_args(["--policy", str(policy), "--host", "127.0.0.1", "--port", "0", *flags])
    return make_server(opts).start()


def _stop(server) -> None:
    server.stop()
    server.runner.close()


def openpi_latency(policy: Path, n: int, flags: list[str]) -> dict[str, list[float]]:
    from openpi_client.websocket_client_policy import WebsocketClientPolicy

    server = _server(policy, *flags)
    try:
        client = WebsocketClientPolicy("127.0.0.1", server.port)
        rows: dict[str, list[float]] = {k: [] for k in COLUMNS}
        for i in range(n + 3):
            t0 = time.perf_counter()
            timing = client.infer(_request(i))["server_timing"]
            wall = (time.perf_counter() - t0) * 1000
            if i < 3:  # warm-up
                continue
            rows["decode"].append(timing["decode_ms"])
            rows["preprocess"].append(timing["preprocess_ms"])
            rows["model"].append(timing["model_ms"])
            rows["hand-off"].append(timing["infer_ms"] - timing["preprocess_ms"] - timing["model_ms"])
            if "prev_encode_ms" in timing and i > 3:
                rows["encode"].append(timing["prev_encode_ms"])
            rows["round trip"].append(wall)
        return rows
    finally:
        _stop(server)


def rest_latency(policy: Path, n: int, flags: list[str]) -> dict[str, list[float]]:
    import json_numpy
    import requests

    server = _server(policy, "--protocol", "openvla", *flags)
    rows: dict[str, list[float]] = {k: [] for k in COLUMNS}
    try:
        with requests.Session() as session:
            for i in range(n + 3):
                req = _request(i)
                body = json_numpy.dumps({"image": req["observation/image"], "instruction": req["prompt"]})
                t0 = time.perf_counter()
                response = session.post(f"http://127.0.0.1:{server.port}/act", data=body, timeout=120)
                json_numpy.loads(response.text)
                wall = (time.perf_counter() - t0) * 1000
                if i < 3:
                    continue
                parts = dict(p.split(";dur=") for p in response.headers["Server-Timing"].split(", "))
                for k in ("decode", "preprocess", "model", "encode"):
                    rows[k].append(float(parts[k]))
                rows["hand-off"].append(float(parts["infer"]) - float(parts["preprocess"]) - float(parts["model"]))
                rows["round trip"].append(wall)
        return rows
    finally:
        _stop(server)


def concurrent(policy: Path, clients: int, per_client: int, max_batch: int, flags: list[str]) -> tuple[float, float]:
    """(requests/s, p50 round trip ms) of ``clients`` clients at once."""
    from openpi_client.websocket_client_policy import WebsocketClientPolicy

    server = _server(policy, "--max-batch", str(max_batch), *flags)
    walls: list[float] = []
    lock = threading.Lock()
    try:
        conns = [WebsocketClientPolicy("127.0.0.1", server.port) for _ in range(clients)]
        for c in conns:
            c.infer(_request(0))  # warm-up

        def drive(c, k: int) -> None:
            for i in range(per_client):
                t0 = time.perf_counter()
                c.infer(_request(100 * k + i))
                with lock:
                    walls.append((time.perf_counter() - t0) * 1000)

        threads = [threading.Thread(target=drive, args=(c, k)) for k, c in enumerate(conns)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        return clients * per_client / elapsed, statistics.median(walls)
    finally:
        _stop(server)


def tiny_models(out: Path) -> dict[str, tuple[Path, list[str]]]:
    from rlinf_core.builtin.toy_policy import TinyVLAPolicy
    from rlinf_policy_openpi.make_tiny import make_tiny as make_pi0
    from rlinf_policy_openpi.policy import OpenPIPolicy
    from rlinf_policy_openvla.make_tiny import make_tiny as make_oft

    torch.manual_seed(0)
    TinyVLAPolicy(action_dim=7, num_action_chunks=8, state_dim=8).save_pretrained(out / "toy")
    make_oft(out / "oft", kind="oft")
    make_pi0(out / "pi0_released", state_dim=8, action_dim=7)
    OpenPIPolicy(str(out / "pi0_released"), action_dim=7, num_steps=10).save_pretrained(out / "pi0")
    return {
        "TinyVLAPolicy (toy)": (out / "toy", []),
        "tiny OpenVLA-OFT": (out / "oft", []),
        "tiny π0 (10 steps)": (out / "pi0", []),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--clients", type=int, default=4)
    opts = parser.parse_args()
    flags = ["--device", opts.device]
    print(
        f"device {opts.device} ({torch.cuda.get_device_name() if opts.device.startswith('cuda') else 'CPU'}), "
        f"torch threads {torch.get_num_threads()}, {opts.requests} requests after 3 warm-up\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        models = tiny_models(Path(tmp))
        print("| model | protocol | " + " | ".join(f"{c} p50 / p95" for c in COLUMNS) + " (ms) |")
        print("|---|---|" + "---|" * len(COLUMNS))
        runs = [(name, "openpi", path) for name, (path, _) in models.items()]
        runs.append(("tiny OpenVLA-OFT", "openvla REST", models["tiny OpenVLA-OFT"][0]))
        for name, protocol, path in runs:
            rows = (openpi_latency if protocol == "openpi" else rest_latency)(path, opts.requests, flags)
            cells = " | ".join(f"{_pct(v, 50):.2f} / {_pct(v, 95):.2f}" for v in rows.values())
            print(f"| {name} | {protocol} | {cells} |", flush=True)
        print(f"\n{opts.clients} openpi clients at once, {max(4, opts.requests // 2)} requests each:\n")
        print("| model | max-batch 1: req/s, p50 ms | max-batch K: req/s, p50 ms | throughput ratio |")
        print("|---|---|---|---|")
        for name in ("TinyVLAPolicy (toy)", "tiny OpenVLA-OFT"):
            path = models[name][0]
            rounds: dict[int, list[tuple[float, float]]] = {1: [], opts.clients: []}
            for _ in range(3):  # alternating rounds, medians: load on a shared machine hits both alike
                for batch in rounds:
                    rounds[batch].append(concurrent(path, opts.clients, max(4, opts.requests // 2), batch, flags))
            one, many = (
                (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for v in rounds.values()
            )
            print(
                f"| {name} | {one[0]:.1f}, {one[1]:.1f} | {many[0]:.1f}, {many[1]:.1f} | {many[0] / one[0]:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
