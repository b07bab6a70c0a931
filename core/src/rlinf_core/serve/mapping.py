"""Protocol observation dicts -> :class:`~rlinf_core.contracts.observation.Observation` (batch of one).

A mapping names the request keys of each observation field. A key is looked up literally first
(``observation/image``), then as a dotted path into nested dicts (``images.cam_high``).

Conventions (the ones the env plugins hand the policies): images arrive **upright RGB uint8**, as the
env plugins produce them after their flips (LIBERO renders upside down; its env and openpi's LIBERO
client both turn it by 180°, openpi: examples/libero/main.py:115-116), so the server never flips. The
**policy resizes** (OpenVLA(-OFT): squash to its input size; π0: resize with padding), so any size is
accepted unless the mapping or ``--image-size`` fixes one. The prompt is the raw task text: the policy
applies its own template and lower-casing. States are float32, concatenated in the listed order.

Images are not copied: the observation's image tensors share the request's memory (for a decoded message, the
read-only bytes msgpack made, kept alive by the tensors), as openpi's server hands its policy the decoded arrays. A
policy only reads its observation (:meth:`~rlinf_core.contracts.policy.Policy.act`). States are copied (they are
small and checked for NaN / inf).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from rlinf_core.contracts.observation import Observation
from rlinf_core.serve.errors import BadRequest, ServeError
from rlinf_core.serve.security import clip

MIN_IMAGE_SIDE = 8
BATCH_KEY = "batch_size"  #: the key of a batched request: how many observations it holds


@dataclass(frozen=True)
class ObsMapping:
    """Where each observation field is in a request.

    Args:
        image: key of the main (third-person) camera, uint8 ``[H, W, 3]`` (``[3, H, W]`` with ``channels_first``).
        prompt: key of the instruction text (UTF-8).
        wrist_images: keys of wrist cameras, in the order the policy's image slots take them.
        state: keys of the proprioceptive state parts, concatenated into one float32 vector.
        optional: fields (``wrist_images``, ``state``) that may be left out of a request.
        channels_first: images are ``[3, H, W]`` (openpi's ALOHA client) instead of ``[H, W, 3]``.
        image_size: ``[H, W]`` every image must have (None: any size, the policy resizes).
        state_dim: length the concatenated state must have (None: not checked).
        state_sizes: length of each state part, in the order of ``state`` (checked when given; a remote policy
            splits the env's state with it).
        default_prompt: instruction used when a request has none (None: the prompt is required).
    """

    image: str
    prompt: str = "prompt"
    wrist_images: tuple[str, ...] = ()
    state: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    channels_first: bool = False
    image_size: tuple[int, int] | None = None
    state_dim: int | None = None
    state_sizes: tuple[int, ...] = ()
    default_prompt: str | None = None

    def keys(self) -> list[str]:
        return [self.image, *self.wrist_images, *self.state, self.prompt]


# openpi's example clients (openpi: examples/libero/main.py:130-141, examples/droid/main.py:119-127,
# examples/aloha_real/env.py:40-53 with AlohaInputs taking cam_high + both wrists) and OpenVLA's deploy
# payloads (openvla: vla-scripts/deploy.py:99-100; openvla-oft: vla-scripts/deploy.py:85-89).
PRESETS: dict[str, ObsMapping] = {
    "libero": ObsMapping(
        image="observation/image",
        wrist_images=("observation/wrist_image",),
        state=("observation/state",),
    ),
    "droid": ObsMapping(
        image="observation/exterior_image_1_left",
        wrist_images=("observation/wrist_image_left",),
        state=("observation/joint_position", "observation/gripper_position"),
        state_sizes=(7, 1),
    ),
    "aloha": ObsMapping(
        image="images.cam_high",
        wrist_images=("images.cam_left_wrist", "images.cam_right_wrist"),
        state=("state",),
        channels_first=True,
    ),
    "openvla": ObsMapping(image="image", prompt="instruction"),
    "openvla-oft": ObsMapping(
        image="full_image",
        prompt="instruction",
        wrist_images=("wrist_image",),
        state=("state",),
        optional=("wrist_images", "state"),
    ),
}


def load_mapping(spec: str) -> ObsMapping:
    """A preset name or a YAML file with :class:`ObsMapping`'s fields."""
    if spec in PRESETS:
        return PRESETS[spec]
    path = Path(spec)
    if not path.is_file():
        raise ServeError(f"--mapping {spec!r} is neither a preset ({', '.join(PRESETS)}) nor a YAML file")

    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ServeError(f"--mapping {path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(raw, dict) or "image" not in raw:
        raise ServeError(f"--mapping {path}: expected a mapping with at least an 'image' key")
    known = {f.name for f in fields(ObsMapping)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ServeError(f"--mapping {path}: unknown keys {unknown} (known: {', '.join(sorted(known))})")
    for key in ("wrist_images", "state", "optional", "state_sizes"):
        if isinstance(raw.get(key), str):
            raw[key] = [raw[key]]
        if key in raw:
            raw[key] = tuple(raw[key] or ())
    if raw.get("image_size") is not None:
        raw["image_size"] = _image_size(raw["image_size"], f"--mapping {path}: image_size")
    mapping = ObsMapping(**raw)
    check_mapping(mapping, f"--mapping {path}")
    return mapping


def check_mapping(mapping: ObsMapping, where: str) -> None:
    """Refuse (:class:`ServeError`) a mapping whose keys collide with the batch key or whose state sizes do not fit."""
    if BATCH_KEY in mapping.keys():
        raise ServeError(f"{where}: {BATCH_KEY!r} is the batched-request key; name the field another way")
    sizes = mapping.state_sizes
    if sizes and (len(sizes) != len(mapping.state) or not all(isinstance(n, int) and n >= 1 for n in sizes)):
        keys = list(mapping.state)
        raise ServeError(f"{where}: state_sizes {list(sizes)} must give one size >= 1 per state key {keys}")


def _image_size(value: Any, what: str) -> tuple[int, int]:
    if isinstance(value, int):
        value = (value, value)
    if isinstance(value, str):
        value = value.lower().replace("x", " ").replace(",", " ").split()
        value = value * 2 if len(value) == 1 else value  # "224": square
    try:
        h, w = (int(v) for v in value)
    except (TypeError, ValueError):
        raise ServeError(f"{what} must be H W (e.g. 224x224), got {value!r}") from None
    return h, w


def with_overrides(mapping: ObsMapping, image_size: str | None = None, default_prompt: str | None = None) -> ObsMapping:
    changes: dict[str, Any] = {}
    if image_size:
        changes["image_size"] = _image_size(image_size, "--image-size")
    if default_prompt is not None:
        changes["default_prompt"] = default_prompt
    return replace(mapping, **changes)


_MISSING = object()


def _lookup(request: dict, key: str) -> Any:
    if key in request:
        return request[key]
    node: Any = request
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


_UINT8 = np.dtype(np.uint8)
_FLOAT32 = np.dtype(np.float32)
_SUMMED_IN_PYTHON = 4096  # a state this short is checked for NaN / inf with Python floats: cheaper than numpy's ufuncs


def _image(value: Any, key: str, mapping: ObsMapping) -> np.ndarray:
    channels = 0 if mapping.channels_first else 2
    if not (isinstance(value, np.ndarray) and value.dtype == _UINT8 and value.ndim == 3 and value.shape[channels] == 3):
        layout = "[3, H, W]" if mapping.channels_first else "[H, W, 3]"
        if not isinstance(value, np.ndarray):
            raise BadRequest(f"{key} must be a uint8 {layout} numpy array, got {type(value).__name__}")
        raise BadRequest(f"{key} must be a uint8 {layout} RGB image, got {value.dtype} {list(value.shape)}")
    img = np.moveaxis(value, 0, -1) if mapping.channels_first else value
    h, w, _ = img.shape
    if mapping.image_size is not None and (h, w) != tuple(mapping.image_size):
        want = "x".join(map(str, mapping.image_size))
        raise BadRequest(f"{key} is {h}x{w}, this server expects {want} images (its --image-size / mapping)")
    if h < MIN_IMAGE_SIDE or w < MIN_IMAGE_SIDE:
        raise BadRequest(f"{key} is {h}x{w}; images must be at least {MIN_IMAGE_SIDE} pixels a side")
    return img if img.flags.c_contiguous else np.ascontiguousarray(img)  # a view of the request when it can be


_read_only_warning_spent = False


def _image_tensor(img: np.ndarray) -> torch.Tensor:
    """``torch.from_numpy``, also over a read-only request buffer. torch warns once per process that writing to such
    a tensor is undefined; policies never write their observation, so that one warning is not shown to the user."""
    global _read_only_warning_spent
    if _read_only_warning_spent or img.flags.writeable:
        return torch.from_numpy(img)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        tensor = torch.from_numpy(img)
    _read_only_warning_spent = True
    return tensor


def _all_finite(arr: np.ndarray) -> bool:
    """Whether a float32 vector holds no NaN or inf. Up to ``_SUMMED_IN_PYTHON`` values their sum in float64 decides
    exactly (float32 values cannot overflow it; a NaN or an inf, or both signs of inf, make it non-finite)."""
    if arr.size <= _SUMMED_IN_PYTHON:
        return math.isfinite(sum(arr.tolist()))
    return bool(np.isfinite(arr).all())


def _state_part(value: Any, key: str) -> np.ndarray:
    if type(value) is np.ndarray and value.dtype == _FLOAT32 and value.ndim == 1:  # what clients send: one copy
        arr = value.copy()
    else:
        arr = np.asarray(value) if isinstance(value, (np.ndarray, np.generic, int, float, list)) else None
        if arr is None or arr.dtype.kind not in "fiub" or arr.ndim > 1:
            got = f"{arr.dtype} {list(arr.shape)}" if arr is not None else type(value).__name__
            raise BadRequest(f"{key} must be a 1-D numeric array, got {got}")
        arr = arr.astype(np.float32).reshape(-1)
    if not _all_finite(arr):
        raise BadRequest(f"{key} holds NaN or inf")
    return arr


def _prompt(value: Any, key: str) -> str:
    if type(value) is str:
        return value
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, (bytes, np.bytes_)):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise BadRequest(f"{key} is not valid UTF-8 text") from None
    if not isinstance(value, str):
        raise BadRequest(f"{key} must be a string, got {type(value).__name__}")
    return value


def _field(request: dict, key: str, field_name: str, mapping: ObsMapping) -> Any:
    value = _lookup(request, key)
    if value is _MISSING and field_name not in mapping.optional:
        have = ", ".join(sorted(map(str, request))) or "none"
        raise BadRequest(f"missing key {key!r} (this server's mapping expects {mapping.keys()}; got {have})")
    return value


def to_observation(request: Any, mapping: ObsMapping) -> Observation:
    """The request as a batch-of-one :class:`Observation` (its images share the request's memory);
    :class:`BadRequest` names the first problem."""
    if not isinstance(request, dict):
        raise BadRequest(f"the request must be a dict of observation keys, got {type(request).__name__}")
    main = _image(_field(request, mapping.image, "image", mapping), mapping.image, mapping)
    wrists = []
    for key in mapping.wrist_images:
        value = _field(request, key, "wrist_images", mapping)
        if value is not _MISSING:
            wrists.append((key, value))
    for i, (key, value) in enumerate(wrists):  # loops, not comprehensions: no function object per request
        wrists[i] = _image(value, key, mapping)
    if len(wrists) > 1 and len({w.shape for w in wrists}) > 1:
        raise BadRequest(f"wrist images {list(mapping.wrist_images)} must share one size")
    parts = []
    for key in mapping.state:
        value = _field(request, key, "state", mapping)
        if value is not _MISSING:
            parts.append((key, value))
    for i, (key, value) in enumerate(parts):
        parts[i] = _state_part(value, key)
    if len(parts) not in (0, len(mapping.state)):
        raise BadRequest(f"send all of the state keys {list(mapping.state)} or none")
    for key, part, size in zip(mapping.state, parts, mapping.state_sizes if parts else ()):
        if part.shape[0] != size:
            raise BadRequest(f"{key} has {part.shape[0]} values, expected {size}")
    state = (parts[0] if len(parts) == 1 else np.concatenate(parts)) if parts else None  # parts are copies already
    if state is not None and mapping.state_dim is not None and state.shape[0] != mapping.state_dim:
        raise BadRequest(
            f"the state ({' + '.join(mapping.state)}) has {state.shape[0]} values, expected {mapping.state_dim}"
        )
    raw_prompt = _lookup(request, mapping.prompt)
    if raw_prompt is _MISSING:
        if mapping.default_prompt is None:
            raise BadRequest(f"missing key {mapping.prompt!r} (the instruction text)")
        raw_prompt = mapping.default_prompt
    prompt = _prompt(raw_prompt, mapping.prompt)
    wrist_t = None
    if len(wrists) == 1:
        wrist_t = _image_tensor(wrists[0][None])  # one camera: [1, H, W, 3]
    elif wrists:
        wrist_t = torch.from_numpy(np.stack(wrists)[None])  # [1, N, H, W, 3], a copy
    return Observation(
        main_images=_image_tensor(main[None]),
        task_descriptions=[prompt],
        wrist_images=wrist_t,
        states=torch.from_numpy(state[None]) if state is not None else None,
    )


def to_observations(request: Any, mapping: ObsMapping, max_batch: int) -> tuple[Observation, bool]:
    """The request as an :class:`Observation` and whether it was a batched request.

    A batched request (``rlinf serve --max-batch N``, what rlinf's remote policy sends) holds ``batch_size`` = n <= N
    observations: every array under the mapping's keys has a first axis of n and the prompt is a list of n strings.
    Each row is checked as a single request is."""
    if not isinstance(request, dict) or BATCH_KEY not in request:
        return to_observation(request, mapping), False
    n = request[BATCH_KEY]
    if type(n) is not int or not 1 <= n <= max_batch:
        got = clip(repr(n), 40)
        raise BadRequest(f"{BATCH_KEY} must be an integer from 1 to {max_batch} (this server's --max-batch), got {got}")
    columns = {}
    for key in mapping.keys():
        value = _lookup(request, key)
        if value is _MISSING:
            continue
        if not isinstance(value, (np.ndarray, list)) or len(value) != n:
            raise BadRequest(f"{key} of a batched request must have {n} rows ({BATCH_KEY}), one per observation")
        columns[key] = value
    rows = [to_observation({k: v[i] for k, v in columns.items()}, mapping) for i in range(n)]
    return Observation.cat(rows), True


def signature(obs: Observation) -> tuple:
    """Observations with equal signatures can be concatenated into one batch."""
    return tuple(None if t is None else tuple(t.shape[1:]) for t in (obs.main_images, obs.wrist_images, obs.states))


__all__ = [
    "BATCH_KEY",
    "ObsMapping",
    "PRESETS",
    "check_mapping",
    "load_mapping",
    "signature",
    "to_observation",
    "to_observations",
    "with_overrides",
]
