"""openpi's input pipeline: images, normalisation round trips, prompt format."""

import numpy as np
import pytest
import sentencepiece
import torch

from rlinf_core.models.weights import CheckpointError
from rlinf_policy_openpi.checkpoint import NormStats, read_norm_stats
from rlinf_policy_openpi.transforms import (
    TOKENIZER_FILE,
    PromptTokenizer,
    camera_slots,
    default_image_resize,
    discretize_state,
    find_tokenizer,
    normalize,
    pad_to_dim,
    resize_with_pad,
    to_model_image,
    unnormalize,
)


def test_resize_with_pad_keeps_aspect_and_pads_black():
    img = torch.full((2, 120, 60, 3), 200, dtype=torch.uint8)  # tall: width becomes 112 of 224
    out = resize_with_pad(img, 224)
    assert out.shape == (2, 224, 224, 3) and out.dtype == torch.uint8
    assert (out[:, :, 56:168] == 200).all() and (out[:, :, :56] == 0).all() and (out[:, :, 168:] == 0).all()
    same = torch.randint(0, 256, (1, 224, 224, 3), dtype=torch.uint8)
    assert torch.equal(resize_with_pad(same, 224), same)
    with pytest.raises(ValueError, match="uint8"):
        resize_with_pad(img.float(), 224)


SHAPES = [(256, 256), (480, 480), (300, 400), (480, 640), (120, 60), (224, 224), (200, 224), (100, 90)]


@pytest.mark.parametrize("h,w", SHAPES, ids=[f"{h}x{w}" for h, w in SHAPES])
def test_pil_resize_is_bit_exact_to_openpi_client(h, w):
    """openpi's and RLinf's input transforms resize with ``openpi_client.image_tools.resize_with_pad`` (PIL
    bilinear, 8-bit): the default mode must be bit-identical to the real package."""
    from openpi_client import image_tools

    gen = torch.Generator().manual_seed(h * 1000 + w)
    img = (torch.rand(3, h, w, 3, generator=gen) * 256).to(torch.uint8)
    img[1] = torch.linspace(0, 255, w).round().to(torch.uint8)[None, :, None]  # smooth ramps round differently
    theirs = image_tools.resize_with_pad(img.numpy(), 224, 224)
    ours = resize_with_pad(img, 224)
    assert ours.dtype == torch.uint8 and np.array_equal(ours.numpy(), theirs)
    chw = resize_with_pad(img.permute(0, 3, 1, 2).contiguous(), 224)  # channels-first input too
    assert np.array_equal(chw.numpy(), theirs)
    expected = torch.from_numpy(theirs).permute(0, 3, 1, 2).float() / 255.0 * 2.0 - 1.0
    assert torch.equal(to_model_image(img, 224), expected)


def test_lerobot_resize_is_float_bilinear_without_antialias():
    """lerobot's π0 / π0.5 (``resize_with_pad_torch`` of ``policies/common/vla_utils.py``): float [0, 1] frames,
    ``F.interpolate`` bilinear without antialias, no 8-bit rounding, black (0) padding, then ``· 2 − 1``."""
    img = torch.zeros(1, 112, 56, 3, dtype=torch.uint8)
    img[0, 0::2, :, 0], img[0, 1::2, :, 0] = 10, 25  # alternating rows: a 2× shrink samples between them
    out = to_model_image(img, 56, "lerobot")
    assert out.shape == (1, 3, 56, 56) and out.dtype == torch.float32
    inner = out[0, 0, :, 14:42]
    torch.testing.assert_close(inner, torch.full_like(inner, 17.5 / 255.0 * 2.0 - 1.0))  # 17.5: not rounded
    assert (out[0, :, :, :14] == -1).all() and (out[0, :, :, 42:] == -1).all()
    pil = to_model_image(img, 56, "pil")[0, 0, :, 14:42]
    assert not torch.allclose(pil, inner)  # PIL antialiases (and rounds) the same shrink
    with pytest.raises(ValueError, match="image_resize 'jax' not supported; use pil or lerobot"):
        to_model_image(img, 56, "jax")


def test_default_image_resize_follows_the_checkpoint_layout():
    assert [default_image_resize(k) for k in ("openpi", "rlinf", "lerobot")] == ["pil", "pil", "lerobot"]


def test_camera_slots_mask_missing_cameras():
    base = torch.full((2, 64, 64, 3), 255, dtype=torch.uint8)
    images, masks = camera_slots([base, None], num_slots=3, size=28)
    assert len(images) == len(masks) == 3
    assert images[0].shape == (2, 3, 28, 28) and torch.allclose(images[0], torch.ones(1))  # 255 → +1
    assert [m.tolist() for m in masks] == [[True, True], [False, False], [False, False]]
    assert (images[1] == -1).all() and (images[2] == -1).all()  # openpi: np.zeros_like(uint8 frame) → -1
    with pytest.raises(ValueError, match="4 cameras given but the model has 3"):
        camera_slots([base] * 4, num_slots=3, size=28)


