"""Per-GPU memory estimate of an RL fine-tuning run (``rlinf memory --config X``).

Counts, per GPU: weights, gradients and AdamW state as the strategy places them (DDP replicas,
FSDP2 shards, DeepSpeed ZeRO 1/2 partitions, optimizer offload), autocast's bf16 weight copies,
the activations autograd keeps for one micro-batch (with or without gradient checkpointing), the
rollout's inference peak, and — in host RAM — the rollout buffer. Sizes come from the policy's
parameters (any ``nn.Module``; built on the meta device for full-size models) and, for
activations, from the transformer stacks the policy describes (:meth:`memory_stacks`). A world-model
training env adds its frozen models' weights and their measured inference peak
(:mod:`rlinf_core.memory.meta_peak`, ``WorldModel.memory_profile``).

Activation model (bytes per token and layer, measured tensor by tensor with autograd's
saved-tensor hooks on CPU and checked by ``tests/core/test_memory.py`` on tiny models): ``h``
hidden size, ``f`` MLP size, ``a`` heads, SDPA attention (no ``T²`` scores kept)::

    Llama block   fp32: 40h + 16f + 4a + 8   mixed (fp32 weights, bf16 autocast): 34h + 8f + 4a + 8
                  bf16 weights: 24h + 8f + 4a + 8     (+ LoRA rank r on every linear: 14r)
    ViT block     fp32: 32h + 8f + 4a + 16   mixed: 20h + 4f + 4a + 16   bf16: 16h + 4f + 4a + 8
                  (+ LayerScale: 8h fp32, 4h otherwise; + LoRA: 8r)
    checkpointed  the block input only (4h, 2h with bf16 weights) + one block recomputed in backward
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import torch
from torch import nn

from rlinf_core.foundation.checks import check_number

if TYPE_CHECKING:
    from rlinf_core.memory.meta_peak import WorldModelMemory

GiB = 1024**3
Mode = Literal["fp32", "mixed", "bf16"]

# (per h, per f, per head, constant) bytes per token and layer
_BLOCK = {
    "llama": {"fp32": (40, 16, 4, 8), "mixed": (34, 8, 4, 8), "bf16": (24, 8, 4, 8)},
    "vit": {"fp32": (32, 8, 4, 16), "mixed": (20, 4, 4, 16), "bf16": (16, 4, 4, 8)},
}
_LAYER_SCALE = {"fp32": 8, "mixed": 4, "bf16": 4}
_LORA_LINEARS = {"llama": 7, "vit": 4}  # adapted linears per block (q, k, v, o, gate, up, down / qkv, proj, fc1, fc2)
CUDA_OVERHEAD_GIB = 1.5  # CUDA context, cuBLAS/NCCL workspaces, allocator fragmentation (rule of thumb)


@dataclass(frozen=True)
class Stack:
    """A stack of transformer blocks one sample passes through (for the activation estimate).

    Args:
        name: label in the report (``llm``, ``vision.featurizer``).
        kind: ``llama`` (RMSNorm, SwiGLU, rotary) or ``vit`` (LayerNorm, GELU MLP).
        layers: blocks the forward runs.
        tokens: tokens per sample through the stack.
        hidden: hidden size ``h``.
        ffn: MLP size ``f``.
        heads: attention heads ``a``.
        layer_scale: ViT LayerScale (DINOv2).
        lora_rank: rank of LoRA adapters on the block's linears (0: none).
        checkpointed: the policy runs this stack with gradient checkpointing.
    """

    name: str
    kind: Literal["llama", "vit"]
    layers: int
    tokens: int
    hidden: int
    ffn: int
    heads: int
    layer_scale: bool = False
    lora_rank: int = 0
    checkpointed: bool = False


@dataclass(frozen=True)
class MemoryProfile:
    """What a policy tells the estimator about one sample (``Policy.memory_profile()``).

    Args:
        stacks: transformer stacks of a training forward (``evaluate``).
        other_bytes: per-sample activation bytes outside the stacks (inputs, projectors, heads) by mode.
        kv_cache_tokens: tokens in the KV cache at the end of ``act`` (autoregressive decoding; 0: none).
        kv_cache_width: key/value width per layer (``kv_heads · head_dim``).
        kv_cache_layers: layers with a KV cache.
    """

    stacks: tuple[Stack, ...]
    other_bytes: dict[str, int] = field(default_factory=dict)
    kv_cache_tokens: int = 0
    kv_cache_width: int = 0
    kv_cache_layers: int = 0


def block_bytes_per_token(stack: Stack, mode: Mode) -> int:
    """Bytes autograd keeps per token for one block of ``stack`` (no checkpointing)."""
    ch, cf, ca, c0 = _BLOCK[stack.kind][mode]
    total = ch * stack.hidden + cf * stack.ffn + ca * stack.heads + c0
    if stack.kind == "vit" and stack.layer_scale:
        total += _LAYER_SCALE[mode] * stack.hidden
    # LoRA: lora_A's output (rank r, bf16) per adapted linear; lora_A shares the base layer's saved input
    total += 2 * stack.lora_rank * _LORA_LINEARS[stack.kind]
    return total


def stack_activation_bytes(stack: Stack, mode: Mode, batch: int) -> tuple[int, int]:
    """``(kept, recompute)`` bytes for ``batch`` samples: what autograd keeps from forward to
    backward, and the extra peak of recomputing one checkpointed block in backward."""
    per_block = block_bytes_per_token(stack, mode) * stack.tokens * batch
    if not stack.checkpointed:
        return per_block * stack.layers, 0
    residual = 2 if mode == "bf16" else 4
    return residual * stack.hidden * stack.tokens * batch * stack.layers, per_block


def activation_bytes(stacks: list[Stack], mode: Mode, batch: int, other_per_sample: int = 0) -> int:
    """Peak activation bytes of a training forward/backward over ``stacks`` for ``batch`` samples
    (plus ``other_per_sample`` bytes outside the stacks)."""
    kept, recompute = other_per_sample * batch, 0
    for stack in stacks:
        k, r = stack_activation_bytes(stack, mode, batch)
        kept += k
        recompute = max(recompute, r)
    return kept + recompute


# ------------------------------------------------------------------------------------------------
# parameters and strategies
# ------------------------------------------------------------------------------------------------
@dataclass
class ParamCounts:
    """Parameter bytes of a module split by role: trainable (count and storage bytes), frozen."""

    trainable: int = 0
    trainable_bytes: int = 0
    frozen: int = 0
    frozen_bytes: int = 0
    fp32_matmul: int = 0  # fp32 parameters of 2-D weights (autocast keeps a bf16 copy of each for backward)

    @property
    def total(self) -> int:
        return self.trainable + self.frozen


def count_parameters(module: nn.Module) -> ParamCounts:
    """Count any module's parameters (meta tensors included)."""
    out = ParamCounts()
    for p in module.parameters():
        n, size = p.numel(), p.numel() * p.element_size()
        if p.requires_grad:
            out.trainable += n
            out.trainable_bytes += size
        else:
            out.frozen += n
            out.frozen_bytes += size
        if p.dtype == torch.float32 and p.dim() >= 2:
            out.fp32_matmul += n
    return out


