"""Per-GPU memory estimates of a run (``rlinf memory``): policy, optimizer, activations and world models."""
