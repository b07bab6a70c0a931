"""``rlinf serve`` on a shared network: nothing read from a checkpoint runs code, the bind address and API key,
every bad REST request answered, and the limits (connections, idle sockets, prompt length). Real clients
(openpi-client's WebsocketClientPolicy, requests, raw sockets), on 127.0.0.1 only."""

from __future__ import annotations

import json
import socket
import sys
import time
from dataclasses import replace

import numpy as np
import pytest
import torch
import yaml
from tests.serve.conftest import libero_request, serving

from rlinf_core.serve.errors import ServeError
from rlinf_core.serve.loading import LoadOptions, load_policy

requests = pytest.importorskip("requests")
json_numpy = pytest.importorskip("json_numpy")
WebsocketClientPolicy = pytest.importorskip(
    "openpi_client.websocket_client_policy", reason="scripts/install.sh installs openpi-client"
).WebsocketClientPolicy


class _TouchOnUnpickle:
    """Unpickling it calls ``Path.touch(marker)``: proof that loading ran code."""

    def __init__(self, marker) -> None:
        self.marker = marker

    def __reduce__(self):
        from pathlib import Path

        return Path.touch, (Path(self.marker),)


# ------------------------------------------------------------------ security: loading
def test_a_checkpoint_holding_a_pickled_call_is_refused_without_running_it(tmp_path):
    from rlinf_core.builtin.toy_policy import TinyVLAPolicy

    policy = TinyVLAPolicy(action_dim=3, num_action_chunks=4, state_dim=8)
    spec = {"class_path": "TinyVLAPolicy", "init_args": {"action_dim": 3, "num_action_chunks": 4, "state_dim": 8}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"model": {"init_args": {"policy": spec}}}))
    state = {f"policy.{k}": v for k, v in policy.state_dict().items()}
    torch.save({"state_dict": state}, tmp_path / "good.ckpt")  # what Lightning writes: torch.save of a dict
    loaded = load_policy(str(tmp_path / "good.ckpt"), LoadOptions())
    for name, value in policy.state_dict().items():
        assert torch.equal(loaded.policy.state_dict()[name], value), name

    marker = tmp_path / "code-ran"
    torch.save({"state_dict": state, "hyper_parameters": _TouchOnUnpickle(marker)}, tmp_path / "last.ckpt")
    with pytest.raises(ServeError, match="cannot be loaded safely"):
        load_policy(str(tmp_path / "last.ckpt"), LoadOptions())
    assert not marker.exists()


