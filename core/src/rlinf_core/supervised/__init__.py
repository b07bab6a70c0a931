"""Supervised training: SFT on demos, and the demo format plugins write (DemoWriter)."""

from rlinf_core.foundation.lazy import lazy_getattr

# public name -> module that defines it (imported on first use: importing this package stays cheap)
_LAZY = {
    "DemoDataset": "rlinf_core.supervised.demos",
    "DemoWriter": "rlinf_core.supervised.demos",
    "SFTModule": "rlinf_core.supervised.sft",
    "read_meta": "rlinf_core.supervised.demos",
}

__all__ = ['DemoDataset', 'DemoWriter', 'SFTModule', 'read_meta']


__getattr__ = lazy_getattr(__name__, _LAZY)
