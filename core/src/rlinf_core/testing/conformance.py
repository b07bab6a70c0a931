"""Standard conformance tests for env and policy plugins.

Subclass in your plugin's tests and fill in the factory methods; every plugin, first- or
third-party, is then checked the same way::

    from rlinf_core.testing.conformance import EnvPluginTests

    class TestMyEnv(EnvPluginTests):
        env_class = MyEnv
        env_kwargs = {"image_size": 64}

Do not override the ``test_*`` methods (a subclass that does fails at class creation); tune the
class attributes and factory methods instead, and add your own tests under other names. The attributes each kit
reads are the ones documented with ``#:`` in its class body (docs/plugin_reference.md lists them, generated from here).

The policy tests are neutral about the action distribution: token policies, Gaussians and
noise-injected (SDE) flow samplers pass the same checks. Log-probs must be finite but may be
positive (densities); ``do_sample=False`` must be deterministic whatever the random state.
"""

from __future__ import annotations

import functools
import math
import sys
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from rlinf_core.contracts.batched_env import BatchedEnv, VideoConfig
from rlinf_core.contracts.env import ChunkStepResult, Env
from rlinf_core.contracts.observation import Observation
from rlinf_core.contracts.policy import ActOutput, Policy
from rlinf_core.envs.vector import vectorize
from rlinf_core.foundation.signatures import constructor_parameters
from rlinf_core.memory.estimate import MemoryProfile
from rlinf_core.plugins.manager import Registry
from rlinf_core.testing.numerics import reorder_rtol


