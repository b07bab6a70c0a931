"""OpenVLA's REST client (``requests`` + ``json_numpy``, as openvla's vla-scripts/deploy.py:13-24 shows it)
against ``rlinf serve --protocol openvla``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tests.serve.conftest import serving

from rlinf_core.contracts.observation import Observation

requests = pytest.importorskip("requests")
json_numpy = pytest.importorskip("json_numpy")


def _post(port: int, payload, **kw):
    return requests.post(f"http://127.0.0.1:{port}/act", json=payload, timeout=60, **kw)


def _payload(seed: int, size: int = 64, instruction: str = "pick up the red block") -> dict:
    rng = np.random.default_rng(seed)
    return {"image": rng.integers(0, 256, (size, size, 3), dtype=np.uint8), "instruction": instruction}


def test_openvla_rest_client_gets_the_greedy_action(monkeypatch):
    for name in ("dumps", "loads", "dump", "load"):  # json_numpy.patch() below replaces these: restored after the test
        monkeypatch.setattr(json, name, getattr(json, name))
    from rlinf_policy_openvla.policy import OpenVLAPolicy
    from rlinf_policy_openvla.testing import tiny_checkpoint

    path = tiny_checkpoint(kind="openvla")
    reference = OpenVLAPolicy.from_pretrained(path).eval()
    json_numpy.patch()  # the client side of deploy.py: json= and .json() carry numpy arrays
    with serving(path, "openvla") as server:
        for seed, key in ((0, None), (1, "libero_spatial_no_noops")):
            payload = {**_payload(seed), **({"unnorm_key": key} if key else {})}
            response = _post(server.port, payload)
            assert response.status_code == 200, response.text
            action = response.json()
            want = reference.act(
                Observation(
                    main_images=torch.from_numpy(payload["image"])[None], task_descriptions=[payload["instruction"]]
                ),
                do_sample=False,
            )
            assert isinstance(action, np.ndarray) and action.shape == (7,)
            np.testing.assert_array_equal(action, want.actions[0, 0].numpy())
            timing = response.headers["Server-Timing"]
            assert all(f"{part};dur=" in timing for part in ("decode", "preprocess", "model", "encode"))


def test_double_encoded_requests_and_chunks_of_an_oft_payload():
    from rlinf_policy_openvla.oft_policy import OpenVLAOFTPolicy
    from rlinf_policy_openvla.testing import tiny_checkpoint

    path = tiny_checkpoint(kind="oft")
    reference = OpenVLAOFTPolicy.from_pretrained(path, num_action_chunks=4).eval()
    payload = _payload(2)
    payload = {"full_image": payload["image"], "instruction": payload["instruction"]}  # openvla-oft's deploy payload
    with serving(path, "openvla", "--mapping", "openvla-oft", "--chunk", "4") as server:
        response = _post(server.port, {"encoded": json_numpy.dumps(payload)})  # deploy.py:93-96, no patch needed
    assert response.status_code == 200, response.text
    actions = json_numpy.loads(response.json())
    want = reference.act(
        Observation(
            main_images=torch.from_numpy(payload["full_image"])[None], task_descriptions=[payload["instruction"]]
        ),
        do_sample=False,
    )
    assert actions.shape == (4, 7)
    np.testing.assert_array_equal(actions, want.actions[0].numpy())


def test_bad_rest_requests_get_400_and_the_server_keeps_serving(toy_export):
    good = json_numpy.dumps({"image": _payload(0)["image"], "instruction": "go", "state": np.zeros(8, np.float32)})
    with serving(toy_export, "openvla", "--mapping", "openvla-oft", "--image-size", "64") as server:
        url = f"http://127.0.0.1:{server.port}"

        def post(body: bytes | str):
            return requests.post(f"{url}/act", data=body, headers={"Content-Type": "application/json"}, timeout=60)

        cases = [
            (json_numpy.dumps({"instruction": "go"}), "missing key 'full_image'"),
            (json_numpy.dumps({"full_image": np.zeros((64, 64), np.uint8), "instruction": "go"}), "uint8 [H, W, 3]"),
            (json_numpy.dumps({"full_image": np.zeros((60, 64, 3), np.uint8), "instruction": "go"}), "is 60x64"),
            (
                json_numpy.dumps(
                    {"full_image": np.zeros((64, 64, 3), np.uint8), "instruction": "go", "unnorm_key": "bridge_orig"}
                ),
                "this server un-normalises with None",
            ),
            (b'{"full_image": 1, "instruction": "\xff"}', "not UTF-8"),
            ("{not json", "not json-numpy JSON"),
            (json.dumps({"encoded": 5}), "double-encoded"),
            (json_numpy.dumps([1, 2]), "must be a dict"),
        ]
        for body, message in cases:
            response = post(body)
            assert response.status_code == 400 and message in response.json()["error"], response.text
        response = post(good.replace('"image"', '"full_image"'))
        assert response.status_code == 200 and json_numpy.loads(response.text).shape == (4, 3)
        assert requests.get(f"{url}/healthz", timeout=10).text == "OK\n"
        assert requests.get(f"{url}/act", timeout=10).status_code == 404
