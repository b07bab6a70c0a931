"""π0 / π0.5 flow-matching policies for rlinf (openpi / lerobot / RLinf checkpoint layouts)."""