@dataclass
class MemoryTarget:
    """The hardware a training config's sizes are written for: its ``memory:`` section (read by ``rlinf memory``;
    ``rlinf fit`` accepts it and only prints the world-size note).

    Args:
        gpu_memory_gb: memory of one GPU (GiB); ``rlinf memory`` checks that the estimate fits.
        world_size: processes (GPUs) the sizes were written for (``num_envs`` is per process,
            ``global_batch_size`` over all): ``rlinf fit`` on another world size prints one line at the start
            with the total envs and optimizer steps per RL step that change.
    """

    gpu_memory_gb: float = 80.0
    world_size: int | None = None

    def __post_init__(self) -> None:

        check_number("memory.gpu_memory_gb", self.gpu_memory_gb, low=0, low_open=True)
        check_number("memory.world_size", self.world_size, low=1, optional=True)


@dataclass(frozen=True)
class StrategySpec:
    """How the trainer places the model: ``ddp`` (also single device), ``fsdp2``, ``deepspeed``.

    Args:
        kind: ``ddp``, ``fsdp2`` or ``deepspeed``.
        world_size: ranks sharing the model (devices × nodes).
        zero_stage: DeepSpeed ZeRO stage (1 or 2).
        offload_optimizer: optimizer state in host RAM (DeepSpeed's ``offload_optimizer``).
        param_dtype_bytes: FSDP2 gathered-parameter bytes (2 for bf16, 4 for fp32).
    """

    kind: Literal["ddp", "fsdp2", "deepspeed"] = "ddp"
    world_size: int = 1
    zero_stage: int = 2
    offload_optimizer: bool = False
    param_dtype_bytes: int = 4


