"""LeRobot datasets in and out: read them for SFT and world-model training, write rollouts and demos as them.

See docs/lerobot.md. Needs the ``lerobot`` extra (pyarrow, PyAV), not the ``lerobot`` package.
"""

from rlinf_core.foundation.lazy import lazy_getattr

_LAZY = {
    "FeatureMap": "rlinf_core.lerobot.mapping",
    "PRESETS": "rlinf_core.lerobot.mapping",
    "LeRobotDemos": "rlinf_core.lerobot.demos",
    "LeRobotDemoWriter": "rlinf_core.lerobot.convert",
    "LeRobotEpisodes": "rlinf_core.lerobot.episodes",
    "demos_to_lerobot": "rlinf_core.lerobot.convert",
    "LeRobotDemoDataset": "rlinf_core.lerobot.demos",
    "LeRobotFormatError": "rlinf_core.lerobot.reader",
    "LeRobotReader": "rlinf_core.lerobot.reader",
    "LeRobotWriter": "rlinf_core.lerobot.writer",
}

__all__ = list(_LAZY)

__getattr__ = lazy_getattr(__name__, _LAZY)
