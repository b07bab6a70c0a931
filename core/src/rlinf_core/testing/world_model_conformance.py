"""Standard conformance tests for world-model and reward-model plugins.

Subclass in your plugin's tests and fill in the factory methods (tiny, randomly initialised models
written in the released layout are the intended use)::

    from rlinf_core.testing.world_model_conformance import RewardModelPluginTests, WorldModelPluginTests

    class TestMyWorldModel(WorldModelPluginTests):
        model_class = MyWorldModel

        def make_model(self):
            return MyWorldModel.from_pretrained(write_tiny_checkpoint(tmp_dir()))

Do not override the ``test_*`` methods; tune the class attributes instead. The last test runs the
model inside :class:`rlinf_core.WorldModelEnv` on initial-state files written with
:func:`rlinf_core.world_models.init_data.save_init_trajectory`, through the env conformance checks' core.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlinf_core.builtin.toy_world_model import ToyRewardModel
from rlinf_core.contracts.world_model import ConditionSpec, RewardModel, WorldModel
from rlinf_core.envs.world_model_env import WorldModelEnv
from rlinf_core.plugins.manager import Registry
from rlinf_core.testing.numerics import reorder_rtol
from rlinf_core.world_models.init_data import save_init_trajectory


class WorldModelPluginTests:
    """Checks the :class:`rlinf_core.WorldModel` contract on a real instance of the plugin's model.

    Reads the class attributes ``model_class``, ``image_size`` and ``chunk``."""

    #: the world model class under test (required).
    model_class: type[WorldModel]
    #: side of the square frames the model takes (its native resolution, or the tiny model's).
    image_size: int = 32
    #: actions per predicted chunk.
    chunk: int = 2
    #: constructor settings the save / load test also gives ``from_pretrained``, each with a value other than the
    #: saved model's: the loaded model's attribute of the same name must equal it ({}: reload without overrides).
    pretrained_overrides: dict[str, Any] = {}

    def make_model(self) -> WorldModel:
        """The model under test (default: ``model_class()``)."""
        return self.model_class()

    def condition_batch(self, model: WorldModel, batch: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Random condition frames ``uint8 [B, T, S, S, 3]`` and actions ``[B, T, D]`` as the model declares."""
        gen = torch.Generator().manual_seed(seed)
        T, S = model.condition.num_frames, self.image_size
        frames = torch.randint(0, 256, (batch, T, S, S, 3), generator=gen, dtype=torch.uint8)
        return frames, torch.rand(batch, T, model.action_dim, generator=gen) * 2 - 1

    def actions(self, model: WorldModel, batch: int, seed: int = 1) -> torch.Tensor:
        """Seeded uniform actions in [-1, 1], ``[B, chunk, D]``."""
        gen = torch.Generator().manual_seed(seed)
        return torch.rand(batch, self.chunk, model.action_dim, generator=gen) * 2 - 1

    def reload(self, path: str, **overrides: Any) -> WorldModel:
        """The model loaded back from a ``save_pretrained`` directory (default: ``from_pretrained(path,
        **overrides)``)."""
        return self.model_class.from_pretrained(path, **overrides)

    def clip_batch(self, model: WorldModel, batch: int, seed: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
        """A random training batch as ``ClipDataset`` gives it: ``uint8 [B, Nc + Nt, S, S, 3]``, ``[B, Nc + Nt, D]``."""
        gen = torch.Generator().manual_seed(seed)
        T, S = sum(model.clip_frames), self.image_size
        frames = torch.randint(0, 256, (batch, T, S, S, 3), generator=gen, dtype=torch.uint8)
        return frames, torch.rand(batch, T, model.action_dim, generator=gen) * 2 - 1

    def _trainable(self, model: WorldModel) -> None:
        if type(model).training_loss is WorldModel.training_loss:
            import pytest

            pytest.skip(f"{type(model).__name__} does not implement training_loss (not fine-tunable)")

    def test_registered_through_hooks(self):
        names = Registry().load().names("world_model")
        assert self.model_class.__name__ in names, f"{self.model_class.__name__} is not registered; registered: {names}"

    def test_training_loss_is_a_seeded_differentiable_scalar(self):
        model = self.make_model()
        self._trainable(model)
        nc, nt = model.clip_frames
        assert nc >= 1 and nt >= 1, f"clip_frames must be (condition >= 1, target >= 1), got {model.clip_frames}"
        model.train()
        frames, actions = self.clip_batch(model, 2)
        loss = model.training_loss(frames, actions, generator=torch.Generator().manual_seed(0))
        assert loss.ndim == 0 and torch.isfinite(loss), loss
        loss.backward()
        grads = [p.grad for p in model.parameters() if p.requires_grad]
        assert grads and any(g is not None and g.abs().sum() > 0 for g in grads), "training_loss reaches no parameter"
        model.eval()
        with torch.no_grad():
            a = model.training_loss(frames, actions, generator=torch.Generator().manual_seed(1))
            b = model.training_loss(frames, actions, generator=torch.Generator().manual_seed(1))
        assert torch.equal(a, b), "the same generator seed must give the same loss"

    def test_save_pretrained_loads_back_unchanged(self):
        model = self.make_model()
        if type(model).save_pretrained is WorldModel.save_pretrained:
            import pytest

            pytest.skip(f"{type(model).__name__} does not implement save_pretrained (nothing to export)")
        path = Path(tempfile.mkdtemp()) / "exported"
        with torch.no_grad():  # the export must carry trained weights, not the initial ones
            for p in model.parameters():
                p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())).to(p))
        model.save_pretrained(str(path))
        loaded = self.reload(str(path))
        want, got = model.state_dict(), loaded.state_dict()
        assert set(want) == set(got), sorted(set(want) ^ set(got))[:5]
        for key, value in want.items():
            assert torch.equal(value.cpu(), got[key].cpu()), f"{key} differs after save_pretrained -> load"
        if self.pretrained_overrides:
            overridden = self.reload(str(path), **self.pretrained_overrides)
            for name, value in self.pretrained_overrides.items():
                assert getattr(model, name) != value, f"pretrained_overrides[{name!r}] is the saved model's value"
                assert getattr(overridden, name) == value, (
                    f"from_pretrained(path, {name}={value!r}) gave {name}={getattr(overridden, name)!r}: an override "
                    "must win over the settings saved with the model (rlinf_core.models.settings.SavedSettings)"
                )

    def test_declares_its_condition(self):
        model = self.make_model()
        assert isinstance(model.condition, ConditionSpec), "set WorldModel.condition to a ConditionSpec"
        dim = getattr(model, "action_dim", None)
        assert isinstance(dim, int) and dim >= 1, (
            f"{type(model).__name__}.action_dim must be an int >= 1 (class attribute or set in __init__), got {dim!r}"
        )
        size = model.image_size
        assert size is None or (isinstance(size, int) and size >= 1), f"image_size must be None or an int, got {size!r}"

    def test_predict_shapes_and_dtype(self):
        model = self.make_model().eval()
        frames, acts = self.condition_batch(model, 2)
        with torch.no_grad():
            state = model.init_state(frames, acts)
            out, state = model.predict(state, self.actions(model, 2), generator=torch.Generator().manual_seed(0))
        assert out.dtype == torch.uint8 and out.shape[:2] == (2, self.chunk) and out.shape[-1] == 3, out.shape

    def test_same_generator_seed_gives_the_same_frames(self):
        model = self.make_model().eval()
        frames, acts = self.condition_batch(model, 2)
        outs = []
        for _ in range(2):
            with torch.no_grad():
                state = model.init_state(frames, acts)
                out, _ = model.predict(state, self.actions(model, 2), generator=torch.Generator().manual_seed(3))
            outs.append(out)
        assert torch.equal(outs[0], outs[1])

    def test_select_and_assign_address_rows(self):
        model = self.make_model().eval()
        frames, acts = self.condition_batch(model, 3)
        with torch.no_grad():
            state = model.init_state(frames, acts)
            other = model.init_state(*self.condition_batch(model, 3, seed=5))
            mixed = model.assign(state, torch.tensor([1]), model.select(other, torch.tensor([1])))
            a, _ = model.predict(mixed, self.actions(model, 3), generator=torch.Generator().manual_seed(0))
            b, _ = model.predict(other, self.actions(model, 3), generator=torch.Generator().manual_seed(0))
            c, _ = model.predict(state, self.actions(model, 3), generator=torch.Generator().manual_seed(0))
        assert torch.equal(a[1], b[1]) and torch.equal(a[0], c[0]) and torch.equal(a[2], c[2])

    def test_runs_as_an_env_from_released_format_init_files(self):

        model = self.make_model()
        root = Path(tempfile.mkdtemp()) / "dataset"
        S, T = self.image_size, max(model.condition.num_frames, 1)
        rng = np.random.default_rng(0)
        for i in range(2):
            images = rng.integers(0, 256, (T, S, S, 3), dtype=np.uint8)
            save_init_trajectory(root / f"traj{i}.npy", images[:1], f"task {i}", np.zeros((1, model.action_dim)))
            save_init_trajectory(root / f"traj{i}_kir.npy", images, f"task {i}", np.zeros((T, model.action_dim)))
        env = WorldModelEnv(model, ToyRewardModel(), str(root), num_envs=2, max_episode_steps=4, enable_kir=True)
        obs = env.reset()
        assert obs.main_images.shape == (2, S, S, 3) and obs.task_descriptions[0].startswith("task")
        res = env.chunk_step(self.actions(model, 2))
        assert res.rewards.shape == (2, self.chunk) and res.valid[:, 0].all()