@dataclass
class MemoryEstimate:
    """Rows of ``(item, GiB per GPU)`` for the training and rollout phases, and host RAM."""

    train: list[tuple[str, float]] = field(default_factory=list)
    rollout: list[tuple[str, float]] = field(default_factory=list)
    host: list[tuple[str, float]] = field(default_factory=list)
    gpu_memory_gib: float = 80.0
    notes: list[str] = field(default_factory=list)

    @property
    def train_total(self) -> float:
        return sum(v for _, v in self.train)

    @property
    def rollout_total(self) -> float:
        return sum(v for _, v in self.rollout)

    @property
    def peak(self) -> float:
        return max(self.train_total, self.rollout_total)

    @property
    def fits(self) -> bool:
        return self.peak <= self.gpu_memory_gib

    def format(self, title: str = "") -> str:
        lines = [title] if title else []
        for label, rows, total in (
            ("training step", self.train, self.train_total),
            ("rollout / eval", self.rollout, self.rollout_total),
        ):
            if not rows:
                continue
            lines.append(f"per GPU, {label}:")
            lines += [f"  {name:<54} {gib:8.2f} GiB" for name, gib in rows]
            lines.append(f"  {'total':<54} {total:8.2f} GiB")
        verdict = "fits" if self.fits else "DOES NOT FIT"
        lines.append(f"peak {self.peak:.2f} GiB of {self.gpu_memory_gib:g} GiB per GPU: {verdict}")
        if self.host:
            lines.append("host RAM per node:")
            lines += [f"  {name:<54} {gib:8.2f} GiB" for name, gib in self.host]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def compute_mode(counts: ParamCounts, strategy: StrategySpec, autocast: bool) -> Mode:
    """The activation dtype regime: ``bf16`` when the blocks' weights are bf16 when they compute
    (bf16 storage, FSDP2 bf16 gathers, DeepSpeed bf16), ``mixed`` for fp32 weights under autocast."""
    if not autocast:
        return "fp32" if counts.fp32_matmul else "bf16"
    if strategy.kind == "deepspeed" or (strategy.kind == "fsdp2" and strategy.param_dtype_bytes == 2):
        return "bf16"
    return "mixed" if counts.fp32_matmul > counts.total // 2 else "bf16"