def test_a_config_json_naming_an_unregistered_module_imports_nothing(tmp_path, monkeypatch):
    from rlinf_core.builtin.toy_policy import TinyVLAPolicy
    from rlinf_core.plugins.manager import PluginError, Registry

    marker = tmp_path / "imported"
    (tmp_path / "rlinf_side_effect.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).touch()\nclass Evil:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    export = tmp_path / "export"
    TinyVLAPolicy(action_dim=3, num_action_chunks=4, state_dim=8).save_pretrained(export)
    config = json.loads((export / "config.json").read_text())
    config["rlinf"] = {**config.get("rlinf", {}), "policy": "rlinf_side_effect.Evil"}
    (export / "config.json").write_text(json.dumps(config))
    with pytest.raises(ServeError, match="not a class any installed plugin registered"):
        load_policy(str(export), LoadOptions())
    assert not marker.exists() and "rlinf_side_effect" not in sys.modules

    registry = Registry().load()
    # the forms LightningCLI writes into a run's config.yaml, and the registered short name, still resolve
    for name in ("TinyVLAPolicy", "rlinf_core.builtin.toy_policy.TinyVLAPolicy"):
        assert registry.resolve("policy", name) is TinyVLAPolicy
    with pytest.raises(PluginError, match="not a class any installed plugin registered"):
        registry.resolve("policy", "this.s")
    assert not marker.exists()


# ------------------------------------------------------------------ security: exposure
def test_binds_this_machine_by_default_and_says_how_to_open_it():
    from rlinf_core.serve.command import build_parser, exposure_note

    assert build_parser().parse_args(["--policy", "p"]).host == "127.0.0.1"
    assert "--host 0.0.0.0" in exposure_note("127.0.0.1", None)
    assert "NO API KEY" in exposure_note("0.0.0.0", None) and "NO" not in exposure_note("0.0.0.0", "k")


def test_the_api_key_is_checked_on_both_protocols_as_the_clients_send_it(toy_export, monkeypatch):
    with serving(toy_export, "openpi", "--api-key", "s3cret") as server:
        client = WebsocketClientPolicy("127.0.0.1", server.port, api_key="s3cret")  # Authorization: Api-Key s3cret
        assert client.infer(libero_request(0))["actions"].shape == (4, 3)
        meta = client.get_server_metadata()
        assert "checkpoint" not in meta and str(toy_export) not in json.dumps(meta, default=str)
        for wrong in (None, "guess"):
            with pytest.raises(Exception, match="401"):
                WebsocketClientPolicy("127.0.0.1", server.port, api_key=wrong)
        assert requests.get(f"http://127.0.0.1:{server.port}/healthz", timeout=10).text == "OK\n"

    monkeypatch.setenv("RLINF_SERVE_API_KEY", "from-env")
    payload = json_numpy.dumps(
        {"image": np.zeros((64, 64, 3), np.uint8), "instruction": "go", "state": np.zeros(8, np.float32)}
    )
    with serving(toy_export, "openvla", "--mapping", "openvla-oft") as server:
        url = f"http://127.0.0.1:{server.port}/act"
        for headers in ({}, {"Authorization": "Api-Key nope"}):
            response = requests.post(url, data=payload.replace('"image"', '"full_image"'), headers=headers, timeout=30)
            assert response.status_code == 401 and "Api-Key" in response.json()["error"]
        for scheme in ("Api-Key", "Bearer"):
            response = requests.post(
                url,
                data=payload.replace('"image"', '"full_image"'),
                headers={"Authorization": f"{scheme} from-env"},
                timeout=30,
            )
            assert response.status_code == 200 and json_numpy.loads(response.text).shape == (4, 3)


# ------------------------------------------------------------------ every bad REST request gets an answer
def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_every_bad_rest_request_gets_a_short_json_answer(toy_export):
    image = np.zeros((64, 64, 3), np.uint8)
    arr = json.loads(json_numpy.dumps(image))
    cases = [
        (_deep(100_000), 400, "nested"),
        (json.dumps({"full_image": {**arr, "__numpy__": "", "shape": []}, "instruction": "go"}), 400, "json-numpy"),
        (json.dumps({"full_image": {**arr, "shape": [-8]}, "instruction": "go"}), 400, "shape"),
        (
            json_numpy.dumps({"full_image": image, "instruction": "go", "unnorm_key": np.zeros(3)}),
            400,
            "unnorm_key must be a string",
        ),
        (json_numpy.dumps({"full_image": image, "instruction": "go", "unnorm_key": "k" * 100_000}), 400, "unnorm_key"),
        (json.dumps({f"key{i}": 0 for i in range(20_000)}), 400, "missing key"),
    ]
    with serving(toy_export, "openvla", "--mapping", "openvla-oft") as server:
        url = f"http://127.0.0.1:{server.port}/act"
        for body, status, words in cases:
            response = requests.post(url, data=body, timeout=60)
            assert response.status_code == status and words in response.json()["error"], response.text[:300]
            assert len(response.text) < 1000
        good = json_numpy.dumps({"full_image": image, "instruction": "go", "state": np.zeros(8, np.float32)})
        assert requests.post(url, data=good, timeout=60).status_code == 200


def test_websocket_errors_quote_little_of_the_request_and_refuse_negative_shapes(toy_export):
    import msgpack

    with serving(toy_export, "openpi") as server:
        client = WebsocketClientPolicy("127.0.0.1", server.port)
        with pytest.raises(RuntimeError, match="missing key") as info:
            client.infer({f"key{i}": 0 for i in range(20_000)})
        assert len(str(info.value)) < 1000
        image = {b"__ndarray__": True, b"data": b"\0" * 8, b"dtype": "|u1", b"shape": [-8]}
        client._ws.send(msgpack.packb({"observation/image": image}))
        assert "shape" in client._ws.recv()
        assert client.infer(libero_request(3))["actions"].shape == (4, 3)


def test_a_bug_in_a_handler_is_a_500_and_the_server_keeps_serving(toy_export, monkeypatch):
    with serving(toy_export, "openvla", "--mapping", "openvla-oft") as server:
        monkeypatch.setattr(server, "act", lambda body: 1 / 0)
        response = requests.post(f"http://127.0.0.1:{server.port}/act", data="{}", timeout=30)
        assert response.status_code == 500 and "internal error" in response.json()["error"]
        assert requests.get(f"http://127.0.0.1:{server.port}/healthz", timeout=10).text == "OK\n"


def test_clients_that_connect_together_wait_in_the_listen_queue(toy_export):
    """Before the server accepts anything, 60 connections complete (listen backlog >= 128; it was 5), then all are
    answered."""
    from rlinf_core.serve.command import build_parser, make_server

    opts = build_parser().parse_args(["--policy", str(toy_export), "--protocol", "openvla", "--port", "0"])
    server = make_server(opts)  # bound and listening, not yet accepting
    clients: list[socket.socket] = []
    started = False
    try:
        for _ in range(60):
            clients.append(socket.create_connection(("127.0.0.1", server.port), timeout=1.0))
            clients[-1].sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        server.start()
        started = True
        for sock in clients:
            sock.settimeout(30)
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        for sock in clients:
            sock.close()
        server.stop() if started else server.httpd.server_close()
        server.runner.close()


def _read_all(sock: socket.socket) -> bytes:
    out = b""
    while chunk := sock.recv(4096):
        out += chunk
    return out


def test_idle_sockets_and_a_lying_content_length_are_closed(toy_export):
    with serving(toy_export, "openvla") as server:
        server.limits = replace(server.limits, idle_timeout_s=0.5)
        idle = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        liar = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        liar.sendall(b'POST /act HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"image": ')
        t0 = time.monotonic()
        assert _read_all(idle) == b""  # closed by the server, no request ever sent
        reply = _read_all(liar)
        assert reply.startswith(b"HTTP/1.1 408") and b"Content-Length" in reply and time.monotonic() - t0 < 4
        idle.close()
        liar.close()
        deadline = time.monotonic() + 5
        while server.httpd.slots.open and time.monotonic() < deadline:  # their threads are gone
            time.sleep(0.05)
        assert server.httpd.slots.open == 0
    from rlinf_core.serve.security import ServerLimits

    assert ServerLimits().idle_timeout_s == 10  # the default, as the websocket side's handshake timeout


# ------------------------------------------------------------------ limits
def test_connections_over_the_cap_get_503_on_both_protocols(toy_export):
    with serving(toy_export, "openvla", "--max-connections", "2") as server:
        held = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(2)]
        time.sleep(0.2)
        response = requests.get(f"http://127.0.0.1:{server.port}/healthz", timeout=10)
        assert response.status_code == 503 and "--max-connections" in response.json()["error"]
        for sock in held:
            sock.close()
        deadline = time.monotonic() + 5
        while server.httpd.slots.open and time.monotonic() < deadline:
            time.sleep(0.05)
        assert requests.get(f"http://127.0.0.1:{server.port}/healthz", timeout=10).status_code == 200

    with serving(toy_export, "openpi", "--max-connections", "2") as server:
        clients = [WebsocketClientPolicy("127.0.0.1", server.port) for _ in range(2)]
        with pytest.raises(Exception, match="503"):
            WebsocketClientPolicy("127.0.0.1", server.port)
        clients[0]._ws.close()
        deadline = time.monotonic() + 5
        while server._slots.open > 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert WebsocketClientPolicy("127.0.0.1", server.port).infer(libero_request(1))["actions"].shape == (4, 3)
        assert clients[1].infer(libero_request(2))["actions"].shape == (4, 3)


