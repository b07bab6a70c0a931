"""openpi's websocket policy protocol (openpi: src/openpi/serving/websocket_policy_server.py).

On connect the server sends the metadata dict (msgpack-numpy); then each binary message is an observation
dict and the reply is ``{"actions": float32 [H, D], "server_timing": {...}}``. With ``--max-batch N`` a message may
also hold ``batch_size`` = n <= N observations (arrays stacked on a first axis, the prompt a list; metadata
``batched_requests``), answered with actions ``[n, H, D]``: what rlinf's remote policy sends for many envs.
``GET /healthz`` answers ``OK``. Unlike openpi's server, an error does not close the connection: the reply to a
bad request is a text frame with a one-line cause (openpi-client raises it as ``RuntimeError``) and the next
request is served; a client that disconnects or crashes only ends its own connection.

With an API key, the handshake must carry ``Authorization: Api-Key <key>`` (what openpi-client's
``WebsocketClientPolicy(api_key=...)`` sends), else HTTP 401. Over ``max_connections`` a handshake gets HTTP 503.
A connection buffers at most one received request while the model works on its previous one (``max_queue=1``).
"""

from __future__ import annotations

import asyncio
import http
import logging
import threading
import time

import torch

from rlinf_core.serve.codecs import msgpack_dumps, msgpack_loads, msgpack_packer
from rlinf_core.serve.errors import BadRequest, serve_dependency
from rlinf_core.serve.mapping import to_observations
from rlinf_core.serve.runner import PolicyFailure, PolicyRunner
from rlinf_core.serve.security import UNAUTHORIZED, ConnectionSlots, ServerLimits, clip

log = logging.getLogger("rlinf.serve")


class OpenPIWebsocketServer:
    """Serves ``runner`` over openpi's protocol.

    Args:
        runner: the policy runner (shared by every connection).
        host: address to bind.
        port: TCP port (0: any free port; see :attr:`port` once started).
        limits: message size, connection cap and API key (default :class:`ServerLimits`).
    """

    def __init__(
        self, runner: PolicyRunner, host: str = "127.0.0.1", port: int = 8000, limits: ServerLimits | None = None
    ):
        self.runner = runner
        self.host = host
        self.port = port
        self.limits = limits or ServerLimits()
        self._slots = ConnectionSlots(self.limits.max_connections)
        self._metadata = msgpack_dumps(runner.metadata("openpi"))
        self._server = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    async def _handle(self, ws) -> None:
        websockets = serve_dependency("websockets")
        peer = ws.remote_address
        if not self._slots.take():  # raced past the handshake check
            await ws.close(1013, clip(self._slots.full_message(), 120))
            return
        log.info("connection from %s", peer)
        prev_encode_ms = None
        pack = msgpack_packer().pack
        try:
            await ws.send(self._metadata)
            while True:
                message = await ws.recv()
                t0 = time.perf_counter()
                try:
                    if isinstance(message, str):
                        raise BadRequest("send the observation as a binary msgpack frame (openpi-client's packer)")
                    request = msgpack_loads(message)
                    t1 = time.perf_counter()
                    obs, batched = to_observations(request, self.runner.mapping, self.runner.settings.max_batch)
                    self.runner.check(obs)
                    t2 = time.perf_counter()
                    result = self.runner.run_inline(obs, batched)
                    if result is None:
                        result = await asyncio.wrap_future(self.runner.submit(obs, batched))
                    actions, timing = result
                except BadRequest as exc:
                    await ws.send(f"rlinf serve: bad request: {clip(exc)}")
                    continue
                except PolicyFailure as exc:
                    await ws.send(f"rlinf serve: the policy failed on this request: {clip(exc)}")
                    continue
                except RecursionError:
                    await ws.send("rlinf serve: bad request: the request is nested too deeply")
                    continue
                except Exception as exc:  # noqa: BLE001 - a bug answers this request, logged with its traceback
                    log.exception("request from %s failed", peer)
                    await ws.send(f"rlinf serve: internal error on this request: {clip(type(exc).__name__)}")
                    continue
                t3 = time.perf_counter()
                server_timing = {
                    "decode_ms": (t1 - t0) * 1000,
                    "preprocess_ms": (t2 - t1) * 1000,
                    **timing,
                    "infer_ms": (t3 - t1) * 1000,
                }
                if prev_encode_ms is not None:
                    server_timing["prev_encode_ms"] = prev_encode_ms
                payload = pack({"actions": actions, "server_timing": server_timing})
                prev_encode_ms = (time.perf_counter() - t3) * 1000
                await ws.send(payload)
        except websockets.ConnectionClosed:
            log.info("connection from %s closed", peer)
        finally:
            self._slots.give()

    def _before_handshake(self, connection, request):
        if request.path == "/healthz":
            return connection.respond(http.HTTPStatus.OK, "OK\n")
        if not self.limits.authorized(request.headers.get("Authorization")):
            return connection.respond(http.HTTPStatus.UNAUTHORIZED, f"rlinf serve: {UNAUTHORIZED}\n")
        if self._slots.open >= self._slots.limit:
            busy = f"rlinf serve: {self._slots.full_message()}\n"
            return connection.respond(http.HTTPStatus.SERVICE_UNAVAILABLE, busy)
        return None

    async def _start(self) -> None:
        serve = serve_dependency("websockets.asyncio.server").serve
        self._server = await serve(
            self._handle,
            self.host,
            self.port,
            compression=None,
            max_size=self.limits.max_bytes,
            max_queue=1,
            open_timeout=self.limits.idle_timeout_s,
            process_request=self._before_handshake,
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def serve_forever(self) -> None:

        with torch.no_grad():  # the loop's thread may run a fast model inline (PolicyRunner.run_inline)
            await self._start()
            await self._server.serve_forever()

    # ------------------------------------------------------------------ in a background thread (tests, benchmarks)
    def start(self) -> OpenPIWebsocketServer:
        """Serve from a daemon thread; returns once the port is bound."""
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:

            torch.set_grad_enabled(False)  # this thread's only: it may run a fast model inline
            self._loop = asyncio.new_event_loop()
            try:
                self._loop.run_until_complete(self._start())
            except BaseException as exc:  # noqa: BLE001 - re-raised in start()
                errors.append(exc)
                ready.set()
                return
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="rlinf-serve-ws", daemon=True)
        self._thread.start()
        ready.wait()
        if errors:
            raise errors[0]
        return self

    def stop(self) -> None:
        if self._loop is None or self._server is None:
            return

        async def shutdown() -> None:
            self._server.close()
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
