"""Many requests to one server at once: a pool of connections on an event loop of its own.

The loop runs on a daemon thread, so the connections answer the server's keep-alive pings while the envs step; a call
from the eval hands it all of one batch's requests at once and waits (two thread hand-offs per batch, not per
request). Each connection carries one request at a time; up to ``connections`` are open.

A failure closes every connection (an abandoned request may still be answered later on its connection) and is
raised as :class:`~rlinf_core.remote.transport.ConnectionLost` or
:class:`~rlinf_core.remote.transport.ServerRefused`; :meth:`RemoteClient.reconnect` opens a connection again, waiting
with a doubling backoff (0.25 s up to 5 s between tries) for at most ``reconnect_s``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Coroutine
from typing import Any

from rlinf_core.remote.transport import ConnectionLost, Endpoint, connection

log = logging.getLogger("rlinf.remote")

FIRST_BACKOFF_S = 0.25
MAX_BACKOFF_S = 5.0


class RemoteClient:
    """Connections to one server.

    Args:
        endpoint: the server's url, API key and reply size limit.
        timeout_s: seconds a request may take, from sending it to its whole reply (also the handshake's limit).
        connections: connections open at once, so requests in flight at once.
        reconnect_s: how long :meth:`connect` / :meth:`reconnect` keep trying a server that does not answer.
    """

    def __init__(self, endpoint: Endpoint, timeout_s: float, connections: int, reconnect_s: float) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.connections = connections
        self.reconnect_s = reconnect_s
        self.metadata: dict = {}
        self.latencies_ms: list[float] = []  # wall time of each answered request, send to decoded reply
        self._open: list = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ called from the eval's thread
    def connect(self) -> dict:
        """Open the first connection (waiting up to ``reconnect_s`` for the server); its metadata (``{}`` over REST)."""
        return self._call(self._reopen())

    def reconnect(self) -> dict:
        """After a lost connection: open one again (up to ``reconnect_s``); the new metadata."""
        return self._call(self._reopen())

    def infer(self, payloads: list[dict]) -> list[Any]:
        """The replies to ``payloads``, in order, sent over up to ``connections`` connections at once."""
        return self._call(self._infer_all(payloads))

    def close(self) -> None:
        if self._loop is None:
            return
        self._call(self._close_all())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self._loop = self._thread = None

    def _call(self, coro: Coroutine) -> Any:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name="rlinf-remote-policy", daemon=True)
            self._thread.start()
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    # ------------------------------------------------------------------ on the loop
    async def _open_one(self):
        conn = connection(self.endpoint, self.timeout_s)
        self.metadata = await conn.open() or self.metadata
        self._open.append(conn)
        return conn

    async def _reopen(self) -> dict:
        await self._close_all()
        deadline = time.monotonic() + self.reconnect_s
        delay, tries = FIRST_BACKOFF_S, 0
        while True:
            tries += 1
            try:
                await self._open_one()
                return self.metadata
            except ConnectionLost as exc:
                if time.monotonic() + delay > deadline:
                    raise ConnectionLost(f"unreachable for {self.reconnect_s:g} s ({tries} tries): {exc}") from None
                if tries == 1:
                    log.warning("waiting for the policy server at %s (%s)", self.endpoint.url, exc)
                await asyncio.sleep(delay)
                delay = min(2 * delay, MAX_BACKOFF_S)

    async def _infer_all(self, payloads: list[dict]) -> list[Any]:
        want = min(len(payloads), self.connections)
        try:
            if len(self._open) < want:
                await asyncio.gather(*(self._open_one() for _ in range(want - len(self._open))))
        except BaseException:
            await self._close_all()
            raise
        results: list[Any] = [None] * len(payloads)
        order = iter(range(len(payloads)))

        async def drive(conn) -> None:
            for i in order:  # shared: each connection takes the next request when it is free
                t0 = time.perf_counter()
                try:
                    results[i] = await asyncio.wait_for(conn.infer(payloads[i]), self.timeout_s)
                except asyncio.TimeoutError:
                    raise ConnectionLost(f"no reply within {self.timeout_s:g} s (timeout_s)") from None
                self.latencies_ms.append((time.perf_counter() - t0) * 1000)

        tasks = [asyncio.ensure_future(drive(c)) for c in self._open[:want]]
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        failed = [t for t in done if t.exception() is not None]
        if failed:
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            await self._close_all()
            raise failed[0].exception()
        return results

    async def _close_all(self) -> None:
        conns, self._open = self._open, []
        for conn in conns:
            await conn.close()
