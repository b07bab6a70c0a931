"""``rlinf serve``: parse the flags, load the policy, serve until interrupted."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from rlinf_core.foundation.optional_deps import MissingDependencyError
from rlinf_core.serve.errors import ServeError, serve_dependency

PROTOCOLS = ("openpi", "openvla")
DEFAULT_MAPPING = {"openpi": "libero", "openvla": "openvla"}
API_KEY_ENV = "RLINF_SERVE_API_KEY"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def build_parser() -> argparse.ArgumentParser:
    from rlinf_core.serve.mapping import PRESETS

    parser = argparse.ArgumentParser(
        prog="rlinf serve",
        description="Serve a trained policy over openpi's websocket protocol (openpi-client's WebsocketClientPolicy) "
        "or OpenVLA's REST deploy protocol (POST /act). See docs/serving.md.",
    )
    parser.add_argument(
        "--policy",
        required=True,
        help="exported policy directory (config.json + safetensors), "
        "a run checkpoint (last.ckpt) or a run directory (its newest good checkpoint)",
    )
    parser.add_argument("--protocol", choices=PROTOCOLS, default="openpi", help="wire protocol (default openpi)")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1: this machine "
        "only; --host 0.0.0.0 serves the network, best with --api-key)",
    )
    parser.add_argument("--port", type=int, default=8000, help="TCP port (default 8000, as openpi and OpenVLA)")
    parser.add_argument(
        "--mapping",
        default=None,
        help=f"request keys -> observation: a preset "
        f"({', '.join(PRESETS)}; default libero for openpi, openvla for openvla) or a YAML file",
    )
    parser.add_argument("--image-size", default=None, help="refuse images that are not HxW (e.g. 224x224)")
    parser.add_argument("--default-prompt", default=None, help="instruction for requests that carry none")
    parser.add_argument("--policy-class", default=None, help="policy class (default: recorded in the checkpoint)")
    parser.add_argument("--config", default=None, help="the run's config.yaml for a checkpoint (default: beside it)")
    parser.add_argument("--unnorm-key", default=None, help="dataset statistics to un-normalise actions with")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other policy setting, repeatable: NAME=VALUE or GROUP.FIELD=VALUE "
        "(e.g. inputs.tokenizer_path=/path/paligemma_tokenizer.model); VALUE is read as YAML",
    )
    parser.add_argument("--chunk", type=int, default=None, help="actions per reply (the policy's num_action_chunks)")
    parser.add_argument("--sample", action="store_true", help="sample actions (default: greedy)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (with --sample)")
    parser.add_argument("--device", default="cpu", help="torch device (cpu, cuda, cuda:1)")
    parser.add_argument("--precision", default=None, help="the policy's precision setting (fp32, bf16, ...)")
    parser.add_argument("--max-batch", type=int, default=1, help="run up to N waiting requests as one batch")
    parser.add_argument("--max-message-mb", type=int, default=16, help="largest request accepted (MiB, default 16)")
    parser.add_argument(
        "--max-connections",
        type=int,
        default=64,
        help="clients connected at once; more are refused with HTTP 503 (default 64)",
    )
    parser.add_argument(
        "--api-key",
        default=None,
        help=f"require this key (default: ${API_KEY_ENV}); clients send "
        "the header 'Authorization: Api-Key <key>' (openpi-client's api_key)",
    )
    return parser


def make_server(opts: argparse.Namespace):
    """The (not yet started) server the options describe."""
    from rlinf_core.serve.loading import LoadOptions, load_policy
    from rlinf_core.serve.mapping import load_mapping, with_overrides
    from rlinf_core.serve.rest_server import OpenVLARestServer
    from rlinf_core.serve.runner import InferenceSettings, PolicyRunner
    from rlinf_core.serve.security import ServerLimits
    from rlinf_core.serve.websocket_server import OpenPIWebsocketServer

    if opts.max_batch < 1 or opts.temperature <= 0 or (opts.chunk is not None and opts.chunk < 1):
        raise ServeError("--max-batch and --chunk must be >= 1 and --temperature > 0")
    if opts.max_connections < 1 or opts.max_message_mb < 1:
        raise ServeError("--max-connections and --max-message-mb must be >= 1")
    mapping = with_overrides(
        load_mapping(opts.mapping or DEFAULT_MAPPING[opts.protocol]), opts.image_size, opts.default_prompt
    )
    for module in ("websockets", "msgpack") if opts.protocol == "openpi" else ("json_numpy",):
        serve_dependency(module)  # before the (slow) policy load
    load = LoadOptions(
        policy_class=opts.policy_class,
        config=opts.config,
        unnorm_key=opts.unnorm_key,
        num_action_chunks=opts.chunk,
        precision=opts.precision,
        device=opts.device,
        settings=parse_settings(opts.set),
    )
    loaded = load_policy(opts.policy, load)
    runner = PolicyRunner(loaded, mapping, InferenceSettings(opts.sample, opts.temperature, opts.max_batch))
    server_cls = OpenPIWebsocketServer if opts.protocol == "openpi" else OpenVLARestServer
    limits = ServerLimits(
        max_message_mb=opts.max_message_mb, max_connections=opts.max_connections, api_key=api_key(opts)
    )
    try:
        return server_cls(runner, opts.host, opts.port, limits)
    except OSError as exc:
        runner.close()
        raise ServeError(f"cannot listen on {opts.host}:{opts.port}: {exc.strerror or exc}") from None


def parse_settings(items: list[str]) -> dict:
    """``--set KEY=VALUE`` items as ``{KEY: value}``, each VALUE read as YAML (``3``, ``true``, ``[1, 2]``)."""
    import yaml

    settings = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip() or not all(part.isidentifier() for part in key.strip().split(".")):
            raise ServeError(f"--set {item!r}: expected KEY=VALUE or GROUP.FIELD=VALUE (inputs.tokenizer_path=...)")
        try:
            settings[key.strip()] = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ServeError(f"--set {key}: {text!r} is not a YAML value ({str(exc).splitlines()[0]})") from None
    return settings


def api_key(opts: argparse.Namespace) -> str | None:
    key = opts.api_key if opts.api_key is not None else os.environ.get(API_KEY_ENV)
    if key is not None and not key.strip():
        raise ServeError(f"--api-key / ${API_KEY_ENV} is empty; give a key or leave both unset")
    return key


def exposure_note(host: str, key: str | None) -> str:
    """What the bind address and key mean, printed on start."""
    if host in LOOPBACK:
        return "this machine only (--host 0.0.0.0 to serve the network; add --api-key)"
    if key:
        return "the network, clients must send the API key"
    return f"the network, with NO API KEY (set --api-key or ${API_KEY_ENV})"


def serve_command(argv: list[str]) -> int:
    opts = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="rlinf serve: %(message)s")
    server = None
    try:
        server = make_server(opts)
        policy, loaded = server.runner.policy, server.runner.loaded
        print(
            f"rlinf serve: {type(policy).__name__} ({loaded.source} {loaded.path}), {opts.protocol} protocol on "
            f"{opts.host}:{opts.port}, mapping {opts.mapping or DEFAULT_MAPPING[opts.protocol]}, actions "
            f"[{policy.num_action_chunks}, {policy.action_dim}], {'sampled' if opts.sample else 'greedy'}; "
            f"reachable from {exposure_note(opts.host, server.limits.api_key)}",
            file=sys.stderr,
            flush=True,
        )
        if opts.protocol == "openpi":
            import asyncio

            try:
                asyncio.run(server.serve_forever())
            except OSError as exc:  # the websocket port is bound when serving starts
                raise ServeError(f"cannot listen on {opts.host}:{opts.port}: {exc.strerror or exc}") from None
        else:
            server.serve_forever()
    except (ServeError, MissingDependencyError) as exc:
        print(f"rlinf serve: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rlinf serve: stopped", file=sys.stderr)
    finally:
        if server is not None:
            server.runner.close()
    return 0
