"""Which LeRobot features feed which :class:`~rlinf_core.contracts.observation.Observation` fields, and presets.

A mapping names the dataset's features: ``camera_keys[0]`` → ``main_images``, ``camera_keys[1]`` (optional) →
``wrist_images``, ``state_key`` → ``states``, ``action_key`` → the action chunks, the episode's task string →
``task_descriptions``, and ``success_key`` → per-frame success (a bool / 0-1 column; ``None``: the episode counts
as a success that is reached at its last frame — how demonstration datasets are recorded).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["PRESETS", "FeatureMap", "resolve_mapping"]


@dataclass(frozen=True)
class FeatureMap:
    """Feature names of one dataset layout (module doc)."""

    camera_keys: tuple[str, ...] = ("observation.images.image", "observation.images.wrist_image")
    state_key: str | None = "observation.state"
    action_key: str = "action"
    success_key: str | None = "next.success"

    def keys(self) -> list[str]:
        return [
            *self.camera_keys,
            *([self.state_key] if self.state_key else []),
            self.action_key,
            *([self.success_key] if self.success_key else []),
        ]


PRESETS: dict[str, FeatureMap] = {
    # what rlinf's own writer (RolloutRecorder(format="lerobot"), metaworld-collect --format lerobot) writes
    "rlinf": FeatureMap(),
    # physical-intelligence/libero: openpi's conversion of the LIBERO demos (image features, 256x256, state 8,
    # actions 7)
    "libero": FeatureMap(
        camera_keys=("image", "wrist_image"), state_key="state", action_key="actions", success_key=None
    ),
    # lerobot/metaworld_mt50: lerobot's MetaWorld layout (one 480x480 camera, state 4 = hand xyz + gripper, action 4)
    "metaworld": FeatureMap(
        camera_keys=("observation.image",), state_key="observation.state", action_key="action", success_key=None
    ),
}


def resolve_mapping(
    features: dict,
    preset: str | None = None,
    camera_keys: list[str] | None = None,
    state_key: str | None = "",
    action_key: str | None = None,
    success_key: str | None = "",
) -> FeatureMap:
    """The mapping from a preset (named, or the first whose features all exist) with explicit keys overriding it.

    ``state_key`` / ``success_key``: ``""`` keeps the preset's, ``None`` drops the field.
    """
    if preset is not None:
        if preset not in PRESETS:
            raise ValueError(f"unknown LeRobot preset {preset!r}; choose one of {sorted(PRESETS)}")
        base = PRESETS[preset]
    else:
        fitting = [m for m in PRESETS.values() if all(k in features for k in (m.camera_keys[0], m.action_key))]
        base = fitting[0] if fitting else FeatureMap(camera_keys=(), state_key=None, action_key="", success_key=None)
        base = replace(base, camera_keys=tuple(k for k in base.camera_keys if k in features))  # wrist optional
        if base.state_key and base.state_key not in features:
            base = replace(base, state_key=None)
        if base.success_key and base.success_key not in features:
            base = replace(base, success_key=None)
    mapping = replace(
        base,
        camera_keys=tuple(camera_keys) if camera_keys is not None else base.camera_keys,
        state_key=base.state_key if state_key == "" else state_key,
        action_key=action_key or base.action_key,
        success_key=base.success_key if success_key == "" else success_key,
    )
    if not mapping.camera_keys or not mapping.action_key:
        raise ValueError(
            f"no preset fits features {sorted(features)}: set camera_keys and action_key (presets: {sorted(PRESETS)})"
        )
    if len(mapping.camera_keys) > 2:
        raise ValueError(f"camera_keys takes at most 2 cameras (main, wrist), got {list(mapping.camera_keys)}")
    return mapping
