"""A remote eval on a network that misbehaves: the server is killed mid-eval and restarted (the eval finishes with
every episode counted once), answers slower than the timeout, sends malformed replies or errors, or disagrees with
the env (metadata, keys, image size): each of the last is one line naming the server, before any env step when it
can be known then. Waits carry 3x margins or more (a loaded CI machine)."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from tests.serve.conftest import REACH_MAPPING, serving

from rlinf_core.builtin.toy_env import ReachEnv
from rlinf_core.builtin.toy_policy import TinyVLAPolicy
from rlinf_core.contracts.policy import Policy
from rlinf_core.remote.errors import RemoteServerError
from rlinf_core.remote.policy import RemotePolicy
from rlinf_core.rl.evaluation import eval_passes
from rlinf_core.serve.codecs import msgpack_dumps
from rlinf_core.serve.loading import LoadedPolicy
from rlinf_core.serve.mapping import load_mapping
from rlinf_core.serve.runner import InferenceSettings, PolicyRunner
from rlinf_core.serve.websocket_server import OpenPIWebsocketServer


def _env() -> ReachEnv:
    return ReachEnv(num_envs=6, is_eval=True, auto_reset=True, max_episode_steps=16, trials_per_task=3)


def _by_state(records: list[dict]) -> list[dict]:
    return sorted(records, key=lambda r: r["reset_state_id"])


def _local_records(reach: Path) -> list[dict]:
    local = TinyVLAPolicy.from_pretrained(reach / "policy").eval()
    return eval_passes(_env(), local, "cpu", passes=1, do_sample=False, temperature=1.0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ killed and restarted
def _crash(server: OpenPIWebsocketServer) -> None:
    """What a client sees of a server killed with SIGKILL: every connection reset (no close handshake), nothing
    listening on the port. (In this process: a second ``rlinf serve`` start takes 10-30 s on a loaded CI machine.)"""

    async def die() -> None:
        server._server.close(close_connections=False)
        for connection in list(server._server.connections):
            connection.transport.abort()
        await server._server.wait_closed()

    asyncio.run_coroutine_threadsafe(die(), server._loop).result(timeout=60)
    server._loop.call_soon_threadsafe(server._loop.stop)
    server._thread.join(timeout=60)
    server.runner.close()


def test_a_server_killed_mid_eval_and_restarted_leaves_every_episode_counted_once(reach):
    want = _local_records(reach)
    servers = [_in_process_server(TinyVLAPolicy.from_pretrained(reach / "policy").eval(), reach)]
    port = servers[0].port
    policy = _remote(port, reach, timeout_s=30, reconnect_s=180)
    act, calls = policy.act, []

    def restart() -> None:
        time.sleep(1.0)  # down for a second: the client's first reconnects are refused
        servers.append(_in_process_server(TinyVLAPolicy.from_pretrained(reach / "policy").eval(), reach, port))

    def act_then_kill(obs, **kw):  # after the 3rd chunk (episodes in flight, some finished): the server dies
        out = act(obs, **kw)
        calls.append(len(obs))
        if len(calls) == 3:
            _crash(servers[0])
            threading.Thread(target=restart, daemon=True).start()
        return out

    policy.act = act_then_kill
    try:
        got = eval_passes(_env(), policy, "cpu", passes=1, do_sample=False, temperature=1.0)
        restarts = policy.restarts
        policy.close()
    finally:
        if len(calls) < 3:
            _crash(servers[0])
        for server in servers[1:]:
            server.stop()
            server.runner.close()
    assert len(servers) == 2 and restarts == 1
    assert sorted(r["reset_state_id"] for r in got) == list(range(9)), "each initial state once"
    assert _by_state(got) == _by_state(want), "the restarted episodes ran as a local eval runs them"


# ------------------------------------------------------------------ slower than the timeout
class SlowPolicy(Policy):
    """Reach actions of a TinyVLAPolicy, after sleeping ``delays[i]`` seconds on its i-th call (0 past the list)."""

    def __init__(self, inner: Policy, delays: list[float]) -> None:
        super().__init__()
        self.inner, self.delays, self.calls = inner, delays, 0
        self.action_dim, self.num_action_chunks = inner.action_dim, inner.num_action_chunks

    def act(self, obs, *, do_sample=True, temperature=1.0):
        delay = self.delays[self.calls] if self.calls < len(self.delays) else 0.0
        self.calls += 1
        time.sleep(delay)
        return self.inner.act(obs, do_sample=do_sample, temperature=temperature)


def _in_process_server(policy: Policy, reach: Path, port: int = 0) -> OpenPIWebsocketServer:
    mapping = load_mapping(str(reach / "mapping.yaml"))
    runner = PolicyRunner(LoadedPolicy(policy, "export", "-"), mapping, InferenceSettings())
    return OpenPIWebsocketServer(runner, "127.0.0.1", port).start()


def _remote(port: int, reach: Path, **kw) -> RemotePolicy:
    settings = {"action_dim": 2, "num_action_chunks": 4, "mapping": str(reach / "mapping.yaml"), **kw}
    return RemotePolicy(f"ws://127.0.0.1:{port}", **settings)


def test_a_reply_slower_than_the_timeout_restarts_the_episodes_then_a_server_always_slower_stops_the_eval(reach):
    inner = TinyVLAPolicy.from_pretrained(reach / "policy").eval()
    server = _in_process_server(SlowPolicy(inner, [0.0, 0.0, 10.0]), reach)  # the 3rd request: 10 s
    try:
        policy = _remote(server.port, reach, timeout_s=3.0, reconnect_s=60)
        got = eval_passes(_env(), policy, "cpu", passes=1, do_sample=False, temperature=1.0)
        assert policy.restarts == 1
        policy.close()
    finally:
        server.stop()
        server.runner.close()
    assert _by_state(got) == _by_state(_local_records(reach))

    server = _in_process_server(SlowPolicy(inner, [4.0] * 3), reach)
    env = _env()
    try:
        policy = _remote(server.port, reach, timeout_s=1.2, retries=1, reconnect_s=60)
        with pytest.raises(RemoteServerError) as info:
            eval_passes(env, policy, "cpu", passes=1, do_sample=False, temperature=1.0)
        policy.close()
    finally:
        server.stop()
        server.runner.close()
    assert str(info.value) == (
        f"remote policy ws://127.0.0.1:{server.port}: no reply within 1.2 s (timeout_s) (2 times in a row; retries: 1)"
    )
    assert env.num_steps_taken == 0


# ------------------------------------------------------------------ malformed replies and error replies
class FakeServer:
    """An openpi-protocol server on its own event loop that sends ``metadata``, then ``reply`` to every request."""

    def __init__(self, reply: bytes | str, metadata: bytes | None = None) -> None:
        from websockets.asyncio.server import serve

        self.reply, self.metadata = reply, metadata if metadata is not None else msgpack_dumps({})
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def handler(ws) -> None:
            await ws.send(self.metadata)
            async for _ in ws:
                await ws.send(self.reply)

        async def start() -> None:
            self.server = await serve(handler, "127.0.0.1", 0, compression=None)
            self.port = self.server.sockets[0].getsockname()[1]
            ready.set()

        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(start(), self.loop)
        assert ready.wait(timeout=60)

    def stop(self) -> None:
        async def close() -> None:
            self.server.close()
            await self.server.wait_closed()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=60)


TRACEBACK = 'Traceback (most recent call last):\n  File "policy.py", line 3, in infer\nValueError: boom\n'


@pytest.mark.parametrize(
    "reply, message",
    [
        (b"\xc1not msgpack", "malformed reply: the reply is not msgpack-numpy"),
        (msgpack_dumps({"action": np.zeros((4, 2), np.float32)}), "malformed reply: expected a dict with 'actions'"),
        (msgpack_dumps({"actions": "left"}), "malformed reply: actions must be a numeric array, got str"),
        (msgpack_dumps({"actions": np.zeros((4, 3), np.float32)}), "the server answered actions [4, 3], the env takes"),
        (
            msgpack_dumps({"actions": np.full((4, 2), np.nan, np.float32)}),
            "the server answered NaN or infinite actions",
        ),
        (TRACEBACK, "the server answered with an error: ValueError: boom"),  # openpi's server sends its traceback
    ],
    ids=["not-msgpack", "no-actions", "actions-not-numbers", "wrong-action-size", "nan", "traceback"],
)
def test_a_malformed_or_error_reply_stops_the_eval_in_one_line_naming_the_server(reach, reply, message):
    server = FakeServer(reply)
    env = _env()
    try:
        policy = _remote(server.port, reach, timeout_s=30)
        with pytest.raises(RemoteServerError) as info:
            eval_passes(env, policy, "cpu", passes=1, do_sample=False, temperature=1.0)
        policy.close()
    finally:
        server.stop()
    text = str(info.value)
    assert text.startswith(f"remote policy ws://127.0.0.1:{server.port}: ") and message in text and "\n" not in text
    assert env.num_steps_taken == 0


# ------------------------------------------------------------------ the server disagrees with the env
def _first_error(url_policy: RemotePolicy, env: ReachEnv, **kw) -> str:
    with pytest.raises(RemoteServerError) as info:
        eval_passes(env, url_policy, "cpu", passes=1, do_sample=kw.get("do_sample", False), temperature=1.0)
    url_policy.close()
    assert env.num_steps_taken == 0, "refused before the first env step"
    return str(info.value).split(": ", 1)[1]


def test_metadata_keys_and_image_sizes_that_disagree_with_the_env_are_refused_before_the_first_step(reach):
    mapping = str(reach / "mapping.yaml")
    with serving(reach / "policy_3d", "openpi", "--mapping", mapping) as server:
        got = _first_error(_remote(server.port, reach), _env())
    assert got == "the server's policy outputs 3-D actions (its metadata), the env takes 2"

    with serving(reach / "policy", "openpi", "--mapping", mapping, "--image-size", "64x64") as server:
        assert _first_error(_remote(server.port, reach), _env()) == (
            "the server takes 64x64 images, this eval sends 32x32 (set image_size)"
        )
        assert _first_error(_remote(server.port, reach, num_action_chunks=8), _env()) == (
            "the server returns chunks of 4 actions, this eval executes 8 per request (lower num_action_chunks)"
        )
        assert _first_error(_remote(server.port, reach), _env(), do_sample=True).startswith(
            "the server acts greedily but the eval asks for do_sample=True (set rollout.do_sample_eval: false"
        )
        policy = _remote(server.port, reach, image_size=64)  # resized as openpi's clients do: served
        assert policy.act(_env().reset(), do_sample=False).actions.shape == (6, 4, 2)
        policy.close()

    state_only = reach / "state_only.yaml"
    state_only.write_text(yaml.safe_dump({**REACH_MAPPING, "state": ["observation/proprio"]}))
    with serving(reach / "policy", "openpi", "--mapping", mapping) as server:
        got = _first_error(RemotePolicy(f"ws://127.0.0.1:{server.port}", action_dim=2, num_action_chunks=4,
                                        mapping=str(state_only)), _env())  # fmt: skip
    assert got.startswith(
        "the server answered with an error: rlinf serve: bad request: missing key 'observation/state'"
    )


def test_an_api_key_the_server_refuses_and_a_server_that_never_answers_are_one_line(reach):
    mapping = str(reach / "mapping.yaml")
    with serving(reach / "policy", "openpi", "--mapping", mapping, "--api-key", "s3cret") as server:
        assert _first_error(_remote(server.port, reach), _env()).startswith("the server refused the API key (HTTP 401")
        policy = _remote(server.port, reach, api_key="s3cret")
        assert policy.act(_env().reset(), do_sample=False).actions.shape == (6, 4, 2)
        policy.close()
    port = _free_port()  # nothing listens there
    t0 = time.monotonic()
    got = _first_error(_remote(port, reach, reconnect_s=1.0), _env())
    assert got.startswith("unreachable for 1 s") and "connection refused" in got and time.monotonic() - t0 < 30
    os.environ.pop("RLINF_REMOTE_API_KEY", None)
