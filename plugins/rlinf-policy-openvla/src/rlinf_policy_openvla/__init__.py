"""OpenVLA and OpenVLA-OFT policies for rlinf (real checkpoint layouts, LoRA, value head)."""

from rlinf_policy_openvla.make_tiny import make_tiny
from rlinf_policy_openvla.policy import OpenVLAOFTPolicy, OpenVLAPolicy

__all__ = ["OpenVLAOFTPolicy", "OpenVLAPolicy", "make_tiny"]
