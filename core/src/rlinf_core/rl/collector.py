"""Collects rollouts from one or more env stages with a policy.

With S > 1 stages the envs are split into S independent envs and the simulator of one stage
steps (in a background thread, or in worker processes for process-backed envs) while the
policy infers the next stage — the rollout then takes about max(env time, policy time) instead
of their sum when the two are balanced.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

import torch

from rlinf_core.contracts.batched_env import BatchedEnv
from rlinf_core.contracts.observation import ChunkStepResult, Observation
from rlinf_core.contracts.observation_mismatch import first_act
from rlinf_core.contracts.policy import ActOutput, Policy
from rlinf_core.rl.data.trajectory import Trajectory


@dataclass
class RolloutTimes:
    """Seconds spent per phase during one rollout (policy = inference, env_wait = blocked on envs)."""

    policy: float = 0.0
    env_wait: float = 0.0
    total: float = 0.0
    env_busy: float = 0.0

    def as_metrics(self, prefix: str = "time/rollout") -> dict[str, float]:
        return {
            f"{prefix}": self.total,
            f"{prefix}_policy": self.policy,
            f"{prefix}_env_wait": self.env_wait,
            f"{prefix}_env_busy": self.env_busy,
        }


@dataclass
class _StageBuffer:
    obs: list[Observation] = field(default_factory=list)
    records: list[dict[str, torch.Tensor]] = field(default_factory=list)
    logprobs: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)
    results: list[ChunkStepResult] = field(default_factory=list)
    bootstrap: list[torch.Tensor] = field(default_factory=list)


class RolloutCollector:
    """Runs ``num_chunk_steps`` chunk steps on every stage env and returns a :class:`Trajectory`.

    Args:
        envs: one env per pipeline stage (same class, ``num_envs`` each).
        policy: the acting policy (its device receives the observations).
        need_values: collect critic values (and bootstrap values of truncated episodes).
        precision: the context every rollout runs in (reusable; the RL module's is the one its updates run in, so
            rollout and update log-probs agree).
        progress: the live-progress callback ``(done, total, episodes=None)`` of a rollout phase, by its label
            (``None``, or returning ``None``: no progress shown).
    """

    def __init__(
        self,
        envs: list[BatchedEnv],
        policy: Policy,
        need_values: bool,
        precision: AbstractContextManager = nullcontext(),
        progress: Callable[[str], Callable[..., None] | None] | None = None,
    ) -> None:
        self.envs = envs
        self.policy = policy
        self.need_values = need_values
        self.precision = precision
        self.progress = progress
        self.last_obs: list[Observation | None] = [None] * len(envs)
        self._pool = ThreadPoolExecutor(max_workers=len(envs)) if len(envs) > 1 else None
        self.times = RolloutTimes()
        self.episodes_done = 0  # episodes that ended during the current collect()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def collect_epochs(
        self, epochs: int, num_chunk_steps: int, do_sample: bool, temperature: float, auto_reset: bool
    ) -> list[Trajectory]:
        """The RL step's ``epochs`` rollouts, each in the collector's precision context and with its progress
        callback. Without auto-reset every rollout starts from a reset and its episodes are flushed after it."""
        trajs = []
        for r in range(epochs):
            reset = not auto_reset or self.last_obs[0] is None
            label = f"rollout {r + 1}/{epochs}" if epochs > 1 else "rollout"
            reporter = self.progress(label) if self.progress is not None else None
            with self.precision:
                trajs.append(self.collect(num_chunk_steps, do_sample, temperature, reset=reset, progress=reporter))
            if not auto_reset:
                for env in self.envs:
                    env.flush_episodes()
        return trajs

    def _act(self, obs: Observation, do_sample: bool, temperature: float) -> ActOutput:
        t0 = time.perf_counter()
        out = first_act(
            self.policy,
            self.envs[0],
            lambda: self.policy.act(obs.to(self.policy.device), do_sample=do_sample, temperature=temperature),
        )
        self.times.policy += time.perf_counter() - t0
        return out

    def _value(self, obs: Observation) -> torch.Tensor:
        """Critic values ``[B, 1 | C]`` of ``obs`` through :meth:`Policy.value` (no action decode)."""
        t0 = time.perf_counter()
        values = self.policy.value(obs.to(self.policy.device)).float().cpu()
        self.times.policy += time.perf_counter() - t0
        return values

    def _timed_step(self, env: BatchedEnv, actions: torch.Tensor) -> ChunkStepResult:
        t0 = time.perf_counter()
        result = env.chunk_step(actions)
        self.times.env_busy += time.perf_counter() - t0
        return result

    def _timed_reset(self, env: BatchedEnv) -> Observation:
        t0 = time.perf_counter()
        obs = env.reset()
        self.times.env_busy += time.perf_counter() - t0
        return obs

    def _submit(self, stage: int, actions: torch.Tensor) -> Future | ChunkStepResult:
        if self._pool is None:
            return self._timed_step(self.envs[stage], actions)
        return self._pool.submit(self._timed_step, self.envs[stage], actions)

    def _wait(self, pending) -> ChunkStepResult:
        if isinstance(pending, Future):
            t0 = time.perf_counter()
            result = pending.result()
            self.times.env_wait += time.perf_counter() - t0
            return result
        return pending

    @torch.no_grad()
    def collect(
        self, num_chunk_steps: int, do_sample: bool, temperature: float, reset: bool, progress=None
    ) -> Trajectory:
        """One rollout epoch. ``reset``: start new episodes (else continue from the last obs)."""
        self.times = RolloutTimes()
        self.episodes_done = 0
        t_start = time.perf_counter()
        S = len(self.envs)
        bufs = [_StageBuffer() for _ in range(S)]
        obs = list(self.last_obs)
        to_reset = [s for s in range(S) if reset or obs[s] is None]
        if self._pool is not None and len(to_reset) > 1:
            # stages reset concurrently (worker-process envs reset in parallel processes)
            futures = {s: self._pool.submit(self._timed_reset, self.envs[s]) for s in to_reset}
            t0 = time.perf_counter()
            for s, future in futures.items():
                obs[s] = future.result()
            self.times.env_wait += time.perf_counter() - t0
        else:
            for s in to_reset:
                obs[s] = self._timed_reset(self.envs[s])
        pending: list = [None] * S
        for k in range(num_chunk_steps):
            for s in range(S):
                if pending[s] is not None:
                    obs[s] = self._record_result(bufs[s], self._wait(pending[s]))
                out = self._act(obs[s], do_sample, temperature)
                self._record_act(bufs[s], obs[s], out)
                pending[s] = self._submit(s, out.actions.cpu())
            if progress is not None:
                progress(k + 1, num_chunk_steps, episodes=self.episodes_done)
        for s in range(S):
            obs[s] = self._record_result(bufs[s], self._wait(pending[s]))
            if self.need_values:
                bufs[s].values.append(self._value(obs[s]))
        self.last_obs = obs
        self.times.total = time.perf_counter() - t_start
        return Trajectory.cat_envs([_to_trajectory(b, self.need_values) for b in bufs])

    def _record_act(self, buf: _StageBuffer, obs: Observation, out: ActOutput) -> None:
        buf.obs.append(obs.to("cpu"))
        buf.records.append({k: v.cpu() for k, v in out.record.items()})
        buf.logprobs.append(out.logprobs.float().cpu())
        if self.need_values:
            if out.values is None:
                raise ValueError("this algorithm needs values but the policy returned none (add_value_head: true)")
            buf.values.append(out.values.float().cpu())

    def _record_result(self, buf: _StageBuffer, result: ChunkStepResult) -> Observation:
        buf.results.append(result)
        self.episodes_done += int((result.dones & result.valid).any(-1).sum())
        boot = torch.zeros_like(result.rewards)
        if self.need_values and result.final_obs is not None:
            v = self._value(result.final_obs)[:, 0]
            ids = result.final_obs_env_ids
            boot[ids] = v.unsqueeze(-1) * result.truncations[ids].float()
        buf.bootstrap.append(boot)
        return result.obs


def _mask_dropped_episodes(valid: torch.Tensor, terminations: torch.Tensor, truncations: torch.Tensor) -> torch.Tensor:
    """Mask every step of episodes that stopped without a done (dropped when their env worker died).

    ``[N, B, C]`` in, ``[N, B, C]`` out. A live episode always ends with a termination or a
    truncation; a valid step followed by an invalid one with no done in between means the episode
    was dropped, so none of its steps may be trained on.
    """
    N, B, C = valid.shape
    v = valid.permute(1, 0, 2).reshape(B, N * C)
    done = (terminations | truncations).permute(1, 0, 2).reshape(B, N * C)
    broken = v[:, :-1] & ~done[:, :-1] & ~v[:, 1:]
    if not broken.any():
        return valid
    v = v.clone()
    for b, t in broken.nonzero().tolist():
        s = t
        while s >= 0 and v[b, s] and (s == t or not done[b, s]):
            v[b, s] = False
            s -= 1
    return v.reshape(B, N, C).permute(1, 0, 2).contiguous()


def _to_trajectory(buf: _StageBuffer, need_values: bool) -> Trajectory:
    res = buf.results
    terminations = torch.stack([r.terminations for r in res])
    truncations = torch.stack([r.truncations for r in res])
    valid = _mask_dropped_episodes(torch.stack([r.valid for r in res]), terminations, truncations)
    return Trajectory(
        obs=buf.obs,
        records=buf.records,
        logprobs=torch.stack(buf.logprobs),
        values=torch.stack(buf.values) if need_values else None,
        rewards=torch.stack([r.rewards for r in res]),
        terminations=terminations,
        truncations=truncations,
        valid=valid,
        bootstrap_values=torch.stack(buf.bootstrap),
        reset_state_ids=torch.stack([r.reset_state_ids for r in res]),
    )
