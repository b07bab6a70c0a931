"""Vectorised envs: any :class:`rlinf_core.Env` run in worker processes (``num_workers > 0``)."""
