"""Observations -> protocol requests: ``rlinf serve``'s mappings (:mod:`rlinf_core.serve.mapping`) inverted.

A mapping names the request key of each :class:`~rlinf_core.contracts.observation.Observation` field; here the
fields of each env's row are put under those keys, as the robot-side clients the presets come from send them
(openpi's LIBERO / DROID / ALOHA clients, OpenVLA's deploy payloads). A dotted key (``images.cam_high``) becomes a
nested dict, as openpi's ALOHA client sends it, unless ``literal_keys`` (LeRobot's ``observation.state``).

Images go as the env hands them: upright RGB uint8 ``[H, W, 3]`` (the env plugins already turned LIBERO's frames by
180 degrees, which is what openpi's LIBERO client does before sending), ``[3, H, W]`` for a ``channels_first``
mapping; with ``image_size`` each is first resized with padding, as openpi's clients do. States are float32, split
over the mapping's state keys by its ``state_sizes``. The prompt is the env's raw task text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rlinf_core.contracts.observation import Observation
from rlinf_core.remote.images import resize_with_pad
from rlinf_core.serve.mapping import BATCH_KEY, ObsMapping

__all__ = ["RequestBuilder"]


@dataclass(frozen=True)
class RequestBuilder:
    """Builds the requests of one observation batch.

    Args:
        mapping: the request keys (a serve preset or a YAML mapping).
        image_size: ``(H, W)`` every image is resized to with padding before sending (None: sent as rendered).
        literal_keys: send dotted keys as they are instead of as nested dicts.
        extra: constant entries added to every request (OpenVLA's ``unnorm_key``).
    """

    mapping: ObsMapping
    image_size: tuple[int, int] | None = None
    literal_keys: bool = False
    extra: tuple[tuple[str, Any], ...] = ()

    # ------------------------------------------------------------------ what the env gives against what is asked
    def problems(self, obs: Observation) -> list[str]:
        """Why ``obs`` cannot fill this mapping's required keys (empty: it can)."""
        m, out = self.mapping, []
        wrist_n = 0 if obs.wrist_images is None else (obs.wrist_images.shape[1] if obs.wrist_images.dim() == 5 else 1)
        if len(m.wrist_images) > wrist_n and "wrist_images" not in m.optional:
            out.append(
                f"the mapping sends {len(m.wrist_images)} wrist image(s) ({', '.join(m.wrist_images)}) but the env "
                f"renders {wrist_n} (turn its wrist camera on, or use a mapping without them)"
            )
        if m.state and obs.states is None and "state" not in m.optional:
            out.append(f"the mapping sends a state ({', '.join(m.state)}) but the env gives none")
        if obs.states is not None and m.state:
            dim = obs.states.shape[1]
            if m.state_sizes and sum(m.state_sizes) != dim:
                out.append(
                    f"the mapping's state_sizes {list(m.state_sizes)} add up to {sum(m.state_sizes)}, the env's "
                    f"state has {dim} values"
                )
            elif len(m.state) > 1 and not m.state_sizes:
                out.append(f"the mapping splits the state over {list(m.state)}: give its state_sizes")
            if m.state_dim is not None and m.state_dim != dim:
                out.append(f"the mapping expects a state of {m.state_dim} values, the env gives {dim}")
        size = self.image_size or (tuple(obs.main_images.shape[1:3]))
        if m.image_size is not None and tuple(m.image_size) != tuple(size):
            want = "x".join(map(str, m.image_size))
            out.append(f"the server expects {want} images, this eval sends {size[0]}x{size[1]} (set image_size)")
        return out

    # ------------------------------------------------------------------ requests
    def requests(self, obs: Observation) -> list[dict]:
        """One request per row of ``obs``."""
        fields = self._fields(obs)
        return [self._place({k: v[i] for k, v in fields.items()}, obs.task_descriptions[i]) for i in range(len(obs))]

    def batch_request(self, obs: Observation) -> dict:
        """All rows of ``obs`` in one request (``rlinf serve --max-batch``): arrays stacked on a first axis, the
        prompts a list, and ``batch_size`` the number of rows."""
        request = self._place(self._fields(obs), list(obs.task_descriptions))
        request[BATCH_KEY] = len(obs)
        return request

    def _fields(self, obs: Observation) -> dict[str, np.ndarray]:
        """``{request key: array with a first axis of len(obs)}`` for every image and state key."""
        m = self.mapping
        out = {m.image: self._images(obs.main_images.cpu().numpy())}
        if obs.wrist_images is not None and m.wrist_images:
            wrists = obs.wrist_images.cpu().numpy()
            wrists = wrists[:, None] if wrists.ndim == 4 else wrists
            for slot, key in enumerate(m.wrist_images[: wrists.shape[1]]):
                out[key] = self._images(wrists[:, slot])
        if obs.states is not None and m.state:
            states = obs.states.detach().cpu().float().numpy()
            sizes = m.state_sizes or (states.shape[1],)
            start = 0
            for key, size in zip(m.state, sizes):
                out[key] = np.ascontiguousarray(states[:, start : start + size])
                start += size
        return out

    def _images(self, images: np.ndarray) -> np.ndarray:
        if self.image_size is not None:
            images = np.stack([resize_with_pad(img, *self.image_size) for img in images])
        if self.mapping.channels_first:
            images = images.transpose(0, 3, 1, 2)
        return np.ascontiguousarray(images)

    def _place(self, values: dict[str, Any], prompt: Any) -> dict:
        request: dict[str, Any] = dict(self.extra)
        for key, value in [*values.items(), (self.mapping.prompt, prompt)]:
            if self.literal_keys or "." not in key:
                request[key] = value
                continue
            *parents, leaf = key.split(".")
            node = request
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        return request