class _KitTests:
    """Refuses subclasses that redefine a kit ``test_*`` method (they would silently skip a contract check)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        kit = [k for k in cls.__mro__[1:] if k.__module__ == __name__ and k is not _KitTests]
        if cls.__module__ == __name__:
            return
        for name, value in vars(cls).items():
            if name.startswith("test_") and any(name in vars(k) for k in kit):
                raise TypeError(
                    f"{cls.__qualname__} overrides the conformance test {name!r}; tune the class attributes or"
                    " factory methods instead (add plugin-specific checks under another name)"
                )


class EnvPluginTests(_KitTests):
    """Checks the :class:`rlinf_core.Env` contract on a real instance of the plugin's env.

    Reads the class attributes ``env_class``, ``env_kwargs``, ``num_workers``, ``chunk`` and ``eval_grid_states``."""

    #: the env class under test (required).
    env_class: type[Env]
    #: extra constructor arguments for every env the tests build.
    env_kwargs: dict[str, Any] = {}
    #: run the env in this many worker processes, as ``rollout.env_workers`` does (0: in the test process).
    num_workers: int = 0
    #: sub-steps per chunk used by the tests.
    chunk: int = 2
    #: initial states visited by the eval-grid test (keep small for slow simulators).
    eval_grid_states: int = 4

    def make_env(self, **overrides: Any) -> BatchedEnv:
        """``env_class(**env_kwargs, **overrides)``, as the RL loop builds it (in ``num_workers`` worker processes
        when that is > 0)."""
        return vectorize(self.env_class(**{**self.env_kwargs, **overrides}), self.num_workers)

    def random_actions(self, env: Env, chunk: int | None = None) -> torch.Tensor:
        """Seeded uniform actions in [-1, 1], ``[num_envs, chunk, env.action_dim]``."""
        gen = torch.Generator().manual_seed(0)
        return torch.rand(env.num_envs, chunk or self.chunk, env.action_dim, generator=gen) * 2 - 1

    def test_registered_through_hooks(self):
        registry = Registry().load()
        names = registry.names("env")
        assert self.env_class.__name__ in names, (
            f"{self.env_class.__name__} is not registered through an rlinf entry point; registered: {names}"
        )

    def test_declared_surface(self):
        """Every attribute the core reads of an env (declared on :class:`~rlinf_core.contracts.batched_env.BatchedEnv`
        and :class:`~rlinf_core.Env`) has a value of the declared type, before the simulator is built."""
        cls = self.env_class
        env = self.make_env(num_envs=2)
        try:
            dim = getattr(env.unwrapped, "action_dim", None)
            assert dim is not None, (
                f"{cls.__name__} declares no action_dim: set it as a class attribute (action_dim = D) or in __init__"
            )
            assert isinstance(dim, int) and dim >= 1 and env.action_dim == dim, (
                f"{cls.__name__}.action_dim must be an int >= 1, got {dim!r}"
            )
            metrics = env.episode_metrics
            assert isinstance(metrics, tuple) and all(isinstance(m, str) for m in metrics), (
                f"{cls.__name__}.episode_metrics must be a tuple of metric names, got {metrics!r}"
            )
            n = env.num_reset_states
            assert isinstance(n, int) and n >= 1, f"{cls.__name__}.num_reset_states must be an int >= 1, got {n!r}"
            tasks = np.asarray(env.task_ids(np.arange(n)))
            names = env.task_names
            assert tasks.shape == (n,) and np.issubdtype(tasks.dtype, np.integer) and tasks.min() >= 0, (
                f"{cls.__name__}.task_ids must map every reset state id to a task id >= 0"
            )
            assert isinstance(names, list) and len(names) > tasks.max() and all(isinstance(t, str) for t in names), (
                f"{cls.__name__}.task_names must name every task id task_ids returns"
            )
            assert isinstance(env.video_cfg, VideoConfig) and isinstance(cls.in_process_only, bool)
            assert isinstance(env.step_observers, tuple) and isinstance(env.capture_frames, bool)
            params = constructor_parameters(cls)
            for flat, (group, field) in cls.FLAT_SETTINGS.items():
                assert group in params, f"{cls.__name__}.FLAT_SETTINGS[{flat!r}] names group {group!r}, not a setting"
                assert isinstance(field, str)
        finally:
            env.close()

    def test_reset_returns_observation(self):
        env = self.make_env(num_envs=2)
        try:
            obs = env.reset()
            assert isinstance(obs, Observation) and len(obs) == 2
            assert obs.main_images.dtype == torch.uint8 and obs.main_images.shape[-1] == 3
            assert all(isinstance(t, str) and t for t in obs.task_descriptions)
            assert obs.main_images.float().std() > 0, "main camera image is blank"
        finally:
            env.close()

    def test_chunk_step_shapes(self):
        env = self.make_env(num_envs=2)
        try:
            env.reset()
            out = env.chunk_step(self.random_actions(env))
            assert isinstance(out, ChunkStepResult)
            for name in ("rewards", "terminations", "truncations", "success", "valid"):
                assert tuple(getattr(out, name).shape) == (2, self.chunk), name
            assert out.rewards.dtype == torch.float32
            assert out.terminations.dtype == torch.bool and out.truncations.dtype == torch.bool
            assert not (out.terminations & out.truncations).any()
            assert len(out.obs) == 2
        finally:
            env.close()

    def test_wrong_action_shape_is_explained(self):
        env = self.make_env(num_envs=2)
        try:
            env.reset()
            bad = torch.zeros(2, self.chunk, env.action_dim + 1)
            try:
                env.chunk_step(bad)
            except ValueError as exc:
                assert str(env.action_dim) in str(exc)
            else:
                raise AssertionError("chunk_step accepted actions with the wrong action dimension")
        finally:
            env.close()

    def test_groups_share_initial_state(self):
        env = self.make_env(num_envs=4, group_size=2)
        try:
            env.reset()
            ids = env.reset_state_ids
            assert ids[0] == ids[1] and ids[2] == ids[3]
        finally:
            env.close()

    def test_truncation_at_max_episode_steps(self):
        env = self.make_env(num_envs=2, max_episode_steps=self.chunk, ignore_terminations=True)
        try:
            env.reset()
            out = env.chunk_step(self.random_actions(env))
            assert out.truncations[:, -1].all() and not out.terminations.any()
            assert out.final_obs is not None and len(out.final_obs) == 2
            episodes = env.pop_episodes()
            assert len(episodes) == 2 and all(e["episode_len"] == self.chunk for e in episodes)
        finally:
            env.close()

    def test_auto_reset_starts_new_episodes(self):
        env = self.make_env(num_envs=2, max_episode_steps=self.chunk, auto_reset=True)
        try:
            env.reset()
            first = env.chunk_step(self.random_actions(env))
            assert first.dones.any(1).all()
            second = env.chunk_step(self.random_actions(env))
            assert second.valid[:, 0].all(), "auto-reset envs must be live in the next chunk"
        finally:
            env.close()

    def test_eval_grid_visits_each_state_once(self):
        env = self.make_env(num_envs=2, is_eval=True, auto_reset=True, max_episode_steps=self.chunk)
        try:
            n = env.num_reset_states
            env.shard(0, max(1, math.ceil(n / self.eval_grid_states)))
            pool = set(env.pool.tolist())
            env.reset()
            for _ in range(len(pool) + 2):
                if env.eval_finished:
                    break
                env.chunk_step(self.random_actions(env))
            assert env.eval_finished
            visited = [e["reset_state_id"] for e in env.pop_episodes()]
            assert sorted(visited) == sorted(pool), "every (task, trial) exactly once"
        finally:
            env.close()


_OWN_MODULES = frozenset({__name__, "rlinf_core.contracts.observation", "dataclasses", "reprlib"})


class _KitObservation(Observation):
    """The kit's observations: they note when the policy reads an optional field the kit left empty."""

    reads: ClassVar[set[str]] = set()

    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        if value is None and name in ("states", "wrist_images"):
            if sys._getframe(1).f_globals.get("__name__") not in _OWN_MODULES:
                _KitObservation.reads.add(name)
        return value


