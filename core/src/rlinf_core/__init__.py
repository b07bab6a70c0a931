"""rlinf: reinforcement-learning fine-tuning of Vision-Language-Action policies on Lightning.

The names below are what plugins import (see docs/plugin_reference.md, "Where plugins import from"). Only
``hookimpl`` is imported eagerly: every other name loads its module (torch, Lightning) on first use, so
that ``rlinf --help`` / ``plugins`` / ``configs`` and a plugin's entry-point module stay fast.
"""

from rlinf_core.foundation.lazy import lazy_getattr
from rlinf_core.plugins.hookspecs import hookimpl  # noqa: F401 - public (in __all__)

# public name -> module that defines it
_LAZY = {
    "ActOutput": "rlinf_core.contracts.policy",
    "ChunkStepResult": "rlinf_core.contracts.observation",
    "Env": "rlinf_core.contracts.env",
    "EvaluateOutput": "rlinf_core.contracts.policy",
    "Observation": "rlinf_core.contracts.observation",
    "Policy": "rlinf_core.contracts.policy",
    "RewardModel": "rlinf_core.contracts.world_model",
    "StepResult": "rlinf_core.contracts.observation",
    "VideoConfig": "rlinf_core.contracts.env",
    "WorldModel": "rlinf_core.contracts.world_model",
    "RLModule": "rlinf_core.rl.module",
    "PPO": "rlinf_core.rl.algorithms",
    "GRPO": "rlinf_core.rl.algorithms",
    "MissingDependencyError": "rlinf_core.foundation.optional_deps",
    "require": "rlinf_core.foundation.optional_deps",
    "check_choice": "rlinf_core.foundation.checks",
    "check_number": "rlinf_core.foundation.checks",
}

__all__ = sorted([*_LAZY, "hookimpl", "lazy_getattr"])


__getattr__ = lazy_getattr(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
