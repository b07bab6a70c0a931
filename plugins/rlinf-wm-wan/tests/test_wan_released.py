"""The released layout: 5 B key names (meta device), strict one-line errors, numerics equal to DiffSynth's."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from rlinf_core.testing.numerics import reorder_rtol
from rlinf_wm_wan._modeling import (
    WanActionTransformer,
    convert_diffsynth_state_dict,
    diffsynth_to_diffusers_key,
    diffusers_to_diffsynth_key,
)
from rlinf_wm_wan.vae import (
    build_vae,
    decode,
    encode,
    load_vae_state_dict,
    original_to_diffusers_key,
    to_original_state_dict,
)
from rlinf_wm_wan.world_model import WanWorldModel

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels

DATA = Path(__file__).parent / "data"
# DiffSynth's reference values were computed on another machine, with other float32 operations: reordered sums
# (rlinf_core.testing.numerics). The tiny DiT's longest sum has 192 terms (48 latent channels x a 1x2x2 patch), its
# longest path ~30 sums (2 blocks of self-attention, action cross-attention and FFN, ~12 sums each, plus the
# embeddings); the tiny VAE's has 1728 (3x3x3 convolutions over 64 channels) and ~50 (encoder and decoder stages).
DIT_SUMS, VAE_SUMS = (192, 30), (1728, 50)


def _fingerprint_atol(out: torch.Tensor, sums: tuple[int, int]) -> float:
    """How far a sum over ``out`` may move: its N elements' independent roundings, reorder_rtol of the largest each."""
    return reorder_rtol(*sums) * out.abs().max().item() * out.numel() ** 0.5


def _diffsynth_key_hash(shapes: dict[str, list[int]]) -> str:
    """DiffSynth's ``hash_state_dict_keys`` (sorted ``key:shape`` and ``key`` strings), which picks its config."""
    keys = sorted([f"{k}:{'_'.join(map(str, s))}" for k, s in shapes.items()] + list(shapes))
    return hashlib.md5(",".join(keys).encode()).hexdigest()


def test_released_5b_dit_key_names_build_the_diffusers_model_on_meta():
    # the fixture: DiffSynth's WanModel in its Wan2.2-TI2V-5B action config, read off the module on meta
    shapes = json.loads((DATA / "wan22_ti2v5b_action_dit_keys.json").read_text())
    assert _diffsynth_key_hash(shapes) == "bc4824aef7c3f23d3378cec6e2b1316c"  # DiffSynth's id of this checkpoint
    with torch.device("meta"):
        dit = WanActionTransformer()  # the 5 B defaults
    state = {k: torch.empty(s, device="meta") for k, s in shapes.items()}
    dit.load_state_dict(convert_diffsynth_state_dict(state, dit, "model-00001.safetensors"), strict=True, assign=True)
    assert sum(p.numel() for p in dit.parameters()) == sum(torch.Size(s).numel() for s in shapes.values())
    assert all(diffusers_to_diffsynth_key(diffsynth_to_diffusers_key(k)) == k for k in shapes)


def test_released_vae_key_names_build_the_diffusers_vae_on_meta():
    shapes = json.loads((DATA / "wan22_vae_keys.json").read_text())  # DiffSynth's VideoVAE38_ (original Wan names)
    with torch.device("meta"):
        vae = build_vae()
    expected = {k: list(v.shape) for k, v in vae.state_dict().items()}
    assert {original_to_diffusers_key(k): s for k, s in shapes.items()} == expected
    assert set(to_original_state_dict(vae)) == set(shapes)  # make_tiny / save_pretrained write the same names


def test_strict_dit_errors_name_the_key():
    dit = WanActionTransformer(dim=24, ffn_dim=48, num_heads=2, num_layers=2, freq_dim=32)
    state = {diffusers_to_diffsynth_key(k): v for k, v in dit.state_dict().items()}
    with pytest.raises(ValueError, match="missing 1 DiT key.*'blocks.1.cross_attn.k.bias'"):
        convert_diffsynth_state_dict({k: v for k, v in state.items() if k != "blocks.1.cross_attn.k.bias"}, dit, "f")
    with pytest.raises(ValueError, match="unexpected key 'blocks.0.lora_A.weight'"):
        convert_diffsynth_state_dict({**state, "blocks.0.lora_A.weight": torch.zeros(1)}, dit, "f")
    with pytest.raises(ValueError, match="text_embedding.*base Wan2.2-TI2V-5B"):
        convert_diffsynth_state_dict({**state, "text_embedding.0.weight": torch.zeros(1)}, dit, "f")
    with pytest.raises(ValueError, match="'action_mlp1.0.weight' has shape \\[24, 8\\]"):
        convert_diffsynth_state_dict({**state, "action_mlp1.0.weight": torch.zeros(24, 8)}, dit, "f")
    with pytest.raises(ValueError, match="head dim"):
        WanActionTransformer(dim=32, num_heads=2)  # head dim 16: RoPE splits differ (5 vs 4)


