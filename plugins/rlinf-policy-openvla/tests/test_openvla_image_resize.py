"""Image resizing by checkpoint origin: RLinf's tensor resize or openvla/openvla's PIL processor, bit for bit.

The PIL reference below follows openvla/openvla's ``PrismaticImageProcessor.apply_transform``
(prismatic/extern/hf/processing_prismatic.py:128-143): optional letterbox pad → ``TVF.resize`` of the PIL image
(``PIL.Image.resize`` with BICUBIC) → ``TVF.center_crop`` → ``to_tensor`` (/255) → normalise, written here with
PIL and numpy only.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from rlinf_core.models.weights import CheckpointError
from rlinf_policy_openvla.processing import pixel_values, resize_images
from rlinf_policy_openvla.settings import InputConfig

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels


def _images(h: int, w: int, n: int = 3, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    # smooth content plus noise: bicubic overshoot and the 8-bit rounding between PIL's passes both show up
    base = torch.linspace(0, 255, w).view(1, 1, w, 1).expand(n, h, w, 3)
    noise = torch.randint(-60, 61, (n, h, w, 3), generator=gen)
    return (base + noise).clamp(0, 255).to(torch.uint8)


def _pil_reference(img: np.ndarray, size: int, strategy: str, fill: tuple[int, int, int]) -> np.ndarray:
    """uint8 HWC → uint8 ``size × size`` as Prismatic's processor makes it from a PIL image."""
    pil = Image.fromarray(img)
    if strategy == "letterbox":
        w, h = pil.size
        side = max(w, h)
        pw, ph = int((side - w) / 2), int((side - h) / 2)
        canvas = Image.new("RGB", (w + 2 * pw, h + 2 * ph), fill)
        canvas.paste(pil, (pw, ph))
        pil = canvas
    w, h = pil.size
    if strategy == "resize-naive":
        new_w, new_h = size, size
    else:  # torchvision's resize to an int: shorter side → size, longer = int(size * long / short)
        new_w, new_h = (size, int(size * h / w)) if w <= h else (int(size * w / h), size)
    pil = pil.resize((new_w, new_h), Image.Resampling.BICUBIC)
    left, top = int(round((new_w - size) / 2.0)), int(round((new_h - size) / 2.0))
    return np.array(pil.crop((left, top, left + size, top + size)))


@pytest.mark.parametrize("hw", [(256, 256), (480, 640), (200, 260)], ids=["256sq", "480x640", "200x260"])
@pytest.mark.parametrize("strategy", ["resize-naive", "resize-crop", "letterbox"])
def test_pil_mode_is_bit_exact_to_pil(hw, strategy):
    images = _images(*hw)
    fill = (127, 127, 127)
    got = resize_images(images, 224, mode="pil", strategy=strategy, fill=fill)
    want = np.stack([_pil_reference(im.numpy(), 224, strategy, fill) for im in images])
    assert got.shape == (3, 3, 224, 224)
    assert torch.equal(got, torch.from_numpy(want).permute(0, 3, 1, 2).float())


def test_pixel_values_match_prismatic_processor_math_in_pil_mode():
    means, stds = [(0.484375, 0.455078125, 0.40625), (0.5, 0.5, 0.5)], [(0.228515625, 0.2236328125, 0.224609375)] * 2
    images = _images(256, 256)
    got = pixel_values([images], 224, means, stds, resize="pil")
    ref = []
    for im in images:
        x = torch.from_numpy(_pil_reference(im.numpy(), 224, "resize-naive", (0, 0, 0))).permute(2, 0, 1).float() / 255
        ref.append(
            torch.cat(
                [(x - torch.tensor(m).view(3, 1, 1)) / torch.tensor(s).view(3, 1, 1) for m, s in zip(means, stds)]
            )
        )
    # (x - m) / s: two correctly rounded float32 operations on values <= 1 / 0.22: <= 2 · 2^-24 · 4.5 < 1e-6
    torch.testing.assert_close(got, torch.stack(ref), atol=1e-6, rtol=0)


def test_tensor_and_pil_modes_differ_at_256_to_224():
    """The setting matters: RLinf's tensor resize is not PIL's (a few grey levels apart)."""
    images = _images(256, 256)
    diff = (resize_images(images, 224, mode="tensor") - resize_images(images, 224, mode="pil")).abs()
    assert 0 < diff.max() <= 16


def test_letterbox_checkpoint_is_honoured(tmp_path, obs):
    from rlinf_policy_openvla import OpenVLAOFTPolicy
    from rlinf_policy_openvla.checkpoint import read_spec
    from rlinf_policy_openvla.make_tiny import make_tiny

    path = make_tiny(tmp_path / "lb", num_shards=1)
    pre = json.loads((path / "preprocessor_config.json").read_text())
    pre.update(image_resize_strategy="letterbox", tvf_do_letterbox=True, tvf_letterbox_fill=[127, 127, 127])
    (path / "preprocessor_config.json").write_text(json.dumps(pre))
    spec = read_spec(path)
    assert (spec.image_resize_strategy, spec.letterbox_fill) == ("letterbox", (127, 127, 127))

    wide = obs.__class__(main_images=_images(40, 60, n=len(obs)), task_descriptions=obs.task_descriptions)
    policy = OpenVLAOFTPolicy(model_path=str(path), inputs=InputConfig(image_resize="pil"))
    captured = {}
    original = policy.vla.build_prefix

    def spy(ids, mask, pixels, proprio):
        captured["pixels"] = pixels
        return original(ids, mask, pixels, proprio)

    policy.vla.build_prefix = spy
    policy.act(wide, do_sample=False)
    size = spec.vision[0].image_size
    x = (
        torch.stack(
            [
                torch.from_numpy(_pil_reference(im.numpy(), size, "letterbox", (127, 127, 127)))
                for im in wide.main_images
            ]
        )
        .permute(0, 3, 1, 2)
        .float()
        / 255
    )
    m, s = (torch.tensor(v).view(1, 3, 1, 1) for v in (spec.image_means[0], spec.image_stds[0]))
    # (x - m) / s: two correctly rounded float32 operations on values <= 1 / 0.22: <= 2 · 2^-24 · 4.5 < 1e-6
    torch.testing.assert_close(captured["pixels"][:, :3], (x - m) / s, atol=1e-6, rtol=0)


