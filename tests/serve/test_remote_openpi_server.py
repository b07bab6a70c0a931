"""openpi's own ``WebsocketPolicyServer`` serving a trivial policy, evaluated by RemotePolicy on LIBERO: the eval
completes, and each request is what openpi's LIBERO client sends (openpi: examples/libero/main.py:113-141): the keys
``observation/image``, ``observation/wrist_image``, ``observation/state``, ``prompt`` and nothing else; the images
are the simulator's frames rotated by 180 degrees and resized with padding to 224 by openpi-client's own
``image_tools`` (main.py:115-122); the state is eef position, robosuite's ``quat2axisangle`` of the eef quaternion,
finger joints; the prompt the task's language.

The server is openpi's module itself, from the PyPI package ``openpi-server`` (its one module is byte-identical to
openpi's ``src/openpi/serving/websocket_policy_server.py``, checked here by hash; openpi's own distribution is not on
PyPI), run unchanged on an event loop of its own.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import tempfile
import threading
import time

os.environ.setdefault("LIBERO_CONFIG_PATH", tempfile.mkdtemp(prefix="libero-config-"))  # no user config.yaml

import numpy as np  # noqa: E402
import pytest  # noqa: E402

libero = pytest.importorskip("rlinf_env_libero")
server_module = pytest.importorskip("openpi_server.websocket_policy_server", reason="scripts/install.sh installs it")
image_tools = pytest.importorskip("openpi_client.image_tools", reason="scripts/install.sh installs openpi-client")
from rlinf_core.remote.policy import RemotePolicy  # noqa: E402
from rlinf_core.rl.evaluation import eval_passes  # noqa: E402
from rlinf_env_libero.settings import LiberoRenderConfig, LiberoSimConfig  # noqa: E402

#: sha256 of src/openpi/serving/websocket_policy_server.py at openpi commit 15a9616a00943ada6c20a0f158e3adb39df2ccac
OPENPI_SERVER_SHA256 = "1370d345e6c3c5b8f15573050e485e60a5b423d1df33e24b237805e6b442b026"
LIBERO_CLIENT_KEYS = {"observation/image", "observation/wrist_image", "observation/state", "prompt"}
RENDER = 64  # the env's render size (openpi's client renders 256; the resize to 224 is the same code either way)


def test_the_openpi_server_package_is_openpis_module_unchanged():
    with open(server_module.__file__, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == OPENPI_SERVER_SHA256


class RecordingPolicy:
    """openpi_client.base_policy.BasePolicy's interface: keeps each request, answers a 10-action chunk (π0's LIBERO
    horizon) that holds the arm still with the gripper open."""

    def __init__(self) -> None:
        self.requests: list[dict] = []

    def infer(self, obs: dict) -> dict:
        self.requests.append({k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in obs.items()})
        actions = np.zeros((10, 7))
        actions[:, 6] = -1.0
        return {"actions": actions}

    def reset(self) -> None:
        pass


class OpenPIServer:
    """``WebsocketPolicyServer(policy).run()`` on an event loop of its own thread; cancelled to stop."""

    def __init__(self, policy) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        server = server_module.WebsocketPolicyServer(policy, host="127.0.0.1", port=self.port, metadata={"x": 1})
        self.loop = asyncio.new_event_loop()
        self.task = self.loop.create_task(server.run())
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise AssertionError("openpi's server did not start")

    def _run(self) -> None:
        try:
            self.loop.run_until_complete(self.task)
        except asyncio.CancelledError:
            pass

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.task.cancel)
        self.thread.join(timeout=60)


def _env(reset_state_ids: list[int]):
    return libero.LiberoEnv(
        task_suite_name="libero_spatial",
        num_envs=2,
        is_eval=True,
        auto_reset=True,
        render=LiberoRenderConfig(use_wrist_image=True, image_size=RENDER, fast_render=True),
        sim=LiberoSimConfig(settle_steps=2),
        max_episode_steps=10,
        reset_state_id_filter=reset_state_ids,
    )


def _openpi_client_request(env, env_id: int) -> dict:
    """What openpi's LIBERO client builds from the simulator of ``env_id`` (main.py:113-141)."""
    from robosuite.utils.transform_utils import quat2axisangle

    sim = env.simulator(env_id)
    frames = {}
    for camera in ("agentview", "robot0_eye_in_hand"):
        sim.sim._render_context_offscreen.gl_ctx.make_current()
        raw = sim.sim.render(camera_name=camera, width=RENDER, height=RENDER)  # rows bottom-up, as robosuite's obs
        upright = np.ascontiguousarray(raw[::-1, ::-1])  # "rotate 180 degrees to match train preprocessing"
        frames[camera] = image_tools.convert_to_uint8(image_tools.resize_with_pad(upright, 224, 224))
    obs = sim.obs
    return {
        "observation/image": frames["agentview"],
        "observation/wrist_image": frames["robot0_eye_in_hand"],
        "observation/state": np.concatenate(
            (obs["robot0_eef_pos"], quat2axisangle(obs["robot0_eef_quat"].copy()), obs["robot0_gripper_qpos"])
        ),
        "prompt": env.tasks[env._slot_task[env_id]].language,
    }


def test_a_remote_libero_eval_against_openpis_server_sends_what_openpis_libero_client_sends():
    probe = _env([0])
    rids = [probe.reset_state_id(0, 0), probe.reset_state_id(1, 0)]
    probe.close()
    recorder = RecordingPolicy()
    server = OpenPIServer(recorder)
    env = _env(rids)
    try:
        policy = RemotePolicy(
            f"ws://127.0.0.1:{server.port}", action_dim=7, num_action_chunks=5, mapping="libero", image_size=224
        )
        records = eval_passes(env, policy, "cpu", passes=1, do_sample=False, temperature=1.0)
        policy.close()
    finally:
        server.stop()
        env.close()
        libero.clear_sim_cache()
    assert sorted(r["reset_state_id"] for r in records) == sorted(rids)
    assert all(r["episode_len"] == 10 for r in records)
    assert len(recorder.requests) == 2 * 2  # 2 envs x 2 chunks of 5 actions over 10 steps
    assert all(set(request) == LIBERO_CLIENT_KEYS for request in recorder.requests)

    fresh = _env(rids)
    try:
        fresh.reset(np.array(rids))  # the grid's first reset: the state of the first two requests
        for env_id in range(2):
            want = _openpi_client_request(fresh, env_id)
            got = next(r for r in recorder.requests[:2] if r["prompt"] == want["prompt"])
            for key in ("observation/image", "observation/wrist_image"):
                assert got[key].dtype == np.uint8 and got[key].shape == (224, 224, 3)
                np.testing.assert_array_equal(got[key], want[key])
                assert not np.array_equal(got[key], np.ascontiguousarray(want[key][::-1, ::-1])), "orientation"
            np.testing.assert_allclose(got["observation/state"], want["observation/state"], rtol=0, atol=1e-6)
    finally:
        fresh.close()
        libero.clear_sim_cache()