def test_strict_vae_errors_name_the_key():
    vae = build_vae(8, 16)
    state = to_original_state_dict(vae)
    with pytest.raises(ValueError, match="unexpected key 'encoder.extra.weight'"):
        load_vae_state_dict({**state, "encoder.extra.weight": torch.zeros(1)}, vae, "Wan2.2_VAE.pth")
    with pytest.raises(ValueError, match="missing 1 VAE key"):
        load_vae_state_dict({k: v for k, v in state.items() if k != "decoder.head.2.bias"}, vae, "Wan2.2_VAE.pth")
    load_vae_state_dict({"model_state": {f"model.{k}": v for k, v in state.items()}}, vae, "x")  # DiffSynth wrappers


def _seeded(shapes: dict[str, tuple], seed: int, std: float) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {k: torch.randn(shapes[k], generator=gen) * std for k in sorted(shapes)}


def test_dit_matches_diffsynth_numerically():
    # reference values: DiffSynth's WanModel + model_fn_wan_video (TI2V2, five_frame_condition, batched) at the
    # fork's commit 2a2e05f, fp32, on the same seeded DiffSynth-named weights and inputs
    dit = WanActionTransformer(dim=24, ffn_dim=48, num_heads=2, num_layers=2, freq_dim=32).eval()
    shapes = {diffusers_to_diffsynth_key(k): tuple(v.shape) for k, v in dit.state_dict().items()}
    dit.load_state_dict(convert_diffsynth_state_dict(_seeded(shapes, 0, 0.2), dit, "seeded"))
    gen = torch.Generator().manual_seed(1)
    lat, act = torch.randn(2, 48, 4, 4, 4, generator=gen), torch.randn(2, 13, 7, generator=gen)
    with torch.no_grad():
        out = dit(lat, torch.tensor([769.2308]), act)
    atol = _fingerprint_atol(out, DIT_SUMS)
    assert out.sum().item() == pytest.approx(59.388671875, abs=atol)
    assert out.abs().sum().item() == pytest.approx(9969.3583984375, abs=atol)
    scale = out.abs().max().item()
    for where, want in (((0, 0, 2, 1), [1.29629207, 3.14359379, -1.05642402, 2.54942298]),
                        ((1, 47, 3, 3), [1.48859560, -0.16083713, 0.50694788, 2.34560823])):  # fmt: skip
        torch.testing.assert_close(out[where], torch.tensor(want), rtol=0, atol=reorder_rtol(*DIT_SUMS) * scale)


def test_vae_matches_diffsynth_numerically():
    # reference values: DiffSynth's VideoVAE38_ encode (normalised mean) / decode (clamped), commit 2a2e05f
    vae = build_vae(8, 16).eval()
    shapes = {k: tuple(v.shape) for k, v in to_original_state_dict(vae).items()}
    load_vae_state_dict(_seeded(shapes, 0, 0.1), vae, "seeded")
    gen = torch.Generator().manual_seed(2)
    x = torch.rand(1, 3, 5, 32, 32, generator=gen) * 2 - 1
    z = torch.randn(1, 48, 2, 2, 2, generator=gen)
    with torch.no_grad():
        e, d = encode(vae, x), decode(vae, z)
    assert e.shape == (1, 48, 2, 2, 2) and d.shape == (1, 3, 5, 32, 32)
    assert e.sum().item() == pytest.approx(17.649620056152344, abs=_fingerprint_atol(e, VAE_SUMS))
    assert e.abs().sum().item() == pytest.approx(117.90876007080078, abs=_fingerprint_atol(e, VAE_SUMS))
    assert d.sum().item() == pytest.approx(-102.36511993408203, abs=_fingerprint_atol(d, VAE_SUMS))
    assert d.abs().sum().item() == pytest.approx(1681.643310546875, abs=_fingerprint_atol(d, VAE_SUMS))
    want = torch.tensor([0.44830757, -0.31752729, 0.43474373, 0.40223867])
    torch.testing.assert_close(e[0, :4, 1, 0, 1], want, rtol=0, atol=reorder_rtol(*VAE_SUMS) * e.abs().max().item())
    with pytest.raises(ValueError, match="1 \\+ 4k frames"):
        encode(vae, x[:, :, :4])


