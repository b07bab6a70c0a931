"""Demonstration data on disk: the demo format envs' collectors write and SFT reads (:mod:`.demos`). LeRobot
datasets (:mod:`rlinf_core.lerobot`) build on it."""

from rlinf_core.foundation.lazy import lazy_getattr

# public name -> module that defines it (imported on first use: importing this package stays cheap)
_LAZY = {
    "DemoDataset": "rlinf_core.datasets.demos",
    "DemoWriter": "rlinf_core.datasets.demos",
    "read_meta": "rlinf_core.datasets.demos",
}

__all__ = ["DemoDataset", "DemoWriter", "read_meta"]


__getattr__ = lazy_getattr(__name__, _LAZY)