def _stats(d=4):
    return NormStats(
        mean=torch.tensor([0.1, -0.2, 0.3, 0.0][:d]),
        std=torch.tensor([0.5, 2.0, 1.0, 0.0][:d]),
        q01=torch.tensor([-1.0, -3.0, 0.0, 0.5][:d]),
        q99=torch.tensor([1.0, 5.0, 2.0, 0.5][:d]),
    )


@pytest.mark.parametrize("quantile", [False, True], ids=["zscore-pi0", "quantile-pi05"])
def test_normalise_round_trip_with_openpi_epsilons(quantile):
    stats = _stats()
    x = torch.randn(5, 3, 4, dtype=torch.float64)
    y = normalize(x, stats, quantile)
    m, s, lo, hi = (v.double() for v in (stats.mean, stats.std, stats.q01, stats.q99))
    expected = (x - lo) / (hi - lo + 1e-6) * 2 - 1 if quantile else (x - m) / (s + 1e-6)
    torch.testing.assert_close(y, expected)
    assert torch.isfinite(y).all()  # a constant dimension (std 0 / q01 == q99) stays finite thanks to 1e-6
    torch.testing.assert_close(unnormalize(y, stats, quantile), x)
    # model output is 32 wide: the statistics' dimensions are unnormalised, the padding stays as z-score / identity
    padded = pad_to_dim(y, 32)
    out = unnormalize(padded, stats, quantile)
    torch.testing.assert_close(out[..., :4], x)
    if quantile:
        assert torch.equal(out[..., 4:], padded[..., 4:])
    else:
        torch.testing.assert_close(out[..., 4:], padded[..., 4:] * (1 + 1e-6))


def test_normalise_slices_longer_statistics_and_rejects_shorter():
    stats = _stats()
    x = torch.randn(2, 3)
    torch.testing.assert_close(normalize(x, stats, False), (x - stats.mean[:3]) / (stats.std[:3] + 1e-6))
    with pytest.raises(ValueError, match="norm stats have 4 dimensions, the input 6"):
        normalize(torch.randn(2, 6), stats, False)
    with pytest.raises(ValueError, match="quantile normalisation .* needs q01"):
        normalize(x, NormStats(mean=stats.mean, std=stats.std), True)
    with pytest.raises(ValueError, match="exceeds the model's 32"):
        pad_to_dim(torch.zeros(33), 32)


def test_prompt_format_and_pad_lengths(tiny):
    path = tiny(layout="openpi")
    sp = sentencepiece.SentencePieceProcessor(model_file=str(path / TOKENIZER_FILE))
    assert (sp.pad_id(), sp.eos_id(), sp.bos_id(), sp.unk_id()) == (0, 1, 2, 3)  # PaliGemma's special ids
    for max_len in (48, 200):
        tok = PromptTokenizer(find_tokenizer(path), max_len)
        ids, mask = tok(["  push_the puck\nto the goal ", "reach the goal"])
        expected = [2] + sp.encode("push the puck to the goal") + sp.encode("\n")
        assert ids.shape == mask.shape == (2, max_len) and ids.dtype == torch.long and mask.dtype == torch.bool
        assert ids[0, : len(expected)].tolist() == expected and mask[0].sum() == len(expected)
        assert not ids[0, len(expected) :].any() and not mask[0, len(expected) :].any()
    with pytest.warns(UserWarning, match=r"prompt of \d+ tokens truncated to max_token_len=4 .*raise max_token_len"):
        short = PromptTokenizer(path / TOKENIZER_FILE, 4)(["pick up the cube and lift it"])
    assert short[1].all() and short[0][0, 0] == 2  # truncated, bos kept


def test_discrete_state_prompt_for_pi05(tiny):
    tok = PromptTokenizer(tiny(pi05=True) / TOKENIZER_FILE, 200)
    state = torch.tensor([-1.0, -0.5, 0.0, 0.999, 1.0])
    bins = discretize_state(state)
    assert bins == (np.digitize(state.numpy(), np.linspace(-1, 1, 257)[:-1]) - 1).tolist() == [0, 64, 128, 255, 255]
    ids = tok.encode("reach_the goal", state)
    assert ids == [2] + tok.sp.encode("Task: reach the goal, State: 0 64 128 255 255;\nAction: ")
    # a max_token_len that fits the task but not the state tokens warns (once) instead of silently cutting them
    short = PromptTokenizer(tok.path, len(tok.encode("reach_the goal")) + 2)
    with pytest.warns(UserWarning, match="with the discrete state"):
        ids, mask = short(["reach_the goal"] * 2, state[None].expand(2, -1))
    assert mask.all() and ids[0].tolist() == tok.encode("reach_the goal", state)[: short.max_len]


def test_tokenizer_and_stats_errors_are_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENPI_DATA_HOME", str(tmp_path / "cache"))
    with pytest.raises(CheckpointError, match="PaliGemma tokenizer not found .*gsutil cp gs://big_vision") as err:
        find_tokenizer(tmp_path, None)
    assert "\n" not in str(err.value)
    with pytest.raises(CheckpointError, match="no norm stats found"):
        read_norm_stats(tmp_path)