def test_save_pretrained_writes_the_released_layout_that_loads_back(tiny_wan, tmp_path):
    model = WanWorldModel(model_path=str(tiny_wan), num_inference_steps=2)
    with torch.no_grad():
        for p in model.dit.action_mlp2.parameters():
            p.add_(0.01)  # as if fine-tuned
    out = model.save_pretrained(tmp_path / "export")
    assert {p.name for p in out.iterdir()} >= {"model-00001.safetensors", "Wan2.2_VAE.pth", "resnet_rm.pth", "dataset"}
    assert "blocks.0.self_attn.q.weight" in load_file(str(out / "model-00001.safetensors"))  # DiffSynth names
    assert "encoder.conv1.weight" in torch.load(out / "Wan2.2_VAE.pth", weights_only=True)  # original names
    back = WanWorldModel(model_path=str(out), num_inference_steps=2)
    for (k, a), b in zip(model.state_dict().items(), back.state_dict().values()):
        assert torch.equal(a, b), k


def test_released_directory_without_side_car_is_the_5b_model(tiny_wan, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(tiny_wan, bare)
    (bare / "wan_config.json").unlink()  # a release has no config: the 5 B sizes are assumed
    with pytest.raises(ValueError, match="has shape .* the configured DiT expects .*wan_config.json"):
        WanWorldModel(model_path=str(bare))
    state = load_file(str(bare / "model-00001.safetensors"))
    save_file({**state, "text_embedding.0.weight": torch.zeros(1)}, str(bare / "model-00001.safetensors"))
    with pytest.raises(ValueError, match="text_embedding"):
        WanWorldModel(model_path=str(bare))
    with pytest.raises(FileNotFoundError, match="make_tiny"):
        WanWorldModel(model_path=str(tmp_path / "nowhere"))


def test_a_whole_chunk_matches_diffsynths_pipeline(tiny_wan):
    # reference: DiffSynth's pipeline loop at commit 2a2e05f in fp32 (VideoVAE38_ encode of the 5 condition frames,
    # seed-0 CPU noise, the fused condition latents, FlowMatchScheduler(shift 5, extra_one_step) 5 steps with the
    # latents re-imposed, decode, vae_output_to_video) on the same seeded weights: 40885676 = the sum of the
    # 2 x 13 decoded uint8 frames; ours differed by 1 level in 3e-6 of the pixels
    model = WanWorldModel(model_path=str(tiny_wan), num_inference_steps=5)
    shapes = {diffusers_to_diffsynth_key(k): tuple(v.shape) for k, v in model.dit.state_dict().items()}
    model.dit.load_state_dict(convert_diffsynth_state_dict(_seeded(shapes, 0, 0.05), model.dit, "seeded"))
    vshapes = {k: tuple(v.shape) for k, v in to_original_state_dict(model.vae).items()}
    load_vae_state_dict(_seeded(vshapes, 1, 0.05), model.vae, "seeded")
    gen = torch.Generator().manual_seed(5)
    frames = torch.randint(0, 256, (2, 5, 64, 64, 3), generator=gen, dtype=torch.uint8)
    actions = torch.rand(2, 13, 7, generator=gen) * 2 - 1
    video = model.generate(frames, actions)
    assert video.shape == (2, 13, 64, 64, 3) and abs(video.long().sum().item() - 40885676) <= 50
    for (b, t, y, x), want in {
        (0, 7, 10, 20): [134, 128, 121],
        (1, 12, 40, 5): [119, 125, 138],
        (0, 5, 33, 33): [116, 129, 139],
    }.items():
        assert (video[b, t, y, x].int() - torch.tensor(want)).abs().max() <= 1
