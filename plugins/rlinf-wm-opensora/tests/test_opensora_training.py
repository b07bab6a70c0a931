"""training_loss (rectified flow on the generated frames) learns, and save_pretrained round-trips."""

import numpy as np
import torch

from rlinf_wm_opensora.testing import tiny_world_model
from rlinf_wm_opensora.world_model import OpenSoraWorldModel


def _clips(n: int = 4):
    """Clips of a square moving right by the action's x: 4 condition + 8 target frames, 8 actions."""
    rng = np.random.default_rng(0)
    frames = np.full((n, 12, 32, 32, 3), 60, np.uint8)
    actions = np.zeros((n, 12, 7), np.float32)  # one per frame: the action that produced it
    for b in range(n):
        x, y = 4, int(rng.integers(4, 24))
        for f in range(12):
            if f >= 4:
                actions[b, f, 0] = 0.5
                x += 2
            frames[b, f, y : y + 6, x : x + 6] = 230
    return torch.from_numpy(frames), torch.from_numpy(actions)


def test_training_loss_decreases_on_tiny_clips():
    torch.manual_seed(0)
    model = OpenSoraWorldModel(str(tiny_world_model()))
    frames, actions = _clips()
    opt = torch.optim.AdamW([p for p in model.dit.parameters() if p.requires_grad], lr=3e-3)

    def loss_at(seed):  # the same timesteps and noise each time: a fair comparison
        return model.training_loss(frames, actions, generator=torch.Generator().manual_seed(seed))

    with torch.no_grad():
        before = sum(float(loss_at(s)) for s in range(3))
    for step in range(15):
        opt.zero_grad()
        loss = loss_at(100 + step)
        loss.backward()
        opt.step()
    with torch.no_grad():
        after = sum(float(loss_at(s)) for s in range(3))
    assert after < 0.8 * before, (before, after)
    assert all(p.grad is None for p in model.vae.parameters())  # the VAE stays frozen
    assert model.dit.y_embedder.y_proj.fc1.weight.grad is None  # and the unused text pathway


def test_training_loss_only_sees_generated_frames():
    model = OpenSoraWorldModel(str(tiny_world_model()))
    frames, actions = _clips(2)
    captured = {}
    original = model.dit.forward

    def spy(x, t, a, x_mask=None, **kw):
        captured.update(t=t, mask=x_mask, actions=a)
        return original(x, t, a, x_mask=x_mask, **kw)

    model.dit.forward = spy
    model.training_loss(frames, actions, generator=torch.Generator().manual_seed(0))
    assert captured["mask"].tolist() == [[False] * 4 + [True] * 8] * 2
    assert ((captured["t"] > 0) & (captured["t"] < 1000)).all()
    torch.testing.assert_close(captured["actions"], model.normalize_actions(actions[:, 4:]))  # the targets' actions


def test_save_pretrained_loads_unchanged(tmp_path):
    model = OpenSoraWorldModel(str(tiny_world_model()), num_sampling_steps=2).eval()
    with torch.no_grad():
        model.dit.t_block[1].bias.add_(0.5)  # "trained"
    model.save_pretrained(tmp_path / "export")
    names = {p.name for p in (tmp_path / "export").iterdir()}
    assert {
        "config.json",
        "model-00001.safetensors",
        "model.safetensors.index.json",
        "vae",
        "resnet_rm.pth",
        "dataset_statistics.json",
        "dataset",
    } <= names
    again = OpenSoraWorldModel(str(tmp_path / "export"), num_sampling_steps=2).eval()
    for k, v in model.dit.state_dict().items():
        assert torch.equal(v, again.dit.state_dict()[k]), k
    frames = torch.randint(0, 256, (1, 4, 32, 32, 3), dtype=torch.uint8)
    with torch.no_grad():
        a, _ = model.predict(
            model.init_state(frames, torch.zeros(1, 4, 7)), torch.zeros(1, 8, 7), torch.Generator().manual_seed(0)
        )
        b, _ = again.predict(
            again.init_state(frames, torch.zeros(1, 4, 7)), torch.zeros(1, 8, 7), torch.Generator().manual_seed(0)
        )
    assert torch.equal(a, b)
