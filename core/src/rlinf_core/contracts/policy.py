"""The policy contract: act on observations, re-evaluate what was done.

Shapes: B = batch, C = ``num_action_chunks`` (sub-steps per chunk), D = ``action_dim``.

Log-probs and entropies are returned at the finest granularity the policy has, ``[B, C, D]``
(one per action token / action dimension); the RL loop reduces them to action level (sum over D)
or chunk level (sum over C and D) as the algorithm's ``logprob_type`` asks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from rlinf_core.contracts.observation import Observation
from rlinf_core.models.precision import under_compute_dtype

if TYPE_CHECKING:
    from rlinf_core.memory.estimate import MemoryProfile


@dataclass
class ActOutput:
    """Result of :meth:`Policy.act`.

    Attributes:
        actions: ``float32 [B, C, D]`` env-scale action chunks.
        logprobs: ``float32 [B, C, D]`` log-probs of the chosen action tokens under the
            temperature-scaled (masked) distribution, also when acting greedily: what
            :meth:`Policy.evaluate` returns at the same temperature.
        values: ``float32 [B, 1]`` (chunk-level) or ``[B, C]`` (per sub-step) critic values,
            or ``None`` without a value head.
        record: the minimal tensors (each ``[B, ...]``) that :meth:`Policy.evaluate` needs besides
            the observation to recompute ``logprobs`` (e.g. action token ids, denoising chains).
    """

    actions: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor | None = None
    record: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class EvaluateOutput:
    """Result of :meth:`Policy.evaluate`: ``logprobs`` and ``entropy`` ``[B, C, D]``, ``values``."""

    logprobs: torch.Tensor
    entropy: torch.Tensor | None = None
    values: torch.Tensor | None = None


class Policy(nn.Module):
    """Base class of VLA policies.

    Subclasses set ``action_dim`` and ``num_action_chunks`` and implement :meth:`act` and
    :meth:`evaluate`; models with a critic set ``has_value_head = True`` and name the critic's
    parameters with ``value_head`` (they get ``optim.value_lr``).

    This class declares everything the core reads of a policy: the attributes below (with their defaults) and the
    methods. ``tests/core/test_policy_contract.py`` checks that the core reads nothing else, and
    :mod:`rlinf_core.testing.conformance` checks a plugin's values of them.
    """

    action_dim: int
    num_action_chunks: int
    has_value_head: bool = False
    #: autocast dtype of ``act`` / ``evaluate`` / ``sft_loss`` (set from the policy's ``precision``,
    #: see :mod:`rlinf_core.models.precision`); ``None``: compute in the parameters' dtype
    compute_dtype: torch.dtype | None = None
    #: the precision setting the policy was built with, as its config names it (``rlinf memory`` reports it);
    #: ``None``: the policy has no such setting
    precision: str | None = None
    #: the checkpoint directory the weights were read from (``None``: built from scratch). The core refuses a run
    #: whose export would overwrite it (:mod:`rlinf_core.run.run_dirs`); trainable-only checkpoints re-read the
    #: frozen weights from it on resume
    model_path: str | None = None
    #: camera views of one observation the policy reads (main camera first); ``rlinf memory`` sizes the rollout
    #: buffer's stored images with it
    num_images_in_input: int = 1
    #: side, or ``(height, width)``, of the images the policy's vision encoder takes (``None``: not declared);
    #: ``rlinf memory`` uses it for the stored images when the env config does not give their size
    image_size: int | tuple[int, int] | None = None
    #: the key of the dataset statistics the policy un-normalises its actions with (OpenVLA's ``unnorm_key``;
    #: ``rlinf serve``'s REST protocol refuses a request for another one); ``None``: one set of statistics
    unnorm_key: str | None = None
    #: the ``model_type`` in ``config.json`` of the checkpoints this class loads (``rlinf serve`` picks the class by it
    #: for a directory whose ``save_pretrained`` recorded no class); ``None``: none
    model_type: str | None = None
    #: the policy cannot be trained (a policy served elsewhere, :class:`rlinf_core.remote.policy.RemotePolicy`):
    #: ``rlinf fit`` refuses it in one line; ``rlinf validate`` evaluates it
    eval_only: bool = False
    #: flat setting names → ``(config group, field)`` for a policy whose constructor groups its settings: the
    #: flat names RLinf's configs and ``rlinf serve``'s overrides use (``{"unnorm_key": ("actions", "unnorm_key")}``)
    FLAT_SETTINGS: ClassVar[dict[str, tuple[str, str]]] = {}

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        for name in ("act", "evaluate", "sft_loss"):
            fn = cls.__dict__.get(name)
            if callable(fn) and not getattr(fn, "_rlinf_compute_wrapped", False):
                setattr(cls, name, under_compute_dtype(fn))

    @classmethod
    def from_pretrained(cls, path: str | Path, **overrides: Any) -> Policy:
        """Load what :meth:`save_pretrained` wrote to ``path``; ``overrides`` are constructor settings
        (e.g. ``add_value_head=True``). The one loading entry used by the conformance kit and tools."""
        raise NotImplementedError(f"{cls.__name__} does not implement Policy.from_pretrained(path, **overrides)")

    def act(self, obs: Observation, *, do_sample: bool = True, temperature: float = 1.0) -> ActOutput:
        """Choose action chunks for a batch of observations (called under ``torch.no_grad``).

        Any action distribution fits: categorical tokens, Gaussians, flow-matching samplers with
        injected noise (SDE). ``logprobs`` are log-densities for continuous actions (they may be
        positive).

        Args:
            obs: B observations (uint8 images; the policy does its own preprocessing). Read, never written in
                place: ``rlinf serve`` passes a request's image buffers, which are read-only memory.
            do_sample: True: draw from the policy's distribution. False: act deterministically
                (argmax tokens, the Gaussian mean, an ODE / zero-noise denoising chain): the same
                observation gives the same actions whatever the random state.
            temperature: sharpness of the sampling distribution; token policies divide logits by
                it, noise-injected samplers scale the injected noise's standard deviation by it.
                ``logprobs`` are under the distribution actually sampled from.
        """
        raise NotImplementedError

    @torch.no_grad()
    def value(self, obs: Observation) -> torch.Tensor:
        """Critic values ``float32 [B, 1]`` or ``[B, C]`` without choosing actions (bootstrap / final
        values). Default: ``act(obs).values``; policies with an expensive decode (autoregressive
        tokens, multi-step flow sampling) override it with the prefix forward the critic reads."""
        values = self.act(obs, do_sample=False).values
        if values is None:
            raise ValueError(f"{type(self).__name__} has no value head (add_value_head: true)")
        return values

    def evaluate(
        self,
        obs: Observation,
        record: dict[str, torch.Tensor],
        *,
        temperature: float = 1.0,
        compute_entropy: bool = False,
        compute_values: bool = False,
    ) -> EvaluateOutput:
        """Recompute log-probs (with grad) of the actions in ``record`` taken at ``obs``.

        Must equal :attr:`ActOutput.logprobs` of the rollout for unchanged weights.
        """
        raise NotImplementedError

    def check_prompt(self, prompt: str) -> None:
        """Raise ``ValueError`` (one line) when ``prompt`` does not fit the model's context. ``rlinf serve`` calls it
        on the connection's thread, before queuing a request, so an oversized prompt never holds the model thread
        (attention cost grows with the square of its length). Default: every prompt fits (a policy that truncates
        or pads prompts to a fixed length)."""

    def pop_metrics(self) -> dict[str, float]:
        """Metrics the policy measured itself since the last call (a remote policy's request latency), logged with
        the eval's under ``eval/``. Default: none."""
        return {}

    def set_rl_step(self, step: int) -> None:
        """Called by the RL loop at the start of every RL step, before its rollout, with the number of RL steps
        done so far (0 first; the right count after a resume). Policies with schedules read it (e.g. π0's
        ``noise_anneal``). Default: nothing."""

    @staticmethod
    def released_standin(model_path: str, directory: str) -> str | None:
        """For ``rlinf memory`` on a config whose ``model_path`` is a placeholder (``/path/to/<released name>``):
        write a weightless directory of the released checkpoint that name stands for into ``directory`` and return
        its path, so the estimate builds the released architecture. Default: ``None`` (no released checkpoints
        known)."""
        return None

    def memory_profile(self) -> MemoryProfile | None:
        """What ``rlinf memory`` needs to know about one sample beyond the parameters: the transformer stacks and
        KV cache (:class:`rlinf_core.memory.estimate.MemoryProfile`). Default: ``None`` (parameters only)."""
        return None

    def unused_parameter_prefixes(self) -> list[str]:
        """Parameter-name prefixes of modules the policy's forward never runs (LoRA leaves them out:
        :func:`rlinf_core.models.lora.unused_prefixes` reads this of any module). Default: none."""
        return []

    def value_parameters(self) -> list[nn.Parameter]:
        """Parameters of the critic (trained at ``value_lr``)."""
        return [p for n, p in self.named_parameters() if "value_head" in n and p.requires_grad]

    def sft_loss(self, obs: Observation, actions: torch.Tensor) -> torch.Tensor:
        """Behaviour-cloning loss for expert ``actions [B, C, D]`` (env scale). Optional."""
        raise NotImplementedError(f"{type(self).__name__} does not support supervised fine-tuning")

    def save_pretrained(self, path: str | Path) -> None:
        """Write the policy in Hugging Face layout (``config.json`` + safetensors)."""
        raise NotImplementedError

    @property
    def device(self) -> torch.device:
        for p in self.parameters():
            return p.device
        return torch.device("cpu")
