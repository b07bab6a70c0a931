"""Worker-process envs (``vectorize(env, num_workers)``): same results as in-process, shared memory, restarts."""

from __future__ import annotations

import os
import pickle
import signal
import time

import numpy as np
import pytest
import torch

from rlinf_core.builtin.toy_env import ReachEnv
from rlinf_core.builtin.toy_policy import TinyVLAPolicy
from rlinf_core.envs.vector import WorkerEnv, vectorize
from rlinf_core.envs.vector.workers import EnvWorkerError, EnvWorkerPool, render_threads
from rlinf_core.rl.algorithms import GRPO
from rlinf_core.rl.collector import RolloutCollector, _mask_dropped_episodes
from rlinf_core.rl.config import RolloutConfig
from rlinf_core.rl.module import RLModule
from rlinf_core.testing.conformance import EnvPluginTests

pytestmark = pytest.mark.slow


class FailingReachEnv(ReachEnv):
    """ReachEnv whose simulator raises once its total step count passes ``fail_after``."""

    def __init__(self, fail_after: int = 10**9, **kwargs) -> None:
        super().__init__(**kwargs)
        self.fail_after = fail_after

    def _step(self, actions, live):
        if self.num_steps_taken >= self.fail_after:
            if self.fail_after == -1:
                time.sleep(3600)  # a hung simulator
            raise FloatingPointError("simulated physics blow-up")
        return super()._step(actions, live)


class ClosingReachEnv(ReachEnv):
    """A plugin that overrides close() without calling super().close()."""

    def close(self) -> None:
        self.pos = None


class TestReachEnvInWorkerProcesses(EnvPluginTests):
    """The plugin conformance suite passes unchanged when the env runs in a worker process."""

    env_class = ReachEnv
    env_kwargs = {"image_size": 16}
    num_workers = 1


def _actions(env, seed: int, chunk: int = 2) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(env.num_envs, chunk, env.action_dim, generator=gen) * 2 - 1


def test_workers_match_in_process_envs():
    """Worker w behaves exactly like an in-process env sharded to every W-th initial state."""
    kw = dict(group_size=2, max_episode_steps=5, auto_reset=False, image_size=16)
    env = vectorize(ReachEnv(num_envs=8, **kw), 2)
    refs = [ReachEnv(num_envs=4, **kw) for _ in range(2)]
    for w, ref in enumerate(refs):
        ref.shard(w, 2)
    try:
        obs = env.reset()
        ref_obs = [r.reset() for r in refs]
        torch.testing.assert_close(obs.main_images, torch.cat([o.main_images for o in ref_obs]))
        assert obs.task_descriptions == ref_obs[0].task_descriptions + ref_obs[1].task_descriptions
        ids = env.reset_state_ids
        assert (ids.reshape(-1, 2)[:, 0] == ids.reshape(-1, 2)[:, 1]).all(), "groups share an initial state"
        assert not set(ids[:4]) & set(ids[4:]), "workers draw from disjoint shards"
        for k in range(4):
            acts = _actions(env, k)
            out = env.chunk_step(acts)
            ref_out = [r.chunk_step(acts[4 * w : 4 * (w + 1)]) for w, r in enumerate(refs)]
            for name in ("rewards", "terminations", "truncations", "success", "valid", "reset_state_ids"):
                torch.testing.assert_close(getattr(out, name), torch.cat([getattr(o, name) for o in ref_out]))
            torch.testing.assert_close(out.obs.states, torch.cat([o.obs.states for o in ref_out]))
            if any(o.final_obs is not None for o in ref_out):
                expect = torch.cat(
                    [o.final_obs_env_ids + 4 * w for w, o in enumerate(ref_out) if o.final_obs is not None]
                )
                torch.testing.assert_close(out.final_obs_env_ids, expect)
                assert len(out.final_obs) == len(expect)
        env.flush_episodes()
        for r in refs:
            r.flush_episodes()
        got = env.pop_episodes()
        want = refs[0].pop_episodes() + refs[1].pop_episodes()
        assert sorted(e["reset_state_id"] for e in got) == sorted(e["reset_state_id"] for e in want)
        assert not env.any_live
    finally:
        env.close()


