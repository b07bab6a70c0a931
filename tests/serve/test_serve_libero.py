"""A LIBERO episode driven through ``rlinf serve`` by a client loop of its own (as openpi's LIBERO example does:
render, send, execute the returned chunk: openpi examples/libero/main.py:113-155) equals the episode ``rlinf
validate`` runs on the same trial (:func:`rlinf_core.rl.evaluation.eval_passes`, the loop of RLModule's
validation_step): the same action chunks and the same episode record (success, length, return)."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("LIBERO_CONFIG_PATH", tempfile.mkdtemp(prefix="libero-config-"))  # no user config.yaml

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from tests.serve.conftest import serving  # noqa: E402

libero = pytest.importorskip("rlinf_env_libero")
from rlinf_env_libero.settings import LiberoRenderConfig, LiberoSimConfig  # noqa: E402

WebsocketClientPolicy = pytest.importorskip(
    "openpi_client.websocket_client_policy", reason="scripts/install.sh installs openpi-client"
).WebsocketClientPolicy

TRIAL = (0, 3)  # LIBERO-Spatial task 0, trial 3


def _env(reset_state_id: int | None = None):
    kw = {"reset_state_id_filter": [reset_state_id]} if reset_state_id is not None else {}
    return libero.LiberoEnv(
        task_suite_name="libero_spatial",
        num_envs=1,
        is_eval=True,
        render=LiberoRenderConfig(use_wrist_image=True, image_size=64, fast_render=True),
        sim=LiberoSimConfig(settle_steps=2),
        max_episode_steps=16,
        **kw,
    )


def test_libero_episode_through_the_server_equals_validate():
    from rlinf_core.rl.evaluation import eval_passes
    from rlinf_policy_openvla.oft_policy import OpenVLAOFTPolicy
    from rlinf_policy_openvla.testing import tiny_checkpoint

    path = tiny_checkpoint(kind="oft")
    rid = _env().reset_state_id(*TRIAL)
    validate_actions: list[np.ndarray] = []
    policy = OpenVLAOFTPolicy.from_pretrained(path).eval()
    act = policy.act

    def recording_act(obs, **kw):
        out = act(obs, **kw)
        validate_actions.append(out.actions[0].numpy().copy())
        return out

    policy.act = recording_act
    env = _env(rid)
    try:
        (validate_record,) = eval_passes(env, policy, "cpu", passes=1, do_sample=False, temperature=1.0)
    finally:
        env.close()

    env = _env(rid)
    served_actions: list[np.ndarray] = []
    try:
        with serving(path, "openpi", "--mapping", "libero") as server:
            client = WebsocketClientPolicy("127.0.0.1", server.port)
            obs = env.reset(np.array([rid]))
            while env.any_live:
                request = {  # what openpi's LIBERO client sends, from the env's upright frames
                    "observation/image": obs.main_images[0].numpy(),
                    "observation/wrist_image": obs.wrist_images[0].numpy(),
                    "observation/state": obs.states[0].numpy(),
                    "prompt": obs.task_descriptions[0],
                }
                chunk = client.infer(request)["actions"]
                served_actions.append(chunk)
                obs = env.chunk_step(chunk[None]).obs
        env.flush_episodes()
        (served_record,) = env.pop_episodes()
    finally:
        env.close()
        libero.clear_sim_cache()
    assert len(served_actions) == len(validate_actions) >= 2
    for mine, theirs in zip(served_actions, validate_actions):
        np.testing.assert_array_equal(mine, theirs)
    assert served_record == validate_record
