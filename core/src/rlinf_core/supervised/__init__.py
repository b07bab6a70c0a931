"""Supervised training: SFT on demos (the demo format itself is :mod:`rlinf_core.datasets`)."""

from rlinf_core.foundation.lazy import lazy_getattr

# public name -> module that defines it (imported on first use: importing this package stays cheap)
_LAZY = {
    "DemoDataset": "rlinf_core.datasets.demos",
    "DemoWriter": "rlinf_core.datasets.demos",
    "LeRobotDemoWriter": "rlinf_core.lerobot.convert",
    "LeRobotDemos": "rlinf_core.lerobot.demos",
    "SFTModule": "rlinf_core.supervised.sft",
    "read_meta": "rlinf_core.datasets.demos",
}

__all__ = ["DemoDataset", "DemoWriter", "LeRobotDemoWriter", "LeRobotDemos", "SFTModule", "read_meta"]


__getattr__ = lazy_getattr(__name__, _LAZY)
