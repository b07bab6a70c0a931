"""``WanWorldModel.memory_profile`` (``rlinf memory``): meta-measured peaks are the real run's; released sizes."""

import torch

from rlinf_core.memory.meta_peak import module_bytes, peak_bytes
from rlinf_core.models.meta import meta_init
from rlinf_wm_wan import WanWorldModel


def test_meta_peak_equals_the_real_cpu_run(tiny_wan):
    real = WanWorldModel(str(tiny_wan))
    with meta_init():
        meta = WanWorldModel(str(tiny_wan))
    B, C, S = 2, 4, real.image_size
    prof = meta.memory_profile(B, C, device_type="cpu")
    frames = torch.zeros(B, 5, S, S, 3, dtype=torch.uint8)
    with torch.no_grad():
        state = real.init_state(frames, torch.zeros(B, 5, 7))
    step = peak_bytes(lambda: real.predict(state, torch.zeros(B, C, 7), generator=torch.Generator().manual_seed(0)))
    measured = dict(prof.peaks)[f"chunk of {C}, {B} envs"]
    assert step > 0 and abs(measured - step) <= 1024  # same ops, same live bytes (up to a few lazily built tables)
    assert dict(prof.weights) == {
        "WanActionTransformer (fp32)": module_bytes(real.dit),
        "AutoencoderKLWan (fp32)": module_bytes(real.vae),
    }


def test_released_size_runs_in_bf16_on_cuda():
    with meta_init():  # a placeholder path: the 5 B release's sizes
        model = WanWorldModel("/path/to/RLinf-Wan-LIBERO-Spatial")
    n_dit = sum(p.numel() for p in model.dit.parameters())
    prof = model.memory_profile(1, 4, device_type="cuda")
    weights = dict(prof.weights)
    assert weights["WanActionTransformer (bf16)"] == module_bytes(model.dit) >= 2 * n_dit
    assert 9.3 < weights["WanActionTransformer (bf16)"] / 2**30 < 9.5  # 5.03 B parameters in bf16
    assert prof.peak[1] > 0
