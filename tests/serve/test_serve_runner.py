"""The model thread: requests waiting together run as one batch with the same actions; a failing batch is
retried request by request."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from tests.serve.conftest import libero_request

from rlinf_core.serve.loading import LoadOptions, load_policy
from rlinf_core.serve.mapping import PRESETS, to_observation
from rlinf_core.serve.runner import InferenceSettings, PolicyFailure, PolicyRunner

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels


def _held_runner(toy_export, max_batch: int):
    """A runner whose first ``act`` waits until released, so that the next requests queue up behind it."""
    loaded = load_policy(str(toy_export), LoadOptions())
    release, calls, busy = threading.Event(), [], threading.Event()
    act = loaded.policy.act

    def held_act(obs, **kw):
        calls.append(len(obs))
        if len(calls) == 1:
            busy.set()
            release.wait(timeout=30)
        return act(obs, **kw)

    loaded.policy.act = held_act
    runner = PolicyRunner(loaded, PRESETS["libero"], InferenceSettings(max_batch=max_batch))
    runner.busy = busy
    return runner, release, calls, act


def test_waiting_requests_run_as_one_batch_with_the_same_actions(toy_export):
    runner, release, calls, act = _held_runner(toy_export, max_batch=4)
    try:
        requests = [libero_request(i) for i in range(5)]
        futures = [runner.submit(to_observation(requests[0], PRESETS["libero"]))]
        assert runner.busy.wait(timeout=30)
        futures += [runner.submit(to_observation(r, PRESETS["libero"])) for r in requests[1:]]
        release.set()
        results = [f.result(timeout=60) for f in futures]
    finally:
        runner.close()
    assert calls == [1, 4], "the first request alone, the four that waited behind it together"
    assert [t["batch_size"] for _, t in results] == [1, 4, 4, 4, 4]
    for request, (actions, _) in zip(requests, results):
        alone = act(to_observation(request, PRESETS["libero"]), do_sample=False).actions[0].numpy()
        # greedy TinyVLA actions are bin centres: equal unless two logits tie within the rounding a batch of 4
        # instead of 1 makes; the tolerance is float32's own at values <= 1 (8 ulps)
        np.testing.assert_allclose(actions, alone, atol=1e-6)


def test_a_bad_request_in_a_batch_fails_alone(toy_export):
    runner, release, calls, _ = _held_runner(toy_export, max_batch=4)
    try:
        good = [to_observation(libero_request(i), PRESETS["libero"]) for i in range(3)]
        bad = to_observation(libero_request(9), PRESETS["libero"])
        bad.states = torch.zeros(1, 3)  # wrong length: the policy raises
        futures = [runner.submit(good[0])]
        assert runner.busy.wait(timeout=30)
        futures += [runner.submit(o) for o in (good[1], bad, good[2])]
        release.set()
        outcomes = []
        for f in futures:
            try:
                outcomes.append(f.result(timeout=60)[0].shape)
            except PolicyFailure:
                outcomes.append("failed")
    finally:
        runner.close()
    assert outcomes == [(4, 3), (4, 3), "failed", (4, 3)]


def test_a_prompt_that_fits_is_checked_once_and_one_that_does_not_is_refused_every_time(toy_export):
    """A client sends the same instruction every step: the policy's prompt check (a tokenization) runs once for it;
    a prompt that does not fit is checked, and refused, on every request."""
    from rlinf_core.serve.errors import BadRequest
    from rlinf_core.serve.runner import FITTING_PROMPT_MAX_CHARS, FITTING_PROMPTS_KEPT

    loaded = load_policy(str(toy_export), LoadOptions())
    checked = []

    def check_prompt(prompt):
        checked.append(prompt)
        if "too long" in prompt:
            raise ValueError("the prompt does not fit the context")

    loaded.policy.check_prompt = check_prompt
    runner = PolicyRunner(loaded, PRESETS["libero"], InferenceSettings())
    try:
        for prompt in ["open the drawer"] * 3 + ["close the drawer"] * 2:
            runner.check(to_observation(libero_request(0, prompt=prompt), runner.mapping))
        assert checked == ["open the drawer", "close the drawer"]
        for _ in range(2):
            with pytest.raises(BadRequest, match="does not fit"):
                runner.check(to_observation(libero_request(0, prompt="far too long"), runner.mapping))
        assert checked[2:] == ["far too long"] * 2
        long_prompt = "x" * (FITTING_PROMPT_MAX_CHARS + 1)  # not kept: the set of kept prompts stays small
        for _ in range(2):
            runner.check(to_observation(libero_request(0, prompt=long_prompt), runner.mapping))
        assert checked[4:] == [long_prompt] * 2
        for i in range(FITTING_PROMPTS_KEPT + 10):  # two kept already; the last twelve are not kept
            runner.check(to_observation(libero_request(0, prompt=f"task {i}"), runner.mapping))
        del checked[:]
        for i in range(FITTING_PROMPTS_KEPT + 10):
            runner.check(to_observation(libero_request(0, prompt=f"task {i}"), runner.mapping))
        assert checked == [f"task {i}" for i in range(FITTING_PROMPTS_KEPT - 2, FITTING_PROMPTS_KEPT + 10)]
    finally:
        runner.close()
