"""The update half of an RL step, for :class:`rlinf_core.rl.module.RLModule`: the precision context shared by
rollout and update, the log-prob recompute, and the optimizer step (clipping, skipped non-finite steps, critic
warm-up)."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch

from rlinf_core.distributed.grad_accumulation import deepspeed_engine, deepspeed_step
from rlinf_core.foundation.trainer import attached_trainer
from rlinf_core.models.precision import compute_context
from rlinf_core.rl.data.trajectory import Samples
from rlinf_core.rl.metrics import MetricSums

_HALF = {"bf16-mixed": torch.bfloat16, "bf16-true": torch.bfloat16, "16-mixed": torch.float16, "16-true": torch.float16}


def precision_context(module):
    """The trainer's precision context for rollouts, evals and updates (the same in all three, so rollout and
    update log-probs agree). DeepSpeed's bf16/fp16 mode and Lightning's ``bf16-true`` / ``16-true`` cast the
    module but have no autocast (Lightning's only changes the default dtype); rlinf enters one so that float32
    observations meet the half-precision weights."""
    trainer = attached_trainer(module)
    if trainer is None:
        return nullcontext()
    precision = str(trainer.precision)
    half = _HALF.get(precision)
    if half is not None and (precision.endswith("-true") or deepspeed_engine(trainer.strategy) is not None):
        return compute_context(module.device, half)
    return trainer.precision_plugin.forward_context()


class PrecisionContext:
    """:func:`precision_context` of ``module`` as one reusable ``with`` object: every ``with`` enters the context of
    the trainer attached at that moment (a precision plugin's context can be entered only once)."""

    def __init__(self, module) -> None:
        self._module = module
        self._entered: list[Any] = []

    def __enter__(self) -> Any:
        context = precision_context(self._module)
        self._entered.append(context)
        return context.__enter__()

    def __exit__(self, *exc_info) -> bool | None:
        return self._entered.pop().__exit__(*exc_info)


@torch.no_grad()
def policy_logprobs(policy, samples: Samples, micro_batch_size: int, device, temperature: float) -> torch.Tensor:
    """``policy``'s log-probs of the samples' actions (shaped like ``samples.old_logprobs``, float32, on CPU),
    ``micro_batch_size`` samples per forward pass."""
    chunks = []
    for start in range(0, len(samples), micro_batch_size):
        mb = samples.select(torch.arange(start, min(start + micro_batch_size, len(samples))))
        out = policy.evaluate(
            mb.obs.to(device), {k: v.to(device) for k, v in mb.records.items()}, temperature=temperature
        )
        chunks.append(out.logprobs.float().cpu())
    return torch.cat(chunks) if chunks else samples.old_logprobs.new_zeros(samples.old_logprobs.shape)


def recompute_old_logprobs(policy, samples: Samples, micro_batch_size: int, device, temperature: float) -> float:
    """Replace ``samples.old_logprobs`` by the policy's current ones; returns this rank's largest change."""
    new = policy_logprobs(policy, samples, micro_batch_size, device, temperature)
    worst = float((new - samples.old_logprobs).abs().max()) if len(samples) else 0.0
    samples.old_logprobs = new
    return worst


class GradientClip:
    """Gradient clipping (and the gradient norm) where the gradients hold their true values.

    Lightning's ``MixedPrecision("16-mixed")`` scales the loss by its GradScaler's scale, so after
    ``manual_backward`` the gradients are ``scale`` times too large. Its ``optimizer_step`` (what
    ``optimizer.step()`` runs) unscales them, calls ``on_before_optimizer_step``, then steps through the scaler
    (which skips a step with inf / NaN gradients) and updates the scale. Clipping must run at that hook:
    :class:`RLModule` calls this object there. Under every other plugin the gradients are true after backward and
    :func:`optimizer_step` calls it itself (Lightning issue #18089: clipping before ``optimizer.step()`` clips
    scaled norms)."""

    def __init__(self) -> None:
        self._params: list[torch.nn.Parameter] | None = None
        self._max_norm = float("inf")
        self.norm = torch.tensor(0.0)

    def arm(self, params: list[torch.nn.Parameter], max_norm: float) -> None:
        self._params, self._max_norm = params, max_norm

    @property
    def armed(self) -> bool:
        return self._params is not None

    def __call__(self) -> None:
        if self._params is None:
            return
        params, self._params = self._params, None
        norm: Any = torch.nn.utils.clip_grad_norm_(params, self._max_norm) if params else torch.tensor(0.0)
        norm = torch.as_tensor(norm).float()
        self.norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm


def grad_scaler(strategy) -> Any:
    """The precision plugin's GradScaler (Lightning's ``MixedPrecision("16-mixed")``), else ``None``."""
    return getattr(getattr(strategy, "precision_plugin", None), "scaler", None)


def optimizer_step(
    policy,
    strategy,
    optimizer,
    scheduler,
    clip_grad: float | None,
    actor_on: bool,
    metrics: MetricSums,
    clip: GradientClip,
) -> bool:
    """One optimizer step after a minibatch's backward passes; returns ``False`` when it was skipped (a
    non-finite gradient norm). Logs the gradient norm and learning rates into ``metrics``. ``clip`` is the
    object the module's ``on_before_optimizer_step`` calls."""
    if deepspeed_engine(strategy) is not None:
        # DeepSpeed keeps the gradients in its own partitions; it unscales (fp16), clips (gradient_clipping), skips
        # an overflowed step and lowers its loss scale itself
        grad_norm, stepped = deepspeed_step(strategy, optimizer, freeze_actor=not actor_on)
        if stepped:
            scheduler.step()
            metrics.add("train/actor/grad_norm", grad_norm, 1)
        optimizer.zero_grad(set_to_none=True)
        return stepped
    if not actor_on:
        value_ids = {id(p) for p in policy.value_parameters()}
        for p in policy.parameters():
            if id(p) not in value_ids:
                p.grad = None
    params = [p for p in policy.parameters() if p.grad is not None]
    clip.arm(params, clip_grad if clip_grad is not None else float("inf"))
    scaler = grad_scaler(strategy)
    if scaler is None or not params:  # (without gradients, GradScaler.step would find no inf check to read)
        clip()
        stepped = bool(torch.isfinite(clip.norm))
        if stepped and scaler is None:
            optimizer.step()
    else:  # the plugin unscales, runs `clip` (on_before_optimizer_step), steps through the scaler, updates it
        scale = scaler.get_scale()
        optimizer.step()
        if clip.armed:
            raise RuntimeError("on_before_optimizer_step did not clip: an override must call super()")
        stepped = scaler.get_scale() >= scale  # the scaler lowers its scale exactly when it skipped the step
    if stepped:
        scheduler.step()
        metrics.add("train/actor/grad_norm", clip.norm.detach(), 1)
    optimizer.zero_grad(set_to_none=True)
    for group in optimizer.optimizer.param_groups if hasattr(optimizer, "optimizer") else optimizer.param_groups:
        name = "critic" if group.get("name") == "critic" else "actor"
        metrics.last[f"train/{name}/lr"] = float(group["lr"])
    return stepped
