"""OpenVLA and OpenVLA-OFT policies for rlinf (real checkpoint layouts, LoRA, value head)."""

from rlinf_core import lazy_getattr

# public name -> module: imported on first use, so that the rlinf entry point (plugin.py) stays light
_LAZY = {
    "OpenVLAOFTPolicy": "rlinf_policy_openvla.oft_policy",
    "OpenVLAPolicy": "rlinf_policy_openvla.policy",
}

__all__ = ["OpenVLAOFTPolicy", "OpenVLAPolicy"]


__getattr__ = lazy_getattr(__name__, _LAZY)