def test_pipelined_rollout_with_worker_envs_matches_in_process_stages():
    """S=2 stages in worker processes collect exactly the trajectory in-process stages collect."""
    torch.manual_seed(0)
    policy = TinyVLAPolicy(action_dim=2, num_action_chunks=2, add_value_head=True).eval()

    def collect(num_workers: int):
        envs = []
        for s in range(2):
            env = vectorize(ReachEnv(num_envs=4, group_size=2, max_episode_steps=5, image_size=16), num_workers)
            env.shard(s, 2)
            envs.append(env)
        collector = RolloutCollector(envs, policy, need_values=True)
        torch.manual_seed(1)
        try:
            return collector.collect(4, True, 1.0, reset=True)
        finally:
            collector.close()
            for env in envs:
                env.close()

    a, b = collect(0), collect(1)
    names = (
        "rewards",
        "terminations",
        "truncations",
        "valid",
        "logprobs",
        "values",
        "bootstrap_values",
        "reset_state_ids",
    )
    for name in names:
        torch.testing.assert_close(getattr(b, name), getattr(a, name), msg=name)
    for oa, ob in zip(a.obs, b.obs):
        torch.testing.assert_close(ob.main_images, oa.main_images)


def test_eval_visits_every_state_once_across_workers_and_ranks():
    visited = []
    for rank in range(2):
        env = vectorize(ReachEnv(num_envs=4, is_eval=True, auto_reset=True, max_episode_steps=3, trials_per_task=3), 2)
        env.shard(rank, 2)
        try:
            env.reset()
            for _ in range(50):
                if env.eval_finished:
                    break
                env.chunk_step(torch.zeros(4, 2, 2))
            assert env.eval_finished
            visited += [e["reset_state_id"] for e in env.pop_episodes()]
        finally:
            env.close()
    assert sorted(visited) == list(range(9)), "every (task, trial) exactly once over 2 ranks x 2 workers"


def test_worker_split_must_keep_groups_whole():
    with pytest.raises(ValueError, match="straddles"):
        vectorize(ReachEnv(num_envs=8, group_size=4), 4)
    with pytest.raises(ValueError, match="num_workers"):
        vectorize(ReachEnv(num_envs=6), 4)
    with pytest.raises(ValueError, match=r"rollout.env_workers must be >= 0, got -1"):
        RolloutConfig(env_workers=-1)


def test_observations_travel_through_shared_memory(monkeypatch):
    env = vectorize(ReachEnv(num_envs=4, image_size=64, auto_reset=True), 2)
    sizes = []
    original = EnvWorkerPool._recv

    def spy(self, worker, cmd):
        reply = original(self, worker, cmd)
        if cmd == "chunk_step":
            sizes.append(len(pickle.dumps(reply)))
        return reply

    monkeypatch.setattr(EnvWorkerPool, "_recv", spy)
    try:
        env.reset()
        for k in range(3):
            out = env.chunk_step(_actions(env, k))
        pool = env
        assert all(buf.is_shared() for w in pool.workers for buf in w.buffers[0].values())
        image_bytes = 2 * 64 * 64 * 3  # one worker's rows of one observation
        assert max(sizes[2:]) < image_bytes / 4, f"replies carry {sizes} bytes: images are being pickled"
        # the result does not alias the shared buffers (the next step overwrites them)
        before = out.obs.main_images.clone()
        env.chunk_step(_actions(env, 9))
        torch.testing.assert_close(out.obs.main_images, before)
    finally:
        env.close()


