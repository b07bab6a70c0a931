"""OpenVLA and OpenVLA-OFT policies for rlinf (real checkpoint layouts, LoRA, value head)."""

import importlib

# public name -> module: imported on first use, so that the rlinf entry point (plugin.py) stays light
_LAZY = {
    "OpenVLAOFTPolicy": "rlinf_policy_openvla.policy",
    "OpenVLAPolicy": "rlinf_policy_openvla.policy",
}

__all__ = ['OpenVLAOFTPolicy', 'OpenVLAPolicy']


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
