"""OpenVLA's REST deploy protocol (openvla: vla-scripts/deploy.py:91-123).

``POST /act`` with a json-numpy body ``{"image": uint8 [H, W, 3], "instruction": str, "unnorm_key": str?}``
answers the json-numpy action: ``[D]`` for a one-action policy (as OpenVLA's server returns it), ``[C, D]``
for a chunk. The double-encoded form ``{"encoded": json_numpy.dumps(payload)}`` (deploy.py:93-96) is
answered double-encoded too. Unlike deploy.py (HTTP 200 with the JSON string ``"error"``), a bad request
gets HTTP 400 and ``{"error": "<cause>"}``; a failure of the policy HTTP 500. ``GET /healthz`` answers OK.
Timings go in the standard ``Server-Timing`` header. Each request is served on its own thread
(:class:`http.server.ThreadingHTTPServer`); the model runs on the runner's thread.
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

log = logging.getLogger("rlinf.serve")


class OpenVLARestServer:
    """Serves ``runner`` over OpenVLA's REST protocol.

    Args:
        runner: the policy runner.
        host: address to bind.
        port: TCP port (0: any free port; see :attr:`port`).
        max_message_mb: largest request body accepted (MiB).
    """

    def __init__(self, runner: PolicyRunner, host: str = "0.0.0.0", port: int = 8000, max_message_mb: int = 64):
        self.runner = runner
        self.max_bytes = max_message_mb * 2**20
        self.httpd = ThreadingHTTPServer((host, port), self._handler_class())
        self.httpd.daemon_threads = True
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
            have = self.runner.policy.unnorm_key
            if payload["unnorm_key"] != have:
                raise BadRequest(f"unnorm_key {payload['unnorm_key']!r}: this server un-normalises with {have!r} "
                                 "(restart it with --unnorm-key to serve another dataset's statistics)")
        t1 = time.perf_counter()
        obs = to_observation(payload, self.runner.mapping)
        t2 = time.perf_counter()
        actions, timing = self.runner.submit(obs).result()
        t3 = time.perf_counter()
        action = actions[0] if actions.shape[0] == 1 else actions
        out = json_numpy_dumps(action)
        out = json.dumps(out) if double else out
        t4 = time.perf_counter()
        ms = {"decode": (t1 - t0) * 1000, "preprocess": (t2 - t1) * 1000, "model": timing["model_ms"],
              "infer": (t3 - t1) * 1000, "encode": (t4 - t3) * 1000}
        return out, ms

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # headers and body in one segment: written apart, Nagle's algorithm and the client's delayed ACK
            # add ~40 ms to every reply on a kept-alive connection
            disable_nagle_algorithm = True
            wbufsize = 1 << 16

            def log_message(self, fmt, *args) -> None:  # route access logs through logging, not stderr
                log.debug("%s " + fmt, self.address_string(), *args)

            def _reply(self, status: int, body: str, timing: dict[str, float] | None = None) -> None:
                data = body.encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json" if body[:1] in "{[\"" else "text/plain")
                self.send_header("Content-Length", str(len(data)))
                if timing:
                    self.send_header("Server-Timing", ", ".join(f"{k};dur={v:.3f}" for k, v in timing.items()))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, message: str) -> None:
                self._reply(status, json.dumps({"error": message}))

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path == "/healthz":
                    self._reply(HTTPStatus.OK, "OK\n")
                else:
                    self._error(HTTPStatus.NOT_FOUND, f"no route GET {self.path} (POST /act, GET /healthz)")

            def do_POST(self) -> None:  # noqa: N802
                if self.path != "/act":
                    self._error(HTTPStatus.NOT_FOUND, f"no route POST {self.path} (POST /act)")
                    return
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    length = -1
                if length <= 0 or length > server.max_bytes:
                    self.close_connection = True
                    self._error(HTTPStatus.BAD_REQUEST, f"send a JSON body of 1 byte to {server.max_bytes} bytes "
                                                        "with its Content-Length")
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
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=30)
