"""A policy served elsewhere, evaluated on rlinf's grids: :class:`RemotePolicy`."""

from __future__ import annotations

import os
import sys

import numpy as np
import torch

from rlinf_core.contracts.interruption import EpisodesInterrupted
from rlinf_core.contracts.observation import Observation
from rlinf_core.contracts.policy import ActOutput, EvaluateOutput, Policy
from rlinf_core.foundation.checks import check_number
from rlinf_core.remote.client import RemoteClient
from rlinf_core.remote.errors import RemoteServerError
from rlinf_core.remote.requests import RequestBuilder
from rlinf_core.remote.transport import ConnectionLost, Endpoint, ServerRefused, check_url
from rlinf_core.serve.errors import ServeError
from rlinf_core.serve.mapping import load_mapping

API_KEY_ENV = "RLINF_REMOTE_API_KEY"
DEFAULT_MAPPING = {"openpi": "libero", "openvla": "openvla"}


class RemotePolicy(Policy):
    """Sends each observation batch to a policy server and returns its action chunks: evaluates a policy served
    by openpi's ``serve_policy.py`` (π0 / π0.5), ``rlinf serve``, OpenVLA's ``deploy.py`` or any server speaking
    one of their protocols, with ``rlinf validate`` on rlinf's eval grids (docs/remote_eval.md).

    Eval only: it has no weights, so ``rlinf fit`` refuses it. Before the first episode the server's metadata is
    checked against the env (action size, chunk length, image size, greedy or sampled) and the first request is the
    probe: a key the server misses or an image it refuses stops the eval in one line. A connection that is lost or a
    request that times out is retried: the client reconnects (doubling backoff, up to ``reconnect_s``) and the
    episodes in flight restart from their reset states
    (:class:`~rlinf_core.contracts.interruption.EpisodesInterrupted`); finished episodes stay counted, once. An
    error reply stops the eval with the server's one-line cause.

    Args:
        url: the server: ``ws://HOST:PORT`` for openpi's websocket protocol (openpi's ``serve_policy.py``,
            ``rlinf serve``) or ``http://HOST:PORT`` for OpenVLA's REST ``POST /act`` (its ``vla-scripts/deploy.py``,
            ``rlinf serve --protocol openvla``).
        action_dim: size of one action: the env's (checked against the server's metadata or first reply).
        num_action_chunks: actions executed per request; a server returning longer chunks has the rest dropped, as
            openpi's LIBERO client executes ``replan_steps`` of each chunk (a shorter chunk is an error).
        mapping: request keys: a ``rlinf serve`` mapping preset (``libero``, ``droid``, ``aloha``, ``openvla``,
            ``openvla-oft``) or a YAML mapping file, as the server reads them (default: ``libero`` for ``ws://``,
            ``openvla`` for ``http://``).
        image_size: resize every image with padding to this side (or ``[H, W]``) before sending, as openpi's clients
            do (224); None: send the env's renders as they are (what ``rlinf serve``'s policies resize themselves).
        literal_keys: send dotted mapping keys as they are (LeRobot's ``observation.state``) instead of nesting them
            (openpi's ALOHA client's ``images: {cam_high: ...}``).
        unnorm_key: OpenVLA's REST payload's ``unnorm_key``: the dataset statistics to un-normalise with (None: the
            server's default).
        api_key: sent as ``Authorization: Api-Key <key>`` (None: ``$RLINF_REMOTE_API_KEY``, else no key).
        timeout_s: seconds one request may take, sending to the whole reply (a JAX server's first request compiles:
            it is retried once it times out).
        connections: requests in flight at once when the server takes one observation per request (an env batch is
            spread over this many connections).
        batch_requests: send up to the server's ``max_batch`` observations in one request when it offers batched
            requests (``rlinf serve --max-batch N``).
        retries: lost connections or timeouts in a row, without one answered request between them, before the eval
            stops.
        reconnect_s: how long to wait for a server that is not (or no longer) answering.
        max_message_mb: largest reply accepted.
    """

    eval_only = True

    def __init__(
        self,
        url: str,
        action_dim: int = 7,
        num_action_chunks: int = 1,
        mapping: str | None = None,
        image_size: int | list[int] | None = None,
        literal_keys: bool = False,
        unnorm_key: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        connections: int = 16,
        batch_requests: bool = True,
        retries: int = 3,
        reconnect_s: float = 120.0,
        max_message_mb: int = 64,
    ) -> None:
        super().__init__()

        self.url = check_url(url)
        for key, value, low in (
            ("action_dim", action_dim, 1),
            ("num_action_chunks", num_action_chunks, 1),
            ("connections", connections, 1),
            ("retries", retries, 0),
            ("max_message_mb", max_message_mb, 1),
        ):
            check_number(f"policy.{key}", value, low=low, high=1 << 20)
        for key, value in (("timeout_s", timeout_s), ("reconnect_s", reconnect_s)):
            if not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"policy.{key} must be a number of seconds > 0, got {value!r}")
        self.action_dim = action_dim
        self.num_action_chunks = num_action_chunks
        self.endpoint = Endpoint(self.url, api_key or os.environ.get(API_KEY_ENV) or None, max_message_mb * 2**20)
        self.protocol = self.endpoint.protocol
        self.mapping_name = mapping or DEFAULT_MAPPING[self.protocol]
        self.unnorm_key = unnorm_key
        self.builder = RequestBuilder(
            _load_mapping(self.mapping_name),
            _image_size(image_size),
            literal_keys,
            (("unnorm_key", unnorm_key),) if unnorm_key is not None and self.protocol == "openvla" else (),
        )
        self.image_size = self.builder.image_size
        self.num_images_in_input = 1 + len(self.builder.mapping.wrist_images)
        self.timeout_s, self.connections, self.reconnect_s = float(timeout_s), connections, float(reconnect_s)
        self.batch_requests, self.retries = batch_requests, retries
        self.client: RemoteClient | None = None  # connected on the first act: building the policy touches no network
        self.server_metadata: dict = {}
        self.restarts = 0  # episode restarts after lost connections / timeouts
        self._restarts_reported = 0
        self._losses_in_a_row = 0
        self._probed = False

    # ------------------------------------------------------------------ the Policy contract
    @torch.no_grad()
    def act(self, obs: Observation, *, do_sample: bool = True, temperature: float = 1.0) -> ActOutput:
        """The server's action chunks ``[B, C, D]`` for the B observations; ``logprobs`` are zeros (a served
        policy gives none)."""
        if self.client is None:
            self._connect(do_sample, temperature)
        if not self._probed:
            problems = self.builder.problems(obs) + self._size_problems(obs)
            if problems:
                raise RemoteServerError(self.url, "; ".join(problems))
        try:
            replies = self.client.infer(self._payloads(obs))
        except ConnectionLost as exc:
            self._lost(str(exc))
        except ServerRefused as exc:
            raise RemoteServerError(self.url, str(exc)) from None
        self._losses_in_a_row = 0
        actions = self._actions(replies, len(obs))
        self._probed = True
        B, C, D = actions.shape
        return ActOutput(actions=torch.from_numpy(actions), logprobs=torch.zeros(B, C, D))

    def evaluate(self, obs, record, *, temperature=1.0, compute_entropy=False, compute_values=False) -> EvaluateOutput:
        raise NotImplementedError("RemotePolicy is eval-only: a served policy has no log-probs to train on")

    def pop_metrics(self) -> dict[str, float]:
        """Since the last call: request round trips (``remote/latency_p50_ms``, ``remote/latency_p99_ms``,
        ``remote/requests``) and ``remote/restarts`` (times the episodes in flight restarted after a lost connection
        or a timeout)."""
        restarts, self._restarts_reported = self.restarts - self._restarts_reported, self.restarts
        if self.client is None or not self.client.latencies_ms:
            return {}
        ms, self.client.latencies_ms = np.asarray(self.client.latencies_ms), []
        return {
            "remote/latency_p50_ms": float(np.percentile(ms, 50)),
            "remote/latency_p99_ms": float(np.percentile(ms, 99)),
            "remote/requests": float(len(ms)),
            "remote/restarts": float(restarts),
        }

    def close(self) -> None:
        """Close the connections (the next act connects again)."""
        if self.client is not None:
            self.client.close()
            self.client = None

    # ------------------------------------------------------------------ connecting and checking
    def _connect(self, do_sample: bool, temperature: float) -> None:
        client = RemoteClient(self.endpoint, self.timeout_s, self.connections, self.reconnect_s)
        try:
            self.server_metadata = client.connect()
        except (ConnectionLost, ServerRefused) as exc:
            client.close()
            raise RemoteServerError(self.url, str(exc)) from None
        problems = self._metadata_problems(self.server_metadata, do_sample, temperature)
        if problems:
            client.close()
            raise RemoteServerError(self.url, "; ".join(problems))
        self.client = client
        meta = self.server_metadata
        what = f"{meta.get('policy', 'a policy')} ({meta['server']})" if "server" in meta else "a policy"
        batched = f", batched requests of up to {self._max_batch()}" if self._max_batch() > 1 else ""
        print(f"rlinf: remote policy {self.url}: {what}, {self.protocol} protocol{batched}", file=sys.stderr)

    def _metadata_problems(self, meta: dict, do_sample: bool, temperature: float) -> list[str]:
        """What in the server's metadata disagrees with this eval (rlinf serve's keys; openpi's servers send the
        policy's own metadata, checked on the first reply instead)."""
        out = []
        dim, horizon = meta.get("action_dim"), meta.get("action_horizon")
        if isinstance(dim, int) and dim != self.action_dim:
            out.append(f"the server's policy outputs {dim}-D actions (its metadata), the env takes {self.action_dim}")
        if isinstance(horizon, int) and horizon < self.num_action_chunks:
            out.append(
                f"the server returns chunks of {horizon} actions, this eval executes {self.num_action_chunks} per "
                "request (lower num_action_chunks)"
            )
        served = meta.get("do_sample")
        if isinstance(served, bool) and served != do_sample:
            how = "samples (--sample)" if served else "acts greedily"
            out.append(
                f"the server {how} but the eval asks for do_sample={do_sample} (set rollout.do_sample_eval: "
                f"{str(served).lower()}, or restart the server {'without' if served else 'with'} --sample)"
            )
        elif served and isinstance(meta.get("temperature"), (int, float)) and meta["temperature"] != temperature:
            out.append(
                f"the server samples at temperature {meta['temperature']:g}, the eval asks for {temperature:g} "
                "(rollout.temperature_eval, or the server's --temperature)"
            )
        return out

    def _size_problems(self, obs: Observation) -> list[str]:
        """The image size the server's metadata demands (``rlinf serve --image-size``) against what this eval sends."""
        size = self.server_metadata.get("image_size")
        if not (isinstance(size, (list, tuple)) and len(size) == 2):
            return []
        sent = self.image_size or tuple(obs.main_images.shape[1:3])
        if tuple(size) == tuple(sent):
            return []
        return [f"the server takes {size[0]}x{size[1]} images, this eval sends {sent[0]}x{sent[1]} (set image_size)"]

    def _max_batch(self) -> int:
        meta = self.server_metadata
        if not (self.batch_requests and meta.get("batched_requests") is True):
            return 1
        n = meta.get("max_batch")
        return n if isinstance(n, int) and n > 1 else 1

    # ------------------------------------------------------------------ requests and replies
    def _payloads(self, obs: Observation) -> list[dict]:
        n = self._max_batch()
        if n == 1:
            return self.builder.requests(obs)
        return [self.builder.batch_request(obs.index(slice(lo, lo + n))) for lo in range(0, len(obs), n)]

    def _actions(self, replies: list[dict], rows: int) -> np.ndarray:
        chunks = []
        batched = self._max_batch() > 1
        for reply in replies:
            value = reply["actions"]
            if not isinstance(value, np.ndarray) or value.dtype.kind not in "fiu":
                got = f"{value.dtype} array" if isinstance(value, np.ndarray) else type(value).__name__
                raise RemoteServerError(self.url, f"malformed reply: actions must be a numeric array, got {got}")
            if batched:
                if value.ndim != 3:
                    shape = list(value.shape)
                    raise RemoteServerError(self.url, f"malformed reply: batched actions are [n, H, D], got {shape}")
                chunks.extend(value)
            else:
                chunks.append(value)
        if len(chunks) != rows:
            raise RemoteServerError(self.url, f"malformed reply: {len(chunks)} action chunks for {rows} observations")
        out = np.empty((rows, self.num_action_chunks, self.action_dim), np.float32)
        for i, chunk in enumerate(chunks):
            chunk = chunk[None] if chunk.ndim == 1 else chunk  # OpenVLA answers one action [D]
            if chunk.ndim != 2 or chunk.shape[1] != self.action_dim:
                raise RemoteServerError(
                    self.url,
                    f"the server answered actions {list(chunk.shape)}, the env takes [H >= {self.num_action_chunks}, "
                    f"{self.action_dim}] (action_dim / the server's policy)",
                )
            if chunk.shape[0] < self.num_action_chunks:
                raise RemoteServerError(
                    self.url,
                    f"the server answered chunks of {chunk.shape[0]} actions, this eval executes "
                    f"{self.num_action_chunks} per request (lower num_action_chunks)",
                )
            out[i] = chunk[: self.num_action_chunks]
        if not np.isfinite(out).all():
            raise RemoteServerError(self.url, "the server answered NaN or infinite actions")
        return out

    def _lost(self, cause: str) -> None:
        """A lost connection or timeout: reconnect and restart the episodes in flight, or stop after ``retries``."""
        self._losses_in_a_row += 1
        if self._losses_in_a_row > self.retries:
            times = f"{self._losses_in_a_row} times in a row; retries: {self.retries}"
            raise RemoteServerError(self.url, f"{cause} ({times})")
        before = {k: self.server_metadata.get(k) for k in ("policy", "action_dim", "action_horizon")}
        try:
            meta = self.client.reconnect()
        except (ConnectionLost, ServerRefused) as exc:
            raise RemoteServerError(self.url, f"lost ({cause}), then {exc}") from None
        after = {k: meta.get(k) for k in before}
        if after != before:
            raise RemoteServerError(self.url, f"the server came back serving another policy: {after}, was {before}")
        self.restarts += 1
        raise EpisodesInterrupted(f"remote policy {self.url}: {cause}; reconnected, restarting the episodes in flight")


def _load_mapping(spec: str):

    try:
        return load_mapping(spec)
    except ServeError as exc:
        raise ValueError(str(exc).replace("--mapping", "policy mapping")) from None


def _image_size(value) -> tuple[int, int] | None:
    if value is None:
        return None
    size = (value, value) if isinstance(value, int) else tuple(value)
    if len(size) != 2 or not all(isinstance(v, int) and 8 <= v <= 4096 for v in size):
        raise ValueError(f"policy.image_size must be a side or [H, W] of 8 to 4096 pixels, got {value!r}")
    return size


__all__ = ["API_KEY_ENV", "RemotePolicy"]
