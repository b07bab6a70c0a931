"""The activation formula of rlinf.memory against what autograd really keeps (tiny OpenVLA / OFT on CPU)."""

import pytest
import torch

from rlinf import Observation
from rlinf.memory import activation_bytes
from rlinf_policy_openvla import OpenVLAOFTPolicy, OpenVLAPolicy


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
        is_weight_copy = t.dtype == torch.bfloat16 and t.dim() == 2 and tuple(t.shape) in weight_shapes
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


CASES = [  # (policy precision, LoRA, activation mode of rlinf.memory)
    ("fp32", False, "fp32"),
    ("bf16", False, "mixed"),  # fp32 trainable weights under bf16 autocast (the shipped full fine-tune)
    ("bf16", True, "bf16"),  # bf16 frozen base + fp32 adapters (the shipped LoRA runs)
    ("bf16-true", False, "bf16"),
]


@pytest.mark.filterwarnings("ignore:precision. bf16-true")
@pytest.mark.parametrize("kind", ["oft", "openvla"])
@pytest.mark.parametrize("precision,lora,mode", CASES)
def test_activation_estimate_matches_saved_tensors(kind, precision, lora, mode, batch, request):
    path = request.getfixturevalue("tiny_oft" if kind == "oft" else "tiny_openvla")
    cls = OpenVLAOFTPolicy if kind == "oft" else OpenVLAPolicy
    policy = cls(model_path=str(path), num_action_chunks=2, precision=precision, is_lora=lora, max_prompt_length=24)
    with torch.no_grad():
        record = policy.act(batch).record
    ctx = torch.autocast("cpu", torch.bfloat16) if precision != "fp32" else torch.autocast("cpu", enabled=False)
    with ctx:
        measured = saved_activation_bytes(lambda: policy.evaluate(batch, record, compute_entropy=True), policy)
    profile = policy.memory_profile()
    estimated = activation_bytes(list(profile.stacks), mode, len(batch), profile.other_bytes[mode])
    assert abs(estimated / measured - 1) < 0.1, (estimated, measured)
