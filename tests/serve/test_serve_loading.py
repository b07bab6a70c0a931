"""What ``rlinf serve`` loads (a run's checkpoint with its config, the run's export), its mappings, and the
``rlinf serve`` command itself (a subprocess on localhost)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.serve.conftest import libero_request, serving

from rlinf_core.cli.main import main
from rlinf_core.contracts.observation import Observation
from rlinf_core.serve.errors import BadRequest, ServeError
from rlinf_core.serve.loading import LoadOptions, load_policy
from rlinf_core.serve.mapping import PRESETS, load_mapping, to_observation

ROOT = Path(__file__).resolve().parents[2]
RLINF = [sys.executable, "-c", "import sys; from rlinf_core.cli.main import main; sys.exit(main())"]
WebsocketClientPolicy = pytest.importorskip(
    "openpi_client.websocket_client_policy", reason="scripts/install.sh installs openpi-client"
).WebsocketClientPolicy


@pytest.fixture(scope="module")
def reach_run(tmp_path_factory) -> Path:
    """A two-step GRPO run of the toy config: its version dir has config.yaml, checkpoints/last.ckpt and policy/."""
    out = tmp_path_factory.mktemp("runs")
    main(
        [
            "fit",
            "--config",
            str(ROOT / "configs/toy/reach_grpo.yaml"),
            "--trainer.max_epochs=2",
            "--trainer.check_val_every_n_epoch=100",
            f"--trainer.logger.init_args.save_dir={out}",
            "--trainer.enable_progress_bar=false",
            "--model.init_args.rollout.show_progress=false",
            "--model.init_args.env.init_args.num_envs=8",
            "--model.init_args.rollout.max_steps_per_rollout_epoch=4",
            "--model.init_args.env.init_args.max_episode_steps=4",
            "--model.init_args.global_batch_size=16",
            "--model.init_args.micro_batch_size=16",
        ]
    )
    return next(out.glob("reach_grpo/version_*"))


def _reach_obs(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "image": rng.integers(0, 256, (32, 32, 3), dtype=np.uint8),
        "instruction": "reach the goal",
        "state": rng.standard_normal(4).astype(np.float32),
    }


def test_run_checkpoint_and_export_load_the_trained_weights(reach_run):
    from rlinf_core.builtin.toy_policy import TinyVLAPolicy

    exported = TinyVLAPolicy.from_pretrained(reach_run / "policy").eval()
    untrained = TinyVLAPolicy(action_dim=2, num_action_chunks=2, add_value_head=False)
    by_ckpt = load_policy(str(reach_run / "checkpoints" / "last.ckpt"), LoadOptions())
    by_dir = load_policy(str(reach_run), LoadOptions())  # a run dir: its newest good checkpoint
    by_export = load_policy(str(reach_run / "policy"), LoadOptions())
    assert (by_ckpt.source, by_dir.source, by_export.source) == ("checkpoint", "checkpoint", "export")
    for loaded in (by_ckpt, by_dir, by_export):
        for (name, mine), theirs in zip(loaded.policy.state_dict().items(), exported.state_dict().values()):
            torch.testing.assert_close(mine, theirs, rtol=0, atol=0, msg=name)
    assert any(not torch.equal(a, b) for a, b in zip(untrained.state_dict().values(), exported.state_dict().values()))


def test_a_run_checkpoint_served_over_rest_equals_the_export(reach_run):
    json_numpy = pytest.importorskip("json_numpy")
    requests = pytest.importorskip("requests")
    from rlinf_core.builtin.toy_policy import TinyVLAPolicy

    exported = TinyVLAPolicy.from_pretrained(reach_run / "policy").eval()
    payload = _reach_obs(1)
    with serving(reach_run / "checkpoints" / "last.ckpt", "openvla", "--mapping", "openvla-oft") as server:
        body = json_numpy.dumps(
            {"full_image": payload["image"], "instruction": payload["instruction"], "state": payload["state"]}
        )
        response = requests.post(f"http://127.0.0.1:{server.port}/act", data=body, timeout=60)
    want = exported.act(
        Observation(
            main_images=torch.from_numpy(payload["image"])[None],
            task_descriptions=[payload["instruction"]],
            states=torch.from_numpy(payload["state"])[None],
        ),
        do_sample=False,
    )
    np.testing.assert_array_equal(json_numpy.loads(response.text), want.actions[0].numpy())


def test_bad_settings_fail_in_one_line(reach_run, toy_export, tmp_path):
    with pytest.raises(ServeError, match="no such file"):
        load_policy(str(tmp_path / "nope"), LoadOptions())
    with pytest.raises(ServeError, match="TinyVLAPolicy has no setting unnorm_key; drop --unnorm-key"):
        load_policy(str(toy_export), LoadOptions(unnorm_key="libero_spatial"))
    (tmp_path / "anon").mkdir()
    (tmp_path / "anon" / "config.json").write_text("{}")
    with pytest.raises(ServeError, match="pass --policy-class"):
        load_policy(str(tmp_path / "anon"), LoadOptions())
    lone = tmp_path / "lone.ckpt"
    lone.symlink_to((reach_run / "checkpoints" / "last.ckpt").resolve())
    with pytest.raises(ServeError, match="no run config"):
        load_policy(str(lone), LoadOptions())
    with pytest.raises(ServeError, match="neither a preset"):
        load_mapping("kuka")


def test_aloha_preset_and_a_yaml_mapping(tmp_path):
    rng = np.random.default_rng(0)
    cams = {
        k: rng.integers(0, 256, (3, 24, 32), dtype=np.uint8)
        for k in ("cam_high", "cam_low", "cam_left_wrist", "cam_right_wrist")
    }
    aloha = {"images": cams, "state": np.zeros(14, np.float32), "prompt": "fold the towel"}
    obs = to_observation(aloha, PRESETS["aloha"])  # openpi's ALOHA client: CHW images nested under "images"
    assert torch.equal(obs.main_images[0], torch.from_numpy(cams["cam_high"]).permute(1, 2, 0))
    assert obs.wrist_images.shape == (1, 2, 24, 32, 3) and obs.states.shape == (1, 14)
    assert torch.equal(obs.wrist_images[0, 1], torch.from_numpy(cams["cam_right_wrist"]).permute(1, 2, 0))

    droid = {
        "observation/exterior_image_1_left": cams["cam_high"].transpose(1, 2, 0).copy(),
        "observation/wrist_image_left": cams["cam_low"].transpose(1, 2, 0).copy(),
        "observation/joint_position": np.arange(7, dtype=np.float64),
        "observation/gripper_position": np.ones(1),
        "prompt": "put the marker in the cup",
    }  # openpi: examples/droid/main.py:119-127
    obs = to_observation(droid, PRESETS["droid"])
    assert obs.states[0].tolist() == [0, 1, 2, 3, 4, 5, 6, 1] and obs.wrist_images.shape == (1, 24, 32, 3)

    spec = tmp_path / "kuka.yaml"
    spec.write_text(
        "image: cams.front\nwrist_images: cams.hand\nstate: [q, gripper]\nprompt: task\n"
        "image_size: 24x32\nstate_dim: 8\ndefault_prompt: stack the cubes\n"
    )
    mapping = load_mapping(str(spec))
    kuka = {
        "cams": {"front": cams["cam_low"].transpose(1, 2, 0), "hand": cams["cam_low"].transpose(1, 2, 0)},
        "q": np.arange(7, dtype=np.float64),
        "gripper": np.float32(0.5),
    }
    obs = to_observation(kuka, mapping)
    assert obs.task_descriptions == ["stack the cubes"] and obs.states.dtype == torch.float32
    assert obs.states[0].tolist() == [0, 1, 2, 3, 4, 5, 6, 0.5]
    with pytest.raises(BadRequest, match="has 7 values, expected 8"):
        to_observation({**kuka, "gripper": np.zeros(0)}, mapping)
    with pytest.raises(BadRequest, match="NaN or inf"):
        to_observation({**kuka, "q": np.full(7, np.nan)}, mapping)
    (tmp_path / "bad.yaml").write_text("image: x\ncamera: y\n")
    with pytest.raises(ServeError, match=r"unknown keys \['camera'\]"):
        load_mapping(str(tmp_path / "bad.yaml"))


def test_the_mapped_images_share_the_decoded_request_and_outlive_it_and_nan_or_inf_in_the_state_is_refused():
    """The images reach the policy without a copy (views of the bytes msgpack decoded, kept alive by the tensors
    after the message and the request are gone, with no torch warning about read-only memory); the state is a copy.
    The state's NaN / inf check (a float64 sum for short states, numpy's isfinite for long ones) agrees with numpy's
    on every vector, including finite float32 values whose float32 sum would overflow."""
    import gc
    import warnings

    from openpi_client import msgpack_numpy

    from rlinf_core.serve.codecs import msgpack_loads

    sent = libero_request(0)
    message = msgpack_numpy.packb(sent)
    request = msgpack_loads(message)  # as the server decodes it: read-only arrays
    assert not request["observation/image"].flags.writeable
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        obs = to_observation(request, PRESETS["libero"])
    for tensor, key in ((obs.main_images, "observation/image"), (obs.wrist_images, "observation/wrist_image")):
        assert np.shares_memory(tensor.numpy(), request[key]) and tensor.is_contiguous()
    assert not np.shares_memory(obs.states.numpy(), request["observation/state"])
    del request, message
    gc.collect()
    _ = [bytes(sent["observation/image"].nbytes) for _ in range(20)]  # reuse of freed memory would show below
    assert torch.equal(obs.main_images[0], torch.from_numpy(sent["observation/image"]))
    assert torch.equal(obs.wrist_images[0], torch.from_numpy(sent["observation/wrist_image"]))
    assert obs.states[0].tolist() == sent["observation/state"].tolist()

    big = np.finfo(np.float32).max
    rng = np.random.default_rng(0)
    for size in (1, 8, 4096, 4097, 20000):
        for poison in (None, np.nan, np.inf, -np.inf, "both infs", "huge"):
            state = rng.standard_normal(size).astype(np.float32)
            if poison == "both infs":
                state[[0, -1]] = np.inf, -np.inf
            elif poison == "huge":
                state[:] = big  # finite; its float32 sum is inf
            elif poison is not None:
                state[rng.integers(size)] = poison
            req = {**libero_request(0), "observation/state": state}
            if np.isfinite(state).all():
                assert to_observation(req, PRESETS["libero"]).states.shape == (1, size)
            else:
                with pytest.raises(BadRequest, match="holds NaN or inf"):
                    to_observation(req, PRESETS["libero"])


def test_rlinf_serve_command_serves_until_stopped(toy_export):
    import socket

    from rlinf_core.builtin.toy_policy import TinyVLAPolicy

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [*RLINF, "serve", "--policy", str(toy_export), "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 400
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as health:
                    assert health.read() == b"OK\n"
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "rlinf serve did not come up"
                time.sleep(0.5)
        request = libero_request(4)
        reply = WebsocketClientPolicy("127.0.0.1", port).infer(request)
        reference = TinyVLAPolicy.from_pretrained(toy_export).eval()
        obs = to_observation(request, PRESETS["libero"])
        np.testing.assert_array_equal(reply["actions"], reference.act(obs, do_sample=False).actions[0].numpy())
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert "TinyVLAPolicy (export" in err and "greedy" in err
    # docs/serving.md shows the lines it prints when ready, and what it prints per connection
    ready = [
        r"rlinf serve: \w+ \(export \S+\), openpi protocol on [\d.]+:\d+, mapping libero, actions \[\d+, \d+\], "
        r"greedy; reachable from this machine only \(--host 0\.0\.0\.0 to serve the network; add --api-key\)",
        r"rlinf serve: server listening on [\d.]+:\d+",
    ]
    doc = (Path(__file__).resolve().parents[2] / "docs" / "serving.md").read_text()
    shown = re.search(r"When it is ready the server prints (\w+) lines.*?```text\n(.*?)```", doc, re.S)
    assert shown and shown.group(1) == "two" and len(shown.group(2).splitlines()) == len(ready)
    for pattern, doc_line, line in zip(ready, shown.group(2).splitlines(), err.splitlines()):
        assert re.fullmatch(pattern, doc_line) and re.fullmatch(pattern, line), (doc_line, line)
    assert "connection open" in err and "connection from ('127.0.0.1'," in err

    bad = subprocess.run(
        [*RLINF, "serve", "--policy", str(toy_export), "--chunk", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("rlinf serve: error: --max-batch")


@pytest.mark.parametrize("protocol", ["openpi", "openvla"])
def test_a_busy_port_is_a_one_line_error(toy_export, protocol, capsys):
    import socket

    from rlinf_core.serve.command import serve_command

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        code = serve_command(
            [
                "--policy",
                str(toy_export),
                "--protocol",
                protocol,
                "--host",
                "127.0.0.1",
                "--port",
                str(busy.getsockname()[1]),
            ]
        )
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("rlinf serve: error: cannot listen on 127.0.0.1")
    assert torch.is_grad_enabled(), "serving turned autograd off in the caller's thread"


def test_a_missing_serving_package_is_a_one_line_error_before_the_load(toy_export, monkeypatch, capsys):
    from rlinf_core.serve.command import serve_command

    monkeypatch.setitem(sys.modules, "json_numpy", None)  # import json_numpy raises ImportError
    code = serve_command(["--policy", str(toy_export), "--protocol", "openvla", "--port", "0"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("rlinf serve: error: `rlinf serve` needs json_numpy"), err
    assert "pip install 'rlinf-core[serve]'" in err[-1]
