"""The activation formula of rlinf_core.memory.estimate against what autograd really keeps (tiny OpenVLA / OFT on
CPU)."""

import pytest
import torch

from rlinf_core import Observation
from rlinf_core.memory.estimate import activation_bytes, stack_activation_bytes
from rlinf_core.models.lora import LoRAConfig
from rlinf_policy_openvla import OpenVLAOFTPolicy, OpenVLAPolicy
from rlinf_policy_openvla.settings import ActionConfig, InputConfig


def saved_activation_bytes(fn, module: torch.nn.Module) -> int:
    """Bytes of the distinct storages autograd saves for backward while ``fn`` runs, without the
    parameters themselves and without autocast's bf16 weight copies (estimated separately)."""
    params = list(module.parameters())
    own = {p.untyped_storage().data_ptr() for p in params}
    weight_shapes = {tuple(p.shape) for p in params if p.dim() >= 2}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        shape = tuple(t.shape)  # autocast's casts of weights (transposed for linears)
        is_weight_copy = t.dtype == torch.bfloat16 and (shape in weight_shapes or shape[::-1] in weight_shapes)
        if key not in own and not is_weight_copy:
            seen[key] = max(seen.get(key, 0), storage.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


@pytest.fixture
def batch():
    gen = torch.Generator().manual_seed(5)
    B = 4
    images = torch.randint(0, 256, (B, 40, 40, 3), generator=gen, dtype=torch.uint8)
    return Observation(main_images=images, task_descriptions=["put the black bowl on the plate"] * B)


CASES = [  # (policy precision, LoRA, activation mode of rlinf_core.memory.estimate)
    ("fp32", False, "fp32"),
    ("bf16", False, "mixed"),  # fp32 trainable weights under bf16 autocast (the shipped full fine-tune)
    ("bf16", True, "bf16"),  # bf16 frozen base + fp32 adapters (the shipped LoRA runs)
    ("bf16-true", False, "bf16"),
]


@pytest.mark.filterwarnings("ignore:precision. bf16-true")
@pytest.mark.parametrize("ckpt", [False, True], ids=["full", "checkpointed"])
@pytest.mark.parametrize("kind", ["oft", "openvla"])
@pytest.mark.parametrize("precision,lora,mode", CASES)
def test_activation_estimate_matches_saved_tensors(kind, precision, lora, mode, ckpt, batch, request):
    path = request.getfixturevalue("tiny_oft" if kind == "oft" else "tiny_openvla")
    cls = OpenVLAOFTPolicy if kind == "oft" else OpenVLAPolicy
    policy = cls(
        model_path=str(path),
        precision=precision,
        lora=LoRAConfig(rank=32) if lora else None,
        gradient_checkpointing=ckpt,
        actions=ActionConfig(num_action_chunks=2),
        inputs=InputConfig(max_prompt_length=24),
    )
    with torch.no_grad():
        record = policy.act(batch).record
    policy.train()
    ctx = torch.autocast("cpu", torch.bfloat16) if precision != "fp32" else torch.autocast("cpu", enabled=False)
    with ctx:
        measured = saved_activation_bytes(lambda: policy.evaluate(batch, record, compute_entropy=True), policy)
    profile = policy.memory_profile()
    assert all(s.checkpointed == ckpt for s in profile.stacks)
    # what autograd keeps from forward to backward (the recomputed block of checkpointing is a backward-time peak)
    kept = sum(stack_activation_bytes(s, mode, len(batch))[0] for s in profile.stacks)
    estimated = kept + profile.other_bytes[mode] * len(batch)
    # tiny models: the stacks are a small share, so the non-block terms (pixels, projector, heads) count too
    assert abs(estimated / measured - 1) < (0.2 if ckpt else 0.1), (estimated, measured)
    if not ckpt:
        assert activation_bytes(list(profile.stacks), mode, len(batch), profile.other_bytes[mode]) == estimated
