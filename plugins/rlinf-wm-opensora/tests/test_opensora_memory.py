"""``OpenSoraWorldModel.memory_profile`` (``rlinf memory``): the meta run's peaks are the real run's; released sizes
from a placeholder path."""

import torch

from rlinf_core.memory.meta_peak import module_bytes, peak_bytes
from rlinf_core.models.meta import meta_init
from rlinf_wm_opensora.testing import tiny_world_model
from rlinf_wm_opensora.world_model import OpenSoraWorldModel


def test_meta_peaks_equal_the_real_cpu_run():
    path = str(tiny_world_model())
    real = OpenSoraWorldModel(path)
    with meta_init():
        meta = OpenSoraWorldModel(path)
    B, C, S = 2, real.chunk, real.image_size
    prof = dict(meta.memory_profile(B, C, device_type="cpu").peaks)
    frames = torch.zeros(B, 4, S, S, 3, dtype=torch.uint8)
    reset = peak_bytes(lambda: real.init_state(frames, torch.zeros(B, 4, 7)))
    with torch.no_grad():
        state = real.init_state(frames, torch.zeros(B, 4, 7))
    step = peak_bytes(lambda: real.predict(state, torch.zeros(B, C, 7), generator=torch.Generator().manual_seed(0)))
    assert step > reset > 0 and set(prof) == {f"reset, {B} envs", f"chunk of {C}, {B} envs"}
    # same ops, same live bytes (up to a few hundred bytes of small tables built lazily on the first real call)
    assert abs(prof[f"reset, {B} envs"] - reset) <= 1024 and abs(prof[f"chunk of {C}, {B} envs"] - step) <= 1024


def test_placeholder_path_builds_the_released_size_on_meta():
    with meta_init():
        model = OpenSoraWorldModel("/path/to/RLinf-OpenSora-LIBERO-Spatial")
    assert model.image_size == 256 and model.config.depth == 28 and model.config.hidden_size == 1152
    assert model.vae.config.block_out_channels == [128, 256, 512, 512]
    assert model.runtime_dtype("cuda") == torch.bfloat16 and model.runtime_dtype("cpu") == torch.float32
    bf16 = sum(p.numel() for p in model.dit.parameters()) * 2
    torch.nn.Module.to(model, torch.bfloat16)
    assert bf16 <= module_bytes(model.dit) < bf16 + 2**23  # the 1.2 B STDiT3 in bf16 (+ buffers: y_embedding, ...)
