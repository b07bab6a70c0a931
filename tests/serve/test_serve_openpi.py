"""openpi's real client (``openpi-client``'s ``WebsocketClientPolicy``) against ``rlinf serve``."""

from __future__ import annotations

import threading
import urllib.request

import numpy as np
import pytest
import torch
from tests.serve.conftest import libero_observation, libero_request, serving

from rlinf_core.testing.numerics import reorder_rtol

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels

WebsocketClientPolicy = pytest.importorskip(
    "openpi_client.websocket_client_policy", reason="scripts/install.sh installs openpi-client"
).WebsocketClientPolicy


# a served tiny π0's actions against the same policy's in this process: float32 reordering at most, through 3 denoise
# steps of passes with sums of <= 588 terms, ~60 in a row (rlinf_policy_openpi.testing.FLOAT32_SUMS), actions <= 5
ACTIONS_ATOL = reorder_rtol(588, 3 * 60) * 5


def _greedy(policy, request) -> np.ndarray:
    return policy.act(libero_observation(request), do_sample=False).actions[0].numpy()


def test_tiny_oft_served_actions_equal_policy_act(tmp_path):
    from rlinf_policy_openvla.oft_policy import OpenVLAOFTPolicy
    from rlinf_policy_openvla.testing import tiny_checkpoint

    path = tiny_checkpoint(kind="oft")
    reference = OpenVLAOFTPolicy.from_pretrained(path).eval()
    with serving(path, "openpi") as server:
        client = WebsocketClientPolicy("127.0.0.1", server.port)
        meta = client.get_server_metadata()
        assert meta["policy"] == "OpenVLAOFTPolicy" and meta["action_horizon"] == 8 and meta["action_dim"] == 7
        assert meta["unnorm_key"] == "libero_spatial_no_noops" and meta["do_sample"] is False
        assert meta["observation_keys"][:3] == ["observation/image", "observation/wrist_image", "observation/state"]
        for seed in range(2):
            request = libero_request(seed, prompt=["open the drawer", "turn on the stove"][seed])
            reply = client.infer(request)
            assert reply["actions"].dtype == np.float32 and reply["actions"].shape == (8, 7)
            np.testing.assert_array_equal(reply["actions"], _greedy(reference, request))
            assert {"decode_ms", "preprocess_ms", "model_ms", "infer_ms"} <= set(reply["server_timing"])


def test_tiny_pi0_export_served_actions_equal_policy_act(tmp_path):
    from rlinf_policy_openpi.policy import OpenPIPolicy
    from rlinf_policy_openpi.testing import tiny_checkpoint

    released = tiny_checkpoint(state_dim=8, action_dim=7)
    OpenPIPolicy(str(released), action_dim=7, num_steps=3).save_pretrained(tmp_path / "export")  # as a run exports
    reference = OpenPIPolicy.from_pretrained(tmp_path / "export").eval()
    with serving(tmp_path / "export", "openpi", "--chunk", "3") as server:
        client = WebsocketClientPolicy("127.0.0.1", server.port)
        meta = client.get_server_metadata()
        assert meta["policy"] == "OpenPIPolicy" and meta["action_horizon"] == 3 and meta["action_dim"] == 7
        request = libero_request(1, size=48)
        reply = client.infer(request)
    want = _greedy(reference, request)[:3]
    assert reply["actions"].shape == (3, 7)
    np.testing.assert_allclose(reply["actions"], want, rtol=0, atol=ACTIONS_ATOL)


BAD_REQUESTS = [
    (lambda r: r.pop("observation/image"), "missing key 'observation/image'"),
    (lambda r: r.update({"observation/image": r["observation/image"].astype(np.float32)}), "must be a uint8"),
    (lambda r: r.update({"observation/image": r["observation/image"][..., :2]}), r"\[64, 64, 2\]"),
    (lambda r: r.update({"observation/image": np.zeros((32, 32, 3), np.uint8)}), "is 32x32, this server expects 64x64"),
    (lambda r: r.update({"observation/state": np.zeros((2, 4), np.float32)}), "must be a 1-D numeric array"),
    (lambda r: r.update({"prompt": b"\xff\xfe pick"}), "prompt is not valid UTF-8"),
    (lambda r: r.update({"prompt": 3}), "prompt must be a string"),
]