def estimate(
    counts: ParamCounts,
    stacks: list[Stack],
    *,
    strategy: StrategySpec,
    micro_batch_size: int,
    rollout_batch: int,
    autocast: bool,
    offload_optimizer_in_rollout: bool = False,
    kv_cache_tokens: int = 0,
    kv_cache_width: int = 0,
    kv_cache_layers: int = 0,
    other_bytes: dict[str, int] | None = None,
    buffer_bytes_per_node: float = 0.0,
    gpu_memory_gib: float = 80.0,
    training: bool = True,
    world_model: WorldModelMemory | None = None,
) -> MemoryEstimate:
    """Per-GPU memory of a training step and of a rollout (see the module docstring).

    Args:
        counts: the policy's parameters (:func:`count_parameters`).
        stacks: transformer stacks per sample (activations); empty: activations not estimated.
        strategy: placement of weights, gradients and optimizer state.
        micro_batch_size: samples per forward/backward.
        rollout_batch: samples per inference call in the rollout (envs per pipeline stage).
        autocast: forward under bf16 autocast (the policy's or the trainer's mixed precision).
        offload_optimizer_in_rollout: RLModule ``offload_optimizer`` (AdamW state on the host during rollouts).
        kv_cache_tokens: tokens kept in a KV cache per sample (autoregressive decoding), 0: none.
        kv_cache_width: key/value width per layer (``kv_heads · head_dim``).
        kv_cache_layers: layers with a KV cache.
        other_bytes: per-sample activation bytes outside the stacks, by mode (``MemoryProfile.other_bytes``).
        buffer_bytes_per_node: rollout buffer in host RAM (all ranks of a node).
        gpu_memory_gib: memory of one GPU.
        training: ``False`` for eval-only runs (``rlinf validate``): no gradients, no optimizer state.
        world_model: a world-model simulator on the same GPU (:mod:`rlinf_core.memory.meta_peak`): its frozen weights
            count in both phases, its inference peak in the rollout.
    """
    N = max(1, strategy.world_size)
    est = MemoryEstimate(gpu_memory_gib=gpu_memory_gib)
    t, tb, fb = counts.trainable, counts.trainable_bytes, counts.frozen_bytes
    master = tb / max(1, t) if t else 4.0  # bytes per trainable parameter as stored
    opt_on_gpu = not strategy.offload_optimizer
    rows: list[tuple[str, float]] = []
    if strategy.kind == "ddp":
        rows.append(("weights (trainable + frozen)", (tb + fb) / GiB))
        rows.append(("gradients", tb / GiB))
        if N > 1:  # DDP's flat all-reduce buckets (gradient_as_bucket_view=False, the default)
            rows.append(("DDP gradient buckets", tb / GiB))
        rows.append(("AdamW state (2 x fp32)", 8 * t / GiB))
        if autocast:
            rows.append(("bf16 weight copies kept by autocast", 2 * counts.fp32_matmul / GiB))
    elif strategy.kind == "fsdp2":
        rows.append(("weight shards (fp32 masters + frozen)", (tb + fb) / N / GiB))
        rows.append(("gradient shards", tb / N / GiB))
        rows.append(("AdamW state shards", 8 * t / N / GiB))
        rows.append(("gathered blocks (2 units in flight)", 2 * _largest_unit_bytes(counts, strategy) / GiB))
    else:  # DeepSpeed ZeRO 1/2 with bf16: module in bf16, fp32 master + Adam partitioned
        wbytes = 2 if autocast else master
        rows.append(("weights (module copy)", (t * wbytes + fb) / GiB))
        if strategy.zero_stage == 1:
            rows.append(("gradients (full, module dtype)", t * wbytes / GiB))
        else:  # fp32 partition + reduce/all-gather buckets (Lightning's default 2e8 elements each)
            rows.append(("gradients (fp32 partition + buckets)", (4 * t / N + 2 * 2e8 * wbytes) / GiB))
        if opt_on_gpu:
            extra = 4 * t / N if autocast else 0
            rows.append(("fp32 master + AdamW state partitions", (extra + 8 * t / N) / GiB))
    if not opt_on_gpu:
        est.notes.append("optimizer state offloaded to host RAM (DeepSpeed offload_optimizer)")
    mode = compute_mode(counts, strategy, autocast)
    if stacks:
        act = activation_bytes(stacks, mode, micro_batch_size, (other_bytes or {}).get(mode, 0))
        ckpt = "with" if any(s.checkpointed for s in stacks) else "without"
        rows.append((f"activations, micro-batch {micro_batch_size} ({mode}, {ckpt} ckpt)", act / GiB))
    else:
        est.notes.append("the policy describes no transformer stacks: activations not estimated")
    wm_weights = [(f"world model: {name}", b / GiB) for name, b in (world_model.weights if world_model else ())]
    rows += wm_weights  # frozen and resident for the whole run (WorldModelEnv lives on the training device)
    rows.append(("CUDA context / workspaces (rule of thumb)", CUDA_OVERHEAD_GIB))
    est.train = rows if training else []
    if not training:
        offload_optimizer_in_rollout = True  # no optimizer state exists in an eval-only run

    # rollout: no gradients; FSDP2 gathers the whole policy once (rlinf_core.distributed.rollout_mode.rollout_mode)
    ro: list[tuple[str, float]] = []
    if strategy.kind == "fsdp2":
        ro.append(("weight shards", (tb + fb) / N / GiB))
        ro.append(("gathered policy for the rollout", (counts.total * strategy.param_dtype_bytes) / GiB))
        if not offload_optimizer_in_rollout:
            ro.append(("AdamW state shards", 8 * t / N / GiB))
    else:
        for name, gib in rows:
            if name.startswith(("weights", "fp32 master", "AdamW")) and not (
                offload_optimizer_in_rollout and name.startswith(("AdamW", "fp32 master"))
            ):
                ro.append((name, gib))
            if name.startswith("bf16 weight copies"):  # autocast caches casts of trainable weights, no_grad too
                ro.append(("bf16 weight copies cached by autocast", gib))
    if stacks:
        inference = _inference_bytes(stacks, mode, rollout_batch)
        ro.append((f"inference activations, batch {rollout_batch}", inference / GiB))
    if kv_cache_tokens:
        kv = 2 * 2 * kv_cache_layers * kv_cache_width * kv_cache_tokens * rollout_batch
        ro.append((f"KV cache, batch {rollout_batch}", kv / GiB))
    if world_model is not None:
        ro += wm_weights
        phase, peak = world_model.peak
        ro.append((f"world model: inference peak ({phase})", peak / GiB))
        est.notes += list(world_model.notes)
    ro.append(("CUDA context / workspaces (rule of thumb)", CUDA_OVERHEAD_GIB))
    est.rollout = ro
    if buffer_bytes_per_node and training:
        est.host.append(("rollout buffer (all ranks of the node)", buffer_bytes_per_node / GiB))
    if strategy.offload_optimizer:
        est.host.append(("offloaded optimizer (per rank)", (4 * t / N + 8 * t / N + 4 * t / N) / GiB))
    return est


def _largest_unit_bytes(counts: ParamCounts, strategy: StrategySpec) -> float:
    # ~1/32 of a 7B Llama per decoder layer; a rough share when the unit structure is unknown
    return counts.total * strategy.param_dtype_bytes / 32


def _inference_bytes(stacks: list[Stack], mode: Mode, batch: int) -> int:
    """Transient peak of a no-grad forward: the largest block's intermediates (input, q/k/v, MLP)."""
    c = 4 if mode == "fp32" else 2
    return max(c * batch * s.tokens * (4 * s.hidden + 3 * s.ffn) for s in stacks)