def test_killed_worker_is_restarted_in_training_and_counted():
    env = vectorize(ReachEnv(num_envs=4, auto_reset=True, max_episode_steps=50), 2)
    try:
        env.reset()
        env.chunk_step(_actions(env, 0))
        pid = env.pids[1]
        os.kill(pid, signal.SIGKILL)
        with pytest.warns(RuntimeWarning, match=r"SIGKILL.*\n.*restarting it; its 2 running episode"):
            out = env.chunk_step(_actions(env, 1))
        assert out.valid[:2].all() and not out.valid[2:].any(), "the dead worker's chunk is invalid"
        assert env.pids[1] != pid
        metrics = env.pop_metrics()
        assert metrics == {"env/worker_restarts": 1.0, "env/dropped_episodes": 2.0}
        assert env.pop_metrics()["env/worker_restarts"] == 0.0, "counters are per call"
        out = env.chunk_step(_actions(env, 2))
        assert out.valid[:, 0].all(), "the restarted worker runs fresh episodes (auto_reset)"
        env.flush_episodes() if not env.auto_reset else None
        assert all(e["episode_len"] > 0 for e in env.pop_episodes())
    finally:
        env.close()


def test_dead_worker_in_eval_raises_with_its_error():
    env = vectorize(ReachEnv(num_envs=2, is_eval=True, auto_reset=True), 2)
    try:
        env.reset()
        os.kill(env.pids[0], signal.SIGKILL)
        with pytest.raises(EnvWorkerError, match=r"worker 0/2 of ReachEnv .*SIGKILL.*eval envs are not restarted"):
            env.chunk_step(torch.zeros(2, 2, 2))
    finally:
        env.close()


def test_simulator_exception_is_reported_and_repeated_failures_give_up():
    env = vectorize(FailingReachEnv(fail_after=0, num_envs=2, auto_reset=True), 1)
    try:
        env.reset()
        with pytest.warns(RuntimeWarning, match="FloatingPointError: simulated physics blow-up"):
            out = env.chunk_step(torch.zeros(2, 2, 2))
            assert not out.valid.any()
            for _ in range(2):
                env.chunk_step(torch.zeros(2, 2, 2))
            with pytest.raises(EnvWorkerError, match="restarts in a row failed too"):
                env.chunk_step(torch.zeros(2, 2, 2))
    finally:
        env.close()


def test_hung_worker_is_killed_after_the_timeout(monkeypatch):
    monkeypatch.setenv("RLINF_ENV_WORKER_TIMEOUT", "2")
    env = vectorize(FailingReachEnv(fail_after=-1, num_envs=2, auto_reset=True), 1)
    try:
        env.reset()
        t0 = time.perf_counter()
        with pytest.warns(RuntimeWarning, match=r"no reply within 2 s"):
            out = env.chunk_step(torch.zeros(2, 2, 2))
        assert time.perf_counter() - t0 < 30 and not out.valid.any()
        assert env.pop_metrics()["env/worker_restarts"] == 1.0
    finally:
        env.close()


def test_no_auto_reset_worker_stays_idle_until_next_reset():
    env = vectorize(ReachEnv(num_envs=4, group_size=2, max_episode_steps=50), 2)
    try:
        env.reset()
        env.chunk_step(_actions(env, 0))
        os.kill(env.pids[0], signal.SIGKILL)
        with pytest.warns(RuntimeWarning):
            env.chunk_step(_actions(env, 1))
        out = env.chunk_step(_actions(env, 2))
        assert not out.valid[:2].any(), "GRPO groups of the restarted worker stay idle in this rollout"
        assert (env.reset_state_ids[:2] == -1).all()
        env.flush_episodes()
        assert len(env.pop_episodes()) == 2, "only the surviving worker's episodes are reported"
        env.reset()
        assert env.any_live and (env.reset_state_ids >= 0).all()
    finally:
        env.close()


