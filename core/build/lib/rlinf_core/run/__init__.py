"""A run on disk: atomic checkpoint files, the checkpoint cadence, exact resume and run directories."""