def test_bad_requests_get_error_replies_and_the_server_keeps_serving(toy_export):
    from rlinf_core.builtin.toy_policy import TinyVLAPolicy

    reference = TinyVLAPolicy.from_pretrained(toy_export).eval()
    with serving(toy_export, "openpi", "--image-size", "64x64") as server:
        client = WebsocketClientPolicy("127.0.0.1", server.port)
        for corrupt, message in BAD_REQUESTS:
            request = libero_request(0)
            corrupt(request)
            with pytest.raises(RuntimeError, match=message):
                client.infer(request)
        client._ws.send("not msgpack")  # a text frame, then bytes that are not msgpack
        assert "binary msgpack frame" in client._ws.recv()
        client._ws.send(b"\xc1\xc1\xc1")
        assert "not msgpack-numpy" in client._ws.recv()
        request = libero_request(5)  # same connection, after all the errors
        np.testing.assert_array_equal(client.infer(request)["actions"], _greedy(reference, request))
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=10) as health:
            assert health.status == 200 and health.read() == b"OK\n"


def test_a_state_the_policy_rejects_is_an_error_reply_not_a_crash(toy_export):
    with serving(toy_export, "openpi") as server:
        client = WebsocketClientPolicy("127.0.0.1", server.port)
        request = libero_request(0)
        request["observation/state"] = np.zeros(3, np.float32)  # the policy reads 8 values
        with pytest.raises(RuntimeError, match="the policy failed on this request"):
            client.infer(request)
        assert client.infer(libero_request(1))["actions"].shape == (4, 3)


def test_disconnects_do_not_stop_the_server_and_two_clients_run_at_once(toy_export):
    from rlinf_core.builtin.toy_policy import TinyVLAPolicy

    reference = TinyVLAPolicy.from_pretrained(toy_export).eval()
    with serving(toy_export, "openpi", "--max-batch", "4") as server:
        crashed = WebsocketClientPolicy("127.0.0.1", server.port)
        crashed._ws.send(crashed._packer.pack(libero_request(0)))  # a request, then gone before the reply
        crashed._ws.socket.close()
        half = WebsocketClientPolicy("127.0.0.1", server.port)
        half._ws.close()

        results: dict[int, list] = {0: [], 1: []}
        errors: list[BaseException] = []

        def drive(client_id: int) -> None:
            try:
                client = WebsocketClientPolicy("127.0.0.1", server.port)
                for step in range(6):
                    request = libero_request(10 * client_id + step)
                    results[client_id].append((request, client.infer(request)["actions"]))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=drive, args=(i,)) for i in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors and all(len(r) == 6 for r in results.values())
        for request, actions in results[0] + results[1]:  # each client got the actions of its own observation
            # greedy TinyVLA actions are bin centres (batched with the other client's or not): float32's own 1e-6
            np.testing.assert_allclose(actions, _greedy(reference, request), atol=1e-6)


def test_sampled_actions_follow_the_temperature(toy_export):
    request = libero_request(3)
    with serving(toy_export, "openpi", "--sample", "--temperature", "5.0") as server:
        client = WebsocketClientPolicy("127.0.0.1", server.port)
        assert client.get_server_metadata()["do_sample"] is True
        draws = np.stack([client.infer(request)["actions"] for _ in range(6)])
    assert len({d.tobytes() for d in draws}) > 1, "sampling at temperature 5 gives varied chunks"
    assert set(np.unique(draws).tolist()) <= set(torch.linspace(-1, 1, 11).tolist()), "the policy's bin centres"