def test_unknown_resize_strategy_is_refused_in_one_line(tmp_path):
    from rlinf_policy_openvla.checkpoint import read_spec
    from rlinf_policy_openvla.make_tiny import make_tiny

    path = make_tiny(tmp_path / "bad", num_shards=1)
    pre = json.loads((path / "preprocessor_config.json").read_text())
    pre["image_resize_strategy"] = "corner-pad"
    (path / "preprocessor_config.json").write_text(json.dumps(pre))
    with pytest.raises(CheckpointError, match="image_resize_strategy 'corner-pad' not supported") as err:
        read_spec(path)
    assert "\n" not in str(err.value)


def test_default_image_resize_follows_the_files_never_the_name(tmp_path):
    from rlinf_policy_openvla.released import default_image_resize, write_released_dir

    # openvla-7b as `huggingface-cli download openvla/openvla-7b --local-dir ckpt/base` leaves it
    assert default_image_resize(write_released_dir(tmp_path / "ckpt" / "base", "openvla-7b"))[0] == "pil"
    hub = tmp_path / "hub" / "models--openvla--openvla-7b" / "snapshots" / "abc"
    assert default_image_resize(write_released_dir(hub, "openvla-7b"))[0] == "pil"
    assert default_image_resize(write_released_dir(tmp_path / "my-oft", "openvla-oft-official-libero"))[0] == "pil"
    renamed = write_released_dir(tmp_path / "openvla-7b", "rlinf-openvla-oft-libero-130")
    (renamed / "preprocessor_config.json").unlink()  # no processor: the name alone must not make it pil
    assert default_image_resize(renamed)[0] == "tensor"
    assert default_image_resize(tmp_path / "anything")[0] == "tensor"


def _unrecorded(tiny: Path, to: Path) -> Path:
    """A copy of ``tiny`` whose config.json records no image_resize: an upstream directory with its processor."""
    shutil.copytree(tiny, to)
    config = json.loads((to / "config.json").read_text())
    config["rlinf"]["inputs"].pop("image_resize")
    (to / "config.json").write_text(json.dumps(config))
    return to


def test_a_guessed_image_resize_is_said_in_one_line(tmp_path, tiny_oft, capsys):
    from rlinf_policy_openvla import OpenVLAOFTPolicy

    tiny_oft = _unrecorded(tiny_oft, tmp_path / "upstream")
    OpenVLAOFTPolicy(model_path=str(tiny_oft))
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "image_resize=" in ln]
    assert len(lines) == 1 and "image_resize=pil" in lines[0] and "set inputs.image_resize: tensor" in lines[0]
    OpenVLAOFTPolicy(model_path=str(tiny_oft), inputs=InputConfig(image_resize="tensor")).save_pretrained(
        tmp_path / "s"
    )
    capsys.readouterr()
    assert OpenVLAOFTPolicy(model_path=str(tmp_path / "s")).image_resize == "tensor"  # recorded: no guess, no line
    assert "image_resize=" not in capsys.readouterr().err


def test_policy_resolves_and_saves_image_resize(tmp_path, tiny_oft):
    from rlinf_policy_openvla import OpenVLAOFTPolicy

    tiny_oft = _unrecorded(tiny_oft, tmp_path / "upstream")
    assert OpenVLAOFTPolicy(model_path=str(tiny_oft)).image_resize == "pil"  # it ships the HF processor
    policy = OpenVLAOFTPolicy(model_path=str(tiny_oft), inputs=InputConfig(image_resize="tensor"))
    policy.save_pretrained(tmp_path / "saved")
    assert OpenVLAOFTPolicy(model_path=str(tmp_path / "saved")).image_resize == "tensor"
    with pytest.raises(ValueError, match="image_resize must be one of"):
        OpenVLAOFTPolicy(model_path=str(tiny_oft), inputs=InputConfig(image_resize="lanczos"))


def test_make_tiny_records_its_image_resize_so_nothing_is_guessed(tmp_path, capsys):
    """A tiny model is rlinf's own (trained by rlinf on tensors): make_tiny records ``tensor``, so a load uses it and
    prints no guess (the quickstart's first run stays free of the note)."""
    from rlinf_policy_openvla import OpenVLAOFTPolicy
    from rlinf_policy_openvla.make_tiny import make_tiny

    path = make_tiny(tmp_path / "tiny", kind="oft", num_shards=1)
    assert (path / "preprocessor_config.json").is_file()
    policy = OpenVLAOFTPolicy(model_path=str(path))
    assert policy.image_resize == "tensor" and "rlinf: note" not in capsys.readouterr().err
