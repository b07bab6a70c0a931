"""What keeps a server on a shared network safe: the API key, the connection cap, timeouts and short errors."""

from __future__ import annotations

import hmac
import threading
from dataclasses import dataclass

IDLE_TIMEOUT_S = 10.0  # the websocket side's handshake timeout (websockets' open_timeout), used for REST reads too
MAX_ECHO_CHARS = 300  # an error message quotes at most this much of what a client sent


@dataclass(frozen=True)
class ServerLimits:
    """Limits and access of a server.

    Args:
        max_message_mb: largest request accepted (MiB); a larger websocket frame closes its connection.
        max_connections: clients connected at once; the next one is refused with HTTP 503.
        api_key: key every request must carry as ``Authorization: Api-Key <key>`` (openpi-client's ``api_key``)
            or ``Authorization: Bearer <key>`` (None: no key).
        idle_timeout_s: a connection that sends nothing (no handshake, no promised body bytes) for this long is
            closed.
    """

    max_message_mb: int = 16
    max_connections: int = 64
    api_key: str | None = None
    idle_timeout_s: float = IDLE_TIMEOUT_S

    @property
    def max_bytes(self) -> int:
        return self.max_message_mb * 2**20

    def authorized(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header value carries the key (always, when the server has none)."""
        if self.api_key is None:
            return True
        scheme, _, given = (authorization or "").strip().partition(" ")
        if scheme.lower() not in ("api-key", "bearer"):
            return False
        return hmac.compare_digest(given.strip().encode("utf-8"), self.api_key.encode("utf-8"))


UNAUTHORIZED = "send the server's API key as the header 'Authorization: Api-Key <key>' (openpi-client: api_key=)"


class ConnectionSlots:
    """Counts open connections; :meth:`take` refuses one over the cap (thread-safe)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.open >= self.limit:
                return False
            self.open += 1
            return True

    def give(self) -> None:
        with self._lock:
            self.open -= 1

    def full_message(self) -> str:
        return f"this server already serves {self.limit} connections (its --max-connections); retry later"


def clip(text: str, limit: int = MAX_ECHO_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was (error messages quote client input)."""
    text = str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"