def test_a_prompt_longer_than_the_context_is_refused_before_the_model_thread():
    from rlinf_policy_openvla.testing import tiny_checkpoint

    path = tiny_checkpoint(kind="openvla")
    image = np.zeros((64, 64, 3), np.uint8)
    with serving(path, "openvla") as server:
        calls = []
        act = server.runner.policy.act
        server.runner.policy.act = lambda *a, **kw: calls.append(1) or act(*a, **kw)
        url = f"http://127.0.0.1:{server.port}/act"
        long_prompt = " ".join(["pick up the red block"] * 2400)  # about 12,000 tokens: 6x the context
        for prompt in (long_prompt, "x" * 10_000_000):
            response = requests.post(url, data=json_numpy.dumps({"image": image, "instruction": prompt}), timeout=60)
            assert response.status_code == 400 and "context" in response.json()["error"], response.text[:300]
        assert not calls
        ok = requests.post(url, data=json_numpy.dumps({"image": image, "instruction": "pick up the block"}), timeout=60)
        assert ok.status_code == 200 and calls == [1]
    with serving(path, "openpi", "--mapping", "openvla") as server:
        client = WebsocketClientPolicy("127.0.0.1", server.port)
        with pytest.raises(RuntimeError, match="context"):
            client.infer({"image": image, "instruction": long_prompt})


def test_a_rest_body_over_the_limit_gets_413_naming_the_limit_even_when_sent_whole(toy_export):
    """A client that sends its whole body before reading (requests) gets the 413, not a broken pipe: the server
    reads and drops the body; one sending ``Expect: 100-continue`` (curl) gets it before sending the body."""
    image = np.zeros((64, 64, 3), np.uint8)
    big = b" " * (3 * 2**20)  # 3 MiB of whitespace: a body over a 1 MiB limit
    with serving(toy_export, "openvla", "--mapping", "openvla-oft", "--max-message-mb", "1") as server:
        url = f"http://127.0.0.1:{server.port}/act"
        response = requests.post(url, data=big, timeout=60)
        assert response.status_code == 413
        assert response.json()["error"] == (
            f"the body is {len(big)} bytes, over this server's limit of {2**20} bytes (--max-message-mb 1)"
        )
        with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
            s.sendall(b"POST /act HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n" % len(big))
            reply = s.recv(4096)
        assert reply.startswith(b"HTTP/1.1 413") and b"--max-message-mb 1" in reply
        good = json_numpy.dumps({"full_image": image, "instruction": "go", "state": np.zeros(8, np.float32)})
        assert requests.post(url, data=good, timeout=60).status_code == 200