def test_frames_sampler_state_and_close():
    env = vectorize(ReachEnv(num_envs=4, image_size=16, auto_reset=True), 2)
    env.video_cfg.max_envs = 3
    try:
        env.capture_frames = True
        env.reset()
        env.chunk_step(_actions(env, 0, chunk=2))
        frames = env.pop_frames()
        assert len(frames) == 3 and frames[0]["images"].shape == (3, 16, 16, 3), "reset + 2 sub-steps, 3 envs"
        state = env.sampler_state()
        a = env.reset()
        env.load_sampler_state(state)
        b = env.reset()
        torch.testing.assert_close(a.main_images, b.main_images)
        pids = env.pids
    finally:
        env.close()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_dropped_episode_steps_are_masked_in_the_trajectory():
    # slot 0: an episode valid for 3 steps, then its worker died (invalid, no done)
    # slot 1: a normal episode that terminated at step 2
    valid = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0]], dtype=torch.bool)
    term = torch.zeros(2, 6, dtype=torch.bool)
    term[1, 2] = True

    def to_nbc(x):  # [B, N*C] -> [N, B, C]
        return x.view(2, 3, 2).permute(1, 0, 2)

    out = _mask_dropped_episodes(to_nbc(valid), to_nbc(term), to_nbc(torch.zeros_like(term)))
    flat = out.permute(1, 0, 2).reshape(2, 6)
    assert not flat[0].any(), "all steps of the dropped episode are masked"
    assert flat[1].tolist() == valid[1].tolist(), "finished episodes are untouched"
    # an earlier finished episode in the same slot keeps its steps
    valid2 = torch.tensor([[1, 1, 1, 1, 0, 0]], dtype=torch.bool)
    term2 = torch.zeros(1, 6, dtype=torch.bool)
    term2[0, 1] = True

    def to1(x):
        return x.view(1, 3, 2).permute(1, 0, 2)

    out2 = _mask_dropped_episodes(to1(valid2), to1(term2), to1(torch.zeros_like(term2))).permute(1, 0, 2).reshape(1, 6)
    assert out2[0].tolist() == [True, True, False, False, False, False]


def test_plugin_close_override_also_stops_workers():
    env = vectorize(ClosingReachEnv(num_envs=2), 1)
    env.reset()
    pids = env.pids
    env.close()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_worker_env_can_be_pickled_and_gets_its_own_workers():
    env = vectorize(ReachEnv(num_envs=2, image_size=16), 1)
    try:
        first = env.reset()
        copy = pickle.loads(pickle.dumps(env))
        try:
            again = copy.reset()
            assert copy.pids != env.pids
            torch.testing.assert_close(again.states, first.states)  # same seed, same first draw
        finally:
            copy.close()
    finally:
        env.close()


def test_in_process_env_has_no_worker_metrics():
    assert ReachEnv(num_envs=2).pop_metrics() == {}
    assert np.array_equal(ReachEnv(num_envs=2).reset_state_ids, np.array([-1, -1]))


class RenderThreadsReachEnv(ReachEnv):
    """ReachEnv that reports its process's ``LP_NUM_THREADS`` as the task description."""

    def _observe(self, env_ids):
        obs = super()._observe(env_ids)
        obs.task_descriptions = [os.environ.get("LP_NUM_THREADS", "unset")] * len(env_ids)
        return obs


def test_render_threads_are_the_workers_share_of_the_cores():
    assert render_threads(16, 2) == 8
    assert render_threads(16, 4) == 4
    assert render_threads(3, 1) == 3
    assert render_threads(2, 2) == 0  # one core each: rasterize in the worker's own thread
    assert render_threads(2, 1 * 2) == 0
    assert render_threads(1, 1) == 0


