"""The ``rlinf`` command and everything only it uses: errors, shipped configs, plots, memory, coevolve."""

from rlinf_core.cli.main import main

__all__ = ["main"]
