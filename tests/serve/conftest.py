"""Helpers of the ``rlinf serve`` tests: servers on localhost, on a free port, always shut down."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
import torch
import yaml

from rlinf_core.builtin.toy_policy import TinyVLAPolicy
from rlinf_core.contracts.observation import Observation


@contextmanager
def serving(policy, protocol: str = "openpi", *flags: str):
    """``rlinf serve --policy POLICY --protocol PROTOCOL FLAGS`` in this process, on 127.0.0.1 and a free port."""
    from rlinf_core.serve.command import build_parser, make_server

    opts = build_parser().parse_args(
        ["--policy", str(policy), "--protocol", protocol, "--host", "127.0.0.1", "--port", "0", *flags]
    )
    server = make_server(opts).start()
    try:
        yield server
    finally:
        server.stop()
        server.runner.close()


def libero_request(seed: int = 0, size: int = 64, prompt: str = "put the black bowl on the plate") -> dict:
    """What openpi's LIBERO client sends (openpi: examples/libero/main.py:130-141)."""
    rng = np.random.default_rng(seed)
    return {
        "observation/image": rng.integers(0, 256, (size, size, 3), dtype=np.uint8),
        "observation/wrist_image": rng.integers(0, 256, (size, size, 3), dtype=np.uint8),
        "observation/state": rng.standard_normal(8).astype(np.float32),
        "prompt": prompt,
    }


def libero_observation(request: dict) -> Observation:
    """The same observation built by hand, as the LIBERO env hands it to the policy."""
    return Observation(
        main_images=torch.from_numpy(request["observation/image"].copy())[None],
        task_descriptions=[request["prompt"]],
        wrist_images=torch.from_numpy(request["observation/wrist_image"].copy())[None],
        states=torch.from_numpy(request["observation/state"].copy())[None],
    )


@pytest.fixture(scope="session")
def toy_export(tmp_path_factory):
    """An exported TinyVLAPolicy (8-D state, chunks of 4 three-D actions)."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("toy") / "policy"
    TinyVLAPolicy(action_dim=3, num_action_chunks=4, state_dim=8).save_pretrained(path)
    return path


REACH_MAPPING = {"image": "observation/image", "state": ["observation/state"], "prompt": "prompt"}


@pytest.fixture(scope="module")
def reach(tmp_path_factory):
    """TinyVLAPolicy exports for ReachEnv (chunks of 4, 4-D state; 2-D actions in ``policy``, 3-D in
    ``policy_3d``) and a mapping file for them."""
    root = tmp_path_factory.mktemp("reach")
    torch.manual_seed(0)
    TinyVLAPolicy(action_dim=2, num_action_chunks=4, state_dim=4).save_pretrained(root / "policy")
    TinyVLAPolicy(action_dim=3, num_action_chunks=4, state_dim=4).save_pretrained(root / "policy_3d")
    (root / "mapping.yaml").write_text(yaml.safe_dump(REACH_MAPPING))
    return root
