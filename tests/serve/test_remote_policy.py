"""RemotePolicy against ``rlinf serve`` on the built-in ReachEnv: a remote eval gives the episodes a local eval gives,
over both protocols, one observation per request or batched; ``rlinf validate`` writes the same tables through the
CLI; ``rlinf fit`` refuses the policy in one line; the client-side resize is openpi-client's, bit for bit."""

from __future__ import annotations

import json
from pathlib import Path

import lightning.pytorch  # noqa: F401 - binds its log handler to sys.stderr now, not to one test's capsys
import numpy as np
import pytest
import yaml
from tests.serve.conftest import serving

from rlinf_core.builtin.toy_env import ReachEnv
from rlinf_core.builtin.toy_policy import TinyVLAPolicy
from rlinf_core.cli.main import main
from rlinf_core.remote.policy import RemotePolicy
from rlinf_core.rl.evaluation import eval_passes

ROOT = Path(__file__).resolve().parents[2]


def _env(**kw) -> ReachEnv:
    return ReachEnv(num_envs=6, is_eval=True, auto_reset=True, max_episode_steps=16, trials_per_task=3, **kw)


def _by_state(records: list[dict]) -> list[dict]:
    return sorted(records, key=lambda r: r["reset_state_id"])


@pytest.mark.parametrize(
    "protocol, flags, requests_per_act",
    [("openpi", [], 6), ("openpi", ["--max-batch", "4"], 2), ("openvla", [], 6)],
    ids=["websocket", "websocket-batched", "rest"],
)
def test_a_remote_eval_gives_the_episodes_of_a_local_eval(reach, protocol, flags, requests_per_act):
    local = TinyVLAPolicy.from_pretrained(reach / "policy").eval()
    want = eval_passes(_env(), local, "cpu", passes=1, do_sample=False, temperature=1.0)
    mapping = str(reach / "mapping.yaml")
    with serving(reach / "policy", protocol, "--mapping", mapping, *flags) as server:
        scheme = "ws" if protocol == "openpi" else "http"
        policy = RemotePolicy(f"{scheme}://127.0.0.1:{server.port}", action_dim=2, num_action_chunks=4, mapping=mapping)
        try:
            got = eval_passes(_env(), policy, "cpu", passes=1, do_sample=False, temperature=1.0)
            metrics = policy.pop_metrics()
        finally:
            policy.close()
    assert len(got) == 9 and _by_state(got) == _by_state(want)
    acts = metrics["remote/requests"] / requests_per_act
    assert acts == int(acts) >= 4 and metrics["remote/restarts"] == 0
    assert 0 < metrics["remote/latency_p50_ms"] <= metrics["remote/latency_p99_ms"]


def test_the_chunk_is_cut_to_what_the_eval_executes(reach):
    """A server answering chunks of 4 with an eval executing 2 per request: the first 2, as openpi's LIBERO client
    executes ``replan_steps`` of each chunk; the eval stops in one line when the server's chunks are too short."""
    mapping = str(reach / "mapping.yaml")
    obs = _env().reset()
    local = TinyVLAPolicy.from_pretrained(reach / "policy").eval()
    with serving(reach / "policy", "openpi", "--mapping", mapping) as server:
        url = f"ws://127.0.0.1:{server.port}"
        short = RemotePolicy(url, action_dim=2, num_action_chunks=2, mapping=mapping)
        too_long = RemotePolicy(url, action_dim=2, num_action_chunks=5, mapping=mapping)
        try:
            got = short.act(obs, do_sample=False).actions
            with pytest.raises(ValueError, match="chunks of 4 actions, this eval executes 5 per request"):
                too_long.act(obs, do_sample=False)
        finally:
            short.close()
            too_long.close()
    np.testing.assert_array_equal(got.numpy(), local.act(obs, do_sample=False).actions[:, :2].numpy())


