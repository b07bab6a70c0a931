"""OpenVLA's REST deploy protocol (openvla: vla-scripts/deploy.py:91-123).

``POST /act`` with a json-numpy body ``{"image": uint8 [H, W, 3], "instruction": str, "unnorm_key": str?}``
answers the json-numpy action: ``[D]`` for a one-action policy (as OpenVLA's server returns it), ``[C, D]``
for a chunk. The double-encoded form ``{"encoded": json_numpy.dumps(payload)}`` (deploy.py:93-96) is
answered double-encoded too. Unlike deploy.py (HTTP 200 with the JSON string ``"error"``), a bad request
gets HTTP 400 and ``{"error": "<cause>"}``; a failure of the policy HTTP 500. ``GET /healthz`` answers OK.
Timings go in the standard ``Server-Timing`` header. Each connection is served on its own thread
(:class:`http.server.ThreadingHTTPServer`, listen backlog 128); the model runs on the runner's thread.

Every failure is answered: a request the server refuses with 400, an API key missing or wrong with 401 (the key
comes as ``Authorization: Api-Key <key>`` or ``Bearer <key>``), a body over ``--max-message-mb`` with 413 (read and
dropped, so a client that sends the whole body before reading still gets the answer; one sending
``Expect: 100-continue`` gets it before sending), a connection over the cap with 503, a bug with 500
(logged with its traceback); error messages quote at most 300 characters of the request. A connection idle for
10 s (no request line, or fewer body bytes than its Content-Length promised) is closed.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rlinf_core.serve.codecs import json_numpy_dumps, json_numpy_loads
from rlinf_core.serve.errors import BadRequest
from rlinf_core.serve.mapping import to_observation
from rlinf_core.serve.runner import PolicyFailure, PolicyRunner
from rlinf_core.serve.security import UNAUTHORIZED, ConnectionSlots, ServerLimits, clip

log = logging.getLogger("rlinf.serve")


class _CappedHTTPServer(ThreadingHTTPServer):
    """A thread per connection, at most ``slots.limit`` at once; the next connection gets 503 and is closed."""

    request_queue_size = 128  # socketserver's 5 resets clients that connect together
    daemon_threads = True

    def __init__(self, address, handler, slots: ConnectionSlots) -> None:
        self.slots = slots
        super().__init__(address, handler)

    def process_request(self, request, client_address) -> None:
        if not self.slots.take():
            body = json.dumps({"error": self.slots.full_message()}).encode()
            try:
                request.settimeout(1.0)
                request.sendall(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                )
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.give()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.give()

    def handle_error(self, request, client_address) -> None:  # an exception escaped a handler: log, never print
        log.exception("connection from %s failed", client_address)


class OpenVLARestServer:
    """Serves ``runner`` over OpenVLA's REST protocol.

    Args:
        runner: the policy runner.
        host: address to bind.
        port: TCP port (0: any free port; see :attr:`port`).
        limits: body size, connection cap, idle timeout and API key (default :class:`ServerLimits`).
    """

    def __init__(
        self, runner: PolicyRunner, host: str = "127.0.0.1", port: int = 8000, limits: ServerLimits | None = None
    ):
        self.runner = runner
        self.limits = limits or ServerLimits()
        self.max_bytes = self.limits.max_bytes
        slots = ConnectionSlots(self.limits.max_connections)
        self.httpd = _CappedHTTPServer((host, port), self._handler_class(), slots)
        self.port = self.httpd.server_address[1]
        self._thread: threading.Thread | None = None

    def act(self, body: bytes) -> tuple[str, dict[str, float]]:
        """The response body for a request body, and its timings (ms); raises BadRequest / PolicyFailure."""
        t0 = time.perf_counter()
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise BadRequest("the request body is not UTF-8 JSON") from None
        payload = json_numpy_loads(text)
        double = isinstance(payload, dict) and "encoded" in payload
        if double:
            if len(payload) != 1 or not isinstance(payload["encoded"], str):
                raise BadRequest('a double-encoded request is {"encoded": json_numpy.dumps(payload)} alone')
            payload = json_numpy_loads(payload["encoded"])
        if isinstance(payload, dict) and payload.get("unnorm_key") is not None:
            have, given = self.runner.policy.unnorm_key, payload["unnorm_key"]
            if not isinstance(given, str):
                raise BadRequest(f"unnorm_key must be a string, got {type(given).__name__}")
            if given != have:
                raise BadRequest(
                    f"unnorm_key {clip(given, 80)!r}: this server un-normalises with {have!r} "
                    "(restart it with --unnorm-key to serve another dataset's statistics)"
                )
        t1 = time.perf_counter()
        obs = to_observation(payload, self.runner.mapping)
        self.runner.check(obs)
        t2 = time.perf_counter()
        result = self.runner.run_inline(obs)  # this connection's thread waits for the model either way
        actions, timing = result if result is not None else self.runner.submit(obs).result()
        t3 = time.perf_counter()
        action = actions[0] if actions.shape[0] == 1 else actions
        out = json_numpy_dumps(action)
        out = json.dumps(out) if double else out
        t4 = time.perf_counter()
        ms = {
            "decode": (t1 - t0) * 1000,
            "preprocess": (t2 - t1) * 1000,
            "model": timing["model_ms"],
            "infer": (t3 - t1) * 1000,
            "encode": (t4 - t3) * 1000,
        }
        return out, ms

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # headers and body in one segment: written apart, Nagle's algorithm and the client's delayed ACK
            # add ~40 ms to every reply on a kept-alive connection
            disable_nagle_algorithm = True
            wbufsize = 1 << 16

            @property
            def timeout(self) -> float:  # the socket's: idle keep-alives and bodies short of their length are closed
                return server.limits.idle_timeout_s

            def log_message(self, fmt, *args) -> None:  # route access logs through logging, not stderr
                log.debug("%s " + fmt, self.address_string(), *args)

            def _reply(self, status: int, body: str, timing: dict[str, float] | None = None) -> None:
                data = body.encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json" if body[:1] in '{["' else "text/plain")
                self.send_header("Content-Length", str(len(data)))
                if timing:
                    self.send_header("Server-Timing", ", ".join(f"{k};dur={v:.3f}" for k, v in timing.items()))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, message: str) -> None:
                self._reply(status, json.dumps({"error": clip(message, 400)}))

            def _content_length(self) -> int:
                try:
                    return int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    return -1

            def _too_large(self, length: int) -> None:
                self.close_connection = True
                self._error(
                    HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                    f"the body is {length} bytes, over this server's limit of {server.max_bytes} bytes "
                    f"(--max-message-mb {server.limits.max_message_mb})",
                )

            def handle_expect_100(self) -> bool:  # a client that waits for 100 Continue never sends the body
                if self.command == "POST" and self._content_length() > server.max_bytes:
                    self._too_large(self._content_length())
                    return False
                return super().handle_expect_100()

            def _drain(self, length: int) -> None:
                """Read and drop the refused body (at most ``length`` bytes, for at most the idle timeout), so a
                client that sends it all before reading gets the 413, not a connection reset (lingering close)."""
                self.wfile.flush()
                deadline = time.monotonic() + server.limits.idle_timeout_s
                left = length
                try:
                    self.connection.settimeout(1.0)
                    while left > 0 and time.monotonic() < deadline:
                        chunk = self.rfile.read1(min(left, 1 << 20))
                        if not chunk:
                            break
                        left -= len(chunk)
                except OSError:  # the client gave up (or the timeout): nothing more to answer
                    pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path == "/healthz":
                    self._reply(HTTPStatus.OK, "OK\n")
                else:
                    self._error(HTTPStatus.NOT_FOUND, f"no route GET {self.path} (POST /act, GET /healthz)")

            def do_POST(self) -> None:  # noqa: N802
                try:
                    self._post()
                except TimeoutError:  # fewer body bytes than the Content-Length promised
                    self.close_connection = True
                    try:
                        self._error(
                            HTTPStatus.REQUEST_TIMEOUT,
                            f"the body stopped arriving for "
                            f"{server.limits.idle_timeout_s:g} s before its Content-Length was reached",
                        )
                    except OSError:
                        pass
                except ConnectionError:
                    self.close_connection = True  # the client left: nothing to answer
                except Exception:  # noqa: BLE001 - a bug: logged with its traceback, answered with 500
                    log.exception("POST %s failed", clip(self.path, 80))
                    self.close_connection = True
                    self._error(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error (logged by the server)")

            def _post(self) -> None:
                if self.path != "/act":
                    self._error(HTTPStatus.NOT_FOUND, f"no route POST {self.path} (POST /act)")
                    return
                if not server.limits.authorized(self.headers.get("Authorization")):
                    self.close_connection = True
                    self._error(HTTPStatus.UNAUTHORIZED, UNAUTHORIZED)
                    return
                length = self._content_length()
                if length > server.max_bytes:
                    self._too_large(length)
                    self._drain(length)
                    return
                if length <= 0:
                    self.close_connection = True
                    self._error(
                        HTTPStatus.BAD_REQUEST,
                        f"send a JSON body of 1 byte to {server.max_bytes} bytes with its Content-Length",
                    )
                    return
                body = self.rfile.read(length)
                try:
                    out, timing = server.act(body)
                except BadRequest as exc:
                    self._error(HTTPStatus.BAD_REQUEST, f"bad request: {exc}")
                except PolicyFailure as exc:
                    self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"the policy failed on this request: {exc}")
                else:
                    self._reply(HTTPStatus.OK, out, timing)

        return Handler

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def start(self) -> OpenVLARestServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="rlinf-serve-rest", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:  # shutdown() waits for serve_forever, forever if it never ran
            self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=30)