def _explain_empty_inputs(test):
    """A policy test that fails after the policy read ``states`` / ``wrist_images`` of an observation that has
    none fails with the cause and the setting that fixes it (the policy's own error stays chained below)."""

    @functools.wraps(test)
    def run(self):
        _KitObservation.reads.clear()
        try:
            return test(self)
        except Exception as exc:
            read = sorted(_KitObservation.reads)
            if not read:
                raise
            fix = []
            if "states" in read:
                fix.append(
                    f"set `state_dim = S` on {type(self).__name__} (the size of Observation.states the policy reads)"
                )
            if "wrist_images" in read:
                fix.append("override make_observation(batch_size) to add wrist_images")
            raise AssertionError(
                f"the policy read Observation.{' and Observation.'.join(read)}, which the kit's observations leave "
                f"None (state_dim = {self.state_dim!r}): if it needs them, {' and '.join(fix)}. PolicyPluginTests "
                "reads image_size, state_dim, batch_size and temperature."
            ) from exc

    return run


class PolicyPluginTests(_KitTests):
    """Checks the :class:`rlinf_core.Policy` contract, for any action distribution.

    Reads the class attributes ``image_size``, ``state_dim``, ``batch_size`` and ``temperature`` (the observations
    of :meth:`make_observation` carry no states unless ``state_dim`` is set)."""

    #: side of the square ``main_images`` of :meth:`make_observation`, pixels.
    image_size: int = 32
    #: size S of ``Observation.states`` ``[B, S]``; ``None``: observations without states.
    state_dim: int | None = None
    #: the temperature of every sampled ``act`` and ``evaluate`` (not 1, so that it must be applied).
    temperature: float = 1.3
    #: observations per batch.
    batch_size: int = 3
    #: ``(setting, value)`` that :meth:`test_from_pretrained_honours_an_override` gives ``from_pretrained``: a
    #: constructor setting (or a ``FLAT_SETTINGS`` name) the policy keeps in the attribute of the same name, and a
    #: value other than ``make_policy``'s; ``None``: ``add_value_head``, the opposite of ``has_value_head``.
    pretrained_override: tuple[str, Any] | None = None
    #: how far two evaluations of the same log-probs or values may differ when their float32 sums run in another
    #: order (``act`` against ``evaluate`` or ``value``: another batch layout, a cached against a joint pass; a
    #: reload that merges weights). :func:`rlinf_core.testing.numerics.reorder_rtol` of the policy's longest sum
    #: and the number of sums in a row on its longest path, times the size of what feeds the log-probs and values,
    #: times the final map's gain. The default holds for the tiny random models a kit runs on: sums of at most 1024
    #: terms, at most 16 in a row, logits and values of size at most 1, and a log-softmax at temperature >= 1 (gain
    #: 2/T <= 2): 1.5e-4. A larger model, or a density whose log moves faster than its inputs (a Gaussian of std
    #: sigma: about 4/sigma), sets its own. A policy whose paths compute in the same order is equal to every bit.
    reorder_atol: float = reorder_rtol(1024, depth=16, gain=2.0)

    def make_policy(self) -> Policy:
        """A fresh policy under test (required)."""
        raise NotImplementedError

    def load_policy(self, path: str) -> Policy:
        """Load what :meth:`Policy.save_pretrained` wrote (default: ``cls.from_pretrained(path)``)."""
        return type(self.make_policy()).from_pretrained(path)

    def make_observation(self, batch_size: int) -> Observation:
        """Seeded random ``uint8`` images ``image_size``², one instruction per row, states if ``state_dim``."""
        gen = torch.Generator().manual_seed(1)
        imgs = torch.randint(
            0, 256, (batch_size, self.image_size, self.image_size, 3), generator=gen, dtype=torch.uint8
        )
        states = torch.randn(batch_size, self.state_dim, generator=gen) if self.state_dim else None
        tasks = [f"pick up the block number {i}" for i in range(batch_size)]
        return _KitObservation(main_images=imgs, task_descriptions=tasks, states=states)

    def _act(self, policy: Policy, obs: Observation, **kw) -> ActOutput:
        policy.eval()
        with torch.no_grad():
            return policy.act(obs, **kw)

    @_explain_empty_inputs
    def test_registered_through_hooks(self):
        cls = type(self.make_policy())
        assert cls.__name__ in Registry().load().names("policy")

    def test_declared_surface(self):
        """Every attribute and method the core reads of a policy (declared on :class:`Policy`) has a value of the
        declared type."""
        policy = self.make_policy()
        cls = type(policy)
        for name in ("action_dim", "num_action_chunks", "num_images_in_input"):
            value = getattr(policy, name)
            assert isinstance(value, int) and value >= 1, f"{cls.__name__}.{name} must be an int >= 1, got {value!r}"
        assert isinstance(policy.has_value_head, bool)
        assert policy.compute_dtype is None or isinstance(policy.compute_dtype, torch.dtype)
        for name in ("precision", "unnorm_key"):
            assert getattr(policy, name) is None or isinstance(getattr(policy, name), str), f"{cls.__name__}.{name}"
        assert policy.model_path is None or Path(policy.model_path).is_dir(), (
            f"{cls.__name__}.model_path must name the directory the weights came from, got {policy.model_path!r}"
        )
        size = policy.image_size
        assert (
            size is None
            or isinstance(size, int)
            or (isinstance(size, tuple) and len(size) == 2 and all(isinstance(s, int) for s in size))
        ), f"{cls.__name__}.image_size must be None, an int or (height, width), got {size!r}"
        params = constructor_parameters(cls)
        for flat, (group, field) in cls.FLAT_SETTINGS.items():
            assert group in params, f"{cls.__name__}.FLAT_SETTINGS[{flat!r}] names group {group!r}, not a setting"
            assert isinstance(field, str)
        profile = policy.memory_profile()
        assert profile is None or isinstance(profile, MemoryProfile)
        prefixes = policy.unused_parameter_prefixes()
        assert isinstance(prefixes, list) and all(isinstance(p, str) for p in prefixes)
        with tempfile.TemporaryDirectory() as tmp:  # a name that is no released checkpoint: no stand-in
            assert cls.released_standin("/path/to/no-such-released-checkpoint", tmp) is None

    @_explain_empty_inputs
    def test_act_shapes(self):
        policy = self.make_policy()
        B = self.batch_size
        obs = self.make_observation(B)
        before = {name: t.clone() for name, t in obs._tensors().items() if t is not None}
        out = self._act(policy, obs, do_sample=True, temperature=self.temperature)
        for name, tensor in before.items():  # `rlinf serve` passes read-only request memory
            assert torch.equal(getattr(obs, name), tensor), f"act wrote into Observation.{name}: it must only read it"
        C, D = policy.num_action_chunks, policy.action_dim
        assert tuple(out.actions.shape) == (B, C, D)
        assert tuple(out.logprobs.shape) == (B, C, D)
        assert torch.isfinite(out.logprobs).all(), "log-probs must be finite (densities may be positive)"
        if policy.has_value_head:
            assert out.values is not None and out.values.shape[0] == B and out.values.shape[1] in (1, C)
        for key, value in out.record.items():
            assert value.shape[0] == B, f"record[{key!r}] must be batch-first"

    @_explain_empty_inputs
    def test_recompute_equals_rollout_logprobs(self):
        policy = self.make_policy()
        obs = self.make_observation(self.batch_size)
        out = self._act(policy, obs, do_sample=True, temperature=self.temperature)
        ev = policy.evaluate(obs, out.record, temperature=self.temperature, compute_entropy=True, compute_values=True)
        torch.testing.assert_close(ev.logprobs, out.logprobs, rtol=0.0, atol=self.reorder_atol)
        assert ev.logprobs.requires_grad
        assert ev.entropy is not None and tuple(ev.entropy.shape) == tuple(out.logprobs.shape)

    @_explain_empty_inputs
    def test_greedy_is_deterministic(self):
        policy = self.make_policy()
        obs = self.make_observation(self.batch_size)
        torch.manual_seed(0)
        a = self._act(policy, obs, do_sample=False)
        torch.manual_seed(1)  # an ODE / zero-noise sampler must not read the random state
        b = self._act(policy, obs, do_sample=False)
        torch.testing.assert_close(a.actions, b.actions)
        torch.testing.assert_close(a.logprobs, b.logprobs)

    @_explain_empty_inputs
    def test_value_matches_act(self):
        policy = self.make_policy()
        obs = self.make_observation(self.batch_size)
        if not policy.has_value_head:
            try:
                policy.value(obs)
            except ValueError:
                return
            raise AssertionError("Policy.value must raise ValueError (one line) without a value head")
        out = self._act(policy, obs, do_sample=True, temperature=self.temperature)
        with torch.no_grad():
            values = policy.value(obs)
        assert values.shape == out.values.shape
        torch.testing.assert_close(values.float(), out.values.float(), rtol=0.0, atol=self.reorder_atol)

    @_explain_empty_inputs
    def test_greedy_logprobs_equal_evaluate_at_the_same_temperature(self):
        policy = self.make_policy()
        obs = self.make_observation(self.batch_size)
        out = self._act(policy, obs, do_sample=False, temperature=self.temperature)
        ev = policy.evaluate(obs, out.record, temperature=self.temperature)
        torch.testing.assert_close(out.logprobs, ev.logprobs.detach(), rtol=0.0, atol=self.reorder_atol)

    @_explain_empty_inputs
    def test_save_load_round_trip(self):
        policy = self.make_policy()
        obs = self.make_observation(self.batch_size)
        before = self._act(policy, obs, do_sample=False)
        with tempfile.TemporaryDirectory() as tmp:
            policy.save_pretrained(tmp)
            loaded = self.load_policy(tmp)
        after = self._act(loaded, obs, do_sample=False)
        torch.testing.assert_close(after.actions, before.actions)
        torch.testing.assert_close(after.logprobs, before.logprobs, rtol=0.0, atol=self.reorder_atol)

    def test_from_pretrained_honours_an_override(self):
        """A setting given to ``from_pretrained`` wins over the one saved with the checkpoint (the settings that are
        not given come from the checkpoint: :meth:`test_save_load_round_trip`)."""
        policy = self.make_policy()
        cls = type(policy)
        name, value = self.pretrained_override or ("add_value_head", not policy.has_value_head)
        attribute = "has_value_head" if name == "add_value_head" else name
        if self.pretrained_override is None and name not in constructor_parameters(cls):
            import pytest

            pytest.skip(f"{cls.__name__} takes no add_value_head; set pretrained_override to check another setting")
        assert getattr(policy, attribute) != value, f"pretrained_override {(name, value)} is make_policy's own value"
        with tempfile.TemporaryDirectory() as tmp:
            policy.save_pretrained(tmp)
            loaded = cls.from_pretrained(tmp, **{name: value})
        got = getattr(loaded, attribute)
        assert got == value, (
            f"{cls.__name__}.from_pretrained(path, {name}={value!r}) gave {name}={got!r}: an override must win over "
            "the settings saved with the checkpoint (rlinf_core.models.settings.SavedSettings does this; "
            "docs/plugin_tutorial.md, 'A policy')"
        )

    @_explain_empty_inputs
    def test_gradients_reach_parameters(self):
        policy = self.make_policy()
        obs = self.make_observation(self.batch_size)
        out = self._act(policy, obs, do_sample=True, temperature=self.temperature)
        policy.train()
        ev = policy.evaluate(obs, out.record, temperature=self.temperature)
        ev.logprobs.sum().backward()
        grads = [p.grad for p in policy.parameters() if p.requires_grad]
        assert any(g is not None and torch.count_nonzero(g) > 0 for g in grads)


__all__ = ["EnvPluginTests", "PolicyPluginTests"]