class RewardModelPluginTests:
    """Checks the :class:`rlinf_core.RewardModel` contract on a real instance of the plugin's model.

    Reads the class attributes ``model_class``, ``image_size`` and ``instructions``."""

    #: the reward model class under test (required).
    model_class: type[RewardModel]
    #: side of the square frames it scores, pixels.
    image_size: int = 32
    #: instructions the model knows (task-conditioned reward models match them exactly).
    instructions: tuple[str, ...] = ("pick up the object",)
    #: how far one frame's success probability may move with the batch it is scored in (its float32 sums then run
    #: in another order): :func:`rlinf_core.testing.numerics.reorder_rtol` of the model's longest sum and the
    #: number of sums in a row on its longest path, times the size of its logit, times the sigmoid's gain (1/4).
    #: The default holds for tiny random models (sums of at most 1024 terms, at most 32 in a row, logits of size at
    #: most 4): 1.1e-4. A larger model sets its own.
    reorder_atol: float = reorder_rtol(1024, depth=32, gain=4 * 0.25)

    def make_model(self) -> RewardModel:
        """The model under test (default: ``model_class()``)."""
        return self.model_class()

    def frames(self, n: int, seed: int = 0) -> torch.Tensor:
        """Seeded random frames ``uint8 [n, image_size, image_size, 3]``."""
        gen = torch.Generator().manual_seed(seed)
        return torch.randint(0, 256, (n, self.image_size, self.image_size, 3), generator=gen, dtype=torch.uint8)

    def reload(self, path: str) -> RewardModel:
        """The model loaded back from the file ``save_pretrained`` returned (default: ``from_pretrained(path)``)."""
        return self.model_class.from_pretrained(path)

    def test_registered_through_hooks(self):
        names = Registry().load().names("world_model")
        assert self.model_class.__name__ in names, f"{self.model_class.__name__} is not registered; registered: {names}"

    def test_logits_are_the_probabilities_before_the_sigmoid_and_export_round_trips(self):
        model = self.make_model().eval()
        if type(model).success_logits is RewardModel.success_logits:
            import pytest

            pytest.skip(f"{type(model).__name__} does not implement success_logits (not trainable)")
        texts = [self.instructions[i % len(self.instructions)] for i in range(3)]
        with torch.no_grad():
            logits = model.success_logits(self.frames(3), texts)
            torch.testing.assert_close(torch.sigmoid(logits), model.success_prob(self.frames(3), texts))
            path = model.save_pretrained(tempfile.mkdtemp())
            again = self.reload(str(path)).eval().success_logits(self.frames(3), texts)
        torch.testing.assert_close(again, logits)

    def test_probabilities_per_frame(self):
        model = self.make_model().eval()
        texts = [self.instructions[i % len(self.instructions)] for i in range(4)]
        with torch.no_grad():
            p = model.success_prob(self.frames(4), texts)
        assert p.shape == (4,) and p.is_floating_point() and bool(((p >= 0) & (p <= 1)).all()), p

    def test_a_frame_scores_the_same_in_any_batch(self):
        model = self.make_model().eval()
        frames = self.frames(4)
        texts = [self.instructions[0]] * 4
        with torch.no_grad():
            full = model.success_prob(frames, texts)
            one = model.success_prob(frames[2:3], texts[2:3])
        torch.testing.assert_close(full[2:3].float(), one.float(), rtol=0.0, atol=self.reorder_atol)
