"""One connection to a policy server, on asyncio: openpi's websocket protocol or OpenVLA's REST ``POST /act``.

- openpi (openpi: src/openpi/serving/websocket_policy_server.py; packages/openpi-client/.../websocket_client_policy.py):
  the handshake carries ``Authorization: Api-Key <key>`` when a key is set, the server's first message is its
  metadata (msgpack-numpy), then each binary message is one request and the reply ``{"actions": [H, D], ...}``; a
  text message is the server's error (openpi's server sends its traceback, ``rlinf serve`` one line).
- OpenVLA REST (openvla: vla-scripts/deploy.py): ``POST /act`` with a json-numpy body, answered with the json-numpy
  action (``[D]`` or ``[H, D]``; a JSON string holding json-numpy when the request was double-encoded); deploy.py
  answers a failed request with HTTP 200 and the JSON string ``"error"``, ``rlinf serve`` with 4xx / 5xx and
  ``{"error": ...}``. Written on asyncio streams (HTTP/1.1 keep-alive, Content-Length or chunked replies).

Failures are sorted for the caller: :class:`ConnectionLost` (the server went away or did not answer: reconnect
and retry), :class:`ServerRefused` (an error reply, a malformed reply, a refused key: retrying cannot help).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from rlinf_core.remote.errors import remote_dependency
from rlinf_core.serve.codecs import json_numpy_dumps, json_numpy_loads, msgpack_dumps, msgpack_loads
from rlinf_core.serve.errors import BadRequest
from rlinf_core.serve.security import clip

PROTOCOLS = {"ws": "openpi", "wss": "openpi", "http": "openvla", "https": "openvla"}


class ConnectionLost(Exception):
    """The server could not be reached, closed the connection, or did not answer in time (worth a reconnect)."""


class ServerRefused(Exception):
    """The server answered, but not with actions (an error, a malformed reply, a refused key)."""


@dataclass(frozen=True)
class Endpoint:
    """Where the server is and how to talk to it.

    Args:
        url: ``ws://host:port`` / ``wss://`` (openpi's protocol) or ``http://host:port[/act]`` / ``https://``
            (OpenVLA's REST protocol; the path defaults to ``/act``).
        api_key: sent as ``Authorization: Api-Key <key>`` (openpi-client's header; ``rlinf serve`` takes it on both
            protocols). None: no header.
        max_message_bytes: largest reply accepted.
    """

    url: str
    api_key: str | None = None
    max_message_bytes: int = 64 * 2**20

    @property
    def protocol(self) -> str:
        return PROTOCOLS[urlsplit(self.url).scheme]

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Api-Key {self.api_key}"} if self.api_key else {}


def check_url(url: str) -> str:
    """The url, or ``ValueError`` (one line) for one no protocol here speaks."""
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in PROTOCOLS or not parts.hostname:
        raise ValueError(
            f"url {url!r}: give ws://HOST:PORT (openpi's websocket protocol: openpi's serve_policy.py, rlinf serve) "
            "or http://HOST:PORT (OpenVLA's REST /act: its deploy.py, rlinf serve --protocol openvla)"
        )
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise ValueError(f"url {url!r}: the port is not a number") from None
    return url


def _server_error_line(text: str) -> str:
    """The line of an error reply that says what went wrong (a traceback's last line: openpi's server sends one)."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    if not lines:
        return "(an empty error message)"
    last = lines[-1] if lines[0].startswith("Traceback") else lines[0]
    return clip(last, 300)


def _decode_msgpack(data: bytes) -> Any:

    try:
        return msgpack_loads(data)
    except BadRequest as exc:
        raise ServerRefused(f"malformed reply: {str(exc).replace('the request', 'the reply')}") from None


class WebsocketConnection:
    """openpi's protocol: metadata on connect, one msgpack-numpy request / reply at a time."""

    def __init__(self, endpoint: Endpoint, open_timeout_s: float) -> None:
        self.endpoint = endpoint
        self.open_timeout_s = open_timeout_s
        self._ws = None
        self.metadata: dict = {}

    async def open(self) -> dict:
        client = remote_dependency("websockets.asyncio.client")
        websockets = remote_dependency("websockets")
        try:
            self._ws = await client.connect(
                self.endpoint.url,
                additional_headers=self.endpoint.headers or None,
                compression=None,  # as openpi-client: images do not compress, deflate costs milliseconds
                max_size=self.endpoint.max_message_bytes,
                open_timeout=self.open_timeout_s,
                close_timeout=1,
            )
            first = await asyncio.wait_for(self._ws.recv(), self.open_timeout_s)
        except websockets.InvalidStatus as exc:
            status = exc.response.status_code
            body = exc.response.body.decode("utf-8", "replace") if exc.response.body else ""
            if status in (401, 403):
                raise ServerRefused(f"the server refused the API key (HTTP {status}: set api_key) {clip(body, 120)}")
            raise ConnectionLost(f"the handshake got HTTP {status} {clip(body.strip(), 120)}") from None
        except (OSError, asyncio.TimeoutError, websockets.WebSocketException, EOFError) as exc:
            await self.close()
            raise ConnectionLost(_describe(exc)) from None
        if isinstance(first, str):
            raise ServerRefused(f"the server sent text instead of its metadata: {_server_error_line(first)}")
        metadata = _decode_msgpack(first)
        if not isinstance(metadata, dict):
            raise ServerRefused(f"the server's metadata is a {type(metadata).__name__}, not a dict")
        self.metadata = metadata
        return metadata

    async def infer(self, payload: dict) -> Any:

        websockets = remote_dependency("websockets")
        try:
            await self._ws.send(msgpack_dumps(payload))
            reply = await self._ws.recv()
        except (OSError, websockets.WebSocketException, EOFError) as exc:
            raise ConnectionLost(_describe(exc)) from None
        if isinstance(reply, str):
            raise ServerRefused(f"the server answered with an error: {_server_error_line(reply)}")
        reply = _decode_msgpack(reply)
        if not isinstance(reply, dict) or "actions" not in reply:
            got = sorted(map(str, reply)) if isinstance(reply, dict) else type(reply).__name__
            raise ServerRefused(f"malformed reply: expected a dict with 'actions', got {clip(got, 120)}")
        return reply

    async def close(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            ws.transport.abort()  # an abandoned request may still be on its way: no close handshake to wait for


class RestConnection:
    """OpenVLA's REST protocol over one HTTP/1.1 keep-alive connection."""

    def __init__(self, endpoint: Endpoint, open_timeout_s: float) -> None:
        self.endpoint = endpoint
        self.open_timeout_s = open_timeout_s
        parts = urlsplit(endpoint.url)
        self.host, self.tls = parts.hostname, parts.scheme == "https"
        self.port = parts.port or (443 if self.tls else 80)
        self.path = parts.path if parts.path not in ("", "/") else "/act"
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.used = False  # a request was answered on this connection (an idle server may have closed it since)
        self.metadata: dict = {}

    async def open(self) -> dict:
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=ssl.create_default_context() if self.tls else None),
                self.open_timeout_s,
            )
        except (OSError, asyncio.TimeoutError) as exc:
            raise ConnectionLost(_describe(exc)) from None
        self.used = False
        return {}

    async def infer(self, payload: dict) -> Any:

        body = json_numpy_dumps(payload).encode("utf-8")
        if self._writer is None:
            await self.open()
        try:
            status, headers, data = await self._exchange(body)
        except ConnectionLost:
            if not self.used:
                raise
            await self.close()  # a kept-alive connection the server closed while idle (uvicorn: after 5 s): reopen
            await self.open()
            status, headers, data = await self._exchange(body)
        self.used = True
        if headers.get("connection", "").lower() == "close":
            await self.close()
        text = data.decode("utf-8", "replace")
        if status != 200:
            try:
                message = json.loads(text).get("error", text)
            except (ValueError, AttributeError):
                message = text
            if status in (401, 403):
                raise ServerRefused(f"the server refused the API key (HTTP {status}: set api_key)")
            raise ServerRefused(f"the server answered HTTP {status}: {_server_error_line(message)}")
        value = _decode_json_numpy(text)
        if isinstance(value, str):  # deploy.py's reply to a double-encoded request, or its "error"
            if value == "error":
                raise ServerRefused(
                    'the server answered "error" (OpenVLA\'s deploy.py on a request it could not serve; its log '
                    "has the traceback)"
                )
            value = _decode_json_numpy(value)
        return {"actions": value}

    async def _exchange(self, body: bytes) -> tuple[int, dict[str, str], bytes]:
        head = [
            f"POST {self.path} HTTP/1.1",
            f"Host: {self.host}:{self.port}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
            *(f"{k}: {v}" for k, v in self.endpoint.headers.items()),
        ]
        try:
            self._writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
            await self._writer.drain()
            status_line = await self._reader.readline()
            if not status_line:
                raise ConnectionLost("the server closed the connection before answering")
            try:
                status = int(status_line.split()[1])
            except (IndexError, ValueError):
                raise ServerRefused(f"malformed reply: not HTTP ({clip(status_line, 80)!r})") from None
            headers: dict[str, str] = {}
            while (line := await self._reader.readline()) not in (b"\r\n", b"\n", b""):
                key, _, value = line.decode("latin-1").partition(":")
                headers[key.strip().lower()] = value.strip()
            if headers.get("transfer-encoding", "").lower() == "chunked":
                data = await self._chunked()
            else:
                length = int(headers.get("content-length", "0"))
                if length > self.endpoint.max_message_bytes:
                    raise ServerRefused(f"malformed reply: a body of {length} bytes")
                data = await self._reader.readexactly(length)
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            await self.close()
            raise ConnectionLost(_describe(exc)) from None
        return status, headers, data

    async def _chunked(self) -> bytes:
        parts, total = [], 0
        while True:
            size = int((await self._reader.readline()).split(b";")[0].strip(), 16)
            if size == 0:
                await self._reader.readline()
                return b"".join(parts)
            total += size
            if total > self.endpoint.max_message_bytes:
                raise ServerRefused(f"malformed reply: a body over {total} bytes")
            parts.append(await self._reader.readexactly(size))
            await self._reader.readline()

    async def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.transport.abort()


def _decode_json_numpy(text: str) -> Any:

    try:
        return json_numpy_loads(text)
    except BadRequest as exc:
        raise ServerRefused(f"malformed reply: {str(exc).replace('the request body', 'the reply')}") from None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "no answer in time"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is the server running?)"
    if isinstance(exc, asyncio.IncompleteReadError):
        return "the server closed the connection in the middle of a reply"
    text = str(exc).strip() or type(exc).__name__
    return clip(text.splitlines()[0], 200)


def connection(endpoint: Endpoint, open_timeout_s: float) -> WebsocketConnection | RestConnection:
    cls = WebsocketConnection if endpoint.protocol == "openpi" else RestConnection
    return cls(endpoint, open_timeout_s)