def _config(tmp_path: Path, policy: dict, name: str) -> Path:
    cfg = yaml.safe_load((ROOT / "configs/toy/reach_grpo.yaml").read_text())
    cfg["trainer"]["logger"]["init_args"] = {"save_dir": str(tmp_path / "runs"), "name": name}
    cfg["model"]["init_args"]["policy"] = policy
    grid = {"num_envs": 6, "is_eval": True, "auto_reset": True, "max_episode_steps": 16, "trials_per_task": 3}
    cfg["model"]["init_args"]["eval_env"] = {"class_path": "ReachEnv", "init_args": grid}
    cfg["model"]["init_args"]["rollout"]["max_steps_per_rollout_epoch"] = 24
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _run(capsys, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


def test_rlinf_validate_writes_the_tables_of_a_local_eval_and_fit_refuses(reach, tmp_path, capsys):
    export = {"class_path": "TinyVLAPolicy", "init_args": {"model_path": str(reach / "policy")}}
    local = _config(tmp_path, export, "local")
    assert _run(capsys, "validate", "--config", str(local))[0] == 0
    mapping = str(reach / "mapping.yaml")
    settings = {"url": "ws://127.0.0.1:1", "action_dim": 2, "num_action_chunks": 4, "mapping": mapping}
    remote_policy = {"class_path": "RemotePolicy", "init_args": settings}
    remote = _config(tmp_path, remote_policy, "remote")
    with serving(reach / "policy", "openpi", "--mapping", str(reach / "mapping.yaml")) as server:
        url = f"--model.init_args.policy.init_args.url=ws://127.0.0.1:{server.port}"
        code, err = _run(capsys, "validate", "--config", str(remote), url)
        assert code == 0, err[-2000:]
        code, err = _run(capsys, "fit", "--config", str(remote), url)
    assert code == 2 and err.strip().splitlines()[-1] == (
        "rlinf: error: model.init_args.policy: RemotePolicy is eval-only, it has no weights to train (a policy served "
        "elsewhere); evaluate it with `rlinf validate --config ...`"
    )
    tables = {}
    for name in ("local", "remote"):
        (table,) = (tmp_path / "runs" / name).glob("version_*/eval/eval_epoch0.json")
        tables[name] = json.loads(table.read_text())
        tables[name]["md"] = table.with_suffix(".md").read_text()
    assert tables["remote"]["per_task"] == tables["local"]["per_task"]
    assert tables["remote"]["md"] == tables["local"]["md"]
    assert sum(row["num_trajectories"] for row in tables["remote"]["per_task"].values()) == 9
    latency = tables["remote"]["metrics"]
    assert 0 < latency["eval/remote/latency_p50_ms"] <= latency["eval/remote/latency_p99_ms"]
    assert latency["eval/success_once"] == tables["local"]["metrics"]["eval/success_once"]


def test_the_client_resize_is_openpi_clients_bit_for_bit():
    image_tools = pytest.importorskip("openpi_client.image_tools", reason="scripts/install.sh installs openpi-client")
    from rlinf_core.remote.images import resize_with_pad

    rng = np.random.default_rng(0)
    for h, w in [(256, 256), (480, 640), (64, 64), (224, 224), (100, 37)]:
        image = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        np.testing.assert_array_equal(resize_with_pad(image, 224, 224), image_tools.resize_with_pad(image, 224, 224))


@pytest.mark.parametrize(
    "config, mapping, chunk",
    [
        ("libero/eval/remote_spatial.yaml", "libero", 5),
        ("metaworld/remote_mt50.yaml", "openvla-oft", 1),
        ("maniskill/remote_ood_plate25.yaml", "openvla-oft", 8),
    ],
)
def test_the_shipped_remote_configs_build_their_policy_without_a_network(config, mapping, chunk):
    cfg = yaml.safe_load((ROOT / "configs" / config).read_text())
    args = cfg["model"]["init_args"]
    policy = RemotePolicy(**args["policy"]["init_args"])  # no connection until the first act
    assert policy.client is None and policy.eval_only and policy.protocol == "openpi"
    assert (policy.mapping_name, policy.num_action_chunks, policy.action_dim) == (mapping, chunk, 7)
    eval_env = args["eval_env"]["init_args"]
    assert eval_env["is_eval"] and args["rollout"]["max_steps_per_rollout_epoch"] % chunk == 0
    if config.startswith("maniskill"):  # the OOD table's columns, one batched request or 64 in flight per chunk
        assert sorted({t.split("/")[0] for t in eval_env["tasks"]}) == ["Position", "Semantic", "Vision"]
        assert len(eval_env["tasks"]) == 13 and policy.connections == eval_env["num_envs"] == 64
    if config.startswith("libero"):  # openpi's LIBERO client: 224 padded images, 10 settle steps, 220 steps
        assert policy.image_size == (224, 224) and eval_env["sim"]["settle_steps"] == 10
        assert eval_env["max_episode_steps"] == 220 and eval_env["render"]["image_size"] == 256
