"""Supervised training: SFT on demos, and the demo format plugins write (DemoWriter)."""

import importlib

# public name -> module that defines it (imported on first use: importing this package stays cheap)
_LAZY = {
    "DemoDataset": "rlinf_core.supervised.demos",
    "DemoWriter": "rlinf_core.supervised.demos",
    "SFTModule": "rlinf_core.supervised.sft",
    "read_meta": "rlinf_core.supervised.demos",
}

__all__ = ['DemoDataset', 'DemoWriter', 'SFTModule', 'read_meta']


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