def test_pipeline_stages_split_the_cores_between_their_workers():
    """Two stages of one worker each: each worker gets half the cores for rendering, not all of them."""
    if "LP_NUM_THREADS" in os.environ:
        pytest.skip("LP_NUM_THREADS is set: workers keep the user's value")
    env = RenderThreadsReachEnv(num_envs=8, group_size=2, max_episode_steps=4, image_size=16)
    module = RLModule(
        env=env,
        policy=TinyVLAPolicy(action_dim=2, num_action_chunks=2, add_value_head=False),
        algorithm=GRPO(),
        rollout=RolloutConfig(max_steps_per_rollout_epoch=4, pipeline_stage_num=2, env_workers=1, show_progress=False),
    )
    module.setup("fit")
    try:
        expected = str(render_threads(os.cpu_count() or 1, 2))
        for stage in module._stage_envs:
            assert isinstance(stage, WorkerEnv), "the RL loop runs its envs in workers when rollout.env_workers > 0"
            assert stage.reset().task_descriptions == [expected] * 4
    finally:
        module.teardown("fit")


def test_the_env_contract_runs_in_process_and_vectorize_wraps_it():
    """``Env`` is the plugin contract only: the worker count is ``vectorize``'s argument (the RL loop's
    ``rollout.env_workers``), never the env's; the env and its WorkerEnv implement one interface, BatchedEnv, and the
    WorkerEnv forwards nothing by name (a plugin's extras are on ``unwrapped``)."""
    from rlinf_core.contracts.batched_env import BatchedEnv

    env = ReachEnv(num_envs=2, image_size=16)
    assert not hasattr(env, "pids") and not hasattr(env, "num_workers") and env.reset().main_images.shape[0] == 2
    with pytest.raises(TypeError, match="num_workers"):
        ReachEnv(num_envs=2, num_workers=2)
    plain = ReachEnv(num_envs=2, image_size=16)
    assert vectorize(plain) is plain and vectorize(plain, 0) is plain and vectorize(None, 2) is None
    wrapped = vectorize(env.clone(), 2)
    try:
        assert isinstance(wrapped, WorkerEnv) and vectorize(wrapped, 2) is wrapped and wrapped.unwrapped is wrapped.env
        assert isinstance(wrapped, BatchedEnv) and isinstance(env, BatchedEnv) and env.unwrapped is env
        assert wrapped.num_envs == 2 and wrapped.task_names == env.task_names  # the env's settings, typed properties
        assert not hasattr(wrapped, "image_size"), "no attribute forwarding: a plugin's own settings are on unwrapped"
        assert wrapped.unwrapped.image_size == 16
        wrapped.capture_frames = True
        assert wrapped.capturing and not wrapped.env.capture_frames, "the WorkerEnv's own setting, read by its pool"
        eval_env = wrapped.clone(is_eval=True, auto_reset=True)
        assert isinstance(eval_env, WorkerEnv) and eval_env.is_eval and eval_env.num_workers == 2
        assert wrapped.reset().main_images.shape[0] == 2 and len(wrapped.pids) == 2
        assert len(wrapped.pop_frames()) == 1
    finally:
        wrapped.close()
    with pytest.raises(ValueError, match="num_workers >= 1"):
        WorkerEnv(plain, 0)


def test_config_parsers_read_the_env_constructor_and_clone_keeps_its_arguments():
    """Env records its constructor arguments without rewriting __init__: jsonargparse still sees the subclass's
    and Env's parameters (nested through **kwargs), and clone() rebuilds from them."""
    from jsonargparse import ArgumentParser

    from rlinf_core.contracts.env import Env

    assert "__init__" not in {k for k, v in vars(ReachEnv).items() if getattr(v, "__wrapped__", None)}
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--env", type=Env)
    cfg = parser.parse_args(["--env.class_path=ReachEnv", "--env.init_args.num_envs=4", "--env.init_args.image_size=8"])
    env = parser.instantiate(cfg).env
    assert (env.num_envs, env.image_size) == (4, 8)
    copy = env.clone(seed=3)
    assert (type(copy), copy.num_envs, copy.image_size, copy.seed) == (ReachEnv, 4, 8, 3)
