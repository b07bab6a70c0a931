"""One model thread shared by every connection: requests queue up, the thread runs ``policy.act``.

With ``max_batch > 1`` the requests already waiting when the model becomes free (up to ``max_batch``
observations, a batched request counting its rows, with the same image / state shapes) run as one batch; nothing
waits for a batch to fill. A batch that fails is retried request by request, so one bad observation never fails
another client's request.

Without batching, a model that answered its last request within ``INLINE_MAX_MS`` runs on the caller's thread (the
websocket server's event loop) when nothing is queued or running: no hand-off to the model thread and back, which is
most of a fast model's serving overhead on a busy machine (benchmarks/serve_overhead.py), and blocking the event loop
that briefly is what openpi's server does for every request. A slower model stays on the model thread, so the
connections and health checks stay responsive while it computes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np
import torch

from rlinf_core.contracts.observation import Observation
from rlinf_core.serve.errors import BadRequest
from rlinf_core.serve.loading import LoadedPolicy
from rlinf_core.serve.mapping import ObsMapping, signature

log = logging.getLogger("rlinf.serve")

INLINE_MAX_MS = 20.0
FITTING_PROMPTS_KEPT = 256  #: prompts (up to ``FITTING_PROMPT_MAX_CHARS`` long) that fit, not checked again
FITTING_PROMPT_MAX_CHARS = 1024


class PolicyFailure(RuntimeError):
    """``policy.act`` raised on a request (e.g. a state of the wrong length); sent back to the client."""


@dataclass
class InferenceSettings:
    """How actions are chosen.

    Args:
        do_sample: draw from the policy's distribution instead of acting greedily (argmax / mean / ODE).
        temperature: sampling temperature (token policies divide logits by it; flow policies scale the noise).
        max_batch: requests run together when they arrive while the model is busy (1: one at a time).
    """

    do_sample: bool = False
    temperature: float = 1.0
    max_batch: int = 1


@dataclass
class _Job:
    obs: Observation
    batched: bool = False  #: the reply is ``[n, C, D]`` (a batched request), not ``[C, D]``
    future: Future = field(default_factory=Future)


class PolicyRunner:
    """Runs ``loaded.policy`` on a background thread; :meth:`submit` is safe from any thread."""

    def __init__(self, loaded: LoadedPolicy, mapping: ObsMapping, settings: InferenceSettings) -> None:
        if settings.max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {settings.max_batch}")
        if settings.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {settings.temperature}")
        self.loaded = loaded
        self.policy = loaded.policy
        self.mapping = mapping
        self.settings = settings
        self._jobs: deque[_Job] = deque()
        self._cond = threading.Condition()
        self._model_lock = threading.Lock()  # one policy.act at a time, on the model thread or inline
        self._last_model_ms = 0.0
        self._device = loaded.policy.device
        self._on_cpu = self._device.type == "cpu"
        self._may_run_inline = settings.max_batch == 1
        self._fitting_prompts: set[str] = set()  # a client sends the same instruction every step of an episode
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="rlinf-serve-model", daemon=True)
        self._thread.start()

    def metadata(self, protocol: str) -> dict:
        """What a client learns on connect (openpi sends it right after the handshake); no path of this machine."""
        p = self.policy
        return {
            "server": "rlinf serve",
            "protocol": protocol,
            "policy": type(p).__name__,
            "action_dim": int(p.action_dim),
            "action_horizon": int(p.num_action_chunks),
            "unnorm_key": getattr(p, "unnorm_key", None),
            "do_sample": self.settings.do_sample,
            "temperature": self.settings.temperature,
            "observation_keys": self.mapping.keys(),
            "image_size": list(self.mapping.image_size) if self.mapping.image_size else None,
            "image_layout": "CHW" if self.mapping.channels_first else "HWC",
            "max_batch": self.settings.max_batch,
            # a request with batch_size = n <= max_batch holds n observations (rlinf_core.serve.mapping.to_observations)
            "batched_requests": self.settings.max_batch > 1,
        }

    def check(self, obs: Observation) -> None:
        """Refuse (:class:`BadRequest`) a prompt the policy's context cannot hold, before it is queued."""
        for prompt in obs.task_descriptions:
            if prompt in self._fitting_prompts:
                continue
            try:
                self.policy.check_prompt(prompt)
            except ValueError as exc:
                raise BadRequest(str(exc)) from None
            if len(prompt) <= FITTING_PROMPT_MAX_CHARS and len(self._fitting_prompts) < FITTING_PROMPTS_KEPT:
                self._fitting_prompts.add(prompt)

    def submit(self, obs: Observation, batched: bool = False) -> Future:
        """Queue one observation (a batch of one), or the n rows of a batched request (``batched``, n <= max_batch);
        the future gives ``(actions float32 [C, D] or [n, C, D], timing dict)``."""
        job = _Job(obs, batched)
        with self._cond:
            if self._closed:
                raise RuntimeError("the policy runner is closed")
            self._jobs.append(job)
            self._cond.notify()
        return job.future

    def run_inline(self, obs: Observation, batched: bool = False) -> tuple[np.ndarray, dict] | None:
        """:meth:`submit`'s result computed on this thread, or None when the model should run on its thread (batching
        is on, a job is queued or running, or the model's last run took ``INLINE_MAX_MS`` or more)."""
        if not self._may_run_inline or self._last_model_ms >= INLINE_MAX_MS or self._jobs or self._closed:
            return None
        if not self._model_lock.acquire(blocking=False):
            return None
        try:
            if not torch.is_grad_enabled():  # the serving threads turn it off once (grad mode is per thread)
                return self._compute([(obs, batched)])[0]
            with torch.no_grad():
                return self._compute([(obs, batched)])[0]
        except Exception as exc:  # noqa: BLE001 - reported to this request only, as the model thread does
            log.exception("policy.act failed")
            raise PolicyFailure(f"{type(exc).__name__}: {exc}") from None
        finally:
            self._model_lock.release()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=30)

    # ------------------------------------------------------------------ model thread
    def _next_batch(self) -> list[_Job] | None:
        with self._cond:
            while not self._jobs and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            first = self._jobs.popleft()
            batch, sig, skipped, rows = [first], signature(first.obs), [], len(first.obs)
            while self._jobs and rows < self.settings.max_batch:
                job = self._jobs.popleft()
                if signature(job.obs) == sig and rows + len(job.obs) <= self.settings.max_batch:
                    batch.append(job)
                    rows += len(job.obs)
                else:
                    skipped.append(job)
            self._jobs.extendleft(reversed(skipped))
            return batch

    def _loop(self) -> None:
        torch.set_grad_enabled(False)
        while (batch := self._next_batch()) is not None:
            try:
                self._run(batch)
            except Exception as exc:  # noqa: BLE001 - a failed batch is retried alone, then reported per request
                if len(batch) > 1:
                    for job in batch:
                        self._run_alone(job)
                else:
                    log.exception("policy.act failed")
                    batch[0].future.set_exception(PolicyFailure(f"{type(exc).__name__}: {exc}"))

    def _run_alone(self, job: _Job) -> None:
        try:
            self._run([job])
        except Exception as exc:  # noqa: BLE001
            log.exception("policy.act failed")
            job.future.set_exception(PolicyFailure(f"{type(exc).__name__}: {exc}"))

    def _run(self, batch: list[_Job]) -> None:
        with self._model_lock:
            results = self._compute([(job.obs, job.batched) for job in batch])
        for job, result in zip(batch, results):
            job.future.set_result(result)

    def _compute(self, batch: list[tuple[Observation, bool]]) -> list[tuple[np.ndarray, dict]]:
        """``(actions, timing)`` of each ``(observation, batched)``, from one ``policy.act`` on all of them."""
        t0 = time.perf_counter()
        obs = Observation.cat([o for o, _ in batch]) if len(batch) > 1 else batch[0][0]
        if not self._on_cpu:
            obs = obs.to(self._device)
        actions = self.policy.act(obs, do_sample=self.settings.do_sample, temperature=self.settings.temperature).actions
        if actions.requires_grad or actions.dtype is not torch.float32 or not actions.is_cpu:
            actions = actions.detach().to("cpu", torch.float32)
        actions = actions.numpy()
        self._last_model_ms = model_ms = (time.perf_counter() - t0) * 1000
        timing = {"model_ms": model_ms, "batch_size": len(actions)}
        if len(batch) == 1:
            rows, batched = batch[0]
            return [(actions[: len(rows)] if batched else actions[0], timing)]
        results, start = [], 0
        for rows, batched in batch:
            n = len(rows)
            results.append((actions[start : start + n] if batched else actions[start], dict(timing)))
            start += n
        return results
